"""The state of a run while it goes on: step and event records in, growing arrays out.

:class:`LiveRun` takes the *new* records of a run (as :class:`ssptk.rundir.logs.RunLogReader` hands them
over) and keeps everything the live dashboard draws, incrementally: appends to growing arrays and
running totals, never a pass over all records per batch. No plotting and no I/O here; what the figure
shows of it is :meth:`LiveRun.view`, computed by :mod:`ssptk.analysis.run_view` as for the report's figure.

Records are taken in time order up to a horizon every worker's log has passed (:attr:`LiveRun.horizon`):
the logs are read one after the other and a worker's record reaches its log after the time it carries, so a
record beyond the horizon may still be followed by another worker's earlier one. Step skew (most minus least
advanced unfinished worker) is kept after every step record with the semantics of
:func:`ssptk.analysis.skew_timeline`; :meth:`LiveRun.finalize` recomputes it once with that function so the
final figure equals :func:`ssptk.render.figures.run_figure`'s.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from ssptk.analysis.metrics import finish_times, skew_timeline
from ssptk.analysis.run_view import Line, RunFacts, RunView, StepArrays, WaitPanel, view_of_records
from ssptk.core.divergence import DivergenceWatch, smoothing_window
from ssptk.rundir import StoredOptions

__all__ = ["GrowingArray", "LiveRun", "WorkerTotals", "nice_ceil", "nice_floor", "sticky_range"]


class GrowingArray:
    """A 1-D float64 array that grows at its end (amortised O(1) per value: capacity doubles)."""

    def __init__(self, capacity: int = 256) -> None:
        self._buf = np.empty(max(1, capacity), dtype="float64")
        self._n = 0

    def extend(self, values: Sequence[float] | np.ndarray) -> None:
        """Append ``values`` at the end."""
        k = len(values)
        if not k:
            return
        need = self._n + k
        if need > len(self._buf):
            grown = np.empty(max(need, 2 * len(self._buf)), dtype="float64")
            grown[: self._n] = self._buf[: self._n]
            self._buf = grown
        self._buf[self._n:need] = values
        self._n = need

    def reorder(self, order: np.ndarray) -> None:
        """Permute the values in place (``order`` as from ``np.argsort``)."""
        self._buf[: self._n] = self._buf[: self._n][order]

    @property
    def values(self) -> np.ndarray:
        """The values so far (a view: copy it before keeping it across appends)."""
        return self._buf[: self._n]

    def __len__(self) -> int:
        return self._n


def _num(value: Any, default: float = math.nan) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return default


def _int(value: Any) -> int | None:
    x = _num(value)
    return int(x) if math.isfinite(x) else None


def _finite(value: Any) -> float:
    x = _num(value, 0.0)
    return x if math.isfinite(x) else 0.0


def _time_key(item: tuple[float, int, dict[str, Any]]) -> tuple[float, int]:
    t = item[0]
    return (math.inf if math.isnan(t) else t, item[1])


class WorkerTotals:
    """One worker's running totals: step records, seconds waited (consistency) and injected delay."""

    __slots__ = ("steps", "wait_s", "delay_s")

    def __init__(self) -> None:
        self.steps = 0
        self.wait_s = 0.0
        self.delay_s = 0.0


class LiveRun:
    """Everything the dashboard draws, accumulated from batches of new records (:meth:`add`).

    ``workers`` (the run's ``--workers``) makes every worker count in the skew from the start with 0
    completed steps, as it does in :func:`ssptk.render.figures.run_figure` once it has logged a step, and
    holds records back until each of them has logged something (:attr:`horizon`). ``options``: the run's
    (``mode``, ``staleness``, ``workers``, ``model``), for :meth:`view`.
    """

    def __init__(self, workers: int = 0, options: Mapping[str, Any] | None = None) -> None:
        self.workers = int(workers)
        self.options = StoredOptions(options or {})
        #: Every step record taken so far, in time order (the order they were taken in).
        self.t = GrowingArray()
        self.worker = GrowingArray()
        self.step = GrowingArray()
        self.loss = GrowingArray()
        #: Skew after each step record (same order as :attr:`t`).
        self.skew = GrowingArray()
        self.skew_end: int | None = None  # once final: the skew is drawn up to here (see finalize)
        #: Running totals per worker that logged a step (per-record columns are the arrays above).
        self.per_worker: dict[int, WorkerTotals] = {}
        #: Number of step records per measured staleness value.
        self.staleness_counts: dict[int, int] = {}
        #: Start barrier (earliest ``start`` event), ``done``/``error`` time per worker.
        self.start_t: float | None = None
        self.finished: dict[int, float] = {}
        self.n_events = 0
        #: Smallest and largest finite loss, and whether any finite loss was <= 0 (log-scale choice).
        self.loss_min = math.inf
        self.loss_max = -math.inf
        self.loss_nonpositive = False
        #: Bumped by every :meth:`add` that took records: a drawing of an older version is stale.
        self.version = 0
        self.in_order = True
        self.final = False
        self._completed: dict[int, float] = {w: 0.0 for w in range(self.workers)}
        self._active: set[int] = set(range(self.workers))
        #: Records read but not taken yet (beyond the horizon); the latest time read of each worker's log,
        #: and the workers whose log has ended (a ``done`` or ``error`` event read).
        self._pending: list[tuple[float, int, dict[str, Any]]] = []
        self._reached: dict[int, float] = {w: -math.inf for w in range(self.workers)}
        self._ended: set[int] = set()
        #: The divergence rule (:mod:`ssptk.core.divergence`) on the losses in time order.
        self.divergence = DivergenceWatch(smoothing_window(max(self.workers, 1)))

    @property
    def n_steps(self) -> int:
        """Step records taken so far."""
        return len(self.t)

    @property
    def n_pending(self) -> int:
        """Records read but held back beyond the :attr:`horizon`."""
        return len(self._pending)

    @property
    def t0(self) -> float | None:
        """Origin of wall time: the start barrier, else the first step record's ``t``."""
        if self.start_t is not None:
            return self.start_t
        return float(self.t.values.min()) if len(self.t) else None

    @property
    def last_t(self) -> float | None:
        return float(self.t.values[-1]) if len(self.t) else None

    @property
    def horizon(self) -> float:
        """The time every worker's log has passed: the least over the workers (those of ``workers`` and any
        that logged) of the latest time read from each one's log; a worker whose log has ended has passed
        every time. Each log is written in time order, so no record at or before the horizon is still to come."""
        return min((math.inf if w in self._ended else t for w, t in self._reached.items()), default=math.inf)

    def add(self, steps: Sequence[dict[str, Any]], events: Sequence[dict[str, Any]]) -> None:
        """Take a batch of new step and event records (docs/run-directory.md keys): those up to the
        :attr:`horizon`, in time order; the others wait for a later batch (or :meth:`finalize`)."""
        if not steps and not events:
            return
        items = [(_num(r.get("t")), 0, r) for r in steps] + [(_num(e.get("t")), 1, e) for e in events]
        for t, kind, rec in items:
            w = _int(rec.get("worker"))
            if kind == 0:
                w = w or 0  # as _step counts it
            elif w is not None and rec.get("event") in ("done", "error"):
                self._ended.add(w)
            if w is not None and not math.isnan(t):
                self._reached[w] = max(self._reached.get(w, -math.inf), t)
            elif w is not None:
                self._reached.setdefault(w, -math.inf)
        self._pending.extend(items)
        horizon = self.horizon
        ready = [item for item in self._pending if item[0] <= horizon]
        if ready:
            self._pending = [item for item in self._pending if not item[0] <= horizon]
            self._take(ready)

    def _take(self, items: list[tuple[float, int, dict[str, Any]]]) -> None:
        items.sort(key=_time_key)  # a step at its worker's done time still counts (as in skew_timeline)
        cols: dict[str, list[float]] = {k: [] for k in ("t", "worker", "step", "loss", "skew")}
        last = self.last_t if self.last_t is not None else -math.inf
        for t, kind, rec in items:
            if kind:
                self._event(t, rec)
            else:
                self._step(t, rec, cols)
                if t < last:
                    self.in_order = False
                last = max(last, t)
        for name in ("t", "worker", "step", "loss", "skew"):
            getattr(self, name).extend(cols[name])
        self.version += 1

    def _event(self, t: float, rec: dict[str, Any]) -> None:
        self.n_events += 1
        kind, w = rec.get("event"), _int(rec.get("worker"))
        if kind == "start" and not math.isnan(t):
            self.start_t = t if self.start_t is None else min(self.start_t, t)
        elif kind in ("done", "error") and w is not None and not math.isnan(t):
            self.finished[w] = min(self.finished.get(w, t), t)
            self._active.discard(w)

    def _step(self, t: float, rec: dict[str, Any], cols: dict[str, list[float]]) -> None:
        w = _int(rec.get("worker")) or 0
        step = _num(rec.get("step"))
        loss = _num(rec.get("loss"))
        series = self.per_worker.get(w)
        if series is None:
            series = self.per_worker[w] = WorkerTotals()
        series.steps += 1
        series.wait_s += _finite(rec.get("wait_s"))
        series.delay_s += _finite(rec.get("delay_s"))
        stale = _int(rec.get("staleness"))
        if stale is not None:
            self.staleness_counts[stale] = self.staleness_counts.get(stale, 0) + 1
        if math.isfinite(loss):
            self.loss_min = min(self.loss_min, loss)
            self.loss_max = max(self.loss_max, loss)
            self.loss_nonpositive |= loss <= 0
        if w not in self._completed and w not in self.finished:
            self._active.add(w)
        self._completed[w] = step if math.isfinite(step) else self._completed.get(w, 0.0)
        done = [self._completed[i] for i in self._active]
        cols["t"].append(t)
        cols["worker"].append(w)
        cols["step"].append(step)
        cols["loss"].append(loss)
        gs = _int(rec.get("global_step"))
        self.divergence.add(loss if math.isfinite(loss) else None, gs)
        cols["skew"].append(max(done) - min(done) if done else 0.0)

    def finalize(self) -> None:
        """The run has ended: take the records held back, sort by ``t`` and recompute the skew exactly as the
        run figure does.

        Uses :func:`ssptk.analysis.skew_timeline` with :func:`ssptk.analysis.finish_times` (a worker
        without a ``done`` event leaves at its last record). Runs once; later calls do nothing.
        """
        if self.final:
            return
        self.final = True
        if self._pending:
            pending, self._pending = self._pending, []
            self._take(pending)
        if not len(self.t):
            return
        if not self.in_order:
            order = np.argsort(self.t.values, kind="stable")
            for col in (self.t, self.worker, self.step, self.loss):
                col.reorder(order)
            self.in_order = True
        df = pd.DataFrame({"t": self.t.values.copy(), "worker": self.worker.values.astype("int64"),
                           "step": self.step.values.copy()})
        events = pd.DataFrame({"event": ["done"] * len(self.finished), "t": list(self.finished.values()),
                               "worker": list(self.finished)})
        finished, ids = finish_times(df, events), sorted(self.per_worker)
        skew = skew_timeline(df, finished, workers=ids)
        self.skew = GrowingArray(len(df))
        self.skew.extend(skew["skew"].to_numpy(dtype="float64"))
        # the records while two or more workers train: a prefix, since workers only ever finish
        self.skew_end = len(skew_timeline(df, finished, workers=ids, end_when_one_left=True))
        self.version += 1

    def skew_shown(self) -> tuple[int, int | None]:
        """The largest skew the figure shows so far, and the bound SSP holds it to (S+1; ``None`` in other
        modes): what the page says beside the figure, for a reader (or a browser test) to hold one to the other."""
        end = len(self.skew) if self.skew_end is None else self.skew_end
        top = int(np.max(self.skew.values[:end])) if end else 0
        staleness = self.options.ssp_bound
        return top, None if staleness is None else staleness + 1

    def view(self) -> RunView:
        """What the run's figure shows of the records taken so far (:func:`ssptk.analysis.run_view.view_of_records`):
        the skew as kept here, the waits of every worker (0 for one without records yet)."""
        t0 = self.t0 or 0.0
        elapsed = self.t.values - t0
        end = len(self.skew) if self.skew_end is None else self.skew_end
        ids = sorted(set(range(self.workers)) | set(self.per_worker))
        totals = [self.per_worker.get(w) for w in ids]
        waits = WaitPanel(np.array(ids, dtype="int64"), _floats(t.wait_s if t else 0.0 for t in totals),
                          _floats(t.delay_s if t else 0.0 for t in totals))
        keys = sorted(self.staleness_counts)
        counts = Line(_floats(keys), _floats(self.staleness_counts[k] for k in keys))
        return view_of_records(StepArrays(elapsed, self.worker.values, self.step.values, self.loss.values),
                               skew=Line(elapsed[:end], self.skew.values[:end]), waits=waits, counts=counts,
                               run=RunFacts(self.options, self.workers, self.options.ssp_bound), ids=ids)


def _floats(values: Any) -> np.ndarray:
    return np.fromiter(values, dtype="float64")


# --- the live figure's axis ranges: round numbers that change rarely ------------------------------

_NICE = (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0)


def nice_ceil(x: float) -> float:
    """Smallest round number (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8 times 10^k) that is >= ``x`` (``x`` <= 0 gives 1)."""
    if not x > 0 or not math.isfinite(x):
        return 1.0
    e = 10.0 ** math.floor(math.log10(x))
    return next(m * e for m in _NICE if m * e >= x * (1 - 1e-12))


def nice_floor(x: float) -> float:
    """Largest round number (as :func:`nice_ceil`) that is <= ``x`` (``x`` > 0)."""
    e = 10.0 ** math.floor(math.log10(x))
    return next(m * e for m in reversed(_NICE[:-1]) if m * e <= x * (1 + 1e-12))


def sticky_range(current: tuple[float, float] | None, lo: float, hi: float, *, log: bool = False,
                 floor: float | None = None, ahead: float | None = None) -> tuple[float, float]:
    """An axis range that changes rarely while a run's data grow: ``current`` while ``[lo, hi]`` fits
    in it, else widened with headroom to round numbers. ``floor``: the range never starts below it
    (0 for counts); ``ahead``: where the data are expected to reach (the run's predicted end), aimed
    at (plus 10%) by the upper end so that it need not move again. A change of range redraws the axes' ticks."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return current or (0.0, 1.0)
    if current is not None and current[0] <= lo and hi <= current[1]:
        return current
    if log:
        lo2 = nice_floor(lo / 4) if current is None or lo < current[0] else current[0]
        hi2 = nice_ceil(hi * 1.5) if current is None or hi > current[1] else current[1]
        return lo2, hi2
    span = max(hi - lo, abs(hi) * 0.1, 1e-9)
    hi2 = current[1] if current is not None and hi <= current[1] else \
        nice_ceil(max(hi + 0.25 * span, 1.1 * ahead if ahead else -math.inf))
    if current is not None and lo >= current[0]:
        lo2 = current[0]
    elif floor is not None and lo - 0.1 * span <= floor:
        lo2 = floor
    else:
        lo2 = lo - 0.1 * span
        lo2 = nice_floor(lo2) if lo2 > 0 else -nice_ceil(-lo2)
    return lo2, hi2
