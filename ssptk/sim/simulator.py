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
own update (0 for applied ``sync`` gradients; in ``local``, the local steps since the last average). In ``async`` and
``ssp`` the read comes as the step starts, or ``gap`` seconds into it: what a real run spends between an update's
landing and the next read (its ``gap_ms``) sees the updates that land meanwhile, and equal workers are then about
``(N-1)(1 - gap/step)`` stale, not ``N-1``. Ties in
time are broken by the order events were scheduled, so equal workers without jitter finish in index order
(and, in ``sync`` with backup, the same B workers are then always the late ones).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ssptk.core.delays import DelayModel, Jitter, parse_jitter, straggler_seconds
from ssptk.core.errors import UsageError
from ssptk.core.labels import LabelError, parse_label
from ssptk.core.network import Network, parse_network
from ssptk.core.options import DEFAULT_LOCAL_STEPS
from ssptk.sim.calibrate import calibrate_overhead
from ssptk.sim.events import run_free, run_sync_abandon, run_sync_drop
from ssptk.sim.links import Links
from ssptk.sim.local import run_local
from ssptk.sim.schedule import COLUMNS

__all__ = [
    "SimResult", "simulate", "ideal_for", "harmonic", "expected_sync_update_time", "COLUMNS"]

LATE = ("drop", "abandon")


@dataclass(eq=False)
class SimResult:
    """A simulated run: its step records (the columns of real runs) and summary figures.

    ``steps_per_s`` is records (minibatches computed, dropped ones included) per second, the figure real runs
    report; ``updates_per_s`` counts applied updates (one per record in async/ssp, one per global step in sync, one
    per averaging round in local). ``wait_fraction`` = sum of ``wait_s`` / (workers * ``wall_s``); ``max_skew`` the
    largest (max - min) completed steps among unfinished workers after any step record, as a real run's summary
    measures it (:meth:`skew_timeline` shows the state at each distinct time: where steps take no time, several
    records share one and a peak between them is not in it). ``overhead``: the fixed per-step seconds it was
    simulated with (``overhead + compute``). ``local_steps``: local SGD's ``H`` (``None`` in other modes).
    ``pushes``: the gradients (``local``: deltas) workers sent to the PS, each after a pull of the parameters: one
    per step, one per round in ``local`` (what a shaped ``network`` carries). ``cores``: the cores the workers
    shared (``None``: each its own CPU, or no shaped ``network``, where cores change nothing). ``gap``: the seconds of
    each step before its read (``async`` and ``ssp``; 0 in the other modes).
    """

    mode: str
    workers: int
    staleness: int | None
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


def _parse_mode(mode: str, staleness: int | None, local_steps: int | None = None
                ) -> tuple[str, int | None, int | None]:
    """``(mode, staleness or None, local steps or None)`` from a mode or label and the numbers given beside it."""
    text = str(mode).strip().lower()
    try:
        name, s = parse_label(text)
    except LabelError as e:
        if ":" in text:
            raise UsageError(f"bad mode {mode!r}: {e.reason}") from None
        hint = e.reason if e.reason.startswith("did you mean") else \
            "use sync, ssp (with staleness, or 'ssp:S'), async, allreduce or local ('local:H')"
        raise UsageError(f"unknown mode {mode!r}: {hint}") from None
    if name == "local":
        if staleness is not None:
            raise UsageError(f"staleness is only for mode ssp (got mode {name!r})")
        if s is not None and local_steps is not None and local_steps != s:
            raise UsageError(f"mode {mode!r} conflicts with local_steps={local_steps}")
        h = s if s is not None else local_steps if local_steps is not None else DEFAULT_LOCAL_STEPS
        return name, None, _int_at_least("local_steps", h, 1)
    if local_steps is not None:
        raise UsageError(f"local_steps is only for mode local (got mode {name!r})")
    if s is not None:
        if staleness is not None and staleness != s:
            raise UsageError(f"mode {mode!r} conflicts with staleness={staleness}")
        return name, s, None
    if name == "ssp":
        if staleness is None:
            raise UsageError("mode ssp needs a staleness >= 0: pass staleness=S or mode 'ssp:S'")
    elif staleness is not None:
        raise UsageError(f"staleness is only for mode ssp (got mode {name!r})")
    return name, None if staleness is None else _int_at_least("staleness", staleness, 0), None


def _int_at_least(name: str, value: object, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
        raise UsageError(f"{name} must be an integer >= {lo}, got {value!r}")
    return int(value)


def _backup(mode: str, workers: int, backup: object, late: str) -> int:
    """``backup`` checked against the mode and the workers (and ``late``, the model of the late ones)."""
    b = _int_at_least("backup", backup, 0)
    if b and mode not in ("sync", "local"):
        raise UsageError(f"backup is only for mode sync or local (got mode {mode!r})")
    if b >= workers:
        raise UsageError(f"backup must be in [0, workers-1] = [0, {workers - 1}], got {b}")
    if late not in LATE:
        raise UsageError(f"late must be 'drop' or 'abandon', got {late!r}")
    return b


def _check_seconds(**seconds: object) -> None:
    for label, x in seconds.items():
        if not isinstance(x, (int, float, np.number)) or not np.isfinite(x) or x < 0:
            raise UsageError(f"{label} must be a number of seconds >= 0, got {x!r}")


def _parse_stragglers(spec: dict[int, float] | list[Any] | tuple[Any, ...] | None, workers: int) -> dict[int, float]:
    out = straggler_seconds(spec)
    for i in out:
        if i >= workers:
            raise UsageError(f"straggler worker index {i} is out of range for {workers} workers")
    return out


def simulate(mode: str, workers: int, steps: int, staleness: int | None = None, backup: int = 0,
             straggler: dict[int, float] | list[tuple[int, float]] | None = None,
             jitter: str | Jitter | None = None, seed: int = 0, overhead: float = 0.0,
             compute: float = 0.0, late: str = "drop", network: str | Network | None = None, ps: int = 1,
             model_bytes: float | Sequence[float] | None = None, cores: float | None = None,
             local_steps: int | None = None, gap: float = 0.0) -> SimResult:
    """Simulate one run and return its step records and summary (see the module docstring).

    ``mode``: ``sync``, ``async``, ``ssp`` (with ``staleness``) or ``ssp:S``, ``local`` (with ``local_steps``,
    default 4) or ``local:H``; ``allreduce`` is simulated like ``sync`` without backup. ``steps``: the budget ``K``
    (N*K shared minibatches for async/ssp, K per worker for sync and local, K updates for sync with backup).
    ``straggler``: ``{worker: seconds}`` or ``[(worker, seconds), ...]`` (or ``"I:S"`` strings); ``jitter``:
    ``exp:MEAN``, ``uniform:LO:HI`` or a :class:`Jitter`. ``overhead`` and ``compute``: fixed seconds added to every
    step (0 here: a step lasts its delays only, so undelayed workers take no time; ``ssptk sim`` and
    ``ssptk.simulate`` default to a measured 5 ms). ``late``: ``drop`` (default, the engine's behaviour) or
    ``abandon`` (Dutta et al.'s K-sync), for sync with backup (local's late deltas are always dropped).
    ``network`` (``--network``'s spec), ``ps`` (PS shards) and ``model_bytes`` (the model's float32 bytes, or each
    variable's in the order the model makes them, which places them on the shards as ``--ps`` does): each
    pull and push is a transfer through the links it crosses, sharing each with the transfers in flight as TCP does
    (:mod:`ssptk.sim.links`); without ``network`` transfers take no time beyond ``overhead``. ``cores`` (with a
    shaped ``network``; without one they change nothing): the workers share that many cores, ``overhead +
    compute`` being what a free run of these workers on these cores measures a step to take (a run's calibrated
    overhead: its CPU work is :func:`ssptk.sim.links.cpu_seconds` of it, taken here); ``None``: each its own CPU,
    whose step is its CPU work. ``gap`` (``async`` and ``ssp``; the other modes ignore it): seconds of ``overhead +
    compute`` a worker spends after its update landed and before its next step reads the parameters (the result's
    way back, its bookkeeping, the next run's dispatch: a real run's ``gap_ms``, :func:`ssptk.sim.calibrate_gap`);
    updates that land then are seen, not stale. 0 (the default): the read comes as the step starts.
    Raises :class:`UsageError` on bad input.
    """
    name, s, h = _parse_mode(mode, staleness, local_steps)
    n = _int_at_least("workers", workers, 1)
    k = _int_at_least("steps", steps, 1)
    b = _backup(name, n, backup, late)
    _check_seconds(overhead=overhead, compute=compute, gap=gap)
    strag = _parse_stragglers(straggler, n)
    jit = parse_jitter(jitter)
    base = float(overhead) + float(compute)
    if gap > base:
        raise UsageError(f"gap must be at most the step's fixed seconds (overhead + compute = {base:g}), got {gap!r}")
    gap = float(gap) if name in ("async", "ssp") else 0.0
    models = [DelayModel(i, strag, jit, seed, own_s=base) for i in range(n)]  # own_s: a replayed trace's pace
    # a local round's CPU work is its H steps' (the cores then shared as in H steps of sync)
    links = _links(network, n, ps, model_bytes, name, seed, cores, base * (h or 1), gap)
    kw = {} if links is None else {"flight": links}

    pushes = None
    if name in ("async", "ssp"):
        log, updates = run_free(n, n * k, s, models, base, gap=gap, **kw)
    elif name == "local":
        log, updates, pushes = run_local(n, k, h or 1, b, models, base, **kw)
    elif b and late == "abandon":
        if links is not None:
            raise UsageError("late='abandon' is not simulated with a network: use late='drop'")
        log, updates = run_sync_abandon(n, k, b, models, base)
    else:
        log, updates = run_sync_drop(n, k, b, models, base, **kw)

    df = log.frame()
    skew = log.timeline()
    wall = float(df["t"].max()) if len(df) else 0.0
    records = len(df)
    rate = (lambda x: x / wall) if wall > 0 else (lambda x: float("inf") if x else 0.0)
    wait_fraction = float(df["wait_s"].sum()) / (n * wall) if wall > 0 else 0.0
    return SimResult(
        mode=name, workers=n, staleness=s, backup=b, steps=df, wall_s=wall, total_steps=records,
        updates=int(updates), steps_per_s=rate(records), updates_per_s=rate(updates),
        wait_fraction=wait_fraction, max_skew=int(log.max_skew()),
        late=late if (name == "sync" and b) else None, overhead=base, local_steps=h,
        pushes=records if pushes is None else pushes, cores=None if links is None else links.cores, gap=gap, _skew=skew,
    )


def _links(network: str | Network | None, workers: int, ps: int, model_bytes: float | Sequence[float] | None,
           mode: str, seed: int = 0, cores: float | None = None, cpu_s: float | None = None,
           gap: float = 0.0) -> Links | None:
    """The simulated links, or ``None`` where transfers take no time (no network, or nothing shaped)."""
    net = parse_network(network)
    if net is None or not net.shaped:
        return None
    shards = _int_at_least("ps", ps, 1)
    sizes = np.atleast_1d(np.asarray(model_bytes if model_bytes is not None else np.nan, dtype=float))
    if not len(sizes) or not np.isfinite(sizes).all() or (sizes < 0).any():
        raise UsageError(f"a simulated --network {net} needs the model's size: give --model (a built-in model, or "
                         "model_bytes= in Python)")
    size: float | list[float] = (float(sizes[0]) if isinstance(model_bytes, (int, float, np.number))
                                 else [float(b) for b in sizes])
    if cores is not None and (isinstance(cores, bool) or not isinstance(cores, (int, float)) or not cores > 0):
        raise UsageError(f"cores must be a number > 0, got {cores!r}")
    return Links(net, workers, 0 if mode == "allreduce" else shards, size, seed=seed, cores=cores, cpu_s=cpu_s,
                 gap=gap, mode=mode)


def ideal_for(steps_df: pd.DataFrame, mode: str, workers: int, steps: int, staleness: int | None = None,
              backup: int = 0, straggler: dict[int, float] | None = None, jitter: str | None = None,
              seed: int = 0, network: str | Network | None = None, ps: int = 1,
              model_bytes: float | Sequence[float] | None = None, cores: float | None = None
              ) -> dict[str, float | None]:
    """What the simulator predicts for a real run's options, with the overhead calibrated from its records.

    ``measured_over_ideal`` near 1 means the run's throughput is what its consistency mode, delays and
    per-step cost explain; well below 1, the engine loses time the model does not (extra round trips).
    Under a shaped ``network`` (with ``model_bytes``) a step's time includes its transfers: the overhead is the
    one whose simulated run, calibrated alike, gives the run's own (the step's cost without them; where the link
    is the bound, step times hardly depend on it, so the estimate is loose and matters little). ``cores``: the
    cores the run's workers shared (``None``: each its own), simulated under a shaped ``network`` (the overhead then
    a free run's step on them, as :func:`simulate` takes it); ``ideal_cores`` says which applied (``None``: none).
    """
    none: dict[str, float | None] = {"overhead_ms": None, "ideal_steps_per_s": None, "ideal_cores": None}
    name = "sync" if mode == "allreduce" else mode
    kw: dict[str, Any] = dict(staleness=staleness, backup=backup, straggler=straggler, jitter=jitter, seed=seed)
    net = parse_network(network) if model_bytes is not None else None
    if net is not None and net.shaped:
        kw.update(network=net, ps=ps if mode != "allreduce" else 1, model_bytes=model_bytes, cores=cores)
    try:
        overhead = calibrate_overhead(steps_df, workers)
        if "network" in kw:
            overhead = _without_transfers(overhead, name, workers, min(steps, 30), kw)
        sim = simulate(name, workers, steps, overhead=overhead, **kw)
    except UsageError:
        return none
    return {"overhead_ms": 1000.0 * overhead, "ideal_steps_per_s": sim.steps_per_s, "ideal_cores": sim.cores}


def _without_transfers(measured: float, mode: str, workers: int, steps: int, kw: dict[str, Any]) -> float:
    """The overhead whose simulated run's :func:`calibrate_overhead` is ``measured`` (bisection: it grows with it)."""
    lo, hi = 0.0, measured
    for _ in range(12):
        mid = (lo + hi) / 2
        if calibrate_overhead(simulate(mode, workers, steps, overhead=mid, **kw).steps, workers) < measured:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2
