"""Where a worker's graph puts its ops: computation on the worker, each variable on a PS shard (``--ps K``)."""
from __future__ import annotations

from typing import Any

from ssptk.core.shards import ShardBalancer

__all__ = ["BalanceBytes", "on_its_shard", "shard_setter"]


def shard_setter(v1: Any, worker_device: str, cluster: dict[str, list[str]]) -> Any:
    """The device function of a worker's graph: computation on ``worker_device``, variables on the PS tasks.
    With K > 1 PS tasks (``--ps K``) each variable goes to the shard holding the fewest bytes so far, as
    ``replica_device_setter`` with a byte-size load balancer does: every worker builds the same variables in the
    same order, so every worker places them alike. The global step is made first, so it lands on ``ps:0``
    with the mode's coordination (clocks, queues, tokens, claims), which is pinned there."""
    shards = len(cluster.get("ps", [])) or 1
    strategy = None if shards == 1 else BalanceBytes(shards)
    return v1.train.replica_device_setter(ps_tasks=shards, worker_device=worker_device,
                                          cluster=v1.train.ClusterSpec(cluster), ps_strategy=strategy)


class BalanceBytes:
    """``replica_device_setter``'s ``ps_strategy``: each variable to its shard by bytes, by the one rule the simulator
    also places them by (:class:`ssptk.core.shards.ShardBalancer`; TF 1's ``GreedyLoadBalancingStrategy`` with
    ``byte_size_load_fn``, gone with ``tf.contrib``)."""

    def __init__(self, shards: int) -> None:
        self.balancer = ShardBalancer(shards)

    def __call__(self, op: Any) -> int:
        import tensorflow as tf

        nbytes = (tf.TensorShape(op.get_attr("shape")).num_elements() or 1) * tf.as_dtype(op.get_attr("dtype")).size
        return self.balancer.place(nbytes)


def on_its_shard(v1: Any, var: Any) -> Any:
    """A device scope for an op that updates ``var``: where ``var`` lives (its shard)."""
    return v1.device(var.device)
