"""The event loops of ``async``, ``ssp`` and ``sync`` (internal; use :func:`ssptk.sim.simulate`).

Each loop takes one :class:`~ssptk.core.delays.DelayModel` per worker and a fixed per-step cost ``base``
(overhead + compute); worker ``i``'s k-th computed step lasts ``base + models[i].next()``. A worker's
:class:`Step` goes through the network (an :class:`InFlight`: :class:`Free`, or :class:`ssptk.sim.link_model.LinkModel`)
and lands at a time; the loop then does what the mode does with it and writes its
:class:`~ssptk.sim.schedule.Record` to a :class:`~ssptk.sim.schedule.Schedule`, in the order things happen, so
record times never decrease. ``sync`` (and local SGD's rounds, :mod:`ssptk.sim.local`) apply an update by one
rule, :class:`Quorum`. Pure Python on a heap, no pandas inside: the DataFrame is built once at the end.
"""
from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import count
from typing import Generic, NamedTuple, Protocol, TypeVar

from ssptk.core.delays import DelayModel
from ssptk.sim.schedule import Finish, Record, Schedule

__all__ = ["Free", "InFlight", "Quorum", "Step", "Work", "Workers", "run_free", "run_sync_abandon",
           "run_sync_drop"]


@dataclass(slots=True)
class Work:
    """What worker ``worker`` has in flight, started from parameter version ``read`` (the updates applied before
    it read them)."""

    worker: int
    read: int = 0


W = TypeVar("W", bound=Work)


class InFlight(Protocol):
    """The steps in flight: :meth:`start` one (by its worker's index); :meth:`landings` gives each as it lands,
    ``(when, work[worker])``, until none is in flight (the caller starts more meanwhile).

    :class:`Free` (no network: a step lands when its compute ends) or :class:`ssptk.sim.link_model.LinkModel` (the pull
    and the push through the links it crosses)."""

    def start(self, worker: int, t: float, compute: float) -> None: ...

    def landings(self, work: Sequence[W]) -> Iterator[tuple[float, W]]: ...

    def read_at(self, worker: int) -> float: ...


class Free:
    """Steps without a network: each lands when its compute ends; ties in the order they started. A step reads the
    parameters ``gap`` seconds after it starts."""

    def __init__(self, workers: int = 0, gap: float = 0.0) -> None:
        self.heap: list[tuple[float, int, int]] = []
        self.order = count()
        self.gap = gap
        self.reads = [0.0] * workers

    def start(self, worker: int, t: float, compute: float) -> None:
        if self.reads:
            self.reads[worker] = t + self.gap
        heapq.heappush(self.heap, (t + compute, next(self.order), worker))

    def landings(self, work: Sequence[W]) -> Iterator[tuple[float, W]]:
        heap, pop = self.heap, heapq.heappop
        while heap:
            t, _, worker = pop(heap)
            yield t, work[worker]

    def read_at(self, worker: int) -> float:
        return self.reads[worker]


@dataclass(slots=True)
class Step(Work):
    """One step in flight: its ``minibatch``, its injected ``delay``, how long its worker ``wait``-ed before it
    (``async``, ``ssp``: the gate) and when its worker became ``ready`` for it (its last step landed)."""

    minibatch: int = 0
    delay: float = 0.0
    wait: float = 0.0
    ready: float = 0.0


class Flight(Generic[W]):
    """Each worker's work in flight through ``flight`` (one object per worker, reused from one step to the next),
    and their landings, in time order."""

    def __init__(self, work: list[W], flight: InFlight) -> None:
        self.work = work
        self.flight = flight

    def landings(self) -> Iterator[tuple[float, W]]:
        """``(when, work)`` for each landing, until nothing is in flight (the loop starts more as they land)."""
        return self.flight.landings(self.work)


class Workers(Flight[Step]):
    """The workers of ``async``, ``ssp`` and ``sync``: :meth:`start` draws a step's delay and sends it off."""

    def __init__(self, models: Sequence[DelayModel], base: float, flight: InFlight) -> None:
        super().__init__([Step(i) for i in range(len(models))], flight)
        self.n = len(models)
        self.models = models
        self.base = base

    def start(self, i: int, t: float, read: int, minibatch: int) -> Step:
        """Worker ``i`` starts a step at ``t`` on version ``read`` and ``minibatch``: it computes for ``base`` and
        its next delay."""
        step = self.work[i]
        step.read = read
        step.minibatch = minibatch
        step.delay = d = self.models[i].next()
        self.flight.start(i, t, self.base + d)
        return step


class Quorum(Generic[W]):
    """``sync``'s update (and local SGD's average): version ``v + 1`` is applied once ``need`` pieces of work read
    from version ``v`` have landed; work read from an older version is late (dropped). The run ends at version
    ``updates``: work still in flight then lands late."""

    def __init__(self, need: int, updates: int) -> None:
        self.need = need
        self.updates = updates
        self.version = 0
        self.done = False  # the last update is applied
        self.current = 0  # the version work must have read to count: ``version``, or -1 once ``done`` (none counts)
        self.landed: list[tuple[float, W]] = []

    def add(self, t: float, work: W) -> list[tuple[float, W]] | None:
        """``work`` (read from :attr:`current`) landed at ``t``: the update it completes, each counted piece with
        when it landed (the version then moves on), or ``None`` while too few have."""
        self.landed.append((t, work))
        if len(self.landed) < self.need:
            return None
        update, self.landed = self.landed, []
        self.version += 1
        self.done = self.version >= self.updates
        self.current = -1 if self.done else self.version
        return update


class FreeRun:
    """``async`` and ``ssp``: the workers share ``total`` minibatches, claimed in order, and each update is applied
    as it lands. With ``bound`` S (ssp), a worker that completed ``c`` steps starts its next one only while
    ``c - min(unfinished counts) <= S``; until then it is blocked. ``gap_reads``: a step reads the parameters when
    its flight says (:meth:`InFlight.read_at`), not as it starts."""

    def __init__(self, workers: Workers, schedule: Schedule, total: int, bound: int | None,
                 gap_reads: bool) -> None:
        self.workers = workers
        self.schedule = schedule
        self.counts = schedule.counts
        self.total = total
        self.bound = bound
        self.claimed = 0
        self.version = 0
        self.blocked: list[int] = []
        self.lo_tried = 0  # the minimum count under which every blocked worker was last found blocked
        self.landed: list[float] | None = [] if gap_reads else None  # when each update landed, in order

    def try_start(self, i: int, t: float) -> bool:
        """Start (or finish) worker ``i`` at ``t``: it checks the gate, then claims a minibatch (none left: it
        finishes), then reads the parameters and computes. False if the gate blocks it."""
        if self.claimed >= self.total:
            self.schedule.finish(Finish(t, i))
            return True
        if self.bound is not None and self.counts.c[i] - self.counts.lo > self.bound:
            return False
        step = self.workers.start(i, t, self.version, self.claimed)
        step.wait = t - step.ready
        self.claimed += 1
        return True

    def run(self) -> int:
        """Every worker starts, then each step that lands is applied as an update, its worker goes on, and so may
        the blocked ones; until no step is in flight. The number of updates."""
        for i in range(self.workers.n):
            if not self.try_start(i, 0.0):
                self.blocked.append(i)
        add, counts, flight, try_start = self.schedule.add, self.counts, self.workers.flight, self.try_start
        for t, step in self.workers.landings():
            if self.landed is not None:  # the updates landed before its read are not stale
                step.read = bisect.bisect_right(self.landed, flight.read_at(step.worker))
                self.landed.append(t)
            stale = self.version - step.read
            self.version += 1
            add(Record(t, step.worker, self.version, step.wait, stale, step.minibatch, step.delay, True))
            step.ready = t
            if not try_start(step.worker, t):
                self.blocked.append(step.worker)
            if self.blocked and (counts.lo != self.lo_tried or self.claimed >= self.total):
                self.unblock(t)
        return self.version

    def unblock(self, t: float) -> None:
        """Start the blocked workers that may go, in the order they were blocked, until none moves (a finishing
        worker can raise the minimum and free others). Only a higher minimum, or no minibatch left, frees one."""
        changed = True
        while self.blocked and changed:
            changed = False
            still = []
            for j in self.blocked:
                if self.try_start(j, t):
                    changed = True
                else:
                    still.append(j)
            self.blocked = still
        self.lo_tried = self.counts.lo


def run_free(n: int, total: int, bound: int | None, models: Sequence[DelayModel], base: float,
             flight: InFlight | None = None, gap: float = 0.0) -> tuple[Schedule, int]:
    """``async`` (``bound=None``) or ``ssp`` (:class:`FreeRun`). With ``gap`` > 0 a step reads the parameters
    ``gap`` seconds into it, and through links (``flight``) when its pull starts: the updates landed by then are
    not stale. Returns the schedule and the number of updates."""
    schedule = Schedule(n)
    workers = Workers(models, base, Free(n, gap) if flight is None else flight)
    updates = FreeRun(workers, schedule, total, bound, gap > 0 or flight is not None).run()
    return schedule, updates


def run_sync_drop(n: int, updates: int, backup: int, models: Sequence[DelayModel], base: float,
                  flight: InFlight | None = None) -> tuple[Schedule, int]:
    """``sync`` as the engine does it: an update needs ``n - backup`` gradients for the current step
    (:class:`Quorum`).

    A gradient computed on the current parameters counts (its worker then waits for the update); one
    computed on older parameters is dropped and its worker starts at once on the current parameters.
    The run ends at update number ``updates``; computations in flight then finish and are dropped.
    """
    schedule = Schedule(n)
    workers = Workers(models, base, Free() if flight is None else flight)
    quorum: Quorum[Step] = Quorum(n - backup, updates)

    def go_on(steps: Iterable[Step], t: float) -> None:
        """The workers of ``steps`` start their next steps (numbered as the engine numbers sync's minibatches: the
        step it is for, then the worker), or finish if the run is over."""
        v = quorum.version
        for s in steps:
            if quorum.done:
                schedule.finish(Finish(t, s.worker))
            else:
                workers.start(s.worker, t, v, v * n + s.worker)

    go_on(workers.work, 0.0)
    add = schedule.add
    for t, step in workers.landings():
        if step.read != quorum.current:  # late: read from an older version, or the run is over
            g = quorum.version
            add(Record(t, step.worker, g, 0.0, g - step.read, step.minibatch, step.delay, False))
            go_on((step,), t)
            continue
        update = quorum.add(t, step)
        if update is None:
            continue
        g = quorum.version
        for landed, s in update:
            add(Record(t, s.worker, g, t - landed, 0, s.minibatch, s.delay, True))
        go_on([s for _, s in update], t)
    return schedule, quorum.version


class Computed(NamedTuple):
    """A step's computation, ended at ``t``: the K-sync model orders a round's by it (ties by worker)."""

    t: float
    worker: int
    delay: float


def run_sync_abandon(n: int, updates: int, backup: int, models: Sequence[DelayModel],
                     base: float) -> tuple[Schedule, int]:
    """``sync`` as the K-sync model of Dutta et al. (2018): each round all ``n`` start together, the
    update happens when the fastest ``n - backup`` finish, the others abandon their step (no record,
    but the delay they were drawn is used up). Minibatch indices are given in order of completion."""
    need = n - backup
    schedule = Schedule(n)
    t = 0.0
    minibatch = count()
    for g in range(1, updates + 1):
        ends = sorted(Computed(t + base + d, i, d) for i, d in enumerate(m.next() for m in models))
        t = ends[need - 1].t
        for end in ends[:need]:
            schedule.add(Record(t, end.worker, g, t - end.t, 0, next(minibatch), end.delay, True))
    for i in range(n):
        schedule.finish(Finish(t, i))
    return schedule, updates
