"""Cells as the tables show them (:mod:`ssptk.render.tables`, :mod:`ssptk.render.terminal_table`, the report): 4
significant digits, ``-`` for a missing value, shares as percentages, ``mean [min–max]`` for repeats, megabytes to at
most 3 decimals, a status that says ``diverged``; rows of cells aligned as text (:func:`aligned`), and what each
figure holds (:data:`FIGURE_LEGEND`)."""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from ssptk.analysis.comparison_table import FIGURE_COLUMNS, SPREAD_SUFFIXES

__all__ = ["FIGURE_LEGEND", "KEY_FIGURES", "aligned", "cell", "megabytes", "missing", "percent", "shown_cells",
           "small_share"]

#: Shares shown as percentages.
_PERCENT = ("wait_fraction", "link_busy", "transfer_share")
#: Shares that may be tiny, shown to 2 significant digits (:func:`small_share`): delay compensation's correction.
_SMALL_SHARES = ("dc_correction_mean", "dc_correction_median", "dc_correction_max")
#: Figures that tables of repeated runs show as ``mean [min–max]`` (the others show the mean).
KEY_FIGURES: tuple[str, ...] = ("steps_per_s", "wall_s", "final_loss", "final_accuracy", "time_to_target_s",
                                 "steps_to_target", "max_skew", "wait_fraction")


def cell(value: Any) -> str:
    """A value as a cell: 4 significant digits, ``-`` when missing."""
    if value is None or value is pd.NA:
        return "-"
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        if math.isnan(value):
            return "-"
        return f"{value:.4g}" if value != 0 else "0"
    return str(value)


def missing(value: Any) -> bool:
    """``None``, ``pd.NA`` or NaN."""
    return value is None or value is pd.NA or (isinstance(value, (float, np.floating)) and math.isnan(value))


def megabytes(value: Any) -> str:
    """Megabytes per minibatch as the tables show them: at most 3 decimals and 4 significant digits (``0.681``,
    ``0.02``, ``12.35``), ``<0.001`` below a kilobyte, ``-`` when missing; metrics.csv keeps every digit."""
    if missing(value):
        return "-"
    v = float(value)
    if v == 0:
        return "0"
    if abs(v) < 0.0005:
        return "<0.001"
    return f"{v:.4g}" if abs(v) >= 10 else f"{v:.3f}".rstrip("0").rstrip(".")


def percent(value: Any) -> str:
    """A share (0.143) as every table and the sentences under them show it: ``14%`` (``0.4%`` below 10%, ``0%``
    for none), ``-`` when missing. The wait fraction is a share in ``metrics.csv`` and a percentage in words."""
    if missing(value):
        return "-"
    p = 100.0 * float(value)
    return f"{p:.0f}%" if p == 0 or round(p, 1) >= 10 else f"{p:.1f}%"


def small_share(value: Any) -> str:
    """A share that may be far below 1% (delay compensation's correction against the gradient) as the tables and
    the sentences under them show it: ``12%``, ``1.5%``, ``8%``, ``0.021%``, ``<0.001%``, ``0%`` for none, ``-`` when
    missing."""
    if missing(value):
        return "-"
    p = 100.0 * float(value)
    if p == 0:
        return "0%"
    if p >= 10:
        return f"{p:.0f}%"
    return f"{p:.2g}%" if p >= 0.001 else "<0.001%"


def _range(lo: Any, hi: Any, fmt: Any = cell) -> str:
    return f"[{fmt(lo)}\u2013{fmt(hi)}]"


def _range_end(value: Any) -> str:
    """An end of a range under its mean: 3 significant digits (a spread, not a measurement), the whole integer
    part kept (``0.0689``, ``636``, ``1234``)."""
    if isinstance(value, (float, np.floating)) and not math.isnan(value) and value != 0:
        return f"{value:.{max(3, len(str(int(abs(value)))))}g}"
    return cell(value)


def _short_range(lo: Any, hi: Any, share: bool) -> str:
    """``150–301``, ``0.0689–0.0751``, ``13–15%``: a range on its own line under its mean, one unit, 3 significant
    digits (a terminal's table of repeats keeps a single run's columns within 100 characters)."""
    if missing(lo) or missing(hi):
        return ""
    if share:
        return f"{percent(lo).rstrip('%')}\u2013{percent(hi)}"
    return f"{_range_end(lo)}\u2013{_range_end(hi)}"


def _status_cell(status: Any, diverged: Any) -> str:
    """A run's status as a table shows it: ``diverged`` for one that finished with a diverged loss, on the training
    or the held-out loss (:mod:`ssptk.core.divergence`; the line under the table names the rule)."""
    if not (diverged is True or diverged == 1):
        return cell(status)
    return "diverged" if status == "ok" else f"{cell(status)}, diverged"


def shown_cells(df: pd.DataFrame, ranges_below: bool = False) -> tuple[pd.DataFrame, dict[Any, bool]]:
    """The cells of a table as shown (strings) and which columns are right-aligned numbers.

    A table of repeated runs (:func:`ssptk.analysis.aggregate_repeats`: ``<figure>_min`` and
    ``_max`` columns) shows the :data:`KEY_FIGURES` as ``mean [min–max]`` and the other figures as
    the mean; the spread columns themselves stay in the table (and metrics.csv) but are not shown.
    ``ranges_below``: each ``[min–max]`` goes on a line of its own under its mean (a terminal's narrow table).
    The wait fraction shows as a percentage (:func:`percent`).
    """
    spread = [c for c in FIGURE_COLUMNS if f"{c}_min" in df.columns and f"{c}_max" in df.columns]
    hidden = {f"{c}{suffix}" for c in spread for suffix in SPREAD_SUFFIXES}
    columns = [c for c in df.columns if c not in hidden]
    cells: dict[Any, list[str]] = {}
    below: dict[Any, list[str]] = {c: [""] * len(df) for c in columns}
    for c in columns:
        fmt = percent if c in _PERCENT else cell
        if c in spread and c in KEY_FIGURES:
            means = [fmt(m) for m in df[c].tolist()]
            bounds = list(zip(df[f"{c}_min"].tolist(), df[f"{c}_max"].tolist()))
            if ranges_below:
                cells[c] = means
                below[c] = ["" if m == "-" else _short_range(lo, hi, fmt is percent)
                            for m, (lo, hi) in zip(means, bounds)]
            else:
                cells[c] = [m if m == "-" else f"{m} {_range(lo, hi, fmt)}" for m, (lo, hi) in zip(means, bounds)]
        elif c in _PERCENT:
            cells[c] = [percent(v) for v in df[c].tolist()]
        elif c in _SMALL_SHARES:
            cells[c] = [small_share(v) for v in df[c].tolist()]
        elif c == "mb_per_minibatch":
            cells[c] = [megabytes(v) for v in df[c].tolist()]
        elif c == "diverged":
            cells[c] = ["yes" if v is True or v == 1 else "" for v in df[c].tolist()]
        elif c == "status" and "diverged" in df.columns:  # ok, but its model is no trained one
            cells[c] = [_status_cell(v, d) for v, d in zip(df[c].tolist(), df["diverged"].tolist())]
        elif c == "label" and "diverged" in df.columns:  # where the eye goes first
            cells[c] = [f"{cell(v)} (DIVERGED)" if d is True or d == 1 else cell(v)
                        for v, d in zip(df[c].tolist(), df["diverged"].tolist())]
        else:
            cells[c] = [cell(v) for v in df[c].tolist()]
    numeric = {c: c in spread or (c != "diverged" and pd.api.types.is_numeric_dtype(df[c])
                                  and not pd.api.types.is_bool_dtype(df[c])) for c in columns}
    shown = pd.DataFrame(cells, columns=columns)
    if ranges_below and spread:  # row i's means, then its ranges
        shown = pd.concat([shown, pd.DataFrame(below, columns=columns)]).sort_index(kind="stable")
        shown = shown.reset_index(drop=True)
    return shown, numeric


#: What each figure of a comparison table holds, in a line under a table that shows it.
FIGURE_LEGEND = {
    "steps_per_s": "steps/s: minibatches per second, from the start barrier to the last step",
    "time_to_target_s": "to target s / mb: seconds and minibatches until the loss first reached the target below",
    "max_skew": "max skew: most minus least completed steps (SSP: at most S+1)",
    "wait_fraction": "wait: share of worker time blocked by the mode (sync: the slowest; ssp: the bound; "
                     "local: averages)",
    "mean_staleness": "staleness: mean updates applied between a step's read of the parameters and its own",
    "mb_per_minibatch": "MB/step: megabytes the workers sent and received per minibatch, measured on their links",
    "link_busy": "net busy: the busiest shaped link's traffic over the run, as a share of its --network rate",
    "transfer_share": "xfer: share of a worker's step its tensors were on the wire (sync, ssp, async: timed on "
                      "every 10th step; local, allreduce: its bytes at the link's rate, an estimate and a floor)",
    "dc_correction_mean": "dc corr: delay compensation's correction |lambda g*g*(w_now - w_read)| as a share of "
                          "the gradient |g|, the mean over the run's updates (--lr-staleness dc or dca; - without it)",
}


def aligned(cells: pd.DataFrame, numeric: Mapping[Any, bool], columns: list[Any],
             headers: Mapping[Any, str] | None = None) -> str:
    """Rows of ``cells`` (strings) under ``headers``: numbers right-aligned, text left-aligned."""
    names = {c: str((headers or {}).get(c, c)) for c in columns}
    widths = {c: max([len(names[c])] + [len(v) for v in cells[c]]) for c in columns}

    def line(values: Mapping[Any, str]) -> str:
        return "  ".join(values[c].rjust(widths[c]) if numeric[c] else values[c].ljust(widths[c])
                         for c in columns).rstrip()

    out = [line(names), "  ".join("-" * widths[c] for c in columns)]
    out += [line(row) for row in cells.to_dict("records")]
    if not len(cells):
        out.append("(no rows)")
    return "\n".join(out)
