"""Delay compensation for async and SSP (``--lr-staleness dc[:LAMBDA]`` and ``dca[:LAMBDA0]``, DC-ASGD, Zheng et al.,
ICML 2017; :class:`ssptk.core.labels.DelayComp`).

A stale gradient ``g``, computed at the parameters ``w_read`` a step read, is applied as
``g + lambda * g * g * (w_now - w_read)``: the first-order Taylor correction towards the gradient at ``w_now``,
the parameters on the PS when the update lands, with ``g * g`` standing in for the Hessian's diagonal. ``dc``
(DC-ASGD-c): ``lambda`` a constant. ``dca`` (DC-ASGD-a): ``lambda = lambda0 / sqrt(ms + eps)`` per coordinate, ``ms``
the running mean square of the applied gradients, ``ms = m * ms + (1 - m) * g * g``, updated by each update's
gradient before it is used (RMSProp's rule; no bias correction, as in the paper).

Where ``w_read`` is kept: on the PS, one copy of the model per worker (``dc_read_<worker>/<variable>``, each on its
variable's shard), taken in the step's own run just before the parameters are read (the run's global-step read
waits for it, as the forward pass waits for that read). So no byte more crosses the wire and no run is added; the
PS holds N x the model's bytes more, and each step copies the model once on the PS. The same read-order caveat as
``staleness``: an update that lands between the copy and the forward pass's own read is in ``w_read``'s error.
``w_now`` is read on the shard once the gradient has arrived there, so it holds every update before this one.
``dca``'s mean square is one more slot per variable (``dc_mean_square/<variable>``, on its shard, shared by every
worker, initialised to 0 by the chief with the model): no byte more on the wire either. Its read-modify-write is not
atomic across workers, as the updates themselves are not (two updates landing at once may each miss the other's
``g * g``).
"""
from __future__ import annotations

from typing import Any

from ssptk.core.labels import DelayComp

__all__ = ["Snapshots", "dc_gradient"]


def dc_gradient(tf: Any, g: Any, w_now: Any, w_read: Any, lam: Any) -> Any:
    """The delay-compensated gradient ``g + lam * g * g * (w_now - w_read)`` (tensors of one variable; ``lam`` a
    number or, for ``dca``, a tensor of the variable's shape)."""
    lam = lam if tf.is_tensor(lam) else tf.constant(lam, g.dtype)  # a float64 model's lambda not rounded to float32
    return g + lam * g * g * (w_now - w_read)


class Snapshots:
    """Worker ``index``'s copy of every model variable as its step read it (built in that worker's graph, under
    the PS device setter): ``taken`` are the copy ops that the step's parameter read waits for, :meth:`corrected`
    the compensated gradients; with ``dca``, ``mean_squares`` the running mean square of each variable's gradients."""

    def __init__(self, v1: Any, model_vars: list[Any], index: int, dc: DelayComp | float) -> None:
        self.model_vars = model_vars
        self.dc = dc if isinstance(dc, DelayComp) else DelayComp(float(dc))
        self.copies, self.taken, self.mean_squares = [], [], []
        for var in model_vars:
            with v1.device(var.device):  # beside its variable: the copy never crosses the wire
                name = var.name.split(':')[0]
                zeros = v1.zeros(var.shape, var.dtype.base_dtype)
                copy = v1.Variable(zeros, trainable=False, name=f"dc_read_{index}/{name}")
                self.copies.append(copy)
                self.taken.append(copy.assign(var.read_value()))
                if self.dc.adaptive:  # one per variable, every worker's graph naming the same one
                    self.mean_squares.append(v1.Variable(zeros, trainable=False, name=f"dc_mean_square/{name}"))

    def _lam(self, tf: Any, k: int, g: Any) -> Any:
        """Variable ``k``'s lambda for gradient ``g``: the constant, or ``dca``'s ``lambda0 / sqrt(ms + eps)`` after
        the mean square took ``g`` in (run on the variable's shard)."""
        dc = self.dc
        if not dc.adaptive:
            return dc.lam
        ms, one = self.mean_squares[k], g.dtype
        # read once the gradient is here, as w_now is: a read with no input runs when the step's run starts, and
        # would miss every update that landed while this worker computed (its own g*g alone, measured)
        with tf.control_dependencies([g]):
            before = ms.read_value()
        new = ms.assign(tf.constant(dc.decay, one) * before + tf.constant(1.0 - dc.decay, one) * g * g)
        return tf.constant(dc.lam, one) / tf.sqrt(new + tf.constant(dc.eps, one))

    def corrected(self, tf: Any, grads: list[Any], device: str | None = None) -> tuple[list[Any], Any]:
        """``grads`` compensated on each variable's shard (``None`` stays ``None``), and the correction's size
        relative to the gradient's, ``|lambda g*g*(w_now - w_read)| / |g|`` over the whole model (float64, 0 for a
        zero gradient; computed on ``device``, the PS task that sends the step's meta back): how much DC changed
        this step."""
        out: list[Any] = []
        squares: list[Any] = []  # per variable: |correction|^2, |g|^2 (scalars; on ps:0 with one shard)
        for k, (g, var, copy, taken) in enumerate(zip(grads, self.model_vars, self.copies, self.taken)):
            if g is None:
                out.append(None)
                continue
            with tf.device(var.device):
                arrived = tf.identity(g)  # received here first: w_now waits for it without a cross-task edge
                with tf.control_dependencies([arrived, taken]):
                    w_now, w_read = var.read_value(), copy.read_value()
                out.append(dc_gradient(tf, arrived, w_now, w_read, self._lam(tf, k, arrived)))
                squares.append(tf.cast(tf.stack([tf.reduce_sum(tf.square(out[-1] - arrived)),
                                                 tf.reduce_sum(tf.square(arrived))]), tf.float64))
        with tf.device(device):
            total = tf.add_n(squares) if squares else tf.zeros([2], tf.float64)
            return out, tf.math.divide_no_nan(tf.sqrt(total[0]), tf.sqrt(total[1]))
