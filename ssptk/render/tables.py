"""Tables as text: a comparison table (or any DataFrame) as aligned plain text, and the cells as shown
in text and HTML (4 significant digits, ``-`` for missing values, ``mean [min–max]`` for repeats)."""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from ssptk.analysis.compare import FIGURE_COLUMNS, SPREAD_SUFFIXES

__all__ = ["KEY_FIGURES", "format_table", "shown_cells"]

#: Figures that tables of repeated runs show as ``mean [min–max]`` (the others show the mean).
KEY_FIGURES: tuple[str, ...] = ("steps_per_s", "wall_s", "final_loss", "max_skew", "wait_fraction")


def _fmt(value: Any) -> str:
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


def _with_range(mean: Any, lo: Any, hi: Any) -> str:
    shown = _fmt(mean)
    return shown if shown == "-" else f"{shown} [{_fmt(lo)}\u2013{_fmt(hi)}]"


def shown_cells(df: pd.DataFrame) -> tuple[pd.DataFrame, dict[Any, bool]]:
    """The cells of a table as shown (strings) and which columns are right-aligned numbers.

    A table of repeated runs (:func:`ssptk.analysis.aggregate_repeats`: ``<figure>_min`` and
    ``_max`` columns) shows the :data:`KEY_FIGURES` as ``mean [min–max]`` and the other figures as
    the mean; the spread columns themselves stay in the table (and metrics.csv) but are not shown.
    """
    spread = [c for c in FIGURE_COLUMNS if f"{c}_min" in df.columns and f"{c}_max" in df.columns]
    hidden = {f"{c}{suffix}" for c in spread for suffix in SPREAD_SUFFIXES}
    columns = [c for c in df.columns if c not in hidden]
    cells: dict[Any, list[str]] = {}
    for c in columns:
        if c in spread and c in KEY_FIGURES:
            cells[c] = [_with_range(m, lo, hi) for m, lo, hi in
                        zip(df[c].tolist(), df[f"{c}_min"].tolist(), df[f"{c}_max"].tolist())]
        else:
            cells[c] = [_fmt(v) for v in df[c].tolist()]
    numeric = {c: c in spread or (pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c]))
               for c in columns}
    return pd.DataFrame(cells, columns=columns), numeric


def format_table(df: pd.DataFrame) -> str:
    """Plain-text table: a header, a rule, one line per row; numbers right-aligned (4 significant
    digits), text left-aligned, missing values as ``-``. A table of repeated runs shows its key
    figures as ``mean [min–max]`` (see :func:`shown_cells`)."""
    if df is None or len(df.columns) == 0:
        return "(no columns)"
    cells, numeric = shown_cells(df)
    columns = list(cells.columns)
    widths = {c: max([len(str(c))] + [len(v) for v in cells[c]]) for c in columns}

    def line(values: Mapping[Any, str]) -> str:
        return "  ".join(values[c].rjust(widths[c]) if numeric[c] else values[c].ljust(widths[c])
                         for c in columns).rstrip()

    out = [line({c: str(c) for c in columns}), "  ".join("-" * widths[c] for c in columns)]
    out += [line(row) for row in cells.to_dict("records")]
    if not len(df):
        out.append("(no rows)")
    return "\n".join(out)
