"""The event loops behind :mod:`ssptk.sim` (internal; use :func:`ssptk.sim.simulate`).

Each loop takes one :class:`~ssptk.core.delays.DelayModel` per worker and a fixed per-step cost ``base``
(overhead + compute); worker ``i``'s k-th computed step lasts ``base + models[i].next()``. The loops
append step records to a :class:`Log` in the order they happen, so record times never decrease.
Pure Python on a heap, no pandas inside: the DataFrame is built once at the end.
"""
from __future__ import annotations

import bisect
import heapq
from collections.abc import Sequence
from itertools import count
from typing import Protocol

import numpy as np
import pandas as pd

from ssptk.core.delays import DelayModel
from ssptk.core.records import INT_STEP_COLUMNS, STEP_COLUMNS

#: The columns of a simulated schedule: those of a real run's step records.
COLUMNS = STEP_COLUMNS


class Counts:
    """Completed-step counts per worker, with the min and max over unfinished workers in O(1) amortised.

    Counts only ever grow by one, so the minimum can only move up by one when its last holder moves;
    only a worker leaving (finishing) can make the maximum go down.
    """

    def __init__(self, n: int) -> None:
        self.c = [0] * n
        self.live = [True] * n
        self.n_live = n
        self.freq: dict[int, int] = {0: n}
        self.lo = 0
        self.hi = 0

    def bump(self, i: int) -> None:
        """Worker ``i`` completed one more step."""
        c = self.c[i]
        self.c[i] = c + 1
        if not self.live[i]:
            return
        f = self.freq
        f[c] -= 1
        if f[c] == 0:
            del f[c]
            if c == self.lo:
                self.lo = c + 1
        f[c + 1] = f.get(c + 1, 0) + 1
        if c + 1 > self.hi:
            self.hi = c + 1

    def finish(self, i: int) -> None:
        """Worker ``i`` will do no more steps: it no longer holds anyone back nor counts for the skew."""
        if not self.live[i]:
            return
        self.live[i] = False
        self.n_live -= 1
        c = self.c[i]
        f = self.freq
        f[c] -= 1
        if f[c] == 0:
            del f[c]
        if self.n_live == 0:
            return
        while self.lo not in f:
            self.lo += 1
        while self.hi not in f:
            self.hi -= 1

    @property
    def skew(self) -> int:
        return self.hi - self.lo if self.n_live else 0


class Log:
    """Step records (as tuples, in the order they happen) plus the skew after every change."""

    def __init__(self, n: int) -> None:
        self.rows: list[tuple] = []
        self.counts = Counts(n)
        self.tl_t: list[float] = []
        self.tl_skew: list[int] = []

    def record(self, t: float, w: int, gs: int, wait: float, stale: int, mb: int, delay: float, applied: bool) -> None:
        cnt = self.counts
        cnt.bump(w)
        self.rows.append((t, w, cnt.c[w], gs, wait, stale, mb, delay, applied))
        self.tl_t.append(t)
        self.tl_skew.append(cnt.skew)

    def finish(self, t: float, w: int) -> None:
        self.counts.finish(w)
        self.tl_t.append(t)
        self.tl_skew.append(self.counts.skew)

    def max_skew(self) -> int:
        """The largest skew after any step record, peaks between records at the same time included (which
        :meth:`timeline`, one row per distinct time, does not show)."""
        return max(self.tl_skew, default=0)

    def frame(self) -> pd.DataFrame:
        """The step records as a DataFrame with :data:`COLUMNS` and fixed dtypes."""
        # a row holds every column but the loss (no loss is modelled), in COLUMNS' order
        names = [c for c in COLUMNS if c != "loss"]
        values = list(zip(*self.rows)) if self.rows else [() for _ in names]
        data = {c: np.asarray(v, dtype=np.int64 if c in INT_STEP_COLUMNS else bool if c == "applied" else float)
                for c, v in zip(names, values)}
        data["loss"] = np.full(len(self.rows), np.nan)
        return pd.DataFrame(data, columns=list(COLUMNS))

    def timeline(self) -> pd.DataFrame:
        """Skew as a step function: one row per distinct time (the state after all changes at it), from t=0."""
        t = np.asarray(self.tl_t, dtype=float)
        s = np.asarray(self.tl_skew, dtype=np.int64)
        if len(t):
            last = np.append(t[1:] != t[:-1], True)
            t, s = t[last], s[last]
        if not len(t) or t[0] > 0:
            t, s = np.append(0.0, t), np.append(0, s).astype(np.int64)
        return pd.DataFrame({"t": t, "skew": s})


class InFlight(Protocol):
    """The steps in flight: :meth:`start` one, :meth:`next` gives the next to land, ``(when, worker)``.

    :class:`Free` (no network: a step lands when its compute ends) or :class:`ssptk.sim.links.Links` (the pull
    and the push through the links it crosses)."""

    def start(self, worker: int, t: float, compute: float) -> None: ...

    def next(self) -> tuple[float, int]: ...

    def read_at(self, worker: int) -> float: ...

    def __bool__(self) -> bool: ...


class Free:
    """Steps without a network: each lands when its compute ends; ties in the order they started. A step reads the
    parameters ``gap`` seconds after it starts."""

    def __init__(self, workers: int = 0, gap: float = 0.0) -> None:
        self.heap: list[tuple[float, int, int]] = []
        self.order = count()
        self.gap = gap
        self.reads = [0.0] * workers

    def __bool__(self) -> bool:
        return bool(self.heap)

    def start(self, worker: int, t: float, compute: float) -> None:
        if self.reads:
            self.reads[worker] = t + self.gap
        heapq.heappush(self.heap, (t + compute, next(self.order), worker))

    def next(self) -> tuple[float, int]:
        t, _, worker = heapq.heappop(self.heap)
        return t, worker

    def read_at(self, worker: int) -> float:
        return self.reads[worker]


def run_free(n: int, total: int, staleness: int | None, models: Sequence[DelayModel], base: float,
             flight: InFlight | None = None, gap: float = 0.0) -> tuple[Log, int]:
    """``async`` (``staleness=None``) or ``ssp``: workers share ``total`` minibatches; each update applies at once.

    A worker that completed ``c`` steps starts the next one only when ``c - min(unfinished counts) <=
    staleness``; it checks the gate, then claims a minibatch (none left: it finishes), then reads the
    parameters and computes. With ``gap`` > 0 the read comes ``gap`` seconds into the step, and through links
    (``flight``) when the pull starts (:meth:`InFlight.read_at` says when): the updates landed by then are not
    stale. Returns the log and the number of updates.
    """
    log = Log(n)
    cnt = log.counts
    heap = Free(n, gap) if flight is None else flight
    landed: list[float] | None = [] if gap > 0 or flight is not None else None  # when each update landed, in order
    gs = 0
    claimed = 0
    read = [0] * n
    delay = [0.0] * n
    mb = [0] * n
    wait = [0.0] * n
    ready = [0.0] * n  # when the worker became ready for its next step

    def try_start(i: int, t: float) -> bool:
        """Start (or finish) worker ``i`` at ``t``; False if the staleness gate blocks it."""
        nonlocal claimed
        if claimed >= total:
            log.finish(t, i)
            return True
        if staleness is not None and cnt.c[i] - cnt.lo > staleness:
            return False
        mb[i] = claimed
        claimed += 1
        read[i] = gs
        d = models[i].next()
        delay[i] = d
        wait[i] = t - ready[i]
        heap.start(i, t, base + d)
        return True

    blocked: list[int] = []
    for i in range(n):
        if not try_start(i, 0.0):
            blocked.append(i)
    while heap:
        t, i = heap.next()
        if landed is not None:
            read[i] = bisect.bisect_right(landed, heap.read_at(i))
            landed.append(t)
        stale = gs - read[i]
        gs += 1
        log.record(t, i, gs, wait[i], stale, mb[i], delay[i], True)
        ready[i] = t
        if not try_start(i, t):
            blocked.append(i)
        changed = True
        while blocked and changed:  # a finishing worker can raise the minimum and free others
            changed = False
            still = []
            for j in blocked:
                if try_start(j, t):
                    changed = True
                else:
                    still.append(j)
            blocked = still
    return log, gs


def run_sync_drop(n: int, updates: int, backup: int, models: Sequence[DelayModel], base: float,
                  flight: InFlight | None = None) -> tuple[Log, int]:
    """``sync`` as the engine does it: an update needs ``n - backup`` gradients for the current step.

    A gradient computed on the current parameters counts (its worker then waits for the update); one
    computed on older parameters is dropped and its worker starts at once on the current parameters.
    The run ends at update number ``updates``; computations in flight then finish and are dropped.
    """
    need = n - backup
    log = Log(n)
    heap = Free() if flight is None else flight
    g = 0
    read = [0] * n
    delay = [0.0] * n
    mb = [0] * n

    def start(i: int, t: float) -> None:
        read[i] = g
        mb[i] = g * n + i  # as the engine numbers sync's minibatches: the step it is for, then the worker
        d = models[i].next()
        delay[i] = d
        heap.start(i, t, base + d)

    for i in range(n):
        start(i, 0.0)
    arrived: list[tuple[int, float]] = []
    done = False
    while heap:
        t, i = heap.next()
        if not done and read[i] == g:
            arrived.append((i, t))
            if len(arrived) < need:
                continue
            g += 1
            for j, tf in arrived:
                log.record(t, j, g, t - tf, 0, mb[j], delay[j], True)
            done = g >= updates
            for j, _ in arrived:
                if done:
                    log.finish(t, j)
                else:
                    start(j, t)
            arrived = []
        else:
            log.record(t, i, g, 0.0, g - read[i], mb[i], delay[i], False)
            if done:
                log.finish(t, i)
            else:
                start(i, t)
    return log, g


def run_sync_abandon(n: int, updates: int, backup: int, models: Sequence[DelayModel], base: float) -> tuple[Log, int]:
    """``sync`` as the K-sync model of Dutta et al. (2018): each round all ``n`` start together, the
    update happens when the fastest ``n - backup`` finish, the others abandon their step (no record,
    but the delay they were drawn is used up). Minibatch indices are given in order of completion."""
    need = n - backup
    log = Log(n)
    t = 0.0
    mbc = 0
    for g in range(1, updates + 1):
        fin = sorted((t + base + d, i, d) for i, d in ((i, models[i].next()) for i in range(n)))
        tu = fin[need - 1][0]
        for f, i, d in fin[:need]:
            log.record(tu, i, g, tu - f, 0, mbc, d, True)
            mbc += 1
        t = tu
    for i in range(n):
        log.finish(t, i)
    return log, updates
