"""Delay compensation for async and SSP (``--lr-staleness dc[:LAMBDA]``, DC-ASGD, Zheng et al., ICML 2017).

A stale gradient ``g``, computed at the parameters ``w_read`` a step read, is applied as
``g + lambda * g * g * (w_now - w_read)``: the first-order Taylor correction towards the gradient at ``w_now``,
the parameters on the PS when the update lands, with ``g * g`` standing in for the Hessian's diagonal.

Where ``w_read`` is kept: on the PS, one copy of the model per worker (``dc_read_<worker>/<variable>``, each on its
variable's shard), taken in the step's own run just before the parameters are read (the run's global-step read
waits for it, as the forward pass waits for that read). So no byte more crosses the wire and no run is added; the
PS holds N x the model's bytes more, and each step copies the model once on the PS. The same read-order caveat as
``staleness``: an update that lands between the copy and the forward pass's own read is in ``w_read``'s error.
``w_now`` is read on the shard once the gradient has arrived there, so it holds every update before this one.
"""
from __future__ import annotations

from typing import Any

__all__ = ["Snapshots", "dc_gradient"]


def dc_gradient(tf: Any, g: Any, w_now: Any, w_read: Any, lam: float) -> Any:
    """The delay-compensated gradient ``g + lam * g * g * (w_now - w_read)`` (tensors of one variable)."""
    return g + tf.cast(lam, g.dtype) * g * g * (w_now - w_read)


class Snapshots:
    """Worker ``index``'s copy of every model variable as its step read it (built in that worker's graph, under
    the PS device setter): ``taken`` are the copy ops that the step's parameter read waits for, :meth:`corrected`
    the compensated gradients."""

    def __init__(self, v1: Any, model_vars: list[Any], index: int, lam: float) -> None:
        self.model_vars, self.lam = model_vars, lam
        self.copies, self.taken = [], []
        for var in model_vars:
            with v1.device(var.device):  # beside its variable: the copy never crosses the wire
                name = f"dc_read_{index}/{var.name.split(':')[0]}"
                copy = v1.Variable(v1.zeros(var.shape, var.dtype.base_dtype), trainable=False, name=name)
                self.copies.append(copy)
                self.taken.append(copy.assign(var.read_value()))

    def corrected(self, tf: Any, grads: list[Any], device: str | None = None) -> tuple[list[Any], Any]:
        """``grads`` compensated on each variable's shard (``None`` stays ``None``), and the correction's size
        relative to the gradient's, ``|lambda g*g*(w_now - w_read)| / |g|`` over the whole model (float64, 0 for a
        zero gradient; computed on ``device``, the PS task that sends the step's meta back): how much DC changed
        this step."""
        out: list[Any] = []
        squares: list[Any] = []  # per variable: |correction|^2, |g|^2 (scalars; on ps:0 with one shard)
        for g, var, copy, taken in zip(grads, self.model_vars, self.copies, self.taken):
            if g is None:
                out.append(None)
                continue
            with tf.device(var.device):
                arrived = tf.identity(g)  # received here first: w_now waits for it without a cross-task edge
                with tf.control_dependencies([arrived, taken]):
                    w_now, w_read = var.read_value(), copy.read_value()
                out.append(dc_gradient(tf, arrived, w_now, w_read, self.lam))
                squares.append(tf.cast(tf.stack([tf.reduce_sum(tf.square(out[-1] - arrived)),
                                                 tf.reduce_sum(tf.square(arrived))]), tf.float64))
        with tf.device(device):
            total = tf.add_n(squares) if squares else tf.zeros([2], tf.float64)
            return out, tf.math.divide_no_nan(tf.sqrt(total[0]), tf.sqrt(total[1]))
