"""The optimizer an update applies (``--optimizer SPEC``): its grammar, its canonical form, its slots, and its update
rule in NumPy.

``sgd`` (the default: ``w -= lr * g``), ``momentum:BETA`` and ``nesterov:BETA`` (TensorFlow's ``MomentumOptimizer``:
``a = BETA * a + g``, ``w -= lr * a``, Nesterov ``w -= lr * (g + BETA * a)``; ``BETA`` 0.9 when left out) and ``adam``
or ``adam:B1,B2,EPS`` (TensorFlow's ``AdamOptimizer``, defaults 0.9, 0.999, 1e-8, its bias correction from each
variable's own ``B1^t``, ``B2^t``). The runtime applies them where each mode applies its update
(:mod:`ssptk.runtime.tf_optimizers`); the simulator's replay applies :func:`apply` here, the same arithmetic in the
parameters' own precision, so a predicted run follows the real one. Imports nothing above core.
"""
from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ssptk.core.errors import UsageError

__all__ = ["ADAM_DEFAULTS", "ADAM_LR", "DEFAULT_MOMENTUM", "NAMES", "OPTIMIZER_HINT", "SEPARATOR", "Optimizer",
           "SlotState", "apply", "learning_rate", "new_state", "parse_optimizer", "suffix"]

NAMES = ("sgd", "momentum", "nesterov", "adam")
#: ``momentum`` and ``nesterov`` without ``:BETA``
DEFAULT_MOMENTUM = 0.9
#: Adam's ``B1, B2, EPS`` when not given (Kingma and Ba 2015; TensorFlow's ``AdamOptimizer``)
ADAM_DEFAULTS = (0.9, 0.999, 1e-8)
OPTIMIZER_HINT = "use sgd, momentum:BETA, nesterov:BETA, adam or adam:B1,B2,EPS"
#: ``--optimizer adam``'s learning rate when neither ``--lr`` nor the model's ``adam_lr`` gives one (Kingma and Ba's)
ADAM_LR = 1e-3
#: Between a mode's label and its optimizer (``async·adam``); ``@`` is taken for it where typing ``·`` is hard.
SEPARATOR = "\u00b7"


@dataclass(frozen=True)
class Optimizer:
    """A parsed ``--optimizer``: ``name`` (one of :data:`NAMES`), ``beta`` (momentum's), ``b1, b2, eps`` (Adam's)."""

    name: str = "sgd"
    beta: float = 0.0
    b1: float = ADAM_DEFAULTS[0]
    b2: float = ADAM_DEFAULTS[1]
    eps: float = ADAM_DEFAULTS[2]

    def __str__(self) -> str:
        """The canonical spec: ``sgd``, ``momentum:0.9``, ``adam`` (its defaults) or ``adam:0.8,0.99,1e-07``."""
        if self.name in ("momentum", "nesterov"):
            return f"{self.name}:{self.beta!r}"
        if self.name == "adam" and (self.b1, self.b2, self.eps) != ADAM_DEFAULTS:
            return f"adam:{self.b1!r},{self.b2!r},{self.eps!r}"
        return self.name

    @property
    def slots(self) -> int:
        """Copies of the parameters it keeps beside them: sgd 0, momentum and nesterov 1 (the accumulator), adam 2
        (``m`` and ``v``; plus two scalars per variable)."""
        return {"sgd": 0, "momentum": 1, "nesterov": 1, "adam": 2}[self.name]

    @property
    def momentum(self) -> float:
        """Its explicit momentum: ``BETA`` (momentum, nesterov), ``B1`` (adam), 0 (sgd)."""
        return self.beta if self.name in ("momentum", "nesterov") else self.b1 if self.name == "adam" else 0.0


def _number(spec: str, what: str, text: str, low: float, high: float, closed_high: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    ok = math.isfinite(value) and low <= value and (value <= high if closed_high else value < high)
    if not ok:
        span = f"a finite number >= {low:g}" if high == math.inf else f"a number in [{low:g}, {high:g})"
        raise UsageError(f"bad --optimizer {spec!r}: {what} must be {span}, got {text!r} ({OPTIMIZER_HINT})")
    return value


def parse_optimizer(spec: Any) -> Optimizer:
    """``--optimizer``'s value -> :class:`Optimizer`; :class:`UsageError` (one line) for an unknown name, a ``BETA``,
    ``B1`` or ``B2`` outside [0, 1), an ``EPS`` that is negative or not finite, or too many numbers."""
    if isinstance(spec, Optimizer):
        return spec
    text = str(spec).strip()
    name, colon, rest = text.partition(":")
    name = name.strip().lower()
    if name not in NAMES:
        near = difflib.get_close_matches(name, NAMES, n=1, cutoff=0.6)
        hint = f"did you mean {near[0]}? ({OPTIMIZER_HINT})" if near else OPTIMIZER_HINT
        raise UsageError(f"unknown optimizer {text!r}: {hint}")
    values = [v.strip() for v in rest.split(",")] if colon else []
    if name == "sgd":
        if values:
            raise UsageError(f"bad --optimizer {text!r}: sgd takes no numbers ({OPTIMIZER_HINT})")
        return Optimizer()
    if name in ("momentum", "nesterov"):
        if len(values) > 1:
            raise UsageError(f"bad --optimizer {text!r}: {name} takes one number, BETA ({OPTIMIZER_HINT})")
        beta = _number(text, "BETA", values[0], 0.0, 1.0, False) if values else DEFAULT_MOMENTUM
        return Optimizer(name, beta=beta)
    if len(values) > 3:
        raise UsageError(f"bad --optimizer {text!r}: adam takes at most three numbers, B1,B2,EPS ({OPTIMIZER_HINT})")
    given = list(ADAM_DEFAULTS)
    for k, (what, v) in enumerate(zip(("B1", "B2", "EPS"), values)):
        given[k] = (_number(text, what, v, 0.0, math.inf, True) if what == "EPS"
                    else _number(text, what, v, 0.0, 1.0, False))
    return Optimizer("adam", b1=given[0], b2=given[1], eps=given[2])


def learning_rate(given: float | None, spec: Any, optimizer: Any) -> float:
    """The learning rate a run uses: ``--lr`` when ``given``, else the model's (a
    :class:`~ssptk.core.models.ModelSpec`): its ``lr`` for sgd and momentum, its ``adam_lr`` (or :data:`ADAM_LR`) for
    adam, whose steps do not scale with the gradient: SGD's rate is far too large for it (digits: 0.1 leaves Adam at
    26% held-out accuracy, 0.01 reaches 97%)."""
    if given:
        return float(given)
    if parse_optimizer(optimizer).name == "adam":
        return float(getattr(spec, "adam_lr", None) or ADAM_LR)
    return float(spec.lr)


def suffix(spec: Any) -> str:
    """What a label adds for ``spec``: ``""`` for sgd (every label as it always was), else ``·`` and the canonical
    spec (``async·adam``, ``ssp:4·momentum:0.9``)."""
    opt = parse_optimizer(spec)
    return "" if opt.name == "sgd" else SEPARATOR + str(opt)


#: One variable's slots in NumPy: momentum ``[a]``; adam ``[m, v, b1^t, b2^t]`` (the powers as 0-d arrays).
SlotState = list[np.ndarray]


def new_state(opt: Optimizer, params: list[np.ndarray]) -> list[SlotState]:
    """The slots of ``params`` before the first update, as TensorFlow's optimizers create them."""
    if opt.name in ("momentum", "nesterov"):
        return [[np.zeros_like(p)] for p in params]
    if opt.name == "adam":
        return [[np.zeros_like(p), np.zeros_like(p), np.asarray(p.dtype.type(opt.b1)),
                 np.asarray(p.dtype.type(opt.b2))] for p in params]
    return [[] for _ in params]


def apply(opt: Optimizer, params: list[np.ndarray], grads: list[np.ndarray], lr: float,
          state: list[SlotState]) -> list[np.ndarray]:
    """One update of ``params`` by ``grads`` at learning rate ``lr``: the new parameters (``state`` is updated in
    place). The arithmetic of TensorFlow's CPU kernels (``ApplyGradientDescent``, ``ApplyMomentum``, ``ApplyAdam``
    and Adam's ``_finish``), op by op in the parameters' own precision."""
    out = []
    for p, g, s in zip(params, grads, state):
        one = p.dtype.type
        lr_t = one(lr)
        if opt.name == "sgd":
            out.append(p - lr_t * g)
        elif opt.name in ("momentum", "nesterov"):
            beta = one(opt.beta)
            s[0] = s[0] * beta + g
            out.append(p - (g * lr_t + s[0] * beta * lr_t) if opt.name == "nesterov" else p - s[0] * lr_t)
        else:
            b1, b2, eps = one(opt.b1), one(opt.b2), one(opt.eps)
            alpha = lr_t * np.sqrt(one(1) - s[3]) / (one(1) - s[2])
            s[0] = s[0] + (g - s[0]) * (one(1) - b1)
            s[1] = s[1] + (g * g - s[1]) * (one(1) - b2)
            out.append(p - (s[0] * alpha) / (np.sqrt(s[1]) + eps))
            s[2], s[3] = np.asarray(s[2] * b1), np.asarray(s[3] * b2)
    return out
