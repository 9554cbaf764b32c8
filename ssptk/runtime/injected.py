"""A step's injected compute time (``--straggler``, ``--jitter``): a sleep op on the worker that the step's gradients
wait for, so they leave the worker only after it. Used by every PS mode's graph (:mod:`ssptk.runtime.ps_graph`,
:mod:`ssptk.runtime.local_graph`)."""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["delayed"]


def _sleep(seconds: np.ndarray) -> np.ndarray:
    import time

    if seconds > 0:
        time.sleep(float(seconds))
    return np.float32(seconds)


def delayed(tf: Any, v1: Any, grads: list[Any]) -> tuple[Any, list[Any]]:
    """``(the delay's placeholder, grads gated by it)``: the sleep runs after every gradient is computed, and the
    gradients (``None`` stays ``None``) come out of it. Gated here, on the worker, so what the PS does with them
    needs no control edge of its own across tasks (each is a message per step)."""
    delay = v1.placeholder(tf.float32, shape=(), name="delay")
    with tf.control_dependencies([g for g in grads if g is not None]):
        slept = tf.numpy_function(_sleep, [delay], tf.float32, name="injected_delay")
    with tf.control_dependencies([slept]):
        return delay, [None if g is None else tf.identity(g) for g in grads]
