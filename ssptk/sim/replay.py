"""Replaying a simulated schedule with real gradients: the simulator predicts the loss, not only the time.

:func:`ssptk.sim.simulate` decides, for every minibatch, which worker computes it, which parameter version
that worker read (``global_step - 1 - staleness`` for an update in async and ssp; the version before its
update in sync) and when its update lands. :func:`replay` walks that schedule in one process: each gradient
is computed at the parameters its worker read, on the minibatch the engine would give it, and the updates
are applied in the schedule's order with the mode's aggregation and learning rate, as the engine applies
them (:mod:`ssptk.runtime.ps_graph`):

* async and ssp: ``params -= lr * gradient`` per update (``lr / (staleness + 1)`` with
  ``--lr-staleness inverse``; with ``--lr-staleness dc:LAMBDA`` the delay-compensated gradient
  ``g + LAMBDA * g * g * (w_now - w_read)``, ``w_read`` the version the gradient was computed at, ``w_now`` the
  one it is applied to; with ``dca:LAMBDA0`` LAMBDA is ``LAMBDA0 / sqrt(ms + eps)`` per coordinate, ``ms`` the
  running mean square of the applied gradients, updated by each update's gradient in the order they land, as the
  engine keeps it on the PS: :class:`ssptk.core.labels.DelayComp`);
* sync (and allreduce): ``params -= update_lr * mean(gradients of the update)``, ``update_lr`` being the
  run's learning rate times the gradients aggregated under ``--lr-convention minibatch``; with ``--backup``
  the late gradients are computed (their loss is logged) and dropped;
* local SGD: its rounds, each worker's private copy, in :mod:`ssptk.sim.replay_local`.

The gradients come from an *oracle* (:class:`GradientOracle`): here only its interface, so that this module
stays pure NumPy; :mod:`ssptk.runtime.gradients` computes them with TensorFlow from a model's
:class:`~ssptk.core.models.ModelSpec`. Gradients are asked for in *waves*: once version ``v`` exists, every
minibatch read at a version up to ``v`` can be computed, together, each at its own parameters, so a wave is
about as wide as the cluster (N workers: ~N gradients per oracle call). Only versions still to be read are
kept.
With ``--optimizer`` other than sgd, what an update applies to the mean of its gradients is that optimizer's step
(:func:`ssptk.core.optimizers.apply`, TensorFlow's arithmetic), its slots carried from update to update in the order
the updates land, as the PS holds them.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import pandas as pd

from ssptk.core.errors import loss_not_finite
from ssptk.core.labels import DelayComp
from ssptk.core.optimizers import Optimizer, SlotState, apply, new_state, parse_optimizer

__all__ = ["GradientOracle", "Params", "ReplayEnd", "Replayed", "compensated", "dca_lambdas", "finish", "read_versions",
           "replay"]

Params = list[np.ndarray]
Batch = tuple[np.ndarray, np.ndarray]


class GradientOracle(Protocol):
    """What :func:`replay` needs of a model (see :class:`ssptk.runtime.gradients.TFOracle`)."""

    def initial(self) -> Params:
        """The parameters a run starts from (the engine's initial values for the run's seed)."""

    def gradients(self, params: Sequence[Params], batches: Sequence[Batch]) -> tuple[np.ndarray, list[Params]]:
        """For each ``i``: the training loss and the gradient at ``params[i]`` on ``batches[i]``."""

    def evaluate(self, params: Params) -> tuple[float, float | None]:
        """The held-out loss (and accuracy, where the model has one) at ``params``."""


@dataclass
class Replayed:
    """What a replay predicts.

    ``steps``: the schedule's records (the columns of real runs) with ``loss`` filled in (NaN where a loss was
    not finite) and, with ``--lr-staleness inverse``, ``lr_scale`` (with ``dc`` or ``dca``, ``dc_correction``: the
    correction's size relative to the gradient's, as the engine logs it); cut after the first non-finite loss unless
    ``allow_nan`` (a real run stops there). ``evals``: ``global_step``, ``t``, ``eval_loss``, ``eval_accuracy``
    every ``eval_every`` updates. ``params``: the final parameters; ``stopped``: why the run ended early;
    ``versions``: with ``keep_versions``, the parameters after every update (version 0 first).
    """

    steps: pd.DataFrame
    evals: pd.DataFrame
    params: Params
    final_loss: float
    final_accuracy: float | None
    updates: int
    stopped: str | None = None
    stopped_by: str | None = None  # who stopped it, when not a worker's own loss (``ssptk``: divergence)
    oracle_calls: int = 0
    gradients: int = field(default=0)
    versions: list[Params] | None = None


def read_versions(steps: pd.DataFrame) -> np.ndarray:
    """The parameter version (updates applied before it) each record's gradient was computed at.

    An applied record landed as update ``global_step`` after ``staleness`` updates of others since its read,
    so it read version ``global_step - 1 - staleness`` (0 for an applied sync gradient: its update's previous
    version); a dropped (late) sync gradient was logged at ``global_step`` with ``staleness`` updates missed,
    so it read ``global_step - staleness``.
    """
    g = steps["global_step"].to_numpy(np.int64)
    s = steps["staleness"].to_numpy(np.int64)
    applied = steps["applied"].to_numpy(bool)
    return np.where(applied, g - 1 - s, g - s)


def replay(steps: pd.DataFrame, oracle: GradientOracle, data: Callable[[int, int], Batch], update_lr: float,
           inverse_staleness: bool = False, eval_every: int = 0, allow_nan: bool = False,
           progress: Callable[[int, int], None] | None = None, wave_limit: int = 256,
           delay_comp: DelayComp | float | None = None, optimizer: str = "sgd",
           keep_versions: bool = False) -> Replayed:
    """Replay ``steps`` (a simulated run's records) with ``oracle``'s gradients; see the module docstring.

    ``data(worker, minibatch)``: that minibatch as the engine gives it to that worker. ``update_lr``: the rate
    an update applies to the mean of its gradients (``RunOptions.update_lr``). ``progress(done, total)``: called
    after every wave with the gradients computed so far. ``wave_limit``: most gradients per oracle call.
    ``delay_comp``: delay compensation (``RunOptions.delay_comp``; a number: ``dc``'s constant lambda; ``None``: none).
    ``optimizer``: what each update applies (``--optimizer``). ``keep_versions``: keep every version for
    :attr:`Replayed.versions`.
    """
    dc = DelayComp(float(delay_comp)) if isinstance(delay_comp, (int, float)) else delay_comp
    r = _Replay(steps.reset_index(drop=True), oracle, update_lr, inverse_staleness, eval_every, dc, optimizer,
                keep_versions)
    with np.errstate(all="ignore"):  # a diverging run overflows: that is a result, not an error
        while True:
            r.wave(data, wave_limit, allow_nan)
            if progress is not None:
                progress(int(r.computed.sum()), r.n)
            moved = r.apply_ready()
            if r.stop_at is not None and not (~r.computed & (r.t <= r.stop_at)).any():
                break
            if not moved and r.nxt >= r.n:
                break
            if not moved and r.reads[r.order[r.nxt]] > r.current:
                raise AssertionError("schedule reads a version that is never applied")  # not a user error
        return r.result()


class _Replay:
    """The state of one replay: the schedule's arrays, the versions still to be read, the gradients in hand."""

    def __init__(self, records: pd.DataFrame, oracle: GradientOracle, lr: float, inverse: bool, every: int,
                 dc: DelayComp | None = None, optimizer: str = "sgd", keep: bool = False) -> None:
        self.records, self.oracle, self.lr, self.inverse, self.every = records, oracle, lr, inverse, every
        self.dc = dc
        self.read_at: dict[int, Params] = {}  # with dc: the parameters each gradient in hand was computed at
        self.n = len(records)
        self.dc_share = None if dc is None else np.zeros(self.n)  # each applied gradient's |correction| / |g|
        self.reads = read_versions(records)
        applied = records["applied"].to_numpy(bool)
        g = records["global_step"].to_numpy(np.int64)
        self.stale = records["staleness"].to_numpy(np.int64)
        self.workers = records["worker"].to_numpy(np.int64)
        self.minibatches = records["minibatch"].to_numpy(np.int64)
        self.t = records["t"].to_numpy(float)
        self.updates = int(g[applied].max()) if applied.any() else 0
        # the records of each update, and the time it landed
        self.members: list[list[int]] = [[] for _ in range(self.updates + 1)]
        for i in np.flatnonzero(applied):
            self.members[g[i]].append(int(i))
        self.landed = np.zeros(self.updates + 1)
        for u in range(1, self.updates + 1):
            self.landed[u] = self.t[self.members[u][0]] if self.members[u] else self.landed[u - 1]
        self.losses = np.full(self.n, np.nan)
        self.grads: dict[int, Params] = {}
        self.computed = np.zeros(self.n, bool)
        self.order = np.argsort(self.reads, kind="stable")  # records by the version they read
        self.nxt = 0  # next position in `order` not computed yet
        self.versions: dict[int, Params] = {0: [np.asarray(p) for p in oracle.initial()]}
        # dca: the running mean square of the applied gradients, per variable (the engine's slot beside each)
        self.mean_square = [np.zeros_like(p) for p in self.versions[0]] if dc is not None and dc.adaptive else None
        self.optimizer = parse_optimizer(optimizer)
        self.slots = new_state(self.optimizer, self.versions[0])  # the PS's slots, as each update lands
        self.history: list[Params] | None = [self.versions[0]] if keep else None
        self.current = 0
        self.evals: list[tuple[int, float, float, float | None]] = []
        self.calls = 0
        self.stop_at: float | None = None  # time of the first non-finite loss (the real run would end there)

    def wave(self, data: Callable[[int, int], Batch], limit: int, allow_nan: bool) -> None:
        """Compute every record read at a version that exists (in oracle calls of at most ``limit``)."""
        end = self.nxt
        while end < self.n and self.reads[self.order[end]] <= self.current:
            end += 1
        for lo in range(self.nxt, end, limit):
            wave = self.order[lo:min(end, lo + limit)]
            loss, gs = self.oracle.gradients([self.versions[int(self.reads[i])] for i in wave],
                                             [data(int(self.workers[i]), int(self.minibatches[i])) for i in wave])
            self.calls += 1
            for i, li, gi in zip(wave, loss, gs):
                self.losses[i] = li
                self.grads[int(i)] = gi
                if self.dc is not None:
                    self.read_at[int(i)] = self.versions[int(self.reads[i])]
            self.computed[wave] = True
            bad = wave[~np.isfinite(np.asarray(loss, float))]
            if len(bad) and not allow_nan:
                first = float(self.t[bad].min())
                self.stop_at = first if self.stop_at is None else min(self.stop_at, first)
        self.nxt = end

    def apply_ready(self) -> bool:
        """Apply every update whose gradients are all in; drop versions nobody reads any more. Whether any was."""
        moved = False
        while self.current < self.updates and all(self.computed[i] for i in self.members[self.current + 1]):
            u = self.current + 1
            grads = [self.grads.pop(i) for i in self.members[u]]
            if self.dc is not None:
                grads = [self._compensated(g, i) for g, i in zip(grads, self.members[u])]
            self.versions[u] = _apply(self.versions[self.current], grads, self.lr,
                                      [self.stale[i] for i in self.members[u]] if self.inverse else None,
                                      self.optimizer, self.slots)
            if self.history is not None:
                self.history.append(self.versions[u])
            self.current, moved = u, True
            if self.every and u % self.every == 0:
                loss, acc = self.oracle.evaluate(self.versions[u])
                self.evals.append((u, float(self.landed[u]), loss, acc))
        oldest = self.reads[self.order[self.nxt]] if self.nxt < self.n else self.current
        for v in [v for v in self.versions if v < min(oldest, self.current)]:
            del self.versions[v]
        return moved

    def _compensated(self, g: Params, i: int) -> Params:
        """Record ``i``'s gradient ``g`` delay-compensated against the version it lands on (``dca``: the running mean
        square takes ``g`` in first); its correction's relative size kept for its record."""
        assert self.dc is not None
        lam: float | Params = self.dc.lam
        if self.mean_square is not None:
            self.mean_square, lam = dca_lambdas(g, self.mean_square, self.dc)
        out = compensated(g, self.versions[self.current], self.read_at.pop(i), lam)
        if self.dc_share is not None:
            moved = sum(float(np.sum(np.square(o - gk, dtype=np.float64))) for o, gk in zip(out, g))
            size = sum(float(np.sum(np.square(gk, dtype=np.float64))) for gk in g)
            self.dc_share[i] = np.sqrt(moved) / np.sqrt(size) if size > 0 else 0.0
        return out

    def result(self) -> Replayed:
        out = finish(ReplayEnd(self.records, self.losses, self.computed, self.stop_at, self.versions[self.current],
                               self.current, float(self.landed[self.current]), self.evals, self.every, self.calls,
                               lr_scale=1.0 / (self.stale + 1.0) if self.inverse else None,
                               dc_correction=self.dc_share), self.oracle)
        out.versions = self.history
        return out


@dataclass
class ReplayEnd:
    """Where a replay ended: the schedule's ``records`` with their ``losses`` (``computed``: which were; cut after
    ``stop_at``, the first non-finite loss's time, where the real run would have stopped), the ``final``
    parameters (version ``updates``, applied at ``landed``), the held-out ``evals`` every ``every`` updates so far,
    the oracle's ``calls``, and per record ``lr_scale`` (``--lr-staleness inverse``) and ``dc_correction`` (``dc``,
    ``dca``) where the mode has them."""

    records: pd.DataFrame
    losses: np.ndarray
    computed: np.ndarray
    stop_at: float | None
    final: Params
    updates: int
    landed: float
    evals: list[tuple[int, float, float, float | None]]
    every: int
    calls: int
    lr_scale: np.ndarray | None = None
    dc_correction: np.ndarray | None = None


def finish(end: ReplayEnd, oracle: GradientOracle) -> Replayed:
    """A replay's :class:`Replayed` from where it ``end``-ed: its records with their losses, the final held-out
    evaluation (by ``oracle``) and the last of the evaluations every ``end.every`` updates."""
    t = end.records["t"].to_numpy(float)
    keep = np.ones(len(end.records), bool) if end.stop_at is None else (t <= end.stop_at) & end.computed
    out = end.records[keep].copy()
    out["loss"] = end.losses[keep]
    if end.lr_scale is not None:
        out["lr_scale"] = end.lr_scale[keep]
    if end.dc_correction is not None:
        out["dc_correction"] = end.dc_correction[keep]
    stopped = None
    if end.stop_at is not None:
        first = out[~np.isfinite(out["loss"].to_numpy(float))].sort_values("t").iloc[0]
        stopped = loss_not_finite(float(first["loss"]), int(first["step"]), int(first["worker"]),
                                  int(first["global_step"]))
    final_loss, final_acc = oracle.evaluate(end.final)
    evals = end.evals
    if end.every and (not evals or evals[-1][0] != end.updates) and end.stop_at is None:
        evals.append((end.updates, end.landed, final_loss, final_acc))
    ev = pd.DataFrame(evals, columns=["global_step", "t", "eval_loss", "eval_accuracy"])
    return Replayed(steps=out, evals=ev, params=end.final, final_loss=final_loss, final_accuracy=final_acc,
                    updates=end.updates, stopped=stopped, oracle_calls=end.calls, gradients=int(end.computed.sum()))


def compensated(grad: Params, now: Params, read: Params, lam: float | Params) -> Params:
    """DC-ASGD's delay-compensated gradient (Zheng et al. 2017): ``g + lam * g * g * (now - read)``, ``read`` the
    parameters ``g`` was computed at, ``now`` those it is applied to; ``lam`` a number (``dc``) or one array per
    variable (``dca``: :func:`dca_lambdas`); in the parameters' own precision."""
    out = []
    for k, (g, w, r) in enumerate(zip(grad, now, read)):
        one = w.dtype.type
        lk = one(lam) if isinstance(lam, (int, float)) else lam[k]
        out.append(g + lk * g * g * (w - r))
    return out


def dca_lambdas(grad: Params, mean_square: Params, dc: DelayComp) -> tuple[Params, Params]:
    """DC-ASGD-a: the running mean square after ``grad``, ``m * ms + (1 - m) * g * g``, and the lambda per
    coordinate, ``lambda0 / sqrt(ms + eps)`` (:class:`ssptk.core.labels.DelayComp`), in the parameters' precision,
    as the engine computes them on the PS."""
    squares, lams = [], []
    for g, ms in zip(grad, mean_square):
        one = ms.dtype.type
        new = one(dc.decay) * ms + one(1.0 - dc.decay) * g * g
        squares.append(new)
        lams.append(one(dc.lam) / np.sqrt(new + one(dc.eps)))
    return squares, lams


def _apply(params: Params, grads: list[Params], lr: float, staleness: list[int] | None,
           optimizer: Optimizer | None = None, slots: list[SlotState] | None = None) -> Params:
    """One update, in the parameters' own precision as TensorFlow's ops compute it: ``params - lr * mean(grads)``
    (with an ``optimizer``, its step on ``mean(grads)``, ``slots`` its state), each gradient first scaled by
    ``1 / (staleness + 1)`` when ``staleness`` is given (``--lr-staleness inverse``)."""
    deltas = []
    for k, p in enumerate(params):
        one = p.dtype.type
        gk = [g[k] for g in grads]
        if staleness is not None:
            gk = [gi * one(1.0 / (s + 1.0)) for gi, s in zip(gk, staleness)]
        deltas.append(gk[0] if len(gk) == 1 else sum(gk[1:], gk[0]) / one(len(gk)))
    opt = optimizer or Optimizer()
    return apply(opt, params, deltas, lr, new_state(opt, params) if slots is None else slots)
