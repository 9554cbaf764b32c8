"""Local SGD in the simulator (internal; use :func:`ssptk.sim.simulate` with ``mode="local:H"``).

A round, for worker ``i``: it pulls the parameters, takes ``H`` local steps on its own copy (each ``base +
models[i].next()`` seconds, no traffic), then pushes its delta. The round's average is applied when the first
``N - B`` deltas computed from the current parameters have landed, by sync's rule (:class:`ssptk.sim.events.Quorum`:
a round here is a sync step there, its compute ``H`` steps long); a late delta is dropped
and its worker starts the next round at once on the current parameters. ``steps=K`` is ``K`` local steps per
worker: ``ceil(K / H)`` rounds, the last one ``K - (rounds - 1) * H`` steps long. Through
:class:`ssptk.sim.link_model.LinkModel` a round is one pull and one push, so local SGD makes ``H`` times fewer transfers
than sync.

Records, one per local step, as :mod:`ssptk.runtime.local_loop` logs them: ``local_round`` the round the step's
delta was computed for (1-based: it started from version ``local_round - 1``), ``global_step`` the same, except on
a dropped delta's last step, where it is the version when the delta arrived (as a late sync gradient's);
``local_step`` the local steps since the last average (``0 .. H-1``), ``staleness`` the rounds the delta missed (0;
a dropped delta's: the rounds applied since its own began), ``wait_s`` the wait for the average (the
round's last step; 0 elsewhere), ``minibatch`` ``(round * H + j) * N + i`` for the ``j``-th step of round
``round`` (0-based; ``local:1`` numbers them as sync does), ``applied`` False on the last step of a delta that
came too late for its round (its earlier steps, logged before anyone knew, say True, as the runtime's do). The
round's last step is logged when the average is applied (its own landing, if dropped); the others when their
compute ends. Through a network only the round's landing is known: the round's transfer time is split evenly
between its pull and its push to place the other steps (exact without a network).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter

from ssptk.core.delays import DelayModel
from ssptk.sim.events import Flight, Free, InFlight, Quorum, Work
from ssptk.sim.schedule import Finish, Record, Schedule

__all__ = ["rounds_of", "run_local"]


def rounds_of(steps: int, local_steps: int) -> int:
    """How many rounds ``steps`` local steps per worker take, ``local_steps`` to a round: ``ceil(K / H)``."""
    return -(-int(steps) // int(local_steps))


@dataclass(slots=True)
class Round(Work):
    """A worker's round in flight: the injected delays of its local steps, drawn when it ``began``."""

    delays: list[float] = field(default_factory=list)
    began: float = 0.0


class Rounds(Flight[Round]):
    """The workers' rounds: :meth:`start` one (its local steps' delays drawn at once), :meth:`records` of one that
    landed. ``steps`` local steps per worker, ``h`` to a round, each ``base`` seconds and its delay."""

    def __init__(self, models: Sequence[DelayModel], base: float, h: int, steps: int, flight: InFlight) -> None:
        super().__init__([Round(i) for i in range(len(models))], flight)
        self.models, self.base, self.h, self.steps = models, base, h, steps
        self.pushes = 0  # rounds started: each ends in a push of its delta

    def start(self, i: int, t: float, read: int) -> None:
        """Worker ``i`` pulls version ``read`` at ``t`` and takes its local steps (the last round: those left)."""
        rnd = self.work[i]
        rnd.read = read
        rnd.delays = [self.models[i].next() for _ in range(min(self.h, self.steps - read * self.h))]
        rnd.began = t
        self.pushes += 1
        self.flight.start(i, t, len(rnd.delays) * self.base + sum(rnd.delays))

    def records(self, rnd: Round, landed: float, end: float, wait: float, applied: bool, version: int) -> list[Record]:
        """``rnd``'s local steps as records, its delta ``landed`` at that time: the last step's at ``end`` (with
        ``wait``; a late delta's, ``applied`` False, at ``version``, the version when it landed), the others when
        their compute ended (the round's transfer time split evenly between its pull and its push)."""
        ds, r, i, n, base = rnd.delays, rnd.read, rnd.worker, len(self.work), self.base
        transfers = max(0.0, landed - rnd.began - len(ds) * base - sum(ds))
        c = rnd.began + transfers / 2
        out = []
        for j, d in enumerate(ds):
            c += base + d
            minibatch = (r * self.h + j) * n + i
            if j < len(ds) - 1:
                out.append(Record(min(c, landed), i, r + 1, 0.0, 0, minibatch, d, True, r + 1, j))
            else:
                out.append(Record(end, i, r + 1 if applied else version, wait, 0 if applied else version - r,
                                  minibatch, d, applied, r + 1, j))
        return out


def run_local(n: int, steps: int, local_steps: int, backup: int, models: Sequence[DelayModel], base: float,
              flight: InFlight | None = None) -> tuple[Schedule, int, int]:
    """Local SGD (see the module docstring): the schedule (its records carry ``local_round``), the rounds applied,
    and the rounds started (pushes)."""
    rounds = Rounds(models, base, int(local_steps), int(steps), Free() if flight is None else flight)
    quorum: Quorum[Round] = Quorum(n - backup, rounds_of(steps, local_steps))
    later: list[Record | Finish] = []  # each round's records are known when it lands: put in time order at the end

    def go_on(i: int, t: float) -> None:
        """Worker ``i`` starts its next round, or finishes if the run is over."""
        if quorum.done:
            later.append(Finish(t, i))
        else:
            rounds.start(i, t, quorum.version)

    for i in range(n):
        go_on(i, 0.0)
    for t, rnd in rounds.landings():
        if rnd.read != quorum.current:  # a late delta: dropped
            later += rounds.records(rnd, t, t, 0.0, False, quorum.version)
            go_on(rnd.worker, t)
            continue
        update = quorum.add(t, rnd)
        if update is None:
            continue
        for landed, r in update:
            later += rounds.records(r, landed, t, t - landed, True, quorum.version)
            go_on(r.worker, t)
    schedule = Schedule(n, local=True)
    for event in sorted(later, key=attrgetter("t")):  # a stable sort: ties in the order they were made
        if isinstance(event, Finish):
            schedule.finish(event)
        else:
            schedule.add(event)
    return schedule, quorum.version, rounds.pushes
