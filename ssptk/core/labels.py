"""The label grammar, its one parser: modes (``sync``, ``ssp``, ``async``, ``allreduce``), labels (``ssp:S``),
the ``+inverse`` suffix of comparison labels, and a label's directory name (``ssp:2`` -> ``ssp-2``).

``--mode``, ``compare``'s labels, ``ssptk.simulate``'s mode, the task command and the simulator all parse
here; a refused label raises :class:`LabelError`, whose ``reason`` lets a caller name the label its own way
without rewriting the message.
"""
from __future__ import annotations

from typing import Any

from ssptk.core.errors import UsageError

__all__ = ["INVERSE_SUFFIX", "MODES", "STALE_MODES", "LabelError", "label_dir", "label_of", "label_options",
           "parse_label", "parse_mode"]

MODES = ("sync", "ssp", "async", "allreduce")
#: A comparison label's suffix for ``--lr-staleness inverse`` (``async+inverse``, ``ssp:4+inverse``).
INVERSE_SUFFIX = "+inverse"
#: The modes whose updates have a staleness: ``--lr-staleness`` (and so ``+inverse``) applies to them only.
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
        staleness = mode[3:].lstrip("-_= ")
        if mode.startswith("ssp") and staleness.isdigit():  # ssp4, ssp-4, ssp_4: a staleness without its colon
            reason = f"did you mean ssp:{int(staleness)}? ({reason}; ssp:S for SSP with staleness S)"
        raise LabelError(f"unknown mode {mode!r}: {reason}", reason)


def parse_label(label: str) -> tuple[str, int | None]:
    """A mode label: ``sync``, ``async``, ``allreduce``, ``ssp`` or ``ssp:S`` -> ``(mode, S or None)``.

    The one parser of labels (``--mode ssp:4``, ``compare sync ssp:2``, ``simulate("ssp:2", ...)``);
    raises :class:`LabelError`."""
    mode, colon, s = str(label).strip().partition(":")
    if not colon:
        _check_mode(mode)
        return mode, None
    if mode != "ssp":
        if mode in MODES:
            raise LabelError(f"bad label {label!r}: only ssp takes a staleness (ssp:S)",
                             "only ssp takes a staleness (ssp:S)")
        _check_mode(mode)
    try:
        staleness = int(s)
    except ValueError:
        staleness = -1
    if staleness < 0:
        reason = "use ssp:S with an integer S >= 0, e.g. ssp:2"
        raise LabelError(f"bad label {label!r}: {reason}", reason)
    return "ssp", staleness


def parse_mode(mode: Any) -> tuple[str, int | None]:
    """``--mode``: a mode's name, or ``ssp:S`` as a shorthand for ``--mode ssp --staleness S`` ->
    ``(mode, S or None)``. Raises :class:`LabelError` (``bad mode 'ssp:x': ...``, ``unknown mode ...``)."""
    text = str(mode)
    if text.partition(":")[0] == "ssp" and ":" in text:
        try:
            return parse_label(text)
        except LabelError as e:
            raise LabelError(f"bad mode {mode!r}: {e.reason}", e.reason) from None
    _check_mode(text)
    return text, None


def label_options(label: str) -> dict[str, Any]:
    """A comparison label -> the run options it sets: ``sync`` -> ``{"mode": "sync"}``, ``ssp:4`` ->
    ``{"mode": "ssp", "staleness": 4}``; a label ending in ``+inverse`` also sets ``lr_staleness="inverse"``
    (the mitigation beside the plain mode). Raises :class:`LabelError`: ``unknown mode ...`` for a bare
    unknown name, else ``bad comparison label ...``."""
    inverse = label.endswith(INVERSE_SUFFIX)
    base = label[:-len(INVERSE_SUFFIX)] if inverse else label
    try:
        mode, staleness = parse_label(base)
    except LabelError as e:
        if ":" not in label and not inverse:
            raise
        raise LabelError(f"bad comparison label {label!r}: {e.reason}", e.reason) from None
    if inverse and mode not in STALE_MODES:
        reason = f"{INVERSE_SUFFIX} (--lr-staleness inverse) applies to {' and '.join(STALE_MODES)} only"
        raise LabelError(f"bad comparison label {label!r}: {reason}", reason)
    return {"mode": mode, **({} if staleness is None else {"staleness": staleness}),
            **({"lr_staleness": "inverse"} if inverse else {})}


def label_of(mode: str, staleness: int | None) -> str:
    """The label of a mode: ``ssp:S`` for SSP, else the mode's name (inverse of :func:`parse_label`)."""
    return f"ssp:{staleness}" if mode == "ssp" else mode


def label_dir(label: str) -> str:
    """The directory name of a label in a comparison (``ssp:2`` -> ``ssp-2``)."""
    return label.replace(":", "-")
