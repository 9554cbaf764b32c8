"""The network in the simulator: each pull and push a transfer through the links it crosses, queued at each.

A link direction is a server of ``rate`` bits per second that carries one transfer at a time: a transfer ready at
``t`` takes the earliest gap of ``bits / rate`` seconds at or after ``t`` in what is already booked (so a push
booked early for a later time does not hold back a pull that comes first). A step of worker ``i`` is

1. **pull**: the model's bytes from each PS shard (``1/K`` of them from each) through the shard's link out and
   worker ``i``'s link in; the step computes once the last shard's part has arrived;
2. **compute**: the step's own seconds (overhead, compute, injected delay);
3. **push**: the gradient's bytes back the same way, into each shard's link in; the update lands when the last
   part has.

Each crossing of a link adds its one-way ``delay`` twice (a request and its reply). The bytes are the model's
float32 parameters times :data:`PROTOCOL_OVERHEAD` (what ssptk's links measured above the tensors' bytes:
3-8%). ``allreduce`` has no PS: after computing, each worker sends and receives ``2 (N-1)/N`` of the model
through its own link (a ring all-reduce).
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from ssptk.core.network import Network

__all__ = ["PROTOCOL_OVERHEAD", "LinkDirection", "Links"]

#: Bytes on the wire per byte of tensor: measured on ssptk's links (1.03-1.08; docs/tf-notes.md).
PROTOCOL_OVERHEAD = 1.05


@dataclass
class LinkDirection:
    """One direction of one link: the transfers booked on it, as sorted ``(start, end)`` intervals."""

    bits_per_s: float
    starts: list[float] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)

    def book(self, ready: float, bits: float) -> float:
        """Book the earliest gap of ``bits / rate`` seconds at or after ``ready``; return when it ends."""
        length = bits / self.bits_per_s
        t = ready
        k = bisect.bisect_right(self.ends, t)  # the first interval that ends after t
        while k < len(self.starts) and self.starts[k] < t + length:
            t = max(t, self.ends[k])
            k += 1
        self.starts.insert(k, t)
        self.ends.insert(k, t + length)
        return t + length

    def forget_before(self, t: float) -> None:
        """Drop intervals that ended before ``t`` (no transfer can be ready before the simulation's clock)."""
        k = bisect.bisect_left(self.ends, t)
        if k:
            del self.starts[:k], self.ends[:k]


class Links:
    """Every link of a simulated cluster: ``shards`` PS tasks and ``workers`` workers under ``network``."""

    def __init__(self, network: Network | None, workers: int, shards: int, model_bytes: float) -> None:
        self.network = network
        self.shards = max(1, shards)
        self.bits = 8.0 * model_bytes * PROTOCOL_OVERHEAD
        self.delay = 0.0 if network is None else network.delay_s
        ps, worker = (None, None) if network is None else (network.rates.get("ps"), network.rates.get("worker"))
        self.ps_out = [self._direction(ps) for _ in range(self.shards)]
        self.ps_in = [self._direction(ps) for _ in range(self.shards)]
        self.w_in = [self._direction(worker) for _ in range(workers)]
        self.w_out = [self._direction(worker) for _ in range(workers)]
        self.now = 0.0

    @staticmethod
    def _direction(rate: float | None) -> LinkDirection | None:
        return None if rate is None else LinkDirection(float(rate))

    def _transfer(self, ready: float, shard_links: list[LinkDirection | None], worker_link: LinkDirection | None,
                  bits: float) -> float:
        end = ready + 2 * self.delay
        for link in shard_links:
            if link is not None:
                end = max(end, link.book(ready, bits / self.shards) + 2 * self.delay)
        if worker_link is not None:
            end = max(end, worker_link.book(ready, bits) + 2 * self.delay)
        return end

    def ps_step(self, worker: int, start: float, compute_s: float) -> float:
        """When worker ``worker``'s step started at ``start`` lands on the PS: pull, compute, push."""
        self._advance(start)
        pulled = self._transfer(start, self.ps_out, self.w_in[worker], self.bits)
        return self._transfer(pulled + compute_s, self.ps_in, self.w_out[worker], self.bits)

    def allreduce_step(self, worker: int, start: float, compute_s: float) -> float:
        """When worker ``worker``'s all-reduce of a step computed from ``start`` is done (ring: 2(N-1)/N)."""
        self._advance(start)
        n = len(self.w_in)
        bits = self.bits * 2 * (n - 1) / n if n > 1 else 0.0
        ready = start + compute_s
        out = self._transfer(ready, [], self.w_out[worker], bits)
        return max(out, self._transfer(ready, [], self.w_in[worker], bits))

    def _advance(self, t: float) -> None:
        if t - self.now > 1.0:  # bookings that ended a while ago can no longer matter
            for link in (*self.ps_out, *self.ps_in, *self.w_in, *self.w_out):
                if link is not None:
                    link.forget_before(self.now)
            self.now = t
