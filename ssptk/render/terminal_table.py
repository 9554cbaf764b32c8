"""The comparison table in a terminal (:func:`terminal_table`: the columns that fit, a legend of what they hold) and
everything a terminal shows of a comparison (:func:`terminal_text`), the predicted-and-measured table included."""
from __future__ import annotations

import textwrap

import pandas as pd

from ssptk.analysis.verdict import Verdict, verdict_of
from ssptk.render.cells import FIGURE_LEGEND, aligned, shown_cells
from ssptk.render.table_notes import cores_phrase, takeaway_line, target_lines
from ssptk.render.verdict_words import verdict_lines

__all__ = ["TERMINAL_COLUMNS", "predicted_text", "terminal_table", "terminal_text", "unmeasured_lines"]


#: The comparison table in a terminal: column -> short header, in order. When the table is wider than the
#: terminal, columns go in the order of :data:`_DROP_ORDER` (the repeats' count first: the legend says it; the
#: outcomes, accuracy and minibatches to target, last); metrics.csv keeps every column.
TERMINAL_COLUMNS: dict[str, str] = {
    "label": "run", "repeats": "repeats", "steps_per_s": "steps/s", "time_to_target_s": "to target s",
    "steps_to_target": "to target mb", "final_loss": "final loss", "final_accuracy": "accuracy",
    "max_skew": "max skew", "wait_fraction": "wait", "mean_staleness": "staleness", "mb_per_minibatch": "MB/step",
    "link_busy": "net busy", "transfer_share": "xfer", "dc_correction_mean": "dc corr", "status": "status",
}
_DROP_ORDER = ("repeats", "transfer_share", "mb_per_minibatch", "mean_staleness", "wait_fraction", "link_busy",
               "dc_correction_mean", "final_accuracy", "steps_to_target")
def terminal_table(table: pd.DataFrame, width: int = 100) -> str:
    """The comparison table for a terminal: the columns of :data:`TERMINAL_COLUMNS` under short headers,
    dropping the least telling ones until it fits ``width``, then a legend of what the figures mean. A table of
    repeated runs shows each key figure's ``[min–max]`` on a line under its mean, so that it has the columns of
    a single run's table in the same width."""
    cells, numeric = shown_cells(table, ranges_below=True)
    columns = [c for c in TERMINAL_COLUMNS if c in cells.columns]
    for c in ("final_accuracy", "link_busy", "mb_per_minibatch", "transfer_share",
              "dc_correction_mean"):  # a column no run has says nothing
        if c in columns and (c not in table.columns or table[c].isna().all()):
            columns.remove(c)
    text = aligned(cells, numeric, columns, TERMINAL_COLUMNS)
    for c in _DROP_ORDER:
        if max(len(line) for line in text.splitlines()) <= width:
            break
        if c in columns:
            columns.remove(c)
            text = aligned(cells, numeric, columns, TERMINAL_COLUMNS)
    legend = [line for c, line in FIGURE_LEGEND.items() if c in columns]
    if len(cells) > len(table):
        counts = " or ".join(str(int(n)) for n in sorted(set(table["repeats"].dropna()))) \
            if "repeats" in table.columns else ""
        legend.append(f"min\u2013max: under a mean, its range over the {counts + ' ' if counts else ''}repeats")
    legend.append(f"Every figure ({len(cells.columns)} columns): metrics.csv and the report.")
    return "\n".join([text, "", *legend, *unmeasured_lines(table)])


def unmeasured_lines(table: pd.DataFrame) -> list[str]:
    """One line per reason a run's traffic was not measured (the table's ``traffic_not_measured``: label -> why)."""
    whys: dict[str, list[str]] = {}
    for label, why in (table.attrs.get("traffic_not_measured") or {}).items():
        whys.setdefault(why, []).append(label)
    return [f"Traffic not measured ({', '.join(labels)}): {why}." for why, labels in whys.items()]


def terminal_text(table: pd.DataFrame, width: int = 100, predicted: pd.DataFrame | None = None,
                  verdict: Verdict | None = None) -> str:
    """What a terminal shows of a comparison: :func:`terminal_table`, then :func:`takeaway_line`,
    :func:`target_lines` and the verdict in words (:func:`ssptk.render.verdict_words.verdict_lines`; ``verdict``: the
    comparison's, else the one ``table`` carries), wrapped at ``width``; with ``predicted`` (``compare --predict``)
    its table of predicted against measured figures under them."""
    verdict = verdict_of(table) if verdict is None else verdict
    lines = [takeaway_line(table), *target_lines(table, verdict), *verdict_lines(verdict)]
    out = [terminal_table(table, width), "", *(textwrap.fill(line, width) for line in lines if line)]
    if predicted is not None:
        out += ["", predicted_text(predicted, width)]
    return "\n".join(out)


#: Short headers of the predicted-and-measured table on a terminal.
_PREDICTED_HEADERS = {"label": "label", "steps_to_target": "mb to target", "steps_to_target_predicted": "predicted",
                      "predicted_over_measured": "pred/meas", "loss_gap": "loss gap", "time_to_target_s": "s to target",
                      "time_to_target_s_predicted": "predicted", "diverged": "diverged",
                      "diverged_predicted": "predicted"}


def predicted_text(table: pd.DataFrame, width: int = 100) -> str:
    """The predicted-and-measured table (:func:`ssptk.analysis.predicted_table`) for a terminal."""
    from ssptk.render.predicted_overlay import predicted_lines

    columns = list(_PREDICTED_HEADERS)
    shown = table[columns].copy()
    shown["predicted_over_measured"] = shown["predicted_over_measured"].round(2)
    shown["loss_gap"] = [None if pd.isna(v) else f"{100 * v:.0f}%" for v in shown["loss_gap"]]
    for col in ("diverged", "diverged_predicted"):
        shown[col] = ["yes" if v is True else "" for v in shown[col]]
    cells, numeric = shown_cells(shown)
    body = aligned(cells, numeric, columns, _PREDICTED_HEADERS)
    return "\n".join([f"predicted (the simulator's replay{cores_phrase(table.attrs.get('predicted_cores'))}) and "
                      "measured:", body, "",
                      *(textwrap.fill(line, width) for line in predicted_lines(table))])
