"""``--optimizer`` in TensorFlow: the optimizer an update applies, where each mode applies it.

sync, ssp and async apply it on the PS (:mod:`ssptk.runtime.ps_graph`, :mod:`ssptk.runtime.sync_graph`), one
variable at a time on its shard: TensorFlow's optimizers create each slot colocated with its variable, so every
shard holds its own variables' slots and an update sends no byte more than SGD's. Adam's bias correction keeps two
scalars (``beta1_power``, ``beta2_power``) that ``AdamOptimizer`` advances once per ``apply_gradients``: applied
variable by variable, one optimizer would advance them once per variable, and place them on one shard only. So
Adam is one ``AdamOptimizer`` per variable (:class:`PerVariable`), its scalars beside its variable, advanced once
per update of that variable. local SGD applies it in each worker's inner steps (:mod:`ssptk.runtime.local_graph`),
allreduce on each worker (:mod:`ssptk.runtime.allreduce`, :func:`eager_update`).

The NumPy twin of every rule, which the simulator's replay applies, is :func:`ssptk.core.optimizers.apply`.
"""
from __future__ import annotations

from typing import Any

from ssptk.core.optimizers import Optimizer, parse_optimizer

__all__ = ["PerVariable", "eager_slots", "eager_update", "optimizer_variables", "tf_optimizer"]


class PerVariable:
    """An optimizer per variable, each made by ``make()`` at the variable's first update (see the module
    docstring); ``apply_gradients`` as TensorFlow's, for any variables."""

    def __init__(self, make: Any) -> None:
        self.make = make
        self.by_var: dict[int, Any] = {}

    def apply_gradients(self, grads_and_vars: Any) -> Any:
        import tensorflow as tf

        ops = []
        for g, var in grads_and_vars:
            _, opt = self.by_var.setdefault(id(var), (var, self.make()))
            ops.append(opt.apply_gradients([(g, var)]))
        return ops[0] if len(ops) == 1 else tf.group(*ops)

    def named_variables(self) -> dict[str, Any]:
        """Every optimizer's state by the name it is saved under: its slots by their own (``w/Adam``), its scalars
        by their variable's (``w/beta1_power``, not TensorFlow's ``beta1_power_3``)."""
        out = {}
        for var, opt in self.by_var.values():
            slots = {id(opt.get_slot(var, name)) for name in opt.get_slot_names()}
            for v in opt.variables():
                name = v.op.name
                out[name if id(v) in slots else f"{var.op.name}/{name.split('_power')[0]}_power"] = v
        return out


def tf_optimizer(v1: Any, spec: str | Optimizer, lr: Any) -> Any:
    """The ``tf.compat.v1`` optimizer of ``spec`` at learning rate ``lr``: sgd is ``GradientDescentOptimizer`` (the
    graph every run built before ``--optimizer``), momentum and nesterov ``MomentumOptimizer``, adam
    :class:`PerVariable` ``AdamOptimizer``\\ s."""
    opt = parse_optimizer(spec)
    if opt.name == "sgd":
        return v1.train.GradientDescentOptimizer(lr)
    if opt.name in ("momentum", "nesterov"):
        return v1.train.MomentumOptimizer(lr, opt.beta, use_nesterov=opt.name == "nesterov")
    return PerVariable(lambda: v1.train.AdamOptimizer(lr, opt.b1, opt.b2, opt.eps))


def optimizer_variables(optimizer: Any) -> dict[str, Any]:
    """The state ``optimizer`` keeps (slots, Adam's scalars) once its updates are built, by the name the model's
    checkpoint saves it under (sgd: none)."""
    if isinstance(optimizer, PerVariable):
        return optimizer.named_variables()
    return {v.op.name: v for v in optimizer.variables()}


def eager_slots(tf: Any, spec: str | Optimizer, variables: list[Any]) -> list[list[Any]]:
    """allreduce: each variable's slots as variables (made inside the strategy's scope, so mirrored on every
    worker): momentum ``[accumulator]``, adam ``[m, v, beta1_power, beta2_power]``, sgd ``[]``."""
    opt = parse_optimizer(spec)
    out = []
    for var in variables:
        name = var.name.split(":")[0].replace("/", "_")
        zeros = [tf.Variable(tf.zeros_like(var), trainable=False, name=f"{name}_slot_{j}") for j in range(opt.slots)]
        if opt.name == "adam":
            zeros += [tf.Variable(tf.constant(b, var.dtype), trainable=False, name=f"{name}_power_{j}")
                      for j, b in enumerate((opt.b1, opt.b2))]
        out.append(zeros)
    return out


def eager_update(tf: Any, spec: str | Optimizer, var: Any, slots: list[Any], g: Any, lr: float) -> None:
    """allreduce: one variable's update by gradient ``g``, with TensorFlow's own kernels (``ResourceApply*``, as the
    PS modes' optimizers run them)."""
    opt = parse_optimizer(spec)
    dtype = var.dtype.base_dtype
    lr_t = tf.constant(lr, dtype)
    if opt.name == "sgd":
        var.assign_sub(lr_t * g)
    elif opt.name in ("momentum", "nesterov"):
        tf.raw_ops.ResourceApplyMomentum(var=var.handle, accum=slots[0].handle, lr=lr_t, grad=g,
                                         momentum=tf.constant(opt.beta, dtype), use_nesterov=opt.name == "nesterov")
    else:
        m, v, p1, p2 = slots
        tf.raw_ops.ResourceApplyAdam(var=var.handle, m=m.handle, v=v.handle, beta1_power=p1.read_value(),
                                     beta2_power=p2.read_value(), lr=lr_t, beta1=tf.constant(opt.b1, dtype),
                                     beta2=tf.constant(opt.b2, dtype), epsilon=tf.constant(opt.eps, dtype), grad=g)
        p1.assign(p1 * tf.constant(opt.b1, dtype))
        p2.assign(p2 * tf.constant(opt.b2, dtype))
