"""The network in the simulator: each pull and push a transfer through the links it crosses, shared as TCP shares them.

Every task has a full-duplex link (``--network``'s rate for its role; an unshaped role's link is free). A transfer
from task ``a`` to task ``b`` crosses ``a``'s link out and ``b``'s link in, and the transfers in flight share every
link max-min (:class:`~ssptk.sim.fluid.Fluid`), by weights: the transfer longest on a link weighs
:data:`HEAD_SHARE` against each of the others, which share the rest evenly, and each weight is scaled by a
log-normal draw of :data:`SHARE_SIGMA`. A transfer carries its tensors' float32 bytes times
:data:`PROTOCOL_OVERHEAD` and takes the one-way ``delay`` twice (its request and its reply).

A step of worker ``i`` (:class:`LinkModel`):

1. **pull**: from each PS shard the bytes it holds (:func:`ssptk.core.shards.shard_bytes`: the engine's placement),
   through the shard's link out and worker ``i``'s link in; the step computes once the last piece has arrived;
2. **compute**: the step's own seconds (overhead, compute, injected delay);
3. **push**: the gradient's bytes back the same way; the update lands with the last piece (``sync``, ``local``).
   In ``async`` and ``ssp``, as the engine runs them with shards: async counts the update once ``ps:0``'s part is
   in, ssp once every other shard's message reached ``ps:0``, behind what that shard's link out holds;
4. **the result back** (``async``, ``ssp``): a few bytes from each shard, each behind the pulls queued in the
   shard's link out, before the worker starts its next step.

``allreduce`` has no PS: after computing, each worker sends and receives ``2 (N-1)/N`` of the model through its own
link (a ring all-reduce). With ``cores`` (a laptop's cluster: the workers on a few cores) a step's fixed cost is CPU
work, shared by the workers computing at that moment as the kernel shares cores (each at most one; a
:class:`~ssptk.sim.fluid.Fluid` link in core-seconds), and its injected delay a sleep; the fixed seconds a caller
gives are what a free run measured a step to take, made CPU work here once (:func:`cpu_seconds`). Without
``cores`` each worker has a CPU of its own (:func:`ssptk.sim.spec.shared_cores` resolves a ``--cores`` value).

Where the model and its constants come from (TCP measured on shaped links, shaped runs predicted, the rules tried
and left): ``benchmarks/experiments/`` and ``benchmarks/FINDINGS.md`` ("Moved from module docstrings").
"""
from __future__ import annotations

import heapq
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import count
from typing import TypeVar

import numpy as np

from ssptk.core.errors import UsageError
from ssptk.core.shards import shard_bytes
from ssptk.sim.fluid import Fluid
from ssptk.sim.spec import SimSpec

__all__ = ["ARRIVAL_FACTOR", "HEAD_SHARE", "PROTOCOL_OVERHEAD", "SHARE_SIGMA", "LinkFit", "LinkModel", "cpu_seconds"]

#: Bytes on the wire per byte of tensor, measured on ssptk's links (``docs/tf-notes.md``).
PROTOCOL_OVERHEAD = 1.05
#: How unevenly TCP shares a link: each transfer's weight is log-normal with this sigma
#: (``benchmarks/experiments/exp_tcp_share.py``).
SHARE_SIGMA = 0.3
#: ``LinkFit(arrival_factor=...)``, for comparisons: each transfer keeps this much more of a link than the one that
#: entered after it. It fits 4 raw TCP transfers, not 16 (``exp_tcp_share.py``), so it is not the default.
ARRIVAL_FACTOR = 1.5
#: The default sharing: the transfer longest on a link takes this much of it against each other one
#: (``exp_tcp_share.py``; against shaped runs of ssptk: ``benchmarks/experiments/exp_link_sharing.py``).
HEAD_SHARE = 2.0
_PULL, _PUSH, _LAND, _COMPUTE, _GAP, _BACK = 0, 1, 2, 3, 4, 5
_W = TypeVar("_W")  # what the caller has in flight per worker


def cpu_seconds(step_s: float, workers: int, cores: float) -> float:
    """The CPU work of a step that took ``step_s`` seconds with ``workers`` workers all computing on ``cores``
    cores (a free run, where every worker computes nearly all the time): ``step_s * min(1, cores / workers)``."""
    return float(step_s) * min(1.0, float(cores) / max(1, int(workers)))


def _model_bytes(spec: SimSpec) -> float | list[float]:
    """What a pull and a push carry: the model's bytes, or each variable's (placed on the shards as ``--ps``
    places them); a :class:`UsageError` where the spec has none."""
    given = spec.model_bytes
    sizes = np.atleast_1d(np.asarray(given if given is not None else np.nan, dtype=float))
    if not len(sizes) or not np.isfinite(sizes).all() or (sizes < 0).any():
        raise UsageError(f"a simulated --network {spec.network} needs the model's size: give --model (a built-in "
                         "model, or model_bytes= in Python)")
    return float(sizes[0]) if isinstance(given, (int, float, np.number)) else [float(b) for b in sizes]


@dataclass(frozen=True)
class LinkFit:
    """How transfers share a link, as fitted (``benchmarks/experiments/``): ``share_sigma``, how unevenly (each
    one's weight log-normal, drawn from the run's seed; 0: exactly evenly); ``head``, how much of a link the transfer
    longest on it takes against each other one (1: none); ``arrival_factor``, how much more of it each transfer keeps
    than the one that entered after it (1: none; :data:`ARRIVAL_FACTOR` fits 4 transfers)."""

    share_sigma: float = SHARE_SIGMA
    head: float = HEAD_SHARE
    arrival_factor: float = 1.0


class LinkModel:
    """Every link of a simulated cluster (``spec.shards`` PS tasks, 0 for ``allreduce``, and ``spec.workers`` workers
    under ``spec.network``) and the steps in flight through them: the event loops of :mod:`ssptk.sim.events`
    :meth:`start` a step and take the next to land with :meth:`next`. ``spec.model_bytes``: the model's bytes, or
    its variables'. ``fit``: how transfers share a link (:class:`LinkFit`); transfers that enter at once are ranked in
    the order the simulator takes them. ``spec.cores``: the CPU the workers share (``None``: each its own); a step's
    fixed seconds (``spec.base``, a local round's H of them) are what a free run of these workers on these cores
    measures: :func:`cpu_seconds` of them is the CPU work that shares them; the rest of a step's seconds (its
    injected delay) is a sleep after its CPU work. In ``async`` and ``ssp`` (with a PS) a step's update counts and
    its result comes back as the module docstring says (points 3 and 4), elsewhere it lands with its last piece."""

    def __init__(self, spec: SimSpec, fit: LinkFit = LinkFit()) -> None:
        network, workers, shards, mode = spec.network, spec.workers, spec.shards, spec.mode
        if network is None:
            raise UsageError("simulated links need a --network")
        model_bytes = _model_bytes(spec)
        cores, cpu_s, gap = spec.cores, spec.base * (spec.local_steps or 1), spec.read_gap
        share_sigma, arrival_factor, head, seed = fit.share_sigma, fit.arrival_factor, fit.head, spec.seed
        self.delay = network.delay_s
        self.free = mode in ("async", "ssp") and shards > 0  # a step's result comes back behind the queues out
        self.early = mode == "async" and shards > 1  # the update counts once ps:0's part is in
        self.tick = mode == "ssp" and shards > 1  # the update counts once every shard's message reached ps:0
        self.returning = [False] * workers  # its update landed, its step's result not back yet
        self.deferred: list[float | None] = [None] * workers  # a step started meanwhile: its seconds
        self.shard_of: dict[int, int] = {}  # a push's piece -> its shard
        self.land_at = [0.0] * workers  # the step in flight: when ps:0 can count its update, so far
        self.back_at = [0.0] * workers  # and when its result is back from every shard, so far
        self.gap = float(gap) if shards else 0.0
        rates: list[float] = []

        def link(rate: float | None) -> int | None:
            if rate is None:
                return None
            rates.append(float(rate))
            return len(rates) - 1

        ps, worker = network.rates.get("ps"), network.rates.get("worker")
        self.ps_out = [link(ps) for _ in range(shards)]
        self.ps_in = [link(ps) for _ in range(shards)]
        self.w_out = [link(worker) for _ in range(workers)]
        self.w_in = [link(worker) for _ in range(workers)]
        self.cores = float(cores) if cores else None
        self.cpu = link(cores) if cores else None
        self.core = [link(1.0) if cores else None for _ in range(workers)]  # a worker's thread: one core at most
        self.cpu_s = cpu_s
        self.cpu_share = cpu_seconds(1.0, workers, cores) if cores else 1.0  # CPU work per second of a free step
        self.fluid = Fluid(rates, arrival_factor, head)
        self.entries = [0] * len(rates)  # per link: how many transfers have entered it (each one's rank)
        self.sigma = share_sigma
        self.rng = random.Random(seed)
        wire = 8.0 * PROTOCOL_OVERHEAD
        self.pieces = [wire * b for b in shard_bytes(model_bytes, shards)] if shards else []
        total = float(model_bytes) if isinstance(model_bytes, (int, float)) else float(sum(model_bytes))
        self.ring = wire * total * 2 * (workers - 1) / workers if workers > 1 else 0.0
        self.timers: list[tuple[float, int, int, int]] = []  # (time, order, what, worker)
        self._order = count()
        self.compute = [0.0] * workers
        self.phase = [_PULL] * workers
        self.pending = [0] * workers  # pieces of the worker's transfer still in the links
        self.owner: dict[int, int] = {}
        self.reads = [0.0] * workers  # when each worker's step in flight read the parameters (its pull's start)
        self.in_flight = 0

    def __bool__(self) -> bool:
        return self.in_flight > 0

    def landings(self, work: Sequence[_W]) -> Iterator[tuple[float, _W]]:
        """Each step as it lands (:meth:`next`), ``(when, work[worker])``, until none is in flight."""
        while self.in_flight > 0:
            t, w = self.next()
            yield t, work[w]

    def start(self, worker: int, t: float, compute: float) -> None:
        """Worker ``worker`` starts a step at ``t`` that computes for ``compute`` seconds (once its last step's
        result is back, where it landed before that: async and ssp)."""
        self.in_flight += 1
        if self.returning[worker]:  # its last step's result is still on its way back: the step starts then
            self.deferred[worker] = compute
            return
        self._begin(worker, t, compute)

    def _begin(self, worker: int, t: float, compute: float) -> None:
        self.compute[worker] = compute
        if not self.pieces:  # all-reduce: compute, then the ring
            self._compute(worker, t)
        elif self.gap:  # the step's first seconds come before its read
            self._gap(worker, t)
        else:
            self._at(t + self.delay, _PULL, worker)

    def read_at(self, worker: int) -> float:
        """When ``worker``'s step in flight read the parameters: its pull's start."""
        return self.reads[worker]

    def next(self) -> tuple[float, int]:
        """The next step to land: ``(when, worker)``; everything in flight moves on to then."""
        fluid = self.fluid
        while True:
            t_flow, fid = fluid.next_end()
            if fid is not None and (not self.timers or t_flow <= self.timers[0][0]):
                fluid.advance(t_flow)
                for k in fluid.pop_done(fid):
                    w = self.owner.pop(k)
                    shard = self.shard_of.pop(k, None)
                    self.pending[w] -= 1
                    if shard is not None:
                        self._push_piece(w, shard, t_flow)
                    if not self.pending[w]:
                        self._arrived(w, t_flow)
                continue
            t, _, what, w = heapq.heappop(self.timers)
            fluid.advance(t)
            if what == _LAND:
                self.in_flight -= 1
                return t, w
            if what == _BACK:
                self.returning[w] = False
                compute, self.deferred[w] = self.deferred[w], None
                if compute is not None:
                    self._begin(w, t, compute)
            elif what == _COMPUTE:
                self._compute(w, t)
            else:
                self._enter(w, what, t)

    def _at(self, t: float, what: int, worker: int) -> None:
        heapq.heappush(self.timers, (t, next(self._order), what, worker))

    def _queued(self, link: int | None) -> float:
        """Seconds a message of a few bytes waits behind the bits in flight on ``link`` (one FIFO queue)."""
        if link is None:
            return 0.0
        fluid = self.fluid
        return sum(fluid.flows[f][0] for f in fluid.members[link]) / fluid.cap[link]

    def _add(self, w: int, bits: float, crossed: tuple[int | None, ...], what: int) -> int | None:
        links = [x for x in crossed if x is not None]
        if not (bits > 0 and links):
            return None
        weight = self.rng.lognormvariate(0.0, self.sigma) if self.sigma else 1.0
        key = links[-1] if what == _PUSH and self.pieces else links[0]  # the PS's side where it is shaped
        self.entries[key] += 1
        fid = self.fluid.add(bits, links, weight, (key, self.entries[key]))
        self.owner[fid] = w
        return fid

    def _enter(self, w: int, what: int, t: float) -> None:
        """Worker ``w``'s pull or push enters the links at ``t``, one piece per shard (or the ring's two)."""
        parts: list[tuple[float, tuple[int | None, ...]]]
        self.phase[w] = what
        if not self.pieces:
            parts = [(self.ring, (self.w_out[w],)), (self.ring, (self.w_in[w],))]
        elif what == _PULL:
            parts = [(b, (self.ps_out[s], self.w_in[w])) for s, b in enumerate(self.pieces)]
        else:
            parts = [(b, (self.w_out[w], self.ps_in[s])) for s, b in enumerate(self.pieces)]
        if what == _PULL:
            self.reads[w] = t
        if what == _PUSH and self.free:
            self.returning[w] = True
            self.land_at[w] = self.back_at[w] = t
        n = 0
        for s, (bits, crossed) in enumerate(parts):
            fid = self._add(w, bits, crossed, what)
            if fid is not None:
                n += 1
                if what == _PUSH and self.free:
                    self.shard_of[fid] = s
            elif what == _PUSH and self.free:
                self._push_piece(w, s, t)
        self.pending[w] = n
        if not n:
            self._arrived(w, t)

    def _push_piece(self, w: int, s: int, t: float) -> None:
        """Shard ``s`` has worker ``w``'s piece of a push at ``t`` and applies it: when the update counts on ps:0
        (``land_at``) and when the step's result is back (``back_at``) move on."""
        behind = self._queued(self.ps_out[s])  # what a message from shard s waits behind on its link out
        if s == 0 and self.early:
            self._at(t + self.delay, _LAND, w)
        else:
            self.land_at[w] = max(self.land_at[w], t + (behind if s and self.tick else 0.0))
        self.back_at[w] = max(self.back_at[w], t + behind)

    def _cpu_links(self, w: int) -> list[int]:
        """The shared cores and worker ``w``'s own core: what its CPU work goes through."""
        return [x for x in (self.cpu, self.core[w]) if x is not None]

    def _gap(self, w: int, t: float) -> None:
        """Worker ``w`` spends its step's first ``gap`` seconds of fixed cost before its pull: a timer, or that CPU
        work through the shared cores."""
        self.phase[w] = _GAP
        if self.cpu is None:
            self._at(t + self.gap + self.delay, _PULL, w)
            return
        self.owner[self.fluid.add(self.cpu_share * self.gap, self._cpu_links(w))] = w
        self.pending[w] = 1

    def _compute(self, w: int, t: float) -> None:
        """Worker ``w`` computes from ``t`` (the rest of its step after its gap): on its own CPU, a timer; on the
        shared cores, its CPU work a transfer through them (then its sleep)."""
        self.phase[w] = _COMPUTE
        if self.cpu is None:
            self._at(t + self.compute[w] - self.gap + self.delay, _PUSH, w)
            return
        fixed = self.compute[w] if self.cpu_s is None else min(self.cpu_s, self.compute[w])
        work = self.cpu_share * max(0.0, fixed - self.gap)
        if work <= 0:
            self._arrived(w, t)
            return
        self.owner[self.fluid.add(work, self._cpu_links(w))] = w
        self.pending[w] = 1

    def _arrived(self, w: int, t: float) -> None:
        """Worker ``w``'s transfer left the links at ``t``: it computes (a pull), pushes (its CPU work done, the
        sleep after it), or lands (a push)."""
        if self.phase[w] == _GAP:
            self._at(t + self.delay, _PULL, w)
        elif self.phase[w] == _PULL:
            if self.cpu is None or not self.delay:
                self._compute(w, t + self.delay)
            else:  # the shared cores are taken from when the pull has arrived
                self._at(t + self.delay, _COMPUTE, w)
        elif self.phase[w] == _COMPUTE:
            sleep = 0.0 if self.cpu_s is None else max(0.0, self.compute[w] - self.cpu_s)
            self._at(t + sleep + self.delay, _PUSH, w)
        elif not self.free:
            self._at(t + self.delay, _LAND, w)
        else:
            back = self.back_at[w]  # every shard answered once it had its part (async with shards)
            if not self.early:
                land = self.land_at[w]
                self._at(land + self.delay, _LAND, w)
                back = max(back, land + self._queued(self.ps_out[0]))  # ps:0 answers once it counted
            self._at(back + self.delay, _BACK, w)
