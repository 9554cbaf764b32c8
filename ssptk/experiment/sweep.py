"""A sweep: SSP once per staleness value (``ssp:S``), or local SGD once per number of local steps between
averages (``local:H``), as a comparison (``ssptk sweep --staleness ...`` / ``--local-steps ...``, ``%dtrain sweep``,
:func:`ssptk.notebook.widgets.sweep`). The one sweep all front ends share, and :class:`Knob`: what a sweep, a
slider and a title say about the number they vary."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ssptk.core.errors import UsageError
from ssptk.core.labels import label_of, parse_label
from ssptk.experiment.compare import CompareResult, compare

__all__ = ["KNOBS", "Knob", "knob_of", "label_knob", "local_steps_values", "ssp_only", "staleness_values",
           "sweep_labels", "sweep_mode", "sweep_runs"]


@dataclass(frozen=True)
class Knob:
    """The number a sweep or a slider varies: SSP's staleness bound S or local SGD's local steps H."""

    #: The mode it belongs to (``ssp``, ``local``) and its run option (``staleness``, ``local_steps``).
    mode: str
    option: str
    #: Its letter in short labels (``S=2``, ``H=4``) and its least value.
    letter: str
    least: int
    #: The slider's text, and what it is called in a sentence (``predicting every staleness``).
    slider: str
    noun: str
    #: The CLI flag that lists its values and an example list.
    flag: str
    example: str
    #: What the mode is, for titles.
    title: str


KNOBS = {
    "ssp": Knob("ssp", "staleness", "S", 0, "staleness S", "staleness", "--staleness", "0,1,2,4,8", "ssp"),
    "local": Knob("local", "local_steps", "H", 1, "local steps H", "H (local steps per average)", "--local-steps",
                  "1,2,4,8", "local SGD, averaging every H local steps"),
}


def knob_of(mode: str | None) -> Knob:
    """The :class:`Knob` of ``mode`` (``ssp`` or ``local``; ``None``: ssp); :class:`UsageError` otherwise."""
    knob = KNOBS.get(mode or "ssp")
    if knob is None:
        raise UsageError(f"only ssp (its staleness S) and local (its local steps H) have a number to sweep or "
                         f"slide over, not mode {mode!r}: use mode ssp or local")
    return knob


def label_knob(labels: Iterable[str]) -> Knob | None:
    """The :class:`Knob` every label varies (``local:1``, ``local:4`` -> local's), ``None`` when the labels are not
    all ``MODE:N`` of one numbered mode."""
    modes = set()
    for label in labels:
        try:
            mode, number = parse_label(str(label))
        except UsageError:
            return None
        if number is None or mode not in KNOBS:
            return None
        modes.add(mode)
    return KNOBS[modes.pop()] if len(modes) == 1 else None


def _values(given: int | str | Iterable[Any], knob: Knob) -> list[int]:
    items = (given.replace(" ", "").split(",") if isinstance(given, str)
             else [given] if isinstance(given, int) else list(given))
    try:
        ok = bool(items) and all(not isinstance(v, bool) and int(v) >= knob.least and float(v) == int(v)
                                 for v in items)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        what = "staleness values" if knob.mode == "ssp" else "local steps H"
        raise UsageError(f"{what} must be integers >= {knob.least}, like {knob.example}; got {given!r}")
    return sorted({int(v) for v in items})


def staleness_values(staleness: int | str | Iterable[Any]) -> list[int]:
    """``"0,1,2,4,8"``, ``4`` or ``[4, 0, 2]`` -> the distinct values, sorted; :class:`UsageError` otherwise."""
    return _values(staleness, KNOBS["ssp"])


def local_steps_values(local_steps: int | str | Iterable[Any]) -> list[int]:
    """``"1,2,4,8"``, ``4`` or ``[8, 1]`` -> the distinct local steps H (each >= 1), sorted; :class:`UsageError`
    otherwise."""
    return _values(local_steps, KNOBS["local"])


def _which(staleness: Any, local_steps: Any) -> tuple[Knob, list[int]]:
    """The knob and values of a sweep given one of ``staleness`` and ``local_steps`` (neither: SSP's default)."""
    if staleness is not None and local_steps is not None:
        raise UsageError("a sweep varies one number: give --staleness S,S,... (ssp) or --local-steps H,H,... "
                         "(local SGD), not both")
    if local_steps is not None:
        return KNOBS["local"], local_steps_values(local_steps)
    return KNOBS["ssp"], staleness_values((0, 1, 2, 4, 8) if staleness is None else staleness)


def sweep_labels(staleness: int | str | Iterable[Any] | None = None,
                 local_steps: int | str | Iterable[Any] | None = None, exactly_one: str | None = None) -> list[str]:
    """The comparison labels of a sweep, in increasing order: ``ssp:S`` for each staleness value, or ``local:H``
    for each number of local steps (one of the two; neither: ssp at 0,1,2,4,8, unless ``exactly_one`` names the
    command that needs one: ``sweep``)."""
    if exactly_one and (staleness is None) == (local_steps is None):
        raise UsageError(f"{exactly_one} takes exactly one of --staleness S,S,... (ssp) and --local-steps H,H,... "
                         "(local SGD)")
    knob, values = _which(staleness, local_steps)
    return [label_of(knob.mode, v) for v in values]


def sweep_mode(options: dict[str, Any], knob: Knob, what: str = "a sweep") -> None:
    """Take ``mode`` out of ``options``: a sweep (``what``) over ``knob`` runs its mode only, so anything else
    raises :class:`UsageError`."""
    mode = options.pop("mode", knob.mode)
    if mode not in (knob.mode, None):
        raise UsageError(f"{what} runs mode {knob.mode} only, not {mode!r}: drop --mode")


def ssp_only(options: dict[str, Any], what: str = "a staleness sweep") -> None:
    """Take ``mode`` out of ``options``: a staleness sweep (``what``) runs mode ssp only, so anything else
    raises :class:`UsageError`."""
    sweep_mode(options, KNOBS["ssp"], what)


def sweep_runs(staleness: int | str | Iterable[Any] | None = None, local_steps: int | str | Iterable[Any] | None = None,
          **compare_options: Any) -> CompareResult:
    """Run mode ssp once per staleness value (labels ``ssp:S``), or mode local once per number of local steps
    between averages (``local_steps=[1, 2, 4, 8]``: labels ``local:H``), with
    :func:`ssptk.experiment.compare.compare`: every option is checked first, runs go to ``out/ssp-S/`` (or
    ``out/local-H/``), a failed run stays in the result, and ``out`` gets ``metrics.csv`` and ``report.html``.
    Give one of ``staleness`` and ``local_steps`` (neither: ssp at 0,1,2,4,8). ``compare_options`` are compare's
    (``out``, ``progress``, ``observer``, ``warm``, ``repeat``, ``runner``) and the common run options
    (``outer_lr``, ``outer_momentum`` for local)."""
    knob, values = _which(staleness, local_steps)
    sweep_mode(compare_options, knob, "a staleness sweep" if knob.mode == "ssp" else "a local-steps sweep")
    compare_options.pop(knob.option, None)
    return compare([label_of(knob.mode, v) for v in values], **compare_options)
