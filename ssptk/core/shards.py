"""How ``--ps K`` spreads a model's variables over the PS shards: the one rule the engine and the simulator share.

Each variable goes to the shard holding the fewest bytes so far (ties: the lowest index), in the order the model
makes them, after the global step (made first, so on ``ps:0``). The engine asks :class:`ShardBalancer` for each
variable as TensorFlow creates it (:mod:`ssptk.runtime.placement`); the simulator asks :func:`shard_bytes` for the
bytes each shard then holds (:mod:`ssptk.sim.link_model`). Standard library only.
"""
from __future__ import annotations

from collections.abc import Sequence

__all__ = ["GLOBAL_STEP_BYTES", "ShardBalancer", "shard_bytes"]

#: The global step (int64), made first and so placed first, on ``ps:0``: the balancer counts it.
GLOBAL_STEP_BYTES = 8


class ShardBalancer:
    """Places variables one by one: :meth:`place` says a variable's shard. ``load`` is each shard's bytes so far."""

    def __init__(self, shards: int) -> None:
        self.load: list[float] = [0] * shards

    def place(self, nbytes: float) -> int:
        """The shard of the next variable, of ``nbytes`` bytes: the one with the fewest bytes so far."""
        shard = min(range(len(self.load)), key=self.load.__getitem__)
        self.load[shard] += nbytes
        return shard


def shard_bytes(sizes: float | Sequence[float], shards: int) -> list[float]:
    """The model's bytes each of ``shards`` PS tasks holds. ``sizes``: the model's bytes (split evenly), or each
    variable's bytes in the order the model makes them, placed as the engine places them (:class:`ShardBalancer`,
    the global step's :data:`GLOBAL_STEP_BYTES` first)."""
    if isinstance(sizes, (int, float)):
        return [float(sizes) / shards] * shards
    balancer = ShardBalancer(shards)
    balancer.place(GLOBAL_STEP_BYTES)
    held = [0.0] * shards
    for b in sizes:
        held[balancer.place(float(b))] += float(b)
    return held
