"""Gradients of a model at any parameters, many at once: the oracle the simulator's replay asks
(:class:`ssptk.sim.replay.GradientOracle`).

A replay needs, per wave, the loss and gradient of up to ~N minibatches, each at a *different* parameter
version. :class:`TFOracle` builds ``copies`` instances of the model in one local TensorFlow graph; copy ``j``
first assigns its variables from row ``j`` of one stacked placeholder per variable, then computes its loss
and gradients on row ``j`` of the stacked minibatches. One session call computes a whole wave (its rows
only: the other copies are pruned), through :func:`ssptk.runtime.fastrun.feeding_callable`.

Copy 0 is built by :func:`ssptk.runtime.ps_graph.model_graph` in a fresh graph with the run's seed, exactly
as every worker builds it, so its initial values are the run's own.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ssptk.core.models import ModelSpec, eval_batch
from ssptk.runtime.fastrun import feeding_callable
from ssptk.runtime.ps_graph import model_graph
from ssptk.sim.replay import Params

__all__ = ["TFOracle"]


class TFOracle:
    """``spec``'s losses and gradients at given parameters (``copies``: most gradients per call)."""

    def __init__(self, spec: ModelSpec, seed: int, copies: int) -> None:
        import tensorflow as tf

        v1 = tf.compat.v1
        self.copies = max(1, int(copies))
        self.graph = tf.Graph()
        with self.graph.as_default(), v1.device("/cpu:0"):
            _, x, y, module, variables = model_graph(spec, seed)
            init = v1.variables_initializer(variables)
            #: the variables' names, as real runs' ``model/final.json`` gives them
            self.names = [v.name.split(":")[0] for v in variables]
            self.params = [v1.placeholder(v.dtype.base_dtype, [None, *v.shape], name=f"params_{k}")
                           for k, v in enumerate(variables)]
            self.x = v1.placeholder(x.dtype, [None, *x.shape], name="xs")
            self.y = v1.placeholder(y.dtype, [None, *y.shape], name="ys")
            self._outputs: list[list[Any]] = []  # per copy: loss, then one gradient per variable
            for j in range(self.copies):
                if j:
                    module = _instance(spec, x)
                loss, grads, _ = _at(tf, spec, module, [p[j] for p in self.params], self.x[j], self.y[j])
                self._outputs.append([loss, *grads])
            # held-out evaluation: copy 0 on a fixed set
            ex, ey = eval_batch(spec, seed)
            self._eval_set = (np.asarray(ex), np.asarray(ey))
            self.ex = v1.placeholder(x.dtype, [None, *x.shape[1:]], name="eval_x")
            self.ey = v1.placeholder(y.dtype, [None, *y.shape[1:]], name="eval_y")
            eloss, _, acc = _at(tf, spec, _instance(spec, x), [p[0] for p in self.params], self.ex, self.ey,
                                with_accuracy=True)
            self._eval_fetch = [eloss] + ([acc] if acc is not None else [])
        self.session = v1.Session(graph=self.graph, config=v1.ConfigProto(device_count={"GPU": 0}))
        self.session.run(init)
        self._initial = self.session.run(variables) if variables else []
        self._calls: dict[int, Callable[..., Any]] = {}
        self._eval: Callable[..., Any] | None = None

    def initial(self) -> Params:
        """The run's initial parameters (its seed's)."""
        return [np.array(p) for p in self._initial]

    def gradients(self, params: Sequence[Params], batches: Sequence[tuple[np.ndarray, np.ndarray]]
                  ) -> tuple[np.ndarray, list[Params]]:
        """Loss and gradients of ``batches[i]`` at ``params[i]``, in calls of at most ``copies`` each."""
        losses: list[float] = []
        grads: list[Params] = []
        for lo in range(0, len(params), self.copies):
            p, b = list(params[lo:lo + self.copies]), list(batches[lo:lo + self.copies])
            k = len(p)
            # a wave's width varies from call to call, and a callable per width costs a graph pruning each: widths
            # are rounded up to a power of two (the padding repeats the last row; its results are dropped)
            width = min(self.copies, 1 << (k - 1).bit_length())
            p += [p[-1]] * (width - k)
            b += [b[-1]] * (width - k)
            run = self._calls.get(width)
            if run is None:
                run = self._calls[width] = feeding_callable(
                    self.session, [o for out in self._outputs[:width] for o in out], [*self.params, self.x, self.y])
            stacked = [np.stack([q[v] for q in p]) for v in range(len(self.params))]
            out = run(*stacked, np.stack([xb for xb, _ in b]), np.stack([yb for _, yb in b]))
            per = 1 + len(self.params)
            for j in range(k):
                losses.append(float(out[j * per]))
                grads.append([np.asarray(a) for a in out[j * per + 1:(j + 1) * per]])
        return np.asarray(losses, float), grads

    def evaluate(self, params: Params) -> tuple[float, float | None]:
        """The held-out loss (and accuracy) at ``params``: the set real runs' final models are evaluated on."""
        if self._eval is None:
            self._eval = feeding_callable(self.session, self._eval_fetch, [*self.params, self.ex, self.ey])
        out = self._eval(*[np.asarray(p)[None] for p in params], *self._eval_set)
        return float(out[0]), (float(out[1]) if len(out) > 1 else None)

    def close(self) -> None:
        self.session.close()


def _instance(spec: ModelSpec, x: Any) -> Any:
    """One more instance of the model, its variables created."""
    module = spec.build()
    if not module.trainable_variables:  # Keras layers may create variables on first call
        module(x)
    return module


def _at(tf: Any, spec: ModelSpec, module: Any, values: list[Any], x: Any, y: Any, with_accuracy: bool = False
        ) -> tuple[Any, list[Any], Any]:
    """``module``'s loss (gradients, accuracy) on ``(x, y)`` after its variables are set to ``values``."""
    variables = list(module.trainable_variables)
    assigns = [v.assign(val) for v, val in zip(variables, values)]
    with tf.control_dependencies(assigns):  # every read of the forward pass follows the assignments
        pred = module(tf.identity(x))
    loss = spec.loss(y, pred)
    grads = [] if with_accuracy else [tf.zeros_like(v) if g is None else tf.convert_to_tensor(g)
                                      for v, g in zip(variables, tf.gradients(loss, variables))]
    acc = spec.accuracy(y, pred) if with_accuracy and spec.accuracy is not None else None
    return loss, grads, acc
