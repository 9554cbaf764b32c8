"""The network in the simulator: each pull and push a transfer through the links it crosses, sharing each as TCP does.

Every task has a full-duplex link (``--network``'s rate for its role; an unshaped role's link is free): what it
sends goes out of its link, what it receives comes in. A transfer from task ``a`` to task ``b`` crosses ``a``'s
link out and ``b``'s link in, and the transfers in flight share every link as TCP flows do: each link's rate is
split among the transfers that can use more (one held back at a slower link it crosses leaves the rest to the
others: max-min sharing, :class:`Fluid`), by weights: the transfer that has been on a link longest weighs
:data:`HEAD_SHARE` against each of the others, which share the rest evenly (as raw TCP on these links measured
with 4 and 16 transfers, ``benchmarks/exp_tcp_share.py``), and each weight is scaled by a draw of
:data:`SHARE_SIGMA` (TCP's unevenness, measured). So of N workers that pull at once from one PS, the first finishes
well before the rest, which finish nearly together. (``arrival_factor`` weighs every transfer :data:`ARRIVAL_FACTOR`
times the one that entered after it: it fits 4 transfers as well, but not 16 or 64, and predicted fewer of 24
shaped runs; ``head=1, arrival_factor=1``: plain fair sharing. ``benchmarks/FINDINGS.md``, stops 27-29.)

A step of worker ``i`` is

1. **pull**: from each PS shard the bytes it holds (:func:`shard_bytes`: the variables placed by bytes, as
   ``placement.BalanceBytes`` places them) through the shard's link out and worker ``i``'s link in; the step
   computes once the last shard's piece has arrived;
2. **compute**: the step's own seconds (overhead, compute, injected delay);
3. **push**: the gradient's bytes back the same way, into each shard's link in; the update lands when the last
   piece has (``sync``, ``local``). In ``async`` and ``ssp`` as the engine runs them: with shards, async counts
   the update (its landing) once ``ps:0``'s part is in, and ssp once every other shard's message reached
   ``ps:0``, that message waiting behind what the shard's link out holds;
4. **the result back** (``async``, ``ssp``): a few bytes from each shard, each waiting in the shard's link out
   behind the bits queued there (one FIFO queue: the pulls in flight) before the worker can start its next step.
   Under a PS-bound link that wait is most of the time between an update's landing and the worker's next read,
   which makes async's staleness below N-1 (8 workers at ``ps=20mbit``: measured 5.7, predicted 5.6; without the
   wait 6.9). A wait for the next step's request behind the pushes in the PS's link in as well predicted 19 of 23
   shaped runs' steps/s within 15% (too slow; the requests pass that link in a class that only requests use,
   :mod:`ssptk.launch.links`), and so did ssp's messages waiting in ``ps:0``'s link in too (``benchmarks/FINDINGS.md``,
   stop 31).

Each transfer also takes the one-way ``delay`` twice (its request and its reply): it enters the links ``delay``
after it is ready and counts as arrived ``delay`` after its last bit left the links. The bytes are the
variables' float32 bytes times :data:`PROTOCOL_OVERHEAD` (what ssptk's links measured above the tensors' bytes:
3-8%). ``allreduce`` has no PS: after computing, each worker sends and receives ``2 (N-1)/N`` of the model
through its own link (a ring all-reduce).

**The CPU, where ``cores`` is given** (a laptop's cluster: N workers, and their PS, on a few cores): a step's
fixed cost is CPU work, shared by the workers computing at that moment as the kernel shares cores (each at most
one core, ``cores`` in all: processor sharing, a :class:`Fluid` link in units of core-seconds); the step's
injected delay (a sleep) is not. So a free run's step is stretched by all N workers computing at once, while
under a PS-bound link few compute together and each computes faster. The step's fixed seconds given (``cpu_s``)
are what a free run of these N workers on these cores measures a step to take (a run's calibrated overhead): its
CPU work is ``cpu_seconds(t, N, cores)`` (:func:`cpu_seconds`), so a free run is simulated at the pace it was
measured at and only what keeps the workers apart changes it; the conversion is made here, once (a caller passes
the measured time, never the CPU work). Without ``cores`` each worker computes on a CPU of its own (a cluster's
machines), as before. :func:`machine_cores` is what a run on this machine gets; :func:`shared_cores` resolves a
``--cores`` value against it.
"""
from __future__ import annotations

import heapq
import math
import os
import random
from collections.abc import Iterator, Sequence
from itertools import count
from typing import TypeVar

from ssptk.core.errors import UsageError
from ssptk.core.network import Network
from ssptk.core.options import check_cores
from ssptk.core.resources import cgroup_cpus
from ssptk.sim.fluid import Fluid

__all__ = ["ARRIVAL_FACTOR", "GLOBAL_STEP_BYTES", "HEAD_SHARE", "PROTOCOL_OVERHEAD", "SHARE_SIGMA", "Links",
           "cpu_seconds", "machine_cores", "recorded_cores", "shard_bytes", "shared_cores"]

#: Bytes on the wire per byte of tensor: measured on ssptk's links (1.03-1.08; docs/tf-notes.md).
PROTOCOL_OVERHEAD = 1.05
#: How unevenly TCP shares a link: each transfer's weight is drawn from a log-normal of this sigma. Measured on a
#: 20 Mbit/s htb link here: 4 transfers started together end at 2.6-4.3x the time one alone takes (exact fair
#: sharing: all at 4x), often one well before the rest; that unevenness is what lets equal workers drift apart.
SHARE_SIGMA = 0.3
#: How much more of a link a transfer keeps than the one that entered it next, for raw TCP with 4 transfers on the
#: same 20 Mbit/s link (2026-11-27, ``exp_tcp_share.py``: 357 kB or 1.2 MB, 0.2 or 0.5 of one transfer's time apart, 3
#: repeats each): 1.5 fits when each ended best there (mean miss 0.24 of one transfer's time; fair sharing 0.35). With
#: 16 transfers it does not (mean miss 5.3 of one transfer's time, where :data:`HEAD_SHARE` misses by 0.65): not the
#: default since stop 29 (``Links(arrival_factor=...)`` keeps it for comparisons).
ARRIVAL_FACTOR = 1.5
#: How much of a link the transfer that has been on it longest takes against each of the others, which share evenly:
#: raw TCP on a 20 Mbit/s htb link here (``exp_tcp_share.py --fit``, 2026-11-28): 16 transfers of 357 kB nearly at
#: once end with the first at 8.6 and the rest at 15.6-19.0 of one transfer's time (2 misses by 0.65 on average, fair
#: sharing 1.2, arrival order 1.5 5.3); 4 transfers 0.2 or 0.5 of a transfer apart end first at 2.16 and 1.16-1.24
#: (2 gives 2.02 and 1.33). Against 24 shaped runs of ssptk (``exp_link_sharing.py``, stop 29's): 21 within 15% (mean
#: miss 7.4%), where arrival order 1.5 predicted 17 (10.3%) and fair sharing 8 (20.5%). The simulator's default.
HEAD_SHARE = 2.0
#: The global step (int64), made first and so placed first, on ``ps:0``: the balancer counts it.
GLOBAL_STEP_BYTES = 8
_PULL, _PUSH, _LAND, _COMPUTE, _GAP, _BACK = 0, 1, 2, 3, 4, 5
W = TypeVar("W")  # what the caller has in flight per worker


def cpu_seconds(step_s: float, workers: int, cores: float) -> float:
    """The CPU work of a step that took ``step_s`` seconds with ``workers`` workers all computing on ``cores``
    cores (a free run, where every worker computes nearly all the time): ``step_s * min(1, cores / workers)``."""
    return float(step_s) * min(1.0, float(cores) / max(1, int(workers)))


def machine_cores() -> float:
    """The cores a run started here gets: the CPUs this process may run on (``os.sched_getaffinity``, which a
    cgroup's cpuset or ``taskset`` narrows; ``os.cpu_count()`` where there is no such call), fewer where its
    cgroup's CPU quota allows less (:func:`ssptk.core.resources.cgroup_cpus`: a container's ``--cpus 1.5`` gives
    1.5); an ``int`` unless the quota binds (then the quota to 0.01, at least 0.01)."""
    try:
        cpus: float = max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        cpus = max(1, os.cpu_count() or 1)
    quota = cgroup_cpus()
    return cpus if quota is None or quota >= cpus else max(0.01, round(quota, 2))


def shared_cores(given: object, default: float | None) -> float | None:
    """The cores a prediction lets its workers share (``None``: each worker its own machine) from ``--cores``'s
    value: ``None`` (not given) takes ``default`` (the cores the run had, or :func:`machine_cores`), 0 means each
    its own, a number > 0 that many. Raises :class:`UsageError` on anything else."""
    value = check_cores(given)
    if value is None:
        if default is not None and not (isinstance(default, (int, float)) and not isinstance(default, bool)
                                        and 0 < default < math.inf):
            raise UsageError(f"the recorded cores must be a number > 0, got {default!r}")
        return None if default is None else float(default)
    return value or None


def recorded_cores(config: object) -> float | None:
    """The cores a run had, as its ``config.json`` recorded them (``tasks.cores``; ``None`` where it did not: a run
    made before they were recorded, or one whose tasks no ssptk launcher started, each perhaps on its own host)."""
    tasks = config.get("tasks") if isinstance(config, dict) else None
    cores = tasks.get("cores") if isinstance(tasks, dict) else None
    ok = isinstance(cores, (int, float)) and not isinstance(cores, bool) and 0 < cores < math.inf
    return float(cores) if ok else None  # type: ignore[arg-type]


def shard_bytes(sizes: float | Sequence[float], shards: int) -> list[float]:
    """The model's bytes each of ``shards`` PS tasks holds. ``sizes``: the model's bytes (split evenly), or each
    variable's bytes in the order the model makes them, placed as ``--ps K`` places them: each on the shard with
    the fewest bytes so far, the global step's :data:`GLOBAL_STEP_BYTES` first on shard 0."""
    if isinstance(sizes, (int, float)):
        return [float(sizes) / shards] * shards
    load = [float(GLOBAL_STEP_BYTES)] + [0.0] * (shards - 1)
    held = [0.0] * shards
    for b in sizes:
        s = min(range(shards), key=load.__getitem__)
        load[s] += float(b)
        held[s] += float(b)
    return held


class Links:
    """Every link of a simulated cluster (``shards`` PS tasks, 0 for ``allreduce``, and ``workers`` workers under
    ``network``) and the steps in flight through them: the event loops of :mod:`ssptk.sim.events` :meth:`start`
    a step and take the next to land with :meth:`next`. ``model_bytes``: the model's bytes, or its variables'.
    ``share_sigma``: how unevenly transfers share a link (each one's weight log-normal, drawn from ``seed``; 0:
    exactly evenly); ``head``: how much of a link the transfer longest on it takes against each other one (the
    default :data:`HEAD_SHARE`, as raw TCP measured; 1: none), ``arrival_factor``: how much more of it each transfer
    keeps than the one that entered after it (default 1: none; :data:`ARRIVAL_FACTOR` fits 4 transfers); transfers
    that enter at once are ranked in the order the simulator takes them. ``cores``: the CPU the workers share
    (``None``: each its own), and ``cpu_s`` how much of the seconds a step computes (:meth:`start`'s ``compute``) is
    its fixed cost (``None``: all of it), as a free run of these workers on these cores measures it:
    :func:`cpu_seconds` of it is the CPU work that shares them; the rest of a step's seconds (its injected delay) is
    a sleep after its CPU work. ``mode``: the simulated mode; in ``async`` and ``ssp`` (with a PS) a step's update
    counts and its result comes back as the module docstring says (points 3 and 4), elsewhere it lands with its
    last piece."""

    def __init__(self, network: Network, workers: int, shards: int, model_bytes: float | Sequence[float],
                 share_sigma: float = SHARE_SIGMA, seed: int = 0, cores: float | None = None,
                 cpu_s: float | None = None, arrival_factor: float = 1.0, head: float = HEAD_SHARE,
                 gap: float = 0.0, mode: str = "async") -> None:
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

    def landings(self, work: Sequence[W]) -> Iterator[tuple[float, W]]:
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
