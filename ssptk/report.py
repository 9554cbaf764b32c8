"""Rendering: figures, HTML reports and plain-text tables of what :mod:`ssptk.analysis` returns.

Figures are built as :class:`matplotlib.figure.Figure` objects without pyplot, so nothing here
touches the user's global matplotlib state (no style, no rcParams changes, no open-figure list)
and everything works headless.
"""
from __future__ import annotations

import base64
import html
import io
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ssptk import analysis as an
from ssptk.errors import UsageError
from ssptk.logs import load_run
from ssptk.tables import KEY_FIGURES, _formatted, format_table  # format_table: re-exported

__all__ = [
    "run_figure",
    "comparison_figure",
    "figure_to_png_base64",
    "format_table",
    "Report",
    "build_report",
    "load_comparison",
    "write_metrics_csv",
    "Repeats",
    "KEY_FIGURES",
]

RunTuple = tuple[pd.DataFrame, pd.DataFrame, Mapping[str, Any], Mapping[str, Any]]
_MAX_LEGEND = 10


class Repeats(list):  # type: ignore[type-arg]
    """The repetitions of one label, in order: a value of :func:`build_report` and
    :func:`comparison_figure` that stands for several runs (a plain tuple or frame is one run)."""


def _reps(value: Any) -> list[Any]:
    return list(value) if isinstance(value, Repeats) else [value]


def _color(i: int, n: int) -> Any:
    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return cmap(i % cmap.N)


def _empty(ax: Axes, title: str) -> None:
    ax.set_title(title)
    ax.text(0.5, 0.5, "no step records", ha="center", va="center", transform=ax.transAxes,
            color="0.5")


def _bound_from_config(config: Mapping[str, Any] | None) -> int | None:
    opts = an.run_options(config)
    if opts.get("mode") == "ssp" and isinstance(opts.get("staleness"), (int, np.integer)):
        return int(opts["staleness"])
    return None


def _loss_scale(ax: Axes, losses: pd.Series) -> None:
    """Log scale when the losses are positive and span more than two decades (early losses would
    otherwise flatten every later difference between modes into the axis)."""
    values = pd.to_numeric(losses, errors="coerce").dropna()
    if len(values) and (values > 0).all() and values.max() / values.min() > 100:
        ax.set_yscale("log")


def run_figure(
    steps: pd.DataFrame,
    events: pd.DataFrame | None = None,
    config: Mapping[str, Any] | None = None,
    staleness_bound: int | None = None,
) -> Figure:
    """One run in a 2x3 grid (six axes).

    Top: training loss against wall time (thin per worker, thick overall smoothed); completed
    steps per worker against wall time; step skew against wall time. Bottom: total wait and
    injected delay per worker (bars); histogram of measured staleness; loss against minibatches
    processed. ``staleness_bound`` is the SSP staleness S (default: from ``config`` when its mode
    is ``ssp``); the skew panel draws the hard bound S+1 as a dashed line labelled "bound".
    Wall time runs from the start barrier when ``events`` has a ``start`` event.
    """
    opts = an.run_options(config)
    fig = Figure(figsize=(15, 8), layout="constrained")
    axes = fig.subplots(2, 3)
    (ax_loss, ax_prog, ax_skew), (ax_wait, ax_stale, ax_samples) = axes
    parts = [f"{k}={opts[k]}" for k in ("mode", "staleness", "workers", "model") if k in opts]
    fig.suptitle("run: " + (", ".join(parts) if parts else "(no config)"))
    if staleness_bound is None:
        staleness_bound = _bound_from_config(config)
    titles = ("loss vs wall time", "completed steps per worker", "step skew",
              "wait and injected delay per worker", "measured staleness", "loss vs minibatches")
    if steps is None or steps.empty:
        for ax, title in zip(axes.flat, titles):
            _empty(ax, title)
        return fig
    workers = max(an.n_workers(config, steps), 1)
    smooth = an.smoothing_window(workers)
    df = an.prepare_steps(steps, an.start_time(events))
    ids = sorted(int(w) for w in df["worker"].unique())
    n = max(len(ids), workers)

    for ax, by in ((ax_loss, "elapsed"), (ax_samples, "samples")):
        curves = an.loss_curves(df, by=by, smooth=smooth)
        for w in ids:
            c = curves[curves["worker"] == w]
            ax.plot(c[by], c["loss"], lw=0.6, alpha=0.5, color=_color(w, n),
                    label=f"worker {w}" if len(ids) <= _MAX_LEGEND else None)
        c = curves[curves["worker"] == an.ALL_WORKERS]
        ax.plot(c[by], c["smoothed"], lw=2.0, color="black", label=f"all (mean of {smooth})")
        ax.set_xlabel("wall time (s)" if by == "elapsed" else "minibatches processed")
        ax.set_ylabel("training loss")
        _loss_scale(ax, df["loss"])
        ax.legend(fontsize="small")
    ax_loss.set_title(titles[0])
    ax_samples.set_title(titles[5])

    for w in ids:
        d = df[df["worker"] == w]
        ax_prog.plot(d["elapsed"], d["completed"], drawstyle="steps-post", color=_color(w, n),
                     label=f"worker {w}" if len(ids) <= _MAX_LEGEND else None)
    ax_prog.set(title=titles[1], xlabel="wall time (s)", ylabel="completed steps")
    if len(ids) <= _MAX_LEGEND:
        ax_prog.legend(fontsize="small")

    skew = an.skew_timeline(df, an.finish_times(df, events), workers=ids)
    ax_skew.plot(skew["elapsed"], skew["skew"], drawstyle="steps-post", color="tab:purple",
                 label="skew")
    if staleness_bound is not None:
        ax_skew.axhline(staleness_bound + 1, ls="--", color="tab:red",
                        label=f"bound (S+1 = {staleness_bound + 1})")
    ax_skew.set(title=titles[2], xlabel="wall time (s)", ylabel="most - least advanced (steps)")
    ax_skew.set_ylim(bottom=0)
    ax_skew.legend(fontsize="small")

    waits = an.wait_by_worker(df)
    x = np.arange(len(waits))
    ax_wait.bar(x - 0.2, waits["wait_s"], width=0.4, label="wait (consistency)", color="tab:orange")
    ax_wait.bar(x + 0.2, waits["delay_s"], width=0.4, label="injected delay", color="tab:gray")
    ax_wait.set_xticks(x, [str(w) for w in waits["worker"]])
    ax_wait.set(title=titles[3], xlabel="worker", ylabel="total seconds")
    ax_wait.legend(fontsize="small")

    counts = an.staleness_counts(df)
    if len(counts):
        ax_stale.bar(counts.index.to_numpy(), counts.to_numpy(), width=0.8, color="tab:blue")
        if len(counts) <= 20:
            ax_stale.set_xticks(counts.index.to_numpy())
    ax_stale.set(title=titles[4], xlabel="staleness (updates)", ylabel="step records")
    return fig


def _as_run(value: pd.DataFrame | Sequence[Any]) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    if isinstance(value, pd.DataFrame):
        return value, None
    return value[0], (value[1] if len(value) > 1 else None)


def comparison_figure(runs: Mapping[str, pd.DataFrame | Sequence[Any]]) -> Figure:
    """Several runs overlaid in a 2x2 grid (four axes), one colour per run.

    Panels: smoothed loss against wall time; smoothed loss against minibatches processed; step
    skew against wall time; per-worker completed steps against wall time (thin lines in the
    run's colour). Values are step DataFrames, or ``(steps, events, ...)`` tuples (then wall time
    runs from the start barrier and finished workers leave the skew on their ``done`` event), or
    :class:`Repeats` of those: every repetition is drawn, thinner, in the label's colour.
    Smoothing uses each run's :func:`ssptk.analysis.smoothing_window`.
    """
    fig = Figure(figsize=(13, 8), layout="constrained")
    axes = fig.subplots(2, 2)
    (ax_t, ax_s), (ax_skew, ax_prog) = axes
    fig.suptitle("comparison")
    n = len(runs)
    repeated = any(isinstance(v, Repeats) for v in runs.values())
    lw, lw_prog = (0.9, 0.5) if repeated else (1.5, 0.8)
    for i, (label, value) in enumerate(runs.items()):
        color = _color(i, n)
        reps = [_as_run(v) for v in _reps(value)]
        drawn = [(steps, events) for steps, events in reps if steps is not None and not steps.empty]
        if not drawn:
            ax_t.plot([], [], color=color, label=f"{label} (no records)")
            continue
        for r, (steps, events) in enumerate(drawn):
            name = str(label) if r == 0 else None
            start = an.start_time(events)
            df = (an.prepare_steps(steps, start)
                  if start is not None or "elapsed" not in steps.columns else steps)
            smooth = an.smoothing_window(df["worker"].nunique())
            for ax, by in ((ax_t, "elapsed"), (ax_s, "samples")):
                c = an.loss_curves(df, by=by, smooth=smooth)
                c = c[c["worker"] == an.ALL_WORKERS]
                ax.plot(c[by], c["smoothed"], color=color, lw=lw, label=name)
            finished = an.finish_times(df, events) if events is not None else None
            skew = an.skew_timeline(df, finished)
            ax_skew.plot(skew["elapsed"], skew["skew"], drawstyle="steps-post", color=color,
                         label=name, **({"lw": lw} if repeated else {}))
            for j, (_, d) in enumerate(df.groupby("worker")):
                ax_prog.plot(d["elapsed"], d["completed"], drawstyle="steps-post", color=color,
                             lw=lw_prog, alpha=0.8, label=name if j == 0 else None)
    ax_t.set(title="loss vs wall time (smoothed)", xlabel="wall time (s)", ylabel="training loss")
    ax_s.set(title="loss vs minibatches processed (smoothed)", xlabel="minibatches processed",
             ylabel="training loss")
    frames = [_as_run(v)[0] for value in runs.values() for v in _reps(value)]
    losses = [f["loss"] for f in frames if f is not None and "loss" in f.columns]
    all_losses = pd.concat(losses) if losses else pd.Series(dtype=float)
    for ax in (ax_t, ax_s):
        _loss_scale(ax, all_losses)
    ax_skew.set(title="step skew", xlabel="wall time (s)", ylabel="most - least advanced (steps)")
    ax_prog.set(title="completed steps per worker", xlabel="wall time (s)",
                ylabel="completed steps")
    for ax in axes.flat:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="small")
    return fig


def figure_png(fig: Figure, dpi: int = 100) -> bytes:
    """``fig`` rendered to PNG bytes (headless: the Agg canvas, no pyplot)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def figure_to_png_base64(fig: Figure, dpi: int = 100) -> str:
    """Render ``fig`` to PNG and return it base64-encoded (ASCII, no ``data:`` prefix)."""
    return base64.b64encode(figure_png(fig, dpi)).decode("ascii")


_CSS = """
.ssptk-report { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; color: #222; }
.ssptk-report h1, .ssptk-report h2 { font-weight: 600; margin: 0.8em 0 0.4em; }
.ssptk-report table { border-collapse: collapse; font-size: 13px; margin: 0.5em 0; }
.ssptk-report th, .ssptk-report td { border-bottom: 1px solid #ddd; padding: 3px 8px;
  text-align: right; }
.ssptk-report th { background: #f3f3f3; }
.ssptk-report td:first-child, .ssptk-report th:first-child { text-align: left; }
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
                 runs_table: pd.DataFrame | None = None) -> None:
        self.title = title
        self.table = table
        self.runs_table = runs_table
        self.figures: list[tuple[str, Figure]] = list(figures)
        self.notes: list[str] = list(notes)
        self._png: dict[int, str] = {}

    def _image(self, fig: Figure) -> str:
        if id(fig) not in self._png:
            self._png[id(fig)] = figure_to_png_base64(fig)
        return self._png[id(fig)]

    def _repr_html_(self) -> str:
        """An HTML fragment (inline CSS, embedded images) for notebooks."""
        parts = [f'<div class="ssptk-report"><style>{_CSS}</style>',
                 f"<h2>{html.escape(self.title)}</h2>",
                 _formatted(self.table).to_html(index=False, border=0, escape=True)]
        parts += [f'<p class="notes">{html.escape(note)}</p>' for note in self.notes]
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
        path.write_text(self.to_html(), encoding="utf-8")
        return path

    def __str__(self) -> str:
        lines = [self.title, "=" * len(self.title), format_table(self.table)]
        return "\n".join(lines + [f"\n{n}" if i == 0 else n for i, n in enumerate(self.notes)])

    def __repr__(self) -> str:
        return f"Report({self.title!r}, runs={len(self.table)}, figures={len(self.figures)})"


def build_report(runs: Mapping[str, RunTuple | Repeats], title: str = "ssptk comparison",
                 target: float | None = None, per_run: bool = True) -> Report:
    """Build a :class:`Report` from ``label -> (steps, events, config, summary)``.

    The table is :func:`ssptk.analysis.compare_table` (``target`` as there); figures are a
    :func:`comparison_figure` of all runs and, with ``per_run``, a :func:`run_figure` per run.

    A value may be :class:`Repeats` of such tuples (a label run several times). Then the table is
    :func:`ssptk.analysis.aggregate_repeats` of :func:`ssptk.analysis.repeat_table` (one target for
    every run; the latter is ``Report.runs_table``), the overview overlays every repetition, and the
    per-run figure shows each label's first repetition.
    """
    repeated = any(isinstance(v, Repeats) for v in runs.values())
    runs_table = None
    if repeated:
        runs_table = an.repeat_table({label: _reps(v) for label, v in runs.items()}, target)
        table = an.aggregate_repeats(runs_table)
    else:
        table = an.compare_table(runs, target)
    notes = []
    chosen = table.attrs.get("target")
    if chosen is not None:
        how = (f"chosen automatically: {an.TARGET_FACTOR:g} x the largest final smoothed training "
               "loss among ok runs" if table.attrs.get("target_auto") else "given")
        notes.append(f"Target training loss {chosen:.4g} ({how}); smoothed over 5 x workers "
                     "step records; times run from the start barrier.")
    if repeated:
        counts = sorted({int(n) for n in table["repeats"].dropna()})
        times = " or ".join(str(n) for n in counts) or "0"
        notes.append(f"Each mode ran {times} times: every figure is the mean over its ok runs; "
                     f"{', '.join(KEY_FIGURES)} also show [min\u2013max]. metrics.csv has one row per run "
                     "(column rep), the table's <figure>_ci95 columns the 95% confidence half-widths.")
    figures: list[tuple[str, Figure]] = []
    if runs:
        caption = "All runs, every repetition (thin lines in the mode's colour)" if repeated else "All runs"
        figures.append((caption, comparison_figure(runs)))
    if per_run:
        for label, value in runs.items():
            reps = _reps(value)
            if not reps:
                continue
            steps, events, config, _summary = reps[0]
            caption = f"Run {label}, repetition 1 of {len(reps)}" if repeated else f"Run {label}"
            figures.append((caption, run_figure(steps, events, config)))
    return Report(title, table, figures, notes, runs_table)


def write_metrics_csv(table: pd.DataFrame, path: str | os.PathLike[str]) -> Path:
    """Write a comparison table as CSV (no index; missing values empty); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(path, index=False)
    return path


def _is_run_dir(path: Path) -> bool:
    return path.is_dir() and any((path / name).exists()
                                 for name in ("config.json", "summary.json", "workers"))


def _rep_dirs(path: Path) -> list[Path]:
    """The ``rep-<k>`` run directories of a repeated label's directory, by k."""
    if not path.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in path.iterdir()
             if (m := re.fullmatch(r"rep-(\d+)", p.name)) and _is_run_dir(p)]
    return [p for _, p in sorted(found)]


def load_comparison(directory: str | os.PathLike[str], title: str | None = None,
                    target: float | None = None, per_run: bool = True) -> Report:
    """Build a report from ``DIR/<label>/`` run directories, or ``DIR/<label>/rep-<k>/`` ones
    (a comparison with repetitions: each label's runs become :class:`Repeats`).

    Runs are ordered as the ``label`` column of ``DIR/metrics.csv`` when it exists (labels it
    lacks follow, sorted), else sorted by label. Raises :class:`UsageError` when there is none.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise UsageError(f"{directory} is not a directory; pass a comparison output directory")
    dirs = sorted(p.name for p in directory.iterdir() if _is_run_dir(p) or _rep_dirs(p))
    if not dirs:
        raise UsageError(f"no run directories (with config.json, summary.json or workers/) "
                         f"under {directory}")
    listed: list[str] = []
    metrics = directory / "metrics.csv"
    if metrics.is_file():
        try:
            listed = pd.read_csv(metrics, dtype={"label": str})["label"].dropna().tolist()
        except (KeyError, ValueError, OSError):
            listed = []
    # a label's run lives in DIR/<label with ':' as '-'> (ssp:2 -> ssp-2)
    by_label = {lab: lab.replace(":", "-") for lab in dict.fromkeys(listed) if lab.replace(":", "-") in dirs}
    by_label.update({d: d for d in dirs if d not in by_label.values()})

    def runs_of(path: Path) -> RunTuple | Repeats:
        if _is_run_dir(path):
            return load_run(path)
        return Repeats(load_run(p) for p in _rep_dirs(path))

    runs = {label: runs_of(directory / d) for label, d in by_label.items()}
    return build_report(runs, title or f"ssptk comparison: {directory.name}", target, per_run)
