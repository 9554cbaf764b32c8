"""Replaying local SGD's rounds with real gradients (the schedule of :mod:`ssptk.sim.local`).

Round ``r`` (1-based) starts from version ``r - 1``: every worker with records in it (``local_round == r``)
takes its local steps in order (``staleness`` 0, 1, ...) on a private copy, each ``copy -= lr * gradient`` at
the copy's present values on the step's minibatch. The round's pseudo-gradient is ``G = mean(version r-1 -
copy)`` over its counted workers (a late delta, one whose round has a record not ``applied``, is computed, its
losses logged, and dropped); version ``r`` is ``version r-1 - outer_scale * G``, or, with ``outer_momentum``
``mu > 0``, Nesterov momentum: ``buf = mu * buf + G``, ``version r = version r-1 - outer_scale * (G + mu *
buf)``, as the runtime's aggregator applies it (:mod:`ssptk.runtime.local_graph`: TensorFlow's
``MomentumOptimizer(use_nesterov=True)``). ``outer_scale`` is ``RunOptions.outer_scale``: ``--outer-lr`` times
the deltas averaged under ``--lr-convention minibatch``, so ``local:1`` replays sync.

With ``--optimizer`` other than sgd each local step is that optimizer's step on the copy
(:func:`ssptk.core.optimizers.apply`), each worker's slots carried from round to round, as the runtime keeps them on
the worker beside its copy.

The oracle is asked once per local step of a round, for every worker in it together (a wave as wide as the
cluster, as for sync), all in the parameters' own precision.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from ssptk.core.optimizers import SlotState, apply, new_state, parse_optimizer
from ssptk.sim.replay import Batch, GradientOracle, Params, Replayed, ReplayEnd, finish

__all__ = ["replay_local"]


def replay_local(steps: pd.DataFrame, oracle: GradientOracle, data: Callable[[int, int], Batch], lr: float,
                 outer_scale: float, outer_momentum: float = 0.0, eval_every: int = 0, allow_nan: bool = False,
                 progress: Callable[[int, int], None] | None = None, wave_limit: int = 256,
                 optimizer: str = "sgd") -> Replayed:
    """Replay local SGD's schedule ``steps`` (see the module docstring). ``lr``: each local step's learning rate
    (the run's own, ``--lr``); ``outer_scale``: what a round applies to the mean of its deltas; ``optimizer``: the
    inner steps' (``--optimizer``); the rest as :func:`ssptk.sim.replay.replay`'s."""
    records = steps.reset_index(drop=True)
    n = len(records)
    g = records["local_round" if "local_round" in records else "global_step"].to_numpy(np.int64)
    position = records["local_step" if "local_step" in records else "staleness"].to_numpy(np.int64)  # v1: staleness
    workers = records["worker"].to_numpy(np.int64)
    minibatches = records["minibatch"].to_numpy(np.int64)
    applied = records["applied"].to_numpy(bool)
    t = records["t"].to_numpy(float)
    rounds = int(g.max()) if n else 0
    losses = np.full(n, np.nan)
    computed = np.zeros(n, bool)
    version = [np.asarray(p) for p in oracle.initial()]
    buf = [np.zeros_like(p) for p in version] if outer_momentum > 0 else None
    inner = parse_optimizer(optimizer)
    slots: dict[int, list[SlotState]] = {}  # each worker's inner slots, from round to round
    evals: list[tuple[int, float, float, float | None]] = []
    stop_at: float | None = None
    calls, done, landed, updates = 0, 0, 0.0, 0
    by_round = pd.Series(np.arange(n)).groupby(g).indices if n else {}
    with np.errstate(all="ignore"):  # a diverging run overflows: that is a result, not an error
        for r in range(1, rounds + 1):
            if stop_at is not None and not (~computed & (t <= stop_at)).any():
                break
            rows = np.asarray(by_round.get(r, []), np.int64)
            rows = rows[np.lexsort((position[rows], workers[rows]))]
            mine = {int(w): rows[workers[rows] == w] for w in dict.fromkeys(workers[rows].tolist())}
            copies = {w: version for w in mine}
            for j in range(max((len(v) for v in mine.values()), default=0)):
                wave = [(w, int(idx[j])) for w, idx in mine.items() if len(idx) > j]
                for lo in range(0, len(wave), wave_limit):
                    part = wave[lo:lo + wave_limit]
                    loss, grads = oracle.gradients([copies[w] for w, _ in part],
                                                   [data(w, int(minibatches[i])) for w, i in part])
                    calls += 1
                    for (w, i), li, gi in zip(part, loss, grads):
                        losses[i] = li
                        computed[i] = True
                        copies[w] = apply(inner, copies[w], gi, lr, slots.setdefault(w, new_state(inner, copies[w])))
                        if not (np.isfinite(li) or allow_nan):
                            stop_at = float(t[i]) if stop_at is None else min(stop_at, float(t[i]))
                    done += len(part)
                    if progress is not None:
                        progress(done, n)
            counted = [w for w, idx in mine.items() if applied[idx].all()]
            if counted:
                version, buf = _outer(version, [copies[w] for w in counted], outer_scale, outer_momentum, buf)
                landed = float(t[np.concatenate([mine[w] for w in counted])].max())
                updates = r
            if eval_every and r % eval_every == 0:
                loss_r, acc = oracle.evaluate(version)
                evals.append((r, landed, loss_r, acc))
    return finish(ReplayEnd(records, losses, computed, stop_at, version, updates, landed, evals, eval_every, calls),
                  oracle)


def _outer(version: Params, copies: list[Params], scale: float, mu: float, buf: Params | None
           ) -> tuple[Params, Params | None]:
    """The round's outer step from ``version`` by its pseudo-gradient ``G``, the mean of ``version - copy`` over
    ``copies``, as the runtime's aggregator applies it (see the module docstring)."""
    out: Params = []
    new_buf: Params | None = None if buf is None else []
    for k, v in enumerate(version):
        one = v.dtype.type
        pseudo = [v - c[k] for c in copies]
        mean = pseudo[0] if len(pseudo) == 1 else sum(pseudo[1:], pseudo[0]) / one(len(pseudo))
        if buf is None or new_buf is None:
            out.append(v - one(scale) * mean)
            continue
        b = buf[k] * one(mu) + mean
        new_buf.append(b)
        out.append(v - (mean * one(scale) + b * one(mu) * one(scale)))
    return out, new_buf
