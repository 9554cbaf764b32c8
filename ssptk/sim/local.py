"""Local SGD in the simulator (internal; use :func:`ssptk.sim.simulate` with ``mode="local:H"``).

A round, for worker ``i``: it pulls the parameters, takes ``H`` local steps on its own copy (each ``base +
models[i].next()`` seconds, no traffic), then pushes its delta. The round's average is applied when the first
``N - B`` deltas computed from the current parameters have landed, as :func:`ssptk.sim.events.run_sync_drop`
applies a sync update (a round here is a sync step there, its compute ``H`` steps long); a late delta is dropped
and its worker starts the next round at once on the current parameters. ``steps=K`` is ``K`` local steps per
worker: ``ceil(K / H)`` rounds, the last one ``K - (rounds - 1) * H`` steps long. Through
:class:`ssptk.sim.links.Links` a round is one pull and one push, so local SGD makes ``H`` times fewer transfers
than sync.

Records, one per local step, as :mod:`ssptk.runtime.local_loop` logs them: ``local_round`` the round the step's
delta was computed for (1-based: it started from version ``local_round - 1``), ``global_step`` the same, except on
a dropped delta's last step, where it is the version when the delta arrived (as a late sync gradient's);
``staleness`` the local steps since the last average (``0 .. H-1``), ``wait_s`` the wait for the average (the
round's last step; 0 elsewhere), ``minibatch`` ``(round * H + j) * N + i`` for the ``j``-th step of round
``round`` (0-based; ``local:1`` numbers them as sync does), ``applied`` False on the last step of a delta that
came too late for its round (its earlier steps, logged before anyone knew, say True, as the runtime's do). The
round's last step is logged when the average is applied (its own landing, if dropped); the others when their
compute ends. Through a network only the round's landing is known: the round's transfer time is split evenly
between its pull and its push to place the other steps (exact without a network).
"""
from __future__ import annotations

from collections.abc import Sequence

from ssptk.core.delays import DelayModel
from ssptk.sim.events import Free, InFlight, Log

__all__ = ["rounds_of", "run_local"]


def rounds_of(steps: int, local_steps: int) -> int:
    """How many rounds ``steps`` local steps per worker take, ``local_steps`` to a round: ``ceil(K / H)``."""
    return -(-int(steps) // int(local_steps))


def run_local(n: int, steps: int, local_steps: int, backup: int, models: Sequence[DelayModel], base: float,
              flight: InFlight | None = None) -> tuple[Log, int, int, list[int]]:
    """Local SGD (see the module docstring): the log, the rounds applied, the rounds started (pushes), and each
    record's ``local_round`` (in the log's order)."""
    h, need, rounds = int(local_steps), n - backup, rounds_of(steps, local_steps)
    heap = Free() if flight is None else flight
    g = 0  # rounds applied: the parameters' version
    read = [0] * n
    draws: list[list[float]] = [[] for _ in range(n)]
    began = [0.0] * n
    rows: list[tuple] = []  # (t, order, worker, record args or None for a finish): sorted into the log at the end
    pushes = 0

    def start(i: int, t: float) -> None:
        nonlocal pushes
        read[i] = g
        draws[i] = [models[i].next() for _ in range(min(h, steps - g * h))]
        began[i] = t
        pushes += 1
        heap.start(i, t, len(draws[i]) * base + sum(draws[i]))

    def emit(i: int, landed: float, end: float, wait: float, applied: bool) -> None:
        """Worker ``i``'s round as records: its last step at ``end``, the others when their compute ended."""
        ds, r = draws[i], read[i]
        transfers = max(0.0, landed - began[i] - len(ds) * base - sum(ds))
        c = began[i] + transfers / 2
        for j, d in enumerate(ds):
            c += base + d
            last = j == len(ds) - 1
            rows.append((end if last else min(c, landed), len(rows), i,
                         (r + 1 if applied or not last else g, wait if last else 0.0, j, (r * h + j) * n + i, d,
                          applied or not last), r + 1))

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
            done = g >= rounds
            for j, landed in arrived:
                emit(j, landed, t, t - landed, True)
                if done:
                    rows.append((t, len(rows), j, None, 0))
                else:
                    start(j, t)
            arrived = []
        else:  # a late delta: dropped
            emit(i, t, t, 0.0, False)
            if done:
                rows.append((t, len(rows), i, None, 0))
            else:
                start(i, t)
    log = Log(n)
    local_round: list[int] = []
    for t, _, i, rec, lr in sorted(rows, key=lambda r: (r[0], r[1])):
        if rec is None:
            log.finish(t, i)
        else:
            log.record(t, i, *rec)
            local_round.append(lr)
    return log, g, pushes, local_round
