"""The label grammar, its one parser: modes (``sync``, ``ssp``, ``async``, ``allreduce``, ``local``), labels
(``ssp:S``, ``local:H``), the suffixes of comparison labels (``+inverse``, ``+dc``, ``+dc:LAMBDA``, ``+dca``,
``+dca:LAMBDA0``, ``+outer``), delay compensation's two forms (:class:`DelayComp`, :func:`parse_dc`), the optimizer a
label ends with (``async·adam``, ``ssp:4+inverse·momentum:0.9``; ``@`` for ``·``), and a label's directory name
(``ssp:2`` -> ``ssp-2``, ``async·momentum:0.9`` -> ``async.momentum-0.9``).

``--mode``, ``compare``'s labels, ``ssptk.simulate``'s mode, the task command and the simulator all parse
here; a refused label raises :class:`LabelError`, whose ``reason`` lets a caller name the label its own way
without rewriting the message.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from ssptk.core.errors import UsageError
from ssptk.core.optimizers import SEPARATOR, parse_optimizer, suffix

__all__ = ["DCA_DECAY", "DCA_EPSILON", "DC_FORMS", "DC_SUFFIX", "DEFAULT_DCA_LAMBDA", "DEFAULT_DC_LAMBDA",
           "DILOCO_OUTER", "INVERSE_SUFFIX", "MODES", "NUMBERED_MODES", "OPTIMIZER_MARKS", "OUTER_SUFFIX",
           "STALE_MODES", "DelayComp", "LabelError", "canonical_label", "label_dir", "label_of", "label_options",
           "parse_dc", "parse_label", "parse_mode", "split_optimizer"]

MODES = ("sync", "ssp", "async", "allreduce", "local")
#: The modes whose label carries a number: ``ssp:S`` (the staleness bound) and ``local:H`` (local steps per average).
NUMBERED_MODES = {"ssp": ("S", 0), "local": ("H", 1)}  # mode -> (the number's letter, its least value)
#: A comparison label's suffix for ``--lr-staleness inverse`` (``async+inverse``, ``ssp:4+inverse``).
INVERSE_SUFFIX = "+inverse"
#: ``--lr-staleness dc[:LAMBDA]`` / ``dca[:LAMBDA0]``: delay-compensated gradients (``async+dc``, ``ssp:4+dc:0.1``,
#: ``async+dca``, ``async+dca:1``).
DC_SUFFIX = "+dc"
#: The forms of delay compensation: ``dc`` (DC-ASGD-c, a constant lambda), ``dca`` (DC-ASGD-a, lambda adapted to
#: the gradients' running mean square). Zheng et al., ICML 2017.
DC_FORMS = ("dc", "dca")
#: DC-ASGD-c's lambda when none is given (MXNet's ``DCASGD`` default, Zheng et al. 2017).
DEFAULT_DC_LAMBDA = 0.04
#: DC-ASGD-a's lambda_0 when none is given (the paper's value for DC-ASGD-a in its experiments).
DEFAULT_DCA_LAMBDA = 2.0
#: DC-ASGD-a's decay of the running mean square, ``m`` (the paper's value; RMSProp's rule).
DCA_DECAY = 0.95
#: Added to the mean square under the square root: a coordinate whose gradients were all 0 gets no correction.
DCA_EPSILON = 1e-7
#: ``local:H+outer``: local SGD with DiLoCo's outer optimizer (Douillard et al. 2023): outer learning rate 0.7,
#: Nesterov momentum 0.9.
OUTER_SUFFIX = "+outer"
DILOCO_OUTER = {"outer_lr": 0.7, "outer_momentum": 0.9}
#: What separates a label from its optimizer: ``·`` (as labels are shown) or ``@`` (easier to type).
OPTIMIZER_MARKS = (SEPARATOR, "@")
#: The modes whose updates have a staleness: ``--lr-staleness`` (and so ``+inverse``, ``+dc``) applies to them only.
STALE_MODES = ("ssp", "async")


class LabelError(UsageError):
    """A label the grammar refuses. The message names the label; ``reason`` is the bare why (``only ssp
    takes a staleness (ssp:S)``), for callers that name the label their own way."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        reason = f"choose one of {', '.join(MODES)}"
        for name, (letter, _) in NUMBERED_MODES.items():
            number = mode[len(name):].lstrip("-_= ")
            if mode.startswith(name) and number.isdigit():  # ssp4, ssp-4, local_8: a number without its colon
                reason = (f"did you mean {name}:{int(number)}? ({reason}; {name}:{letter} for "
                          f"{_MEANING[name]} {letter})")
                break
        else:
            near = difflib.get_close_matches(mode.lower(), MODES, n=1, cutoff=0.6)  # asnyc, snyc, allredcue
            if near:
                reason = f"did you mean {near[0]}? ({reason})"
        raise LabelError(f"unknown mode {mode!r}: {reason}", reason)


_MEANING = {"ssp": "SSP with staleness", "local": "local SGD averaging every"}


def parse_label(label: str) -> tuple[str, int | None]:
    """A mode label: ``sync``, ``async``, ``allreduce``, ``ssp``, ``ssp:S``, ``local`` or ``local:H`` ->
    ``(mode, S or H or None)``: the staleness bound of ``ssp:S``, the local steps per average of ``local:H``.

    The one parser of labels (``--mode ssp:4``, ``compare sync ssp:2 local:4``, ``simulate("ssp:2", ...)``);
    raises :class:`LabelError`."""
    mode, colon, s = str(label).strip().partition(":")
    if not colon:
        _check_mode(mode)
        return mode, None
    if mode not in NUMBERED_MODES:
        if mode in MODES:
            reason = "only ssp (ssp:S) and local (local:H) take a number"
            raise LabelError(f"bad label {label!r}: {reason}", reason)
        _check_mode(mode)
    letter, least = NUMBERED_MODES[mode]
    try:
        number = int(s)
    except ValueError:
        number = least - 1
    if number < least:
        reason = f"use {mode}:{letter} with an integer {letter} >= {least}, e.g. {mode}:{max(least, 2)}"
        raise LabelError(f"bad label {label!r}: {reason}", reason)
    return mode, number


def parse_mode(mode: Any) -> tuple[str, int | None]:
    """``--mode``: a mode's name, or ``ssp:S`` / ``local:H`` as a shorthand for ``--mode ssp --staleness S`` /
    ``--mode local --local-steps H`` -> ``(mode, S or H or None)``. Raises :class:`LabelError` (``bad mode
    'ssp:x': ...``, ``unknown mode ...``)."""
    text = str(mode)
    if text.partition(":")[0] in NUMBERED_MODES and ":" in text:
        try:
            return parse_label(text)
        except LabelError as e:
            raise LabelError(f"bad mode {mode!r}: {e.reason}", e.reason) from None
    _check_mode(text)
    return text, None


@dataclass(frozen=True)
class DelayComp:
    """Delay compensation (DC-ASGD, Zheng et al. 2017) as a run applies it: a stale gradient ``g``, computed at the
    parameters ``w_read``, is applied as ``g + lambda * g * g * (w_now - w_read)``, ``w_now`` the parameters it lands
    on. ``adaptive`` False (``dc``, DC-ASGD-c): ``lambda`` is :attr:`lam`. ``adaptive`` True (``dca``, DC-ASGD-a):
    ``lambda = lam / sqrt(ms + eps)`` per coordinate, ``ms = decay * ms + (1 - decay) * g * g`` a running mean
    square of the applied gradients kept per variable (updated by each update's gradient before it is used)."""

    lam: float
    adaptive: bool = False
    decay: float = DCA_DECAY
    eps: float = DCA_EPSILON

    @property
    def form(self) -> str:
        """``"dc"`` or ``"dca"``: the name ``--lr-staleness`` and the labels give it."""
        return DC_FORMS[self.adaptive]

    @property
    def spec(self) -> str:
        """The canonical ``--lr-staleness`` value: ``dc:0.04``, ``dca:2.0``."""
        return f"{self.form}:{self.lam!r}"


def parse_dc(value: Any) -> DelayComp | None:
    """``--lr-staleness``'s ``dc``, ``dc:LAMBDA``, ``dca`` or ``dca:LAMBDA0`` -> its :class:`DelayComp` (``None``
    for any other value). Raises :class:`LabelError` for a lambda that is not a finite number >= 0."""
    name, colon, text = str(value).partition(":")
    if name not in DC_FORMS:
        return None
    adaptive = name == "dca"
    default = DEFAULT_DCA_LAMBDA if adaptive else DEFAULT_DC_LAMBDA
    if not colon:
        return DelayComp(default, adaptive)
    try:
        lam = float(text)
    except ValueError:
        lam = -1.0
    if not 0 <= lam < float("inf"):
        letter = "LAMBDA0" if adaptive else "LAMBDA"
        reason = f"{name}:{letter} needs a finite {letter} >= 0 (default {default}), got {text!r}"
        raise LabelError(f"bad {name} {value!r}: {reason}", reason)
    return DelayComp(lam, adaptive)


def split_optimizer(label: str) -> tuple[str, str | None]:
    """``async·adam`` (or ``async@adam``) -> ``("async", "adam")``; a label without one -> ``(label, None)``."""
    text = str(label)
    at = max(text.rfind(mark) for mark in OPTIMIZER_MARKS)
    return (text, None) if at < 0 else (text[:at], text[at + 1:])


def _label_optimizer(spec: str) -> str:
    try:
        return str(parse_optimizer(spec))
    except UsageError as e:
        reason = str(e).replace(f"bad --optimizer {spec!r}: ", "")
        raise LabelError(reason, reason) from None


def canonical_label(label: str, optimizer: str = "sgd") -> str:
    """A comparison label as every table and title shows it: its optimizer canonical and after ``·``
    (``async@momentum`` -> ``async·momentum:0.9``), or ``optimizer`` (the comparison's own) added where it has none
    and is not sgd; a label without either is returned as given."""
    plain, own = split_optimizer(label)
    return plain + suffix(optimizer if own is None else own)


def _split_suffix(label: str) -> tuple[str, str]:
    """``async+dc:0.1`` -> ``("async", "+dc:0.1")``; a label without a suffix -> ``(label, "")``."""
    base, plus, suffix = label.partition("+")
    return base, plus + suffix


def label_options(label: str) -> dict[str, Any]:
    """A comparison label -> the run options it sets: ``sync`` -> ``{"mode": "sync"}``, ``ssp:4`` ->
    ``{"mode": "ssp", "staleness": 4}``, ``local:4`` -> ``{"mode": "local", "local_steps": 4}``. Suffixes set the
    mitigation beside the plain mode: ``+inverse`` sets ``lr_staleness="inverse"``, ``+dc`` / ``+dc:LAMBDA``
    ``lr_staleness="dc:LAMBDA"``, ``+dca`` / ``+dca:LAMBDA0`` ``lr_staleness="dca:LAMBDA0"`` (ssp and async),
    ``+outer`` DiLoCo's outer optimizer (local); an optimizer at the end (``·adam``, ``@momentum:0.9``) sets
    ``optimizer`` (its canonical spec). Raises :class:`LabelError`: ``unknown mode ...`` for a bare unknown name, else
    ``bad comparison label ...``."""
    plain, optimizer = split_optimizer(label)
    base, end = _split_suffix(plain)
    try:
        mode, number = parse_label(base)
        extra = _suffix_options(mode, end)
        if optimizer is not None:
            extra["optimizer"] = _label_optimizer(optimizer)
    except LabelError as e:
        if ":" not in label and not end and optimizer is None:
            raise
        raise LabelError(f"bad comparison label {label!r}: {e.reason}", e.reason) from None
    if number is not None:
        extra["staleness" if mode == "ssp" else "local_steps"] = number
    return {"mode": mode, **extra}


def _suffix_options(mode: str, suffix: str) -> dict[str, Any]:
    if not suffix:
        return {}
    if suffix == OUTER_SUFFIX:
        if mode != "local":
            reason = f"{OUTER_SUFFIX} (DiLoCo's outer optimizer) applies to local:H only"
            raise LabelError(reason, reason)
        return dict(DILOCO_OUTER)
    if suffix == INVERSE_SUFFIX or suffix.startswith(DC_SUFFIX):
        what = "inverse" if suffix == INVERSE_SUFFIX else suffix[1:]
        if mode not in STALE_MODES:
            reason = f"+{what.partition(':')[0]} (--lr-staleness {what}) applies to {' and '.join(STALE_MODES)} only"
            raise LabelError(reason, reason)
        if what != "inverse":
            dc = parse_dc(what)
            if dc is None:
                raise _unknown_suffix(suffix)
            what = dc.spec
        return {"lr_staleness": what}
    raise _unknown_suffix(suffix)


def _unknown_suffix(suffix: str) -> LabelError:
    reason = (f"unknown suffix {suffix!r}: use {INVERSE_SUFFIX}, {DC_SUFFIX}[:LAMBDA], {DC_SUFFIX}a[:LAMBDA0] or "
              f"{OUTER_SUFFIX}")
    return LabelError(reason, reason)


def label_of(mode: str, number: int | None) -> str:
    """The label of a mode: ``ssp:S`` for SSP (``number`` its staleness), ``local:H`` for local SGD (``number``
    its local steps), else the mode's name (inverse of :func:`parse_label`)."""
    return f"{mode}:{number}" if mode in NUMBERED_MODES and number is not None else mode


def label_dir(label: str) -> str:
    """The directory name of a label in a comparison (``ssp:2`` -> ``ssp-2``, ``async·adam`` -> ``async.adam``)."""
    plain, optimizer = split_optimizer(label)
    if optimizer is not None:
        try:
            optimizer = str(parse_optimizer(optimizer))  # async@momentum and async·momentum:0.9: one directory
        except UsageError:
            pass
    return (plain if optimizer is None else f"{plain}.{optimizer}").replace(":", "-")
