"""A staleness sweep: SSP once per staleness value, as a comparison (``ssptk sweep``, ``%dtrain sweep``,
:func:`ssptk.notebook.widgets.sweep`). The one sweep all front ends share."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ssptk.core.errors import UsageError
from ssptk.core.labels import label_of
from ssptk.experiment.compare import CompareResult, compare

__all__ = ["ssp_only", "staleness_values", "sweep", "sweep_labels"]


def staleness_values(staleness: int | str | Iterable[Any]) -> list[int]:
    """``"0,1,2,4,8"``, ``4`` or ``[4, 0, 2]`` -> the distinct values, sorted; :class:`UsageError` otherwise."""
    items = (staleness.replace(" ", "").split(",") if isinstance(staleness, str)
             else [staleness] if isinstance(staleness, int) else list(staleness))
    try:
        ok = bool(items) and all(not isinstance(s, bool) and int(s) >= 0 and float(s) == int(s) for s in items)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise UsageError(f"staleness values must be integers >= 0, like 0,1,2,4,8; got {staleness!r}")
    return sorted({int(s) for s in items})


def sweep_labels(staleness: int | str | Iterable[Any]) -> list[str]:
    """The comparison labels of a sweep: ``ssp:S`` for each staleness value, in increasing order."""
    return [label_of("ssp", s) for s in staleness_values(staleness)]


def ssp_only(options: dict[str, Any], what: str = "a staleness sweep") -> None:
    """Take ``mode`` out of ``options``: a staleness sweep (``what``) runs mode ssp only, so anything else
    raises :class:`UsageError`."""
    mode = options.pop("mode", "ssp")
    if mode not in ("ssp", None):
        raise UsageError(f"{what} runs mode ssp only, not {mode!r}: drop --mode")


def sweep(staleness: int | str | Iterable[Any] = (0, 1, 2, 4, 8), **compare_options: Any) -> CompareResult:
    """Run mode ssp once per staleness value (labels ``ssp:S``) with :func:`ssptk.experiment.compare.compare`:
    every option is checked first, runs go to ``out/ssp-S/``, a failed run stays in the result, and
    ``out`` gets ``metrics.csv`` and ``report.html``. ``compare_options`` are compare's (``out``,
    ``progress``, ``observer``, ``warm``, ``repeat``, ``runner``) and the common run options."""
    ssp_only(compare_options)
    compare_options.pop("staleness", None)
    return compare(sweep_labels(staleness), **compare_options)
