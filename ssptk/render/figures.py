"""Matplotlib figures of runs: one run's six panels (:func:`run_figure`) and several runs overlaid
(:func:`comparison_figure`). Pure rendering of what :mod:`ssptk.analysis` computes; the shared look is
:mod:`ssptk.render.style`'s."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter

from ssptk import analysis as an
from ssptk.analysis.comparison_table import RunTuple
from ssptk.analysis.outcomes import SettingOutcome
from ssptk.analysis.run_view import view_of_run
from ssptk.analysis.step_split import blocked_share
from ssptk.analysis.verdict import Verdict
from ssptk.render.fit import LEGEND_INSIDE, legend_below, wrap_title
from ssptk.render.run_panels import RunPanels, panel_titles
from ssptk.render.skew import draw_skew
from ssptk.render.style import (
    BOUND_STYLE,
    NOTE_COLOR,
    NotebookFigure,
    bound_label,
    color,
    draw_bound,
    run_title,
    set_loss_scale,
    skew_bound,
)
from ssptk.render.verdict_words import legend_mark
from ssptk.rundir import Summary

__all__ = ["FIGSIZE", "PREDICTED_TITLE", "Repeats", "comparison_figure", "run_figure"]

#: Inches of a run's and a comparison's six panels: shown about 900 pixels wide (a notebook, the report), at
#: about 80 dots per inch, so that legends and ticks stay 9-11 pixels high.
FIGSIZE = (11.0, 7.0)
#: The second line of a predicted run's title.
PREDICTED_TITLE = "PREDICTED: the simulator's schedule replayed with the model's gradients (simulated clock)"


class Repeats(list[Any]):
    """The repetitions of one label, in order: a value of :func:`ssptk.render.report.build_report` and
    :func:`comparison_figure` that stands for several runs (a plain tuple or frame is one run)."""

    @staticmethod
    def of(value: Any) -> list[Any]:
        """The runs ``value`` stands for: its repetitions, or ``[value]`` for one run."""
        return list(value) if isinstance(value, Repeats) else [value]


def _empty(ax: Axes, title: str) -> None:
    ax.set_title(title)
    ax.text(0.5, 0.5, "no step records", ha="center", va="center", transform=ax.transAxes, color=NOTE_COLOR)


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
    Wall time runs from the start barrier when ``events`` has a ``start`` event. What it draws is
    :func:`ssptk.analysis.run_view.view_of_run`'s, as the live dashboard's figure does, and as there one legend
    below the panels names what every panel draws (a legend per panel covered a third of it at 8 workers). The
    title is broken into lines that fit (a predicted run's says so on a line of its own).
    """
    view = view_of_run(steps, events, config, bound=staleness_bound)
    fig = NotebookFigure(figsize=FIGSIZE, layout="constrained")
    axes = list(fig.subplots(2, 3).flat)
    title = run_title(view.options) if view.options else "run (no config)"
    fig.suptitle(wrap_title(title + (f"\n{PREDICTED_TITLE}" if view.predicted else ""), FIGSIZE[0]))
    if not view.n_records:
        for ax, title in zip(axes, panel_titles(view)):
            _empty(ax, title)
        return fig
    panels = RunPanels(axes, view)
    panels.show(view, settled=True)
    legend_below(fig, *panels.legend_entries())
    return fig


def _as_run(value: pd.DataFrame | Sequence[Any]) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    if isinstance(value, pd.DataFrame):
        return value, None
    return value[0], (value[1] if len(value) > 1 else None)


def _config_of(value: pd.DataFrame | Sequence[Any]) -> Mapping[str, Any] | None:
    """The run's config.json content, where ``value`` is a ``(steps, events, config, ...)`` tuple."""
    if isinstance(value, pd.DataFrame) or len(value) < 3 or not isinstance(value[2], Mapping):
        return None
    return value[2]


def _fallen_behind(df: pd.DataFrame) -> Any:
    """The worker that really fell behind (fewest steps at the end, by more than 3 and 5%), or ``None``: sync
    and a binding SSP bound keep every worker together."""
    finals = df.groupby("worker")["completed"].max()
    behind = len(finals) > 1 and finals.min() < finals.max() - max(3, 0.05 * finals.max())
    return finals.idxmin() if behind else None


def _progress_lines(ax: Axes, df: pd.DataFrame, run_color: Any, lw: float, name: str | None) -> None:
    """One thin line per worker in the run's colour; its slowest worker (:func:`_fallen_behind`) thicker, and
    named in the run's legend entry (names at the lines' ends ran into each other and out of the panel). From
    :data:`~ssptk.analysis.MANY_WORKERS` workers on: the band of the workers' progress, its median, and the
    slowest worker only."""
    slowest = _fallen_behind(df)
    if df["worker"].nunique() >= an.MANY_WORKERS:  # dozens of workers: the run's band, and its slowest worker
        band = an.progress_band(df)
        ax.fill_between(band["elapsed"], band["lo"], band["hi"], step="post", color=run_color, alpha=0.2, lw=0)
        ax.plot(band["elapsed"], band["median"], drawstyle="steps-post", color=run_color, lw=lw, label=name)
        name = None
        df = df[df["worker"] == slowest] if slowest is not None else df.iloc[:0]
    for j, (w, d) in enumerate(df.groupby("worker")):
        slow = w == slowest
        ax.plot(d["elapsed"], d["completed"], drawstyle="steps-post", color=run_color,
                lw=2.2 * lw if slow else lw, alpha=1.0 if slow else 0.6, label=name if j == 0 else None)


def _draw_one(axes: list[Axes], steps: pd.DataFrame, events: pd.DataFrame | None, run_color: Any,
              widths: tuple[float, float], name: str | None, repeated: bool) -> pd.DataFrame:
    """One run (repetition) of :func:`comparison_figure` into its loss, skew and progress axes; returns its
    prepared steps. ``name``: its legend entry (the first repetition's), to which the worker that fell behind
    is added: with one colour per run, a straggler would hide."""
    ax_t, ax_s, ax_skew, ax_prog, ax_u = axes[:5]
    lw, lw_prog = widths
    start = an.start_time(events)
    df = an.prepare_steps(steps, start) if start is not None or "elapsed" not in steps.columns else steps
    slowest = _fallen_behind(df)
    if name is not None and slowest is not None:
        name = f"{name} \u00b7 worker {slowest} fell behind"
    smooth = an.smoothing_window(df["worker"].nunique())
    for ax, by in ((ax_t, "elapsed"), (ax_s, "samples"), (ax_u, "global_step")):
        c = an.loss_curves(df, by=by, smooth=smooth)
        c = c[c["worker"] == an.ALL_WORKERS]
        ax.plot(c[by], c["smoothed"], color=run_color, lw=lw, label=name)
    finished = an.finish_times(df, events) if events is not None else None
    skew = an.skew_timeline(df, finished, end_when_one_left=True)
    draw_skew(ax_skew, skew["elapsed"], skew["skew"], run_color, label=name, band=not repeated, lw=lw)
    _progress_lines(ax_prog, df, run_color, lw_prog, name)
    return df


def _cost_point(ax: Axes, label: str, waits: list[Any], stale: list[Any], run_color: Any) -> None:
    """The run's (mean over repetitions) share of time waiting and mean staleness, as a point named in the
    panel's legend (labels beside points that lie close, as sync's and ssp's often do, run into each other)."""
    w = [float(v) for v in waits if v is not None]
    s = [float(v) for v in stale if v is not None]
    if not w or not s:
        return
    x, y = 100 * float(np.mean(w)), float(np.mean(s))
    ax.scatter([x], [y], s=60, color=run_color, zorder=3, label=label)


def _outcome(verdict: Verdict, label: str) -> SettingOutcome | None:
    return next((o for o in verdict.outcomes if o.label == label), None)


def _summary_of(value: pd.DataFrame | Sequence[Any]) -> Summary:
    """The run's summary.json content, where ``value`` is a ``(steps, events, config, summary)`` tuple (else empty)."""
    stored = value[3] if not isinstance(value, pd.DataFrame) and len(value) > 3 else None
    return Summary.of(stored)


def _run_tuple(value: pd.DataFrame | Sequence[Any]) -> RunTuple:
    """``value`` as the analysis layer's ``(steps, events, config, summary)``; what it lacks is empty."""
    steps, events = _as_run(value)
    return steps, pd.DataFrame() if events is None else events, _config_of(value) or {}, _summary_of(value)


def comparison_tables(runs: Mapping[str, Any], target: float | None = None) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """The comparison table of the runs a :func:`comparison_figure` or a report draws, whose ``attrs["verdict"]``
    every view words, and with :class:`Repeats`, the table of every repetition it aggregates
    (:func:`ssptk.analysis.repeat_table`; ``None`` without repeats)."""
    if any(isinstance(v, Repeats) for v in runs.values()):
        each = an.repeat_table({label: Repeats.of(v) for label, v in runs.items()}, target)
        return an.aggregate_repeats(each), each
    return an.compare_table({label: _run_tuple(v) for label, v in runs.items()}, target), None


def comparison_figure(runs: Mapping[str, pd.DataFrame | Sequence[Any]], verdict: Verdict | None = None) -> Figure:
    """Several runs overlaid in six axes, one colour per run (a run that diverged says so in the legend, as the
    comparison's ``verdict`` has it, on the training or the held-out loss; without one, as the verdict of
    :func:`comparison_tables` has it: the table a report shows beside the figure).

    Panels (in ``fig.axes`` order): smoothed loss against wall time; smoothed loss against minibatches
    processed; step skew against wall time (a symmetric-log axis once one run's skew dwarfs the others, so
    an SSP bound, dashed in its run's colour, stays visible beside async's hundreds); per-worker completed
    steps against wall time (thin lines in the run's colour, its slowest worker thicker and named in the
    run's legend entry); smoothed loss against updates applied (the global step: sync applies one per N - B minibatches,
    ssp and async one per minibatch); what each run paid: share of worker time waiting against mean
    staleness. Values are step DataFrames, or ``(steps, events, config, ...)`` tuples (then wall time runs
    from the start barrier, finished workers leave the skew on their ``done`` event, and an SSP run's bound
    is drawn), or :class:`Repeats` of those: every repetition is drawn, thinner, in the label's colour.
    Smoothing uses each run's :func:`ssptk.analysis.smoothing_window`.
    """
    if verdict is None:
        verdict = an.verdict_of(comparison_tables(runs)[0])
    fig = NotebookFigure(figsize=FIGSIZE, layout="constrained")
    grid = fig.add_gridspec(2, 3)
    ax_t, ax_s = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1])
    ax_skew, ax_prog = fig.add_subplot(grid[1, 0]), fig.add_subplot(grid[1, 1])
    ax_u, ax_cost = fig.add_subplot(grid[0, 2]), fig.add_subplot(grid[1, 2])
    axes = [ax_t, ax_s, ax_skew, ax_prog, ax_u, ax_cost]
    fig.suptitle("comparison")
    n = len(runs)
    repeated = any(isinstance(v, Repeats) for v in runs.values())
    lw, lw_prog = (0.9, 0.5) if repeated else (1.5, 0.8)
    skew_max, skew_bound_max = 0, 0  # the largest skew, and the largest SSP bound S+1
    for i, (label, value) in enumerate(runs.items()):
        run_color = color(i, n)
        values = list(Repeats.of(value))
        reps = [(*_as_run(v), _summary_of(v)) for v in values]
        drawn = [(steps, events, stored) for steps, events, stored in reps if steps is not None and not steps.empty]
        if not drawn:
            ax_t.plot([], [], color=run_color, label=f"{label} (no records)")
            continue
        shown = str(label) + legend_mark(_outcome(verdict, str(label)))
        config = _config_of(values[0])
        bound = an.staleness_bound(config)
        if bound is not None:
            skew_bound_max = max(skew_bound_max, skew_bound(bound))
            draw_bound(ax_skew, bound, color=run_color, lw=1.0, label=f"{label} {bound_label(bound)}")
        paid, blocked = [], []
        for r, (steps, events, stored) in enumerate(drawn):
            df = _draw_one(axes, steps, events, run_color, (lw, lw_prog), shown if r == 0 else None, repeated)
            paid.append(an.summarize(df, events, config))
            blocked.append(blocked_share(stored, paid[-1].wait_fraction))
            skew_max = max(skew_max, int(paid[-1].max_skew or 0))
        _cost_point(ax_cost, label, blocked, [p.mean_staleness for p in paid], run_color)
    if skew_max > 4 * max(skew_bound_max, 2):  # async's hundreds would flatten every bound onto the axis
        ax_skew.set_yscale("symlog", linthresh=max(2 * skew_bound_max, 4), linscale=1.5)
        ax_skew.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax_cost.set(title="what each run paid:\nwaiting and staleness", xlabel="worker time spent waiting (%)",
                ylabel="mean staleness (updates)")
    ax_cost.margins(0.15)  # no point on the frame
    ax_t.set(title="loss vs wall time (smoothed)", xlabel="wall time (s)", ylabel="training loss")
    ax_s.set(title="loss vs minibatches (smoothed)", xlabel="minibatches processed",
             ylabel="training loss")
    ax_u.set(title="loss vs updates (smoothed)", xlabel="updates applied (global step)", ylabel="training loss")
    frames = [_as_run(v)[0] for value in runs.values() for v in Repeats.of(value)]
    losses = [f["loss"] for f in frames if f is not None and "loss" in f.columns]
    all_losses = pd.concat(losses) if losses else pd.Series(dtype=float)
    for ax in (ax_t, ax_s, ax_u):
        set_loss_scale(ax, all_losses)
    ax_skew.set(title="step skew", xlabel="wall time (s)", ylabel="most - least advanced (steps)")
    ax_prog.set(title="completed steps per worker\n(one fallen behind: thicker)", xlabel="wall time (s)",
                ylabel="completed steps")
    _legends(fig, axes, n)
    return fig


def _legends(fig: Figure, axes: list[Axes], n: int) -> None:
    """A legend in each panel for a few runs; for more (a legend of 7 covered 30% of a panel, of 12 more than
    half) one below the panels, naming each run once and the SSP bounds in one entry."""
    ax_t, ax_skew = axes[0], axes[2]
    bounds = [lab for lab in ax_skew.get_legend_handles_labels()[1] if " bound" in lab]
    if n > LEGEND_INSIDE:
        handles, labels = ax_t.get_legend_handles_labels()
        if bounds:
            handles.append(Line2D([], [], **{**BOUND_STYLE, "color": NOTE_COLOR, "lw": 1.0}))
            labels.append("dashed: an ssp:S run's bound S+1")
        legend_below(fig, handles, labels)
        return
    for ax in axes:
        handles, labels = ax.get_legend_handles_labels()
        if ax is ax_skew:  # the runs' colours are named in every other panel: here only the bounds
            handles, labels = [h for h, lab in zip(handles, labels) if " bound" in lab], \
                [lab for lab in labels if " bound" in lab]
        if handles:
            ax.legend(handles, labels, fontsize="small")
