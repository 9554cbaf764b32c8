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

from ssptk import analysis as an
from ssptk.render.style import (
    DELAY_COLOR,
    MAX_LEGEND,
    SKEW_COLOR,
    STALENESS_COLOR,
    WAIT_COLOR,
    color,
    draw_bound,
    set_loss_scale,
)

__all__ = ["Repeats", "comparison_figure", "run_figure"]


class Repeats(list[Any]):
    """The repetitions of one label, in order: a value of :func:`ssptk.render.report.build_report` and
    :func:`comparison_figure` that stands for several runs (a plain tuple or frame is one run)."""

    @staticmethod
    def of(value: Any) -> list[Any]:
        """The runs ``value`` stands for: its repetitions, or ``[value]`` for one run."""
        return list(value) if isinstance(value, Repeats) else [value]


def _empty(ax: Axes, title: str) -> None:
    ax.set_title(title)
    ax.text(0.5, 0.5, "no step records", ha="center", va="center", transform=ax.transAxes,
            color="0.5")


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
        staleness_bound = an.staleness_bound(config)
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
            ax.plot(c[by], c["loss"], lw=0.6, alpha=0.5, color=color(w, n),
                    label=f"worker {w}" if len(ids) <= MAX_LEGEND else None)
        c = curves[curves["worker"] == an.ALL_WORKERS]
        ax.plot(c[by], c["smoothed"], lw=2.0, color="black", label=f"all (mean of {smooth})")
        ax.set_xlabel("wall time (s)" if by == "elapsed" else "minibatches processed")
        ax.set_ylabel("training loss")
        set_loss_scale(ax, df["loss"])
        ax.legend(fontsize="small")
    ax_loss.set_title(titles[0])
    ax_samples.set_title(titles[5])

    for w in ids:
        d = df[df["worker"] == w]
        ax_prog.plot(d["elapsed"], d["completed"], drawstyle="steps-post", color=color(w, n),
                     label=f"worker {w}" if len(ids) <= MAX_LEGEND else None)
    ax_prog.set(title=titles[1], xlabel="wall time (s)", ylabel="completed steps")
    if len(ids) <= MAX_LEGEND:
        ax_prog.legend(fontsize="small")

    skew = an.skew_timeline(df, an.finish_times(df, events), workers=ids)
    ax_skew.plot(skew["elapsed"], skew["skew"], drawstyle="steps-post", color=SKEW_COLOR,
                 label="skew")
    if staleness_bound is not None:
        draw_bound(ax_skew, staleness_bound)
    ax_skew.set(title=titles[2], xlabel="wall time (s)", ylabel="most - least advanced (steps)")
    ax_skew.set_ylim(bottom=0)
    ax_skew.legend(fontsize="small")

    waits = an.wait_by_worker(df)
    x = np.arange(len(waits))
    ax_wait.bar(x - 0.2, waits["wait_s"], width=0.4, label="wait (consistency)", color=WAIT_COLOR)
    ax_wait.bar(x + 0.2, waits["delay_s"], width=0.4, label="injected delay", color=DELAY_COLOR)
    ax_wait.set_xticks(x, [str(w) for w in waits["worker"]])
    ax_wait.set(title=titles[3], xlabel="worker", ylabel="total seconds")
    ax_wait.legend(fontsize="small")

    counts = an.staleness_counts(df)
    if len(counts):
        ax_stale.bar(counts.index.to_numpy(), counts.to_numpy(), width=0.8, color=STALENESS_COLOR)
        if len(counts) <= 20:
            ax_stale.set_xticks(counts.index.to_numpy())
    ax_stale.set(title=titles[4], xlabel="staleness (updates)", ylabel="step records")
    return fig


def _as_run(value: pd.DataFrame | Sequence[Any]) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    if isinstance(value, pd.DataFrame):
        return value, None
    return value[0], (value[1] if len(value) > 1 else None)


def comparison_figure(runs: Mapping[str, pd.DataFrame | Sequence[Any]]) -> Figure:
    """Several runs overlaid in five axes, one colour per run (a run that diverged says so in the legend).

    Panels (in ``fig.axes`` order): smoothed loss against wall time; smoothed loss against minibatches
    processed; step skew against wall time; per-worker completed steps against wall time (thin lines in
    the run's colour); smoothed loss against updates applied (the global step: sync applies one per N - B
    minibatches, ssp and async one per minibatch). Values are step DataFrames, or ``(steps, events, ...)``
    tuples (then wall time runs from the start barrier and finished workers leave the skew on their ``done`` event), or
    :class:`Repeats` of those: every repetition is drawn, thinner, in the label's colour.
    Smoothing uses each run's :func:`ssptk.analysis.smoothing_window`.
    """
    fig = Figure(figsize=(15, 8), layout="constrained")
    grid = fig.add_gridspec(2, 3)
    ax_t, ax_s = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1])
    ax_skew, ax_prog = fig.add_subplot(grid[1, 0]), fig.add_subplot(grid[1, 1:])
    ax_u = fig.add_subplot(grid[0, 2])
    axes = [ax_t, ax_s, ax_skew, ax_prog, ax_u]
    fig.suptitle("comparison")
    n = len(runs)
    repeated = any(isinstance(v, Repeats) for v in runs.values())
    lw, lw_prog = (0.9, 0.5) if repeated else (1.5, 0.8)
    for i, (label, value) in enumerate(runs.items()):
        run_color = color(i, n)
        reps = [_as_run(v) for v in Repeats.of(value)]
        drawn = [(steps, events) for steps, events in reps if steps is not None and not steps.empty]
        if not drawn:
            ax_t.plot([], [], color=run_color, label=f"{label} (no records)")
            continue
        diverged = sum(an.divergence(s, an.smoothing_window(s["worker"].nunique()))["diverged"] for s, _ in drawn)
        shown = f"{label} (DIVERGED)" if diverged == len(drawn) else (
            f"{label} ({diverged} of {len(drawn)} DIVERGED)" if diverged else str(label))
        for r, (steps, events) in enumerate(drawn):
            name = shown if r == 0 else None
            start = an.start_time(events)
            df = (an.prepare_steps(steps, start)
                  if start is not None or "elapsed" not in steps.columns else steps)
            smooth = an.smoothing_window(df["worker"].nunique())
            for ax, by in ((ax_t, "elapsed"), (ax_s, "samples"), (ax_u, "global_step")):
                c = an.loss_curves(df, by=by, smooth=smooth)
                c = c[c["worker"] == an.ALL_WORKERS]
                ax.plot(c[by], c["smoothed"], color=run_color, lw=lw, label=name)
            finished = an.finish_times(df, events) if events is not None else None
            skew = an.skew_timeline(df, finished)
            skew_style: dict[str, Any] = {"lw": lw} if repeated else {}
            ax_skew.plot(skew["elapsed"], skew["skew"], drawstyle="steps-post", color=run_color,
                         label=name, **skew_style)
            for j, (_, d) in enumerate(df.groupby("worker")):
                ax_prog.plot(d["elapsed"], d["completed"], drawstyle="steps-post", color=run_color,
                             lw=lw_prog, alpha=0.8, label=name if j == 0 else None)
    ax_t.set(title="loss vs wall time (smoothed)", xlabel="wall time (s)", ylabel="training loss")
    ax_s.set(title="loss vs minibatches processed (smoothed)", xlabel="minibatches processed",
             ylabel="training loss")
    ax_u.set(title="loss vs updates (smoothed)", xlabel="updates applied (global step)", ylabel="training loss")
    frames = [_as_run(v)[0] for value in runs.values() for v in Repeats.of(value)]
    losses = [f["loss"] for f in frames if f is not None and "loss" in f.columns]
    all_losses = pd.concat(losses) if losses else pd.Series(dtype=float)
    for ax in (ax_t, ax_s, ax_u):
        set_loss_scale(ax, all_losses)
    ax_skew.set(title="step skew", xlabel="wall time (s)", ylabel="most - least advanced (steps)")
    ax_prog.set(title="completed steps per worker", xlabel="wall time (s)",
                ylabel="completed steps")
    for ax in axes:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="small")
    return fig
