"""The graph of local SGD (``--mode local:H``, periodic model averaging through the PS).

Each worker keeps a private copy of the model's variables on the worker: a local step is one run on the worker
alone (forward, gradient, the injected delay, the inner optimizer's step on the copy: ``w -= lr * g`` under the
default ``--optimizer sgd``), no message to or from the PS. The inner optimizer's slots (momentum, Adam's moments)
live on the worker beside its copy and carry over from round to round, as torch's post-local-SGD optimizer keeps
its inner optimizer's state (a restarted worker's start from zero, with its new copy). The
round's last step is also one run: the local step, then the round's pseudo-gradient ``anchor - copy`` (``anchor``:
the values pulled at the round's start; DiLoCo's outer gradient, minus the delta) is pushed into sync's conditional
accumulators on each variable's shard, the worker blocks on its token, and once the chief's aggregator on the PS
has applied the round the new global values are pulled into the copy and the anchor, all in that run. Its
messages: the pseudo-gradients out (one tensor per variable, to its shard), the token, and the values back, as a
sync step's gradient out and parameters in.

The chief's aggregator is sync's (:func:`ssptk.runtime.sync_graph.sync_ops`): it takes the mean of the first N-B
pseudo-gradients of the round and applies it with the outer optimizer: ``w -= outer_scale * mean`` (plain
averaging at ``--outer-lr 1`` under ``--lr-convention mean``), or TensorFlow's Nesterov ``MomentumOptimizer`` with
``--outer-momentum``, its momentum kept on the PS beside each variable. So ``local:1`` is sync, operation for
operation, up to float rounding (``w - (w - lr g)`` is ``lr g`` rounded).

With ``--restart-failed`` the round's push is fenced exactly as sync's (:mod:`ssptk.runtime.fence`): the push and
the ledger's row (the round it was pushed for) are one fact under the worker's lock on ``ps:0``, so a restarted
worker knows from the PS whether its dead self's delta is in a round.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from ssptk.core.models import ModelSpec
from ssptk.core.optimizers import learning_rate
from ssptk.core.options import RunOptions
from ssptk.runtime import ps_graph, sync_graph
from ssptk.runtime.injected import delayed
from ssptk.runtime.placement import on_its_shard
from ssptk.runtime.tf_optimizers import optimizer_variables, tf_optimizer

__all__ = ["LocalOps", "build_local_graph", "rounds"]


@dataclass
class LocalOps:
    """The ops of local SGD's step (besides a :class:`~ssptk.runtime.ps_graph.PSGraph`'s)."""

    local_loss: Any    # a local step: update the private copy, fetch its loss (before the update)
    round_meta: Any    # the round's last step, after the local step: push, wait for the token, pull; sync's meta
    pull: Any          # copy the global values into the private copy and the anchor, the inner slots to 0 (a start)


def rounds(opts: RunOptions) -> int:
    """How many averaging rounds ``--steps K`` makes: ceil(K / H) (the last one may be shorter)."""
    return math.ceil(opts.steps / (opts.local_steps or 1))


def build_local_graph(spec: ModelSpec, opts: RunOptions, cluster: dict[str, list[str]], index: int, container: str,
          with_delay: bool, gpu: int | None = None,
          incarnation: int | None = None) -> tuple[ps_graph.PSGraph, LocalOps]:
    """Worker ``index``'s graph for ``--mode local``: the PS modes' shared part with the global variables (held-out
    evaluation and the final model read those), plus the private copy's step and sync's round machinery.
    ``incarnation`` (``--restart-failed``): the round's push is fenced as sync's (:mod:`ssptk.runtime.fence`)."""
    ops: dict[str, Any] = {}

    def mode_ops(s: Any) -> dict[str, Any]:
        tf, v1 = s.tf, s.v1
        with ps_graph.BUILD_LOCK, v1.device(f"/job:worker/task:{index}"):  # not the PS: the copy stays here
            private = spec.build()
            if not private.trainable_variables:
                private(s.x)
            mine = list(private.trainable_variables)
            anchor = [v1.Variable(tf.zeros(v.shape, v.dtype.base_dtype), trainable=False, name=f"local_anchor_{k}")
                      for k, v in enumerate(mine)]
        loss = tf.identity(spec.loss(s.y, private(s.x)), name="local_loss")
        grads = tf.gradients(loss, mine)
        delay = None
        if with_delay:
            delay, grads = delayed(tf, v1, grads)
        inner = tf_optimizer(v1, opts.optimizer, learning_rate(opts.lr, spec, opts.optimizer))
        update = inner.apply_gradients([(g, v) for g, v in zip(grads, mine) if g is not None])
        slots = list(optimizer_variables(inner).values())  # on this worker; the chief's init does not reach the others
        with tf.control_dependencies([update]):
            ops["local_loss"] = tf.identity(loss)
            outer_grads = [a.read_value() - v.read_value() for a, v in zip(anchor, mine)]
        if opts.outer_momentum:
            outer = v1.train.MomentumOptimizer(opts.outer_scale, opts.outer_momentum, use_nesterov=True)
        else:
            outer = v1.train.GradientDescentOptimizer(opts.outer_scale)
        extra = sync_graph.sync_ops(dataclasses.replace(s, grads=outer_grads, after_compute=outer_grads, opt=outer))

        def pull(after: list[Any]) -> list[Any]:
            assigns = []
            for var, copy, anc in zip(s.model_vars, mine, anchor):
                with on_its_shard(v1, var), tf.control_dependencies(after):
                    value = var.read_value()
                assigns += [copy.assign(value), anc.assign(value)]
            return assigns

        ops["pull"] = tf.group(*pull([]), *([v1.variables_initializer(slots)] if slots else []))
        with tf.control_dependencies(pull([extra["sync_meta"]])):  # after the token: the round is applied
            ops["round_meta"] = tf.identity(extra["sync_meta"])
        return {**extra, "delay": delay}

    g = ps_graph.build(spec, opts, cluster, index, container, with_delay=False, updates=rounds(opts), gpu=gpu,
                       incarnation=incarnation, mode_ops=mode_ops)
    return g, LocalOps(**ops)
