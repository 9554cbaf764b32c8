"""A discrete-event simulator of the training modes: where the time goes, without TensorFlow.

Worker ``i``'s k-th step takes ``overhead + compute + delay_i(k)`` seconds, where ``delay_i`` is drawn
from :class:`ssptk.core.delays.DelayModel` -- the very class the real workers sleep on -- so a simulated run
and a real run with the same ``seed``, ``straggler`` and ``jitter`` see identical delay streams (worker
``i``'s j-th computed step, counting dropped ones, gets the j-th value of its stream). ``overhead`` is
a fixed per-step cost (estimate it from a real async run with :func:`calibrate_overhead`), ``compute``
an optional extra fixed cost. No loss is modelled (``loss`` is NaN); the step records have the columns
of real runs (``docs/run-directory.md``).

Modes
-----
``async``
    Every worker loops on its own; each update is applied when its step finishes.
``ssp`` (``staleness=S`` or ``mode="ssp:S"``)
    A worker that completed ``c`` steps starts its next one only when ``c - min_j c_j <= S``, the
    minimum over workers that have not finished; until then it is blocked (its ``wait_s``). So the
    skew (max - min completed steps) never exceeds ``S + 1``. A worker checks the gate, then claims a
    minibatch, then reads the parameters.
``sync``, ``backup=0`` (and ``allreduce``, modelled the same way)
    Each step all workers compute; the update comes when the last finishes; all start again then.
    Every worker does exactly ``steps`` steps.
``sync``, ``backup=B > 0``
    The update needs only ``N - B`` gradients. Two models of the late ones (``late=``):

    * ``"drop"`` -- **the default, because it is what the engine does**: the update is applied when
      the first ``N - B`` gradients computed on the current parameters (from distinct workers)
      arrive. Late workers still finish their step; their gradient is dropped (``applied=False``,
      ``staleness`` = updates they missed) and they start at once on the current parameters. A worker
      whose gradient counted waits for the update (its ``wait_s``). At the last update the run ends:
      steps still in flight finish and are dropped.
    * ``"abandon"`` -- the K-sync model of Dutta et al. (2018): all N start each step together, the
      update comes when the fastest ``N - B`` finish, the other B abandon their work (no record).

    With i.i.d. exponential step times (mean M) the time per update is ``M * H_N`` for ``B = 0``,
    ``M * (H_N - H_B)`` for ``abandon`` and, for ``drop``, lies between the two: after every update
    the B late workers must first finish a useless step, so the wait is the ``(N-B)``-th arrival
    among ``N-B`` Exp(M) and ``B`` Erlang(2, M) clocks (:func:`expected_sync_update_time`).

``local`` (``local_steps=H`` or ``mode="local:H"``: local SGD, :mod:`ssptk.sim.local`)
    Rounds: each worker pulls, takes ``H`` local steps on its own copy (each ``overhead + compute + delay``, from
    the same delay streams), then pushes its delta; the round's average is applied when the first ``N - B``
    deltas computed from the current parameters have landed (``backup=B``: the late ones are dropped, as in
    sync's ``"drop"`` model), and every worker goes on from it. Under a ``network`` a round is one pull and one
    push, not one per step (:attr:`SimResult.pushes`). ``local:1`` is ``sync`` step for step.

Budget (as in the engine): ``steps=K`` means ``N*K`` minibatches shared by all workers in ``async``
and ``ssp`` (a worker claims one before computing it; faster workers do more); ``K`` steps per worker
in ``sync`` without backup; ``K`` updates in ``sync`` with backup (however many minibatches that takes); ``K``
local steps per worker in ``local``: ``ceil(K / H)`` rounds (with backup, however many minibatches they take).

``staleness`` of a record: updates from other workers applied between its parameter read and its
own update (0 for applied ``sync`` gradients and ``local`` deltas; ``local_step`` counts local SGD's local steps since
the last average). In ``async`` and
``ssp`` the read comes as the step starts, or ``gap`` seconds into it: what a real run spends between an update's
landing and the next read (its ``gap_ms``) sees the updates that land meanwhile, and equal workers are then about
``(N-1)(1 - gap/step)`` stale, not ``N-1``. Ties in
time are broken by the order events were scheduled, so equal workers without jitter finish in index order
(and, in ``sync`` with backup, the same B workers are then always the late ones).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd

from ssptk.core.delays import DelayModel, Jitter
from ssptk.core.errors import UsageError
from ssptk.core.network import Network
from ssptk.core.options import resolve
from ssptk.sim.calibrate import calibrate_overhead
from ssptk.sim.events import run_free, run_sync_abandon, run_sync_drop
from ssptk.sim.link_model import LinkModel
from ssptk.sim.local import run_local
from ssptk.sim.schedule import COLUMNS
from ssptk.sim.spec import LATE, SimSpec

__all__ = [
    "SimResult", "SimSpec", "simulate", "simulate_spec", "ideal_for", "harmonic", "expected_sync_update_time",
    "COLUMNS"]


@dataclass(eq=False)
class SimResult:
    """A simulated run: its step records (the columns of real runs) and summary figures.

    ``steps_per_s`` is records (minibatches computed, dropped ones included) per second, the figure real runs
    report; ``updates_per_s`` counts applied updates (one per record in async/ssp, one per global step in sync, one
    per averaging round in local). ``wait_fraction`` = sum of ``wait_s`` / (workers * ``wall_s``); ``max_skew`` the
    largest (max - min) completed steps among unfinished workers after any step record, as a real run's summary
    measures it (:meth:`skew_timeline` shows the state at each distinct time: where steps take no time, several
    records share one and a peak between them is not in it). ``overhead``: the fixed per-step seconds it was
    simulated with (``overhead + compute``). ``bound``: ssp's staleness bound S. ``local_steps``: local SGD's ``H``
    (``None`` in other modes).
    ``pushes``: the gradients (``local``: deltas) workers sent to the PS, each after a pull of the parameters: one
    per step, one per round in ``local`` (what a shaped ``network`` carries). ``cores``: the cores the workers
    shared (``None``: each its own CPU, or no shaped ``network``, where cores change nothing). ``gap``: the seconds of
    each step before its read (``async`` and ``ssp``; 0 in the other modes).
    """

    mode: str
    workers: int
    bound: int | None
    backup: int
    steps: pd.DataFrame = field(repr=False)
    wall_s: float
    total_steps: int
    updates: int
    steps_per_s: float
    updates_per_s: float
    wait_fraction: float
    max_skew: int
    late: str | None = None
    overhead: float = 0.0
    local_steps: int | None = None
    pushes: int = 0
    cores: float | None = None
    gap: float = 0.0
    _skew: pd.DataFrame = field(default_factory=lambda: pd.DataFrame({"t": [0.0], "skew": [0]}), repr=False)

    def skew_timeline(self) -> pd.DataFrame:
        """Columns ``t``, ``skew``: a step function, the skew from each ``t`` until the next row's."""
        return self._skew.copy()

    def staleness_hist(self) -> pd.Series:
        """How many records had each staleness value (all records, dropped ones included)."""
        return self.steps["staleness"].value_counts().sort_index().rename("count")


def harmonic(n: int) -> float:
    """The harmonic number ``H_n = 1 + 1/2 + ... + 1/n`` (``H_0 = 0``)."""
    if int(n) != n or n < 0:
        raise UsageError(f"harmonic needs an integer n >= 0, got {n!r}")
    return float(sum(1.0 / k for k in range(1, int(n) + 1)))


def expected_sync_update_time(workers: int, backup: int = 0, mean: float = 1.0, late: str = "drop") -> float:
    """Long-run mean seconds per ``sync`` update when step times are i.i.d. exponential with ``mean``.

    ``backup=0``: ``mean * H_N``. ``late="abandon"``: ``mean * (H_N - H_B)``. ``late="drop"``: by
    memorylessness, right after each update ``N - B`` workers start fresh (one Exp step to a useful
    gradient) and ``B`` are late (a useless step first, then a useful one); the update time is the
    ``(N-B)``-th useful arrival, computed exactly by dynamic programming over (useful arrivals so far,
    late workers still on their useless step). While ``k`` gradients have arrived ``N - k`` workers
    are busy, so each event takes ``mean / (N - k)`` on average. (The first update of a run has no late
    workers; it is not counted in this long-run figure.)
    """
    n, b = int(workers), int(backup)
    if n < 1 or not 0 <= b < n:
        raise UsageError(f"need workers >= 1 and 0 <= backup < workers, got workers={workers}, backup={backup}")
    if late not in LATE:
        raise UsageError(f"late must be 'drop' or 'abandon', got {late!r}")
    if b == 0 or late == "abandon":
        return mean * (harmonic(n) - harmonic(b))
    need = n - b
    nxt = [0.0] * (b + 1)  # E(k+1, s) for s = 0..b; E(need, s) = 0
    for k in range(need - 1, -1, -1):
        cur = [0.0] * (b + 1)
        for s in range(b + 1):
            cur[s] = (mean + (n - k - s) * nxt[s] + (s * cur[s - 1] if s else 0.0)) / (n - k)
        nxt = cur
    return nxt[b]


def simulate(mode: str, workers: int, steps: int, *, overhead: float = 0.0, compute: float = 0.0,
             late: str = "drop", model_bytes: float | Sequence[float] | None = None, gap: float = 0.0,
             **options: Any) -> SimResult:
    """Simulate one run and return its step records and summary (see the module docstring).

    ``mode``: ``sync``, ``async``, ``ssp`` (with ``staleness``, default 2) or ``ssp:S``, ``local`` (with
    ``local_steps``, default 4) or ``local:H``; ``allreduce`` is simulated like ``sync`` without backup (its
    transfers as a ring). ``steps``: the budget ``K`` (N*K shared minibatches for async/ssp, K per worker for sync
    and local, K updates for sync with backup). ``options``: the run options of ``ssptk run`` the simulator takes
    (``staleness``, ``local_steps``, ``backup``, ``straggler`` as ``{worker: seconds}``, ``[(worker, seconds),
    ...]`` or ``"I:S"`` strings, ``jitter``, ``seed``, ``network``, ``ps``, ``cores``), resolved and checked as a
    run's are (:func:`ssptk.core.options.resolve`); ``cores``: those the workers share under a shaped ``network``
    (``None`` or 0: each its own CPU). The clock's own: ``overhead`` and ``compute``, fixed seconds added to every
    step (0 here: a step lasts its delays only; ``ssptk sim`` and ``ssptk.simulate`` default to a measured 5 ms);
    ``late``: ``drop`` (default, the engine's behaviour) or ``abandon`` (Dutta et al.'s K-sync), for sync with
    backup; ``model_bytes``: the model's float32 bytes, or each variable's, which a shaped ``network``'s pulls and
    pushes carry (:mod:`ssptk.sim.link_model`); ``gap`` (async and ssp): seconds of ``overhead + compute`` before a step
    reads the parameters (a real run's ``gap_ms``, :func:`ssptk.sim.calibrate_gap`). See :class:`SimSpec`.
    Raises :class:`UsageError` on bad input.
    """
    for name, value in (("jitter", options.get("jitter")), ("network", options.get("network"))):
        if isinstance(value, (Jitter, Network)):
            options[name] = str(value)  # the option's own form, as a run takes it
    opts = resolve(mode=mode, workers=workers, steps=steps, stall_timeout=0, **options)
    return simulate_spec(SimSpec.of(opts, overhead=overhead, compute=compute, late=late, model_bytes=model_bytes,
                                    gap=gap))


def simulate_spec(spec: SimSpec) -> SimResult:
    """Simulate ``spec`` (options already resolved and checked: :meth:`SimSpec.of`); see :func:`simulate`."""
    n, k, b, h, base = spec.workers, spec.steps, spec.backup, spec.local_steps, spec.base
    models = [DelayModel(i, dict(spec.stragglers), spec.jitter, spec.seed, own_s=base)  # own_s: a replayed trace's pace
              for i in range(n)]
    links = LinkModel(spec) if spec.shaped else None
    kw = {} if links is None else {"flight": links}
    pushes = None
    if spec.mode in ("async", "ssp"):
        log, updates = run_free(n, n * k, spec.bound, models, base, gap=spec.read_gap, **kw)
    elif spec.mode == "local":
        log, updates, pushes = run_local(n, k, h or 1, b, models, base, **kw)
    elif b and spec.late == "abandon":
        if links is not None:
            raise UsageError("late='abandon' is not simulated with a network: use late='drop'")
        log, updates = run_sync_abandon(n, k, b, models, base)
    else:
        log, updates = run_sync_drop(n, k, b, models, base, **kw)
    df = log.frame()
    wall = float(df["t"].max()) if len(df) else 0.0
    records = len(df)
    rate = (lambda x: x / wall) if wall > 0 else (lambda x: float("inf") if x else 0.0)
    return SimResult(
        mode=spec.mode, workers=n, bound=spec.bound, backup=b, steps=df, wall_s=wall, total_steps=records,
        updates=int(updates), steps_per_s=rate(records), updates_per_s=rate(updates),
        wait_fraction=float(df["wait_s"].sum()) / (n * wall) if wall > 0 else 0.0, max_skew=int(log.max_skew()),
        late=spec.late if (spec.mode == "sync" and b) else None, overhead=base, local_steps=h,
        pushes=records if pushes is None else pushes, cores=None if links is None else links.cores,
        gap=spec.read_gap, _skew=log.timeline())


def ideal_for(steps_df: pd.DataFrame, spec: SimSpec) -> dict[str, float | None]:
    """What the simulator predicts for a real run's options (``spec``, :meth:`SimSpec.of` of them, its budget what
    the run got through), with the overhead calibrated from its records ``steps_df``.

    ``measured_over_ideal`` near 1 means the run's throughput is what its consistency mode, delays and
    per-step cost explain; well below 1, the engine loses time the model does not (extra round trips).
    Under a shaped network (with ``spec.model_bytes``) a step's time includes its transfers: the overhead is the
    one whose simulated run, calibrated alike, gives the run's own (the step's cost without them; where the link
    is the bound, step times hardly depend on it, so the estimate is loose and matters little). ``spec.cores``: the
    cores the run's workers shared (``None``: each its own), simulated under a shaped network (the overhead then
    a free run's step on them, as :func:`simulate` takes it); ``ideal_cores`` says which applied (``None``: none).
    """
    if spec.model_bytes is None:  # no size to carry: the links cannot be simulated
        spec = replace(spec, network=None)
    try:
        overhead = calibrate_overhead(steps_df, spec.workers)
        if spec.shaped:
            overhead = _without_transfers(overhead, replace(spec, steps=min(spec.steps, 30)))
        sim = simulate_spec(replace(spec, overhead=overhead, compute=0.0, gap=0.0))
    except UsageError:
        return {"overhead_ms": None, "ideal_steps_per_s": None, "ideal_cores": None}
    return {"overhead_ms": 1000.0 * overhead, "ideal_steps_per_s": sim.steps_per_s, "ideal_cores": sim.cores}


def _without_transfers(measured: float, spec: SimSpec) -> float:
    """The overhead whose simulated run's :func:`calibrate_overhead` is ``measured`` (bisection: it grows with it)."""
    lo, hi = 0.0, measured
    for _ in range(12):
        mid = (lo + hi) / 2
        if calibrate_overhead(simulate_spec(replace(spec, overhead=mid, compute=0.0, gap=0.0)).steps,
                              spec.workers) < measured:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2
