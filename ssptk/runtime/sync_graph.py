"""sync's part of a worker's graph (and local SGD's rounds): conditional accumulators on each variable's shard, one
token queue per worker, and the chief's aggregator, a while loop on the PS for the whole run. The shared part (the
variables, the model, its gradient, the barriers) is :func:`ssptk.runtime.ps_graph.build`'s."""
from __future__ import annotations

from typing import Any

from ssptk.runtime.fence import fetch_add
from ssptk.runtime.graph_parts import PS, QUEUE_CAPACITY, GraphParts, received_on_shards
from ssptk.runtime.placement import on_its_shard

__all__ = ["sync_ops"]


def _push(s: GraphParts, accs: list[Any], local_step: Any, after: Any) -> list[Any]:
    """sync: this worker's gradients into the accumulators, after ``after``; with a fence, under the worker's lock
    with its ledger row (the step it pushed for)."""
    tf, v1, fence = s.tf, s.v1, s.fence
    if fence is None:
        with tf.control_dependencies([after]):
            return [acc.apply_grad(g, local_step=local_step) for acc, g in zip(accs, s.grads)]
    grads = received_on_shards(s, s.grads)
    with v1.device(PS):
        step = tf.identity(local_step)

    def body() -> Any:
        with tf.control_dependencies([after]):
            pushes = []
            for acc, g, var in zip(accs, grads, s.model_vars):
                with on_its_shard(v1, var):
                    pushes.append(acc.apply_grad(g, local_step=step))
        with v1.device(PS), tf.control_dependencies(pushes):
            with tf.control_dependencies([fence.record([step, -1, -1])]):
                return tf.identity(step)

    with v1.device(PS):
        return [fence.guarded(body)]


def sync_ops(s: GraphParts) -> dict[str, Any]:
    """sync (and local SGD's rounds, whose workers push their deltas as ``s.grads``): conditional accumulators on
    the PS, one token queue per worker, and the chief's aggregator."""
    tf, v1, n = s.tf, s.v1, s.n
    extra: dict[str, Any] = {}
    local_step = v1.placeholder(tf.int64, shape=(), name="local_step")
    extra["local_step"] = local_step
    accs = []
    for k, var in enumerate(s.model_vars):
        with on_its_shard(v1, var):  # a gradient's bytes go to its variable's shard, not all to ps:0
            accs.append(v1.ConditionalAccumulator(var.dtype.base_dtype, shape=var.shape,
                                                  shared_name=f"sync_acc_{k}", name=f"sync_acc_{k}"))
    # The global step read on the PS just before the push tells whether this gradient was in time for its
    # step (the accumulators drop gradients whose local_step is behind).
    with v1.device(PS), tf.control_dependencies(s.after_compute):
        g_before_push = s.global_step.read_value()
    pushes = _push(s, accs, local_step, g_before_push)
    with v1.device(PS):
        # a token is (global step after the update, PS time the update was applied)
        tokens = [v1.FIFOQueue(QUEUE_CAPACITY, [tf.int64, tf.float64], shapes=[[], []],
                               shared_name=f"sync_token_{j}", name=f"sync_token_{j}") for j in range(n)]
        # One run per step: push, then block on this worker's own token. The wait is measured on the PS
        # clock, from the push landing to the update being applied.
        with tf.control_dependencies(pushes):
            pushed_at = tf.timestamp()
            tok = tokens[s.index].dequeue()
        with tf.control_dependencies(tok):
            parts = [g_before_push, tok[0], s.global_step.read_value(),
                     tf.cast(tokens[s.index].size(), tf.int64), tf.bitcast(pushed_at, tf.int64),
                     tf.bitcast(tok[1], tf.int64)]
        extra["sync_meta"] = tf.stack(parts, name="sync_meta")
    extra["drain_n"] = v1.placeholder(tf.int32, shape=(), name="drain_n")
    extra["drain"] = tokens[s.index].dequeue_many(extra["drain_n"])
    with v1.device(PS):
        extra["backlog"] = tokens[s.index].size()  # a restarted worker drops its dead self's tokens

    # The chief's aggregator is one while loop that runs on the PS for the whole run: no round trip from
    # the chief per update. Each iteration takes the mean of the first N-B fresh gradients, applies it,
    # and puts one token in every worker's queue.
    def aggregate_once(i: Any) -> Any:
        applied = []
        for acc, var in zip(accs, s.model_vars):
            with on_its_shard(v1, var):
                applied.append(s.opt.apply_gradients([(acc.take_grad(n - s.backup), var)]))
        update = tf.group(*applied)
        with tf.control_dependencies([update]):
            new_step = fetch_add(tf, s.global_step)
        with tf.control_dependencies([new_step]):
            applied_at = tf.timestamp()
            released = [acc.set_global_step(new_step) for acc in accs]
            released += [q.enqueue((new_step, applied_at)) for q in tokens]
        with tf.control_dependencies(released):
            return i + 1

    with v1.device(PS):
        extra["aggregate"] = tf.while_loop(lambda i: i < s.updates, aggregate_once,
                                           [tf.constant(0, tf.int64)], parallel_iterations=1)
    extra["close_tokens"] = tf.group(*[q.close() for q in tokens])
    return extra
