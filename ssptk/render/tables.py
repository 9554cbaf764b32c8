"""Tables as text: a comparison table (or any DataFrame) as aligned plain text, and the cells as shown
in text and HTML (4 significant digits, ``-`` for missing values, ``mean [min–max]`` for repeats)."""
from __future__ import annotations

import html
import textwrap
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from ssptk.analysis.compare import FIGURE_COLUMNS, SPREAD_SUFFIXES, TARGET_FACTOR
from ssptk.analysis.verdict import Verdict, verdict_of
from ssptk.render.cells import KEY_FIGURES, cell, missing, percent, shown_cells
from ssptk.render.text import LOCAL_STALENESS, evaluated_every
from ssptk.render.verdict import diverged_line, first_phrase, verdict_lines
from ssptk.rundir import StoredOptions

__all__ = ["KEY_FIGURES", "SHOWN_COLUMNS", "ShownTable", "TERMINAL_COLUMNS", "format_table",
           "has_local", "local_staleness_note", "lr_lines", "percent", "shown_cells", "table_html", "table_text",
           "takeaway_line", "target_lines", "terminal_table", "terminal_text"]


def has_local(table: pd.DataFrame) -> bool:
    """Whether any row of a comparison table is a local SGD run (mode ``local``, or a ``local:H`` label)."""
    if "mode" in table.columns and (table["mode"] == "local").any():
        return True
    return "label" in table.columns and bool(table["label"].astype(str).str.startswith("local").any())


def local_staleness_note(local: bool) -> str | None:
    """The line under a table that shows local SGD runs: what their staleness counts (``None`` without any)."""
    return (f"staleness of local:H runs: {LOCAL_STALENESS} (0 to H-1), not updates applied since the read"
            if local else None)

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
              and c not in ("mode", "staleness", "lr_staleness", "diverged", "diverged_on") and table[c].notna().any()]
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
    head = "".join(f'<th title="{html.escape(_LEGEND.get(c, str(c)), quote=True)}" '
                   f'style="{_HEAD.format(align=align[c])}">{_head(SHOWN_COLUMNS[c])}</th>' for c in columns)
    body = []
    for row in rows:
        tds = "".join(f'<td style="{_CELL.format(align=align[c])}">{html.escape(row[c][0])}'
                      + (f'<br><span style="color:#777;font-size:85%">{html.escape(row[c][1])}</span>'
                         if row[c][1] else "") + "</td>" for c in columns)
        body.append(f"<tr>{tds}</tr>")
    more = (f'<p style="color:#555;font-size:85%;margin:2px 0">Also in the DataFrame and metrics.csv: '
            f"{html.escape(', '.join(hidden))}.</p>") if hidden else ""
    note = local_staleness_note("mean_staleness" in columns and has_local(table))
    for line in [_LEGEND[c] for c in _EXPLAINED if c in columns] + ([note] if note else []):
        more += f'<p style="color:#555;font-size:85%;margin:2px 0">{html.escape(line)}.</p>'
    return (f'<table class="ssptk-table" style="border-collapse:collapse;font-size:13px">'
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>{more}")


def table_text(table: pd.DataFrame) -> str:
    """:func:`table_html`'s table as aligned text (a REPL's ``repr``), each range on a line under its mean."""
    columns, rows, numeric, hidden = _display(table)
    lines = pd.DataFrame([{c: v[k] for c, v in row.items()} for row in rows for k in (0, 1)
                          if k == 0 or any(v[1] for v in row.values())], columns=columns)
    text = _aligned(lines, numeric, columns, SHOWN_COLUMNS)
    note = local_staleness_note("mean_staleness" in columns and has_local(table))
    text += f"\n(also in the DataFrame: {', '.join(hidden)})" if hidden else ""
    return text + (f"\n({note})" if note else "")


def format_table(df: pd.DataFrame) -> str:
    """Plain-text table: a header, a rule, one line per row; numbers right-aligned (4 significant
    digits), text left-aligned, missing values as ``-``. A table of repeated runs shows its key
    figures as ``mean [min–max]`` (see :func:`shown_cells`)."""
    if df is None or len(df.columns) == 0:
        return "(no columns)"
    cells, numeric = shown_cells(df)
    return _aligned(cells, numeric, list(cells.columns))


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
_LEGEND = {
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
    text = _aligned(cells, numeric, columns, TERMINAL_COLUMNS)
    for c in _DROP_ORDER:
        if max(len(line) for line in text.splitlines()) <= width:
            break
        if c in columns:
            columns.remove(c)
            text = _aligned(cells, numeric, columns, TERMINAL_COLUMNS)
    legend = [line for c, line in _LEGEND.items() if c in columns]
    note = local_staleness_note("mean_staleness" in columns and has_local(table))
    legend += [note] if note else []
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
    :func:`target_lines` and the verdict in words (:func:`ssptk.render.verdict.verdict_lines`; ``verdict``: the
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
    body = _aligned(cells, numeric, columns, _PREDICTED_HEADERS)
    return "\n".join([f"predicted (the simulator's replay{cores_phrase(table.attrs.get('predicted_cores'))}) and "
                      "measured:", body, "",
                      *(textwrap.fill(line, width) for line in predicted_lines(table))])


def _aligned(cells: pd.DataFrame, numeric: Mapping[Any, bool], columns: list[Any],
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


def takeaway_line(table: pd.DataFrame) -> str | None:
    """One line on what differs between the runs: steps/s (against sync's, where there is one), the share
    of worker time spent waiting and the mean staleness, per label; ``None`` for fewer than two runs."""
    rows = [r for r in table.to_dict("records") if r.get("status") == "ok"]
    if len(rows) < 2 or "steps_per_s" not in table.columns:
        return None
    base = next((r for r in rows if r.get("mode") == "sync"), rows[0])

    def speed(r: Mapping[Any, Any]) -> str:
        v, b = r.get("steps_per_s"), base.get("steps_per_s")
        shown = f"{r['label']} {cell(v)}"
        return shown if r is base or not (v and b) else f"{shown} ({v / b:.3g}x {base['label']})"

    def num(v: Any) -> str:
        return "-" if missing(v) else f"{v:.2g}"

    return ("What differs: steps/s " + ", ".join(speed(r) for r in rows)
            + "; time spent waiting " + ", ".join(f"{r['label']} {percent(r.get('wait_fraction'))}" for r in rows)
            + "; mean staleness " + ", ".join(f"{r['label']} {num(r.get('mean_staleness'))}" for r in rows)
            + (f" (local:H: {LOCAL_STALENESS})" if any(r.get("mode") == "local" for r in rows) else "") + ".")


def cores_phrase(cores: Any) -> str:
    """``; the workers sharing 2 cores (--cores)``: the cores the predictions' workers shared under a shaped network
    (``None``: each its own machine); nothing where no prediction's network made them matter."""
    said = ["each worker on a machine of its own" if c is None else f"the workers sharing {float(c):g} cores"
            for c in cores or ()]
    return f"; {' or '.join(said)} (--cores)" if said else ""


def target_lines(table: pd.DataFrame, verdict: Verdict | None = None) -> list[str]:
    """One line on the loss target (which, how it was chosen, who reached it first: the comparison's ``verdict``, else
    the one ``table`` carries) and, when some runs diverged, one naming them and the rule each broke: what the
    report and the CLI print under the table."""
    verdict = verdict_of(table) if verdict is None else verdict
    lines = []
    if table.attrs.get("predicted"):
        lines.append("PREDICTED: no cluster ran; every run is the simulator's schedule replayed with the model's real "
                     "gradients, its steps/s and seconds from a simulated clock (see each summary's overhead_ms)"
                     f"{cores_phrase(table.attrs.get('predicted_cores'))}.")
    target = verdict.target
    held_out = verdict.target_on == "held-out"
    what = "held-out loss" if held_out else "training loss"
    if target is None:
        lines.append(f"Target {what}: none (no run converged), so no time or minibatches to target.")
    else:
        best = "held-out loss at the end" if held_out else "smoothed training loss"
        how = (f"{TARGET_FACTOR:g} x the best final {best} among the runs that converged"
               if verdict.target_auto else "given with --target")
        measured = (f"worker 0's held-out evaluations {evaluated_every(table.attrs.get('eval_every'))}" if held_out
                    else "smoothed over 5 x workers step records")
        lines.append(f"Target {what} {target:.4g} ({how}; {measured}, times from the start barrier); "
                     f"{first_phrase(verdict)}.")
    diverged = diverged_line(verdict)
    return lines + ([diverged] if diverged else [])


def lr_lines(options: Iterable[Mapping[str, Any]]) -> list[str]:
    """One line saying which learning-rate convention the runs (their ``options``) used, and one more where
    some of them scaled it by staleness (``--lr-staleness inverse``)."""
    stored = [StoredOptions.of(o) for o in options if o]
    inverse = ["Runs with --lr-staleness inverse (labels ending in +inverse) apply each gradient with lr / (its "
               "staleness + 1) (Zhang et al. 2016): compare them with the plain mode to see whether it helps."] \
        if any(o.lr_staleness == "inverse" for o in stored) else []
    return _convention_lines(stored) + inverse


def _convention_lines(options: list[StoredOptions]) -> list[str]:
    used = {o.lr_convention or "mean" for o in options}  # runs made before the option: the mean
    if used == {"minibatch"}:
        return ["Learning rate per minibatch (--lr-convention minibatch): every gradient moves the parameters by "
                "lr x gradient in every mode; sync and allreduce apply lr x the sum of the gradients they "
                "aggregate, so differences between modes come from staleness and waiting, not from the step size."]
    if used == {"mean"}:
        return ["Learning rate as TensorFlow's SyncReplicasOptimizer (--lr-convention mean): sync and allreduce "
                "apply lr x the mean of the N gradients they aggregate, N times less per minibatch than ssp and "
                "async: compare loss against updates, not minibatches."]
    return ["The runs used different learning-rate conventions (--lr-convention): their losses do not compare."] \
        if len(used) > 1 else []
