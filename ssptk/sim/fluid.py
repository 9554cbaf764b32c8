"""Transfers sharing links of fixed rates, as TCP flows share them (weighted max-min fairness): the fluid model
under :class:`ssptk.sim.link_model.LinkModel`, which says which links a pull or a push crosses and how each weighs."""
from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from itertools import count

__all__ = ["Fluid"]


class Fluid:
    """Transfers in flight over links of fixed rates (bits per second), sharing them weighted max-min fairly.

    On one link each transfer's rate is the link's rate times its weight over the weights in flight (all 1:
    processor sharing, what TCP flows through one queue do on average). A transfer added with an ``order``
    ``(key, rank)`` also weighs ``factor ** -rank`` against the others of its key in flight (the oldest of them
    weighs 1, times ``head``), so that ranks can grow without bound. Over several links: the link that gives
    the least per unit of weight fixes the rates of its transfers, the rest of the other links they cross goes
    to the others there (progressive filling), so a transfer goes at the pace of the slowest link it crosses.

    :meth:`add` a transfer of ``bits`` over some links; :meth:`next_end` says when the next one ends at the
    present rates; :meth:`advance` moves the clock (never past that); :meth:`pop_done` takes the ended ones off.
    Rates are worked out again only after the set of transfers changed.
    """

    def __init__(self, rates: Sequence[float], factor: float = 1.0, head: float = 1.0) -> None:
        self.cap = [float(r) for r in rates]
        self.factor = float(factor)
        self.head = float(head)
        self.members: list[set[int]] = [set() for _ in self.cap]
        self.flows: dict[int, list] = {}  # id -> [bits left, links, rate, weight, order]
        self.now = 0.0
        self._ids = count()
        self._stale = False
        self._end: tuple[float, int | None] | None = None

    def add(self, bits: float, links: Sequence[int], weight: float = 1.0,
            order: tuple[int, int] | None = None) -> int:
        """A transfer of ``bits`` (> 0) over ``links`` (at least one), starting now, weighing ``weight`` (and, with
        ``order`` ``(key, rank)``, ``factor ** -rank`` against the others of ``key``); returns its id."""
        fid = next(self._ids)
        self.flows[fid] = [float(bits), tuple(links), 0.0, float(weight), order]
        for link in links:
            self.members[link].add(fid)
        self._stale = True
        return fid

    def rate(self, fid: int) -> float:
        """Transfer ``fid``'s present rate, bits per second."""
        if self._stale:
            self._share()
        return float(self.flows[fid][2])

    def next_end(self) -> tuple[float, int | None]:
        """When the next transfer ends at the present rates, and which (``(inf, None)`` if none is in flight)."""
        if self._stale:
            self._share()
        if self._end is None:  # rates hold until the transfers change: so does when the next one ends
            best, who = math.inf, None
            for fid, f in self.flows.items():
                if f[2] > 0 and f[0] < best * f[2]:
                    best, who = f[0] / f[2], fid
            self._end = (self.now + best, who)
        return self._end

    def advance(self, t: float) -> None:
        """Move the clock to ``t``: every transfer sends ``rate * (t - now)`` bits."""
        dt = t - self.now
        if dt > 0:
            if self._stale:
                self._share()
            for f in self.flows.values():
                f[0] -= f[2] * dt
            self.now = t

    def pop_done(self, fid: int | None = None) -> list[int]:
        """Take off the transfers that have ended (``fid`` counts as ended: :meth:`next_end` named it)."""
        done = [k for k, f in self.flows.items() if k == fid or f[0] <= 1e-6]
        for k in done:
            for link in self.flows.pop(k)[1]:
                self.members[link].discard(k)
        self._stale = self._stale or bool(done)
        return done

    def _share(self) -> None:
        """Weighted max-min fair rates by progressive filling."""
        self._stale = False
        left: dict[int, float] = {}
        weight: dict[int, float] = {}
        unfixed: dict[int, int] = {}
        heap: list[tuple[float, int]] = []
        w = {fid: f[3] for fid, f in self.flows.items()}
        if self.factor != 1.0 or self.head != 1.0:  # ranks counted from the oldest of each key in flight
            oldest: dict[int, int] = {}
            for f in self.flows.values():
                if f[4] is not None:
                    key, rank = f[4]
                    oldest[key] = min(rank, oldest.get(key, rank))
            for fid, f in self.flows.items():
                if f[4] is not None:
                    w[fid] *= self.factor ** (oldest[f[4][0]] - f[4][1])
                    if f[4][1] == oldest[f[4][0]]:
                        w[fid] *= self.head
        for link, m in enumerate(self.members):
            if m:
                left[link], unfixed[link] = self.cap[link], len(m)
                weight[link] = sum(w[fid] for fid in m)
                heap.append((left[link] / weight[link], link))
        heapq.heapify(heap)
        fixed: set[int] = set()
        while heap:
            level, link = heapq.heappop(heap)
            if not unfixed[link] or level != left[link] / weight[link]:  # an older entry: the level grew since
                continue
            touched = set()
            for fid in self.members[link]:
                if fid in fixed:
                    continue
                fixed.add(fid)
                f = self.flows[fid]
                f[2] = level * w[fid]
                for other in f[1]:
                    if other != link:
                        left[other] = max(0.0, left[other] - f[2])
                        unfixed[other] -= 1
                        weight[other] = max(weight[other] - w[fid], 1e-12)
                        touched.add(other)
            unfixed[link] = 0
            for other in touched:
                if unfixed[other]:
                    heapq.heappush(heap, (left[other] / weight[other], other))
        self._end = None
