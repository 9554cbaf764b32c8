"""A sweep: SSP once per staleness value (``ssp:S``), local SGD once per number of local steps between
averages (``local:H``), or any mode once per explicit momentum (``async·momentum:0.9``), as a comparison
(``ssptk sweep --staleness ...`` / ``--local-steps ...`` / ``--momentum ...``, ``%dtrain sweep``,
:func:`ssptk.notebook.staleness_widgets.sweep`). The one sweep all front ends share, and :class:`Knob`: what a sweep, a
slider and a title say about the number they vary."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ssptk.core.errors import UsageError
from ssptk.core.labels import label_of, parse_label, parse_mode, split_optimizer
from ssptk.core.optimizers import parse_optimizer, suffix
from ssptk.experiment.compare import CompareResult, compare

__all__ = ["KNOBS", "MOMENTUM", "Knob", "knob_of", "label_knob", "local_steps_values", "momentum_labels",
           "momentum_values", "ssp_only", "staleness_values", "sweep_labels", "sweep_mode", "sweep_runs"]


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


#: A momentum sweep's knob: the explicit momentum BETA of ``--optimizer momentum:BETA`` (0: sgd), in any mode.
MOMENTUM = Knob("momentum", "optimizer", "\u03b2", 0, "momentum \u03b2", "explicit momentum", "--momentum",
                "0,0.5,0.9", "explicit momentum")


def momentum_values(given: float | str | Iterable[Any]) -> list[float]:
    """``"0,0.5,0.9"``, ``0.9`` or ``[0.9, 0]`` -> the distinct momenta, sorted, each in [0, 1) (0: plain sgd);
    :class:`UsageError` otherwise."""
    items = (given.replace(" ", "").split(",") if isinstance(given, str)
             else [given] if isinstance(given, (int, float)) else list(given))
    try:
        values = sorted({parse_optimizer(f"momentum:{float(v)!r}").beta for v in items if not isinstance(v, bool)})
    except (TypeError, ValueError, UsageError):
        values = []
    if not values:
        raise UsageError(f"momentum values must be numbers in [0, 1), like {MOMENTUM.example}; got {given!r}")
    return values


def momentum_labels(base: str, values: Iterable[float]) -> list[str]:
    """A momentum sweep's labels: ``base`` (a mode's label) with each momentum, 0 as plain sgd (``async``,
    ``async·momentum:0.5``, ...)."""
    return [base + suffix(f"momentum:{v!r}" if v else "sgd") for v in values]


def _momentum_base(options: dict[str, Any]) -> str:
    """Take the mode (``mode``, ``staleness``, ``local_steps``; default async) out of a momentum sweep's ``options``:
    its label."""
    if options.get("optimizer") not in (None, "sgd"):
        raise UsageError("a momentum sweep sets --optimizer momentum:BETA itself: drop --optimizer")
    options.pop("optimizer", None)
    mode, number = parse_mode(options.pop("mode", None) or "async")
    given = options.pop("staleness", None) if mode == "ssp" else options.pop("local_steps", None)
    return label_of(mode, number if number is not None else given)


def knob_of(mode: str | None) -> Knob:
    """The :class:`Knob` of ``mode`` (``ssp`` or ``local``; ``None``: ssp); :class:`UsageError` otherwise."""
    knob = KNOBS.get(mode or "ssp")
    if knob is None:
        raise UsageError(f"only ssp (its staleness S) and local (its local steps H) have a number to sweep or "
                         f"slide over, not mode {mode!r}: use mode ssp or local")
    return knob


def label_knob(labels: Iterable[str]) -> Knob | None:
    """The :class:`Knob` every label varies (``local:1``, ``local:4`` -> local's), ``None`` when the labels are not
    all ``MODE:N`` of one numbered mode; :data:`MOMENTUM` when they are one mode's label with momenta."""
    labels = list(labels)
    bases = {split_optimizer(str(label))[0] for label in labels}
    opts = [split_optimizer(str(label))[1] for label in labels]
    if len(bases) == 1 and any(opts) and all(o is None or parse_optimizer(o).name == "momentum" for o in opts):
        return MOMENTUM
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


def _which(staleness: Any, local_steps: Any, momentum: Any = None) -> tuple[Knob, list[Any]]:
    """The knob and values of a sweep given one of ``staleness``, ``local_steps`` and ``momentum`` (none: SSP's
    default)."""
    if sum(v is not None for v in (staleness, local_steps, momentum)) > 1:
        raise UsageError("a sweep varies one number: give --staleness S,S,... (ssp), --local-steps H,H,... "
                         "(local SGD) or --momentum B,B,... (any mode), not both")
    if momentum is not None:
        return MOMENTUM, momentum_values(momentum)
    if local_steps is not None:
        return KNOBS["local"], local_steps_values(local_steps)
    return KNOBS["ssp"], staleness_values((0, 1, 2, 4, 8) if staleness is None else staleness)


def sweep_labels(staleness: int | str | Iterable[Any] | None = None,
                 local_steps: int | str | Iterable[Any] | None = None, exactly_one: str | None = None,
                 momentum: float | str | Iterable[Any] | None = None, options: dict[str, Any] | None = None
                 ) -> list[str]:
    """The comparison labels of a sweep, in increasing order: ``ssp:S`` for each staleness value, ``local:H`` for
    each number of local steps, or the mode of ``options`` (taken out of them; default async) with each explicit
    ``momentum`` (one of the three; none: ssp at 0,1,2,4,8, unless ``exactly_one`` names the command that needs
    one: ``sweep``)."""
    if exactly_one and sum(v is not None for v in (staleness, local_steps, momentum)) != 1:
        raise UsageError(f"{exactly_one} takes exactly one of --staleness S,S,... (ssp), --local-steps H,H,... "
                         "(local SGD) and --momentum B,B,... (any --mode)")
    knob, values = _which(staleness, local_steps, momentum)
    if knob is MOMENTUM:
        return momentum_labels(_momentum_base({} if options is None else options), values)
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


def sweep_runs(staleness: int | str | Iterable[Any] | None = None,
               local_steps: int | str | Iterable[Any] | None = None,
               momentum: float | str | Iterable[Any] | None = None, **compare_options: Any) -> CompareResult:
    """Run mode ssp once per staleness value (labels ``ssp:S``), or mode local once per number of local steps
    between averages (``local_steps=[1, 2, 4, 8]``: labels ``local:H``), with
    :func:`ssptk.experiment.compare.compare`: every option is checked first, runs go to ``out/ssp-S/`` (or
    ``out/local-H/``), a failed run stays in the result, and ``out`` gets ``metrics.csv`` and ``report.html``.
    Give one of ``staleness`` and ``local_steps`` (neither: ssp at 0,1,2,4,8). ``compare_options`` are compare's
    (``out``, ``progress``, ``observer``, ``warm``, ``repeat``, ``runner``) and the common run options
    (``outer_lr``, ``outer_momentum`` for local). ``momentum=[0, 0.5, 0.9]``: the mode of ``compare_options``
    (``mode``, default async; ``staleness`` or ``local_steps`` with it) once per explicit momentum, labels
    ``async``, ``async·momentum:0.5``, ... (0: plain sgd)."""
    if momentum is not None:
        if staleness is not None or local_steps is not None:
            _which(staleness, local_steps, momentum)  # raises: one number at a time
        return compare(sweep_labels(momentum=momentum, options=compare_options), **compare_options)
    knob, values = _which(staleness, local_steps)
    sweep_mode(compare_options, knob, "a staleness sweep" if knob.mode == "ssp" else "a local-steps sweep")
    compare_options.pop(knob.option, None)
    return compare([label_of(knob.mode, v) for v in values], **compare_options)
