"""Comparison reports: the metrics table, figures and notes as self-contained HTML (:class:`Report`),
built from finished runs (:func:`build_report`) or from a comparison directory (:func:`load_comparison`)."""
from __future__ import annotations

import html
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from ssptk import analysis as an
from ssptk.analysis.comparison_table import RunTuple
from ssptk.render.cells import KEY_FIGURES, shown_cells
from ssptk.render.figures import Repeats, comparison_figure, comparison_tables, run_figure
from ssptk.render.held_out_plot import has_held_out, held_out_figure
from ssptk.render.predicted_overlay import predicted_figure, predicted_lines
from ssptk.render.style import figure_to_png_base64
from ssptk.render.table_notes import lr_lines, takeaway_line, target_lines
from ssptk.render.tables import SHOWN_COLUMNS, format_table, table_html
from ssptk.render.tradeoff_plot import tradeoff_figure
from ssptk.render.traffic_words import network_section
from ssptk.render.verdict_words import verdict_lines
from ssptk.rundir import Summary, load_run
from ssptk.rundir.comparison import ComparisonDir, LabelRuns, write_metrics_csv
from ssptk.rundir.space import write_whole

__all__ = ["Report", "build_report", "comparison_notes", "comparison_title", "load_comparison", "repeats_note",
           "write_metrics_csv"]


def comparison_title(labels: Iterable[str]) -> str:
    """The title of a comparison's report: its labels, in order."""
    return f"ssptk comparison: {', '.join(labels)}"


_CSS = """
.ssptk-report { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; color: #222; }
.ssptk-report h1, .ssptk-report h2 { font-weight: 600; margin: 0.8em 0 0.4em; }
.ssptk-report table { border-collapse: collapse; font-size: 13px; margin: 0.5em 0; }
.ssptk-report th, .ssptk-report td { border-bottom: 1px solid #ddd; padding: 3px 8px;
  text-align: right; }
.ssptk-report th { background: #f3f3f3; }
.ssptk-report td:first-child, .ssptk-report th:first-child { text-align: left; }
.ssptk-report .table-wrap { overflow-x: auto; max-width: 100%; }
.ssptk-report figure { margin: 1em 0; }
.ssptk-report img { max-width: 100%; height: auto; }
.ssptk-report figcaption, .ssptk-report .notes { color: #555; font-size: 13px; }
"""


class Report:
    """A comparison report: the metrics table, figures and notes.

    ``figures`` is a list of ``(caption, Figure)``. Figures are rendered to PNG once, on first
    use, and embedded as ``data:`` URIs, so every HTML form is self-contained. ``runs_table``: for
    repeated runs, one row per run (``label``, ``rep``, figures); None otherwise.
    """

    def __init__(self, title: str, table: pd.DataFrame,
                 figures: Sequence[tuple[str, Figure]] = (), notes: Sequence[str] = (),
                 runs_table: pd.DataFrame | None = None, predicted: pd.DataFrame | None = None) -> None:
        self.title = title
        self.table = table
        self.runs_table = runs_table
        #: with predicted runs: :func:`ssptk.analysis.predicted_table` (shown under the table)
        self.predicted = predicted
        self.figures: list[tuple[str, Figure]] = list(figures)
        self.notes: list[str] = list(notes)
        #: HTML sections shown after the tables (the network section:
        #: :func:`ssptk.render.traffic_words.network_section`)
        self.sections: list[str] = []
        #: what the comparison says (:class:`ssptk.analysis.Verdict`), the one its notes and figures word
        self.verdict: an.Verdict | None = table.attrs.get("verdict")
        self._png: dict[int, str] = {}

    def _image(self, fig: Figure) -> str:
        if id(fig) not in self._png:
            self._png[id(fig)] = figure_to_png_base64(fig)
        return self._png[id(fig)]

    def _repr_html_(self) -> str:
        """An HTML fragment (inline CSS, embedded images) for notebooks."""
        parts = [f'<div class="ssptk-report"><style>{_CSS}</style>',
                 f"<h2>{html.escape(self.title)}</h2>",
                 # a wide table scrolls inside the report instead of widening the page (and JupyterLab's cell)
                 '<div class="table-wrap">' + table_html(self.table) + "</div>"]
        parts += [f'<p class="notes">{html.escape(note)}</p>' for note in self.notes]
        if self.predicted is not None:
            parts += ["<h2>Predicted and measured</h2>", '<div class="table-wrap">'
                      + shown_cells(self.predicted)[0].to_html(index=False, border=0, escape=True) + "</div>"]
        parts += self.sections
        for caption, fig in self.figures:
            parts.append(f'<figure><img alt="{html.escape(caption, quote=True)}" '
                         f'src="data:image/png;base64,{self._image(fig)}">'
                         f"<figcaption>{html.escape(caption)}</figcaption></figure>")
        parts.append("</div>")
        return "\n".join(parts)

    def to_html(self) -> str:
        """A complete, self-contained HTML document."""
        return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                f"<title>{html.escape(self.title)}</title>\n</head>\n<body>\n"
                f"{self._repr_html_()}\n</body>\n</html>\n")

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write :meth:`to_html` to ``path`` (parent folders created); returns the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_whole(str(path), self.to_html())
        return path

    def __str__(self) -> str:
        lines = [self.title, "=" * len(self.title), format_table(self.table)]
        if self.predicted is not None:
            lines += ["", "Predicted and measured", format_table(self.predicted)]
        return "\n".join(lines + [f"\n{n}" if i == 0 else n for i, n in enumerate(self.notes)])

    def __repr__(self) -> str:
        return f"Report({self.title!r}, runs={len(self.table)}, figures={len(self.figures)})"


def build_report(runs: Mapping[str, RunTuple | Repeats], title: str = "ssptk comparison",
                 target: float | None = None, per_run: bool = True,
                 predicted: Mapping[str, RunTuple] | None = None) -> Report:
    """Build a :class:`Report` from ``label -> (steps, events, config, summary)``.

    The table is :func:`ssptk.analysis.compare_table` (``target`` as there); figures are a
    :func:`comparison_figure` of all runs, a :func:`held_out_figure` when runs logged held-out evaluations,
    the cost-and-gain :func:`tradeoff_figure` for several runs and, with ``per_run``, a :func:`run_figure`
    per run.

    A value may be :class:`Repeats` of such tuples (a label run several times). Then the table is
    :func:`ssptk.analysis.aggregate_repeats` of :func:`ssptk.analysis.repeat_table` (one target for
    every run; the latter is ``Report.runs_table``), the overview overlays every repetition, and the
    per-run figure shows each label's first repetition.

    ``predicted``: label -> a predicted run of the same options (``compare --predict``): the report adds
    :func:`ssptk.analysis.predicted_table` (``Report.predicted``, against the measured runs' target), what it
    says in words, and a figure of the predictions drawn over the measured runs.
    """
    repeated = any(isinstance(v, Repeats) for v in runs.values())
    table, runs_table = comparison_tables(runs, target)
    options = [an.run_options(r[2]) for v in runs.values() for r in Repeats.of(v)
               if isinstance(r, tuple) and len(r) > 2]
    table.attrs["eval_every"] = [o.eval_every for o in options]  # what "every K updates" says
    verdict = an.verdict_of(table)  # made with the table, once: every sentence, star and marker below words it
    notes = _ending_lines(runs) + comparison_notes(table, verdict) + lr_lines(options)
    if repeated:
        notes.append(repeats_note(table))
    figures: list[tuple[str, Figure]] = []
    if runs:
        caption = "All runs, every repetition (thin lines in the mode's colour)" if repeated else "All runs"
        figures.append((caption, comparison_figure(runs, verdict)))
    compared = None
    if predicted:
        compared = an.predicted_table(table, predicted, {label: Repeats.of(v)[0] for label, v in runs.items()
                                                         if Repeats.of(v)})
        notes += predicted_lines(compared)
        figures.append(("Predicted (dashed) and measured (solid): the simulator's schedule replayed with the "
                        "model's gradients, against what the cluster did", predicted_figure(runs, predicted, compared)))
    if runs and has_held_out(runs):
        on = table.attrs.get("target_on") == "held-out"
        figures.append(("Held-out loss during training" + (" (what the target is measured on)" if on else ""),
                        held_out_figure(runs, table.attrs.get("target") if on else None)))
    if len(table) > 1:
        figures.append(("What staleness costs and buys: minibatches to the target (cost per update), steps/s "
                        "(speed) and time to the target (both together), from sync to async; the fastest is "
                        "starred only when its lead is more than noise",
                        tradeoff_figure(table, table.attrs.get("target"), verdict)))
    if per_run:
        for label, value in runs.items():
            reps = Repeats.of(value)
            if not reps:
                continue
            steps, events, config, _summary = reps[0]
            caption = f"Run {label}, repetition 1 of {len(reps)}" if repeated else f"Run {label}"
            figures.append((caption, run_figure(steps, events, config)))
    report = Report(title, table, figures, notes, runs_table, compared)
    report.verdict = verdict
    report.sections = [s for s in [network_section({k: Repeats.of(v)[0][3] for k, v in runs.items() if Repeats.of(v)})]
                       if s]
    return report


def _ending_lines(runs: Mapping[str, RunTuple | Repeats]) -> list[str]:
    """A line for each run that did not finish: which task ended it and why (its summary's ``reason``, which names
    the task first), or the signal that interrupted it."""
    lines = []
    for label, value in runs.items():
        reps = Repeats.of(value)
        for k, run in enumerate(reps):
            summary = Summary.maybe(run[3] if isinstance(run, tuple) and len(run) > 3 else None) or Summary()
            status = summary.status
            if status in ("failed", "interrupted"):
                which = f" (repetition {k + 1})" if len(reps) > 1 else ""
                why = summary.reason or f"{summary.failed_task or 'a task'}: no reason recorded"
                lines.append(f"Run {label}{which} {status}: {why}")
    return lines


def comparison_notes(table: pd.DataFrame, verdict: an.Verdict) -> list[str]:
    """The sentences under a comparison's table: what differs between the runs, the target and who reached it,
    the diverged runs, and the ``verdict`` in words (:func:`ssptk.render.verdict_words.verdict_lines`)."""
    takeaway = takeaway_line(table)
    return ([takeaway] if takeaway else []) + target_lines(table, verdict) + verdict_lines(verdict)


def repeats_note(table: pd.DataFrame) -> str:
    """What a table of repeated runs shows: means, the min–max under the key figures, where each run's row and the
    95% confidence half-widths are."""
    counts = sorted({int(n) for n in table["repeats"].dropna()})
    times = " or ".join(str(n) for n in counts) or "0"
    return (f"Each mode ran {times} times: every figure is the mean over its ok runs; "
            f"{', '.join(SHOWN_COLUMNS.get(c, c) for c in KEY_FIGURES if c in SHOWN_COLUMNS)} also show "
            "their min\u2013max under the mean. metrics.csv has one row per run (column rep); the comparison's "
            "DataFrame (ssptk.compare(...).table) also holds each figure's 95% confidence half-width, in a column "
            "named after it with _ci95 (e.g. time_to_target_s_ci95).")


def load_comparison(directory: str | os.PathLike[str], title: str | None = None,
                    target: float | None = None, per_run: bool = True) -> Report:
    """Build a report from ``DIR/<label>/`` run directories, or ``DIR/<label>/rep-<k>/`` ones
    (a comparison with repetitions: each label's runs become :class:`Repeats`).

    Runs are ordered as the ``label`` column of ``DIR/metrics.csv`` when it exists (labels it
    lacks follow, sorted), else sorted by label; the default title names them, as :func:`ssptk.api.compare`'s
    report does. Raises :class:`UsageError` when there is none.
    """
    def runs_of(label: LabelRuns) -> RunTuple | Repeats:
        return Repeats(load_run(p) for p in label.reps) if label.reps else load_run(label.path)

    found = ComparisonDir(directory).labels()
    runs = {label.label: runs_of(label) for label in found}
    predicted = {label.label: load_run(label.predicted) for label in found if label.predicted}
    return build_report(runs, title or comparison_title(runs), target, per_run, predicted or None)
