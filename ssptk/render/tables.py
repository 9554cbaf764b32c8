"""A comparison table (or any DataFrame) as a notebook and a REPL show it (:class:`ShownTable`: :func:`table_html`,
:func:`table_text`) and as plain text (:func:`format_table`). The terminal's table is
:mod:`ssptk.render.terminal_table`'s, the sentences under a table :mod:`ssptk.render.table_notes`'."""
from __future__ import annotations

import html
from typing import Any

import pandas as pd

from ssptk.analysis.comparison_table import FIGURE_COLUMNS, SPREAD_SUFFIXES
from ssptk.render.cells import FIGURE_LEGEND, aligned, shown_cells

__all__ = ["SHOWN_COLUMNS", "ShownTable", "format_table", "table_html", "table_text"]


class ShownTable(pd.DataFrame):
    """A comparison's table as a notebook or a REPL shows it (:func:`table_html`, :func:`table_text`): the
    figures that matter under short headers, 4 significant digits, ``-`` for a missing one, a range under each
    mean of repeated runs. Everything else is a plain DataFrame (what it derives is one), every column in it."""

    @property
    def _constructor(self) -> Any:
        return pd.DataFrame

    def __repr__(self) -> str:
        return table_text(self)

    def _repr_html_(self) -> str:
        return table_html(self)


#: What a notebook and the report show of a comparison table, in order, under short headers; the other columns
#: (mode and staleness: in the label; wall seconds, workers, ...; the spread columns, shown as ranges) stay in
#: the DataFrame and metrics.csv. Figures no run has are left out.
SHOWN_COLUMNS: dict[str, str] = {
    "label": "run", "rep": "rep", "repeats": "repeats", "steps_per_s": "steps/s", "time_to_target_s": "to target s",
    "steps_to_target": "to target mb", "final_loss": "final loss", "final_accuracy": "accuracy",
    "max_skew": "max skew", "wait_fraction": "wait", "mean_staleness": "staleness", "mb_per_minibatch": "MB/step",
    "link_busy": "net busy", "transfer_share": "xfer", "dc_correction_mean": "dc corr", "status": "status"}
_CELL = "white-space:nowrap;padding:2px 8px;text-align:{align};border-bottom:1px solid #ddd"
_HEAD = "padding:2px 8px;text-align:{align};vertical-align:bottom;background:#f3f3f3;font-weight:600"


def _display(table: pd.DataFrame) -> tuple[list[Any], list[dict[Any, tuple[str, str]]], dict[Any, bool], list[str]]:
    """``(columns, rows, numeric, hidden)``: the :data:`SHOWN_COLUMNS` a table has values in; per row, per
    column, its cell and the range under it (``""`` without repeats); which are numbers; the columns left out.
    A table without a ``label`` column is labelled by its index."""
    if "label" not in table.columns:
        table = pd.DataFrame(table).assign(label=[str(i) for i in table.index])
    cells, numeric = shown_cells(table, ranges_below=True)
    paired = len(table) > 0 and len(cells) == 2 * len(table)
    means = cells.iloc[0::2] if paired else cells
    ranges = cells.iloc[1::2] if paired else None
    columns = [c for c in SHOWN_COLUMNS if c in cells.columns
               and (c == "label" or any(v not in ("-", "") for v in means[c]))]
    rows = [{c: (means[c].iloc[i], "" if ranges is None else ranges[c].iloc[i]) for c in columns}
            for i in range(len(means))]
    spread = {f"{c}{x}" for c in FIGURE_COLUMNS for x in SPREAD_SUFFIXES}
    hidden = [str(c) for c in table.columns if c not in columns and c not in spread
              and c not in ("mode", "bound", "lr_staleness", "diverged", "diverged_on") and table[c].notna().any()]
    return columns, rows, numeric, hidden


#: Columns whose short header a reader cannot guess: a line under an HTML table says what each shown one holds.
_EXPLAINED = ("mb_per_minibatch", "link_busy", "transfer_share", "dc_correction_mean")


def _head(text: str) -> str:
    """A short header in at most two lines at any width: its first two words kept together (``to target`` over
    ``mb``), the rest under them."""
    words = html.escape(text).split()
    return "&nbsp;".join(words[:2]) + "<br>" + " ".join(words[2:]) if len(words) > 2 else " ".join(words)


def table_html(table: pd.DataFrame) -> str:
    """A comparison table (or its repeats' aggregate, or one row per run) as a compact HTML table for a notebook
    or the report: :data:`SHOWN_COLUMNS` under short headers (the column's name on hover), no cell wrapping, a
    repeated figure's ``min–max`` on a line under its mean, then one line naming the columns left out and one per
    network column shown (what MB/step, net busy and xfer hold; every header says what it holds on hover)."""
    columns, rows, numeric, hidden = _display(table)
    align = {c: "right" if numeric.get(c) else "left" for c in columns}
    head = "".join(f'<th title="{html.escape(FIGURE_LEGEND.get(c, str(c)), quote=True)}" '
                   f'style="{_HEAD.format(align=align[c])}">{_head(SHOWN_COLUMNS[c])}</th>' for c in columns)
    body = []
    for row in rows:
        tds = "".join(f'<td style="{_CELL.format(align=align[c])}">{html.escape(row[c][0])}'
                      + (f'<br><span style="color:#777;font-size:85%">{html.escape(row[c][1])}</span>'
                         if row[c][1] else "") + "</td>" for c in columns)
        body.append(f"<tr>{tds}</tr>")
    more = (f'<p style="color:#555;font-size:85%;margin:2px 0">Also in the DataFrame and metrics.csv: '
            f"{html.escape(', '.join(hidden))}.</p>") if hidden else ""
    for line in [FIGURE_LEGEND[c] for c in _EXPLAINED if c in columns]:
        more += f'<p style="color:#555;font-size:85%;margin:2px 0">{html.escape(line)}.</p>'
    return (f'<table class="ssptk-table" style="border-collapse:collapse;font-size:13px">'
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>{more}")


def table_text(table: pd.DataFrame) -> str:
    """:func:`table_html`'s table as aligned text (a REPL's ``repr``), each range on a line under its mean."""
    columns, rows, numeric, hidden = _display(table)
    lines = pd.DataFrame([{c: v[k] for c, v in row.items()} for row in rows for k in (0, 1)
                          if k == 0 or any(v[1] for v in row.values())], columns=columns)
    text = aligned(lines, numeric, columns, SHOWN_COLUMNS)
    return text + (f"\n(also in the DataFrame: {', '.join(hidden)})" if hidden else "")


def format_table(df: pd.DataFrame) -> str:
    """Plain-text table: a header, a rule, one line per row; numbers right-aligned (4 significant
    digits), text left-aligned, missing values as ``-``. A table of repeated runs shows its key
    figures as ``mean [min–max]`` (see :func:`shown_cells`)."""
    if df is None or len(df.columns) == 0:
        return "(no columns)"
    cells, numeric = shown_cells(df)
    return aligned(cells, numeric, list(cells.columns))
