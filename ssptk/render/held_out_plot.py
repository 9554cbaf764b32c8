"""The held-out loss of several runs against wall time and against minibatches (runs with ``--eval-every``)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from ssptk import analysis as an
from ssptk.render.figures import Repeats
from ssptk.render.fit import LEGEND_INSIDE, legend_below
from ssptk.render.style import NotebookFigure, color, draw_target, set_loss_scale
from ssptk.render.text import evaluated_every

__all__ = ["has_held_out", "held_out_figure", "held_out_points"]


def held_out_points(value: Any) -> list[tuple[pd.DataFrame, pd.Series]]:
    """``(curve, minibatches at each point)`` of every repetition of one label that logged evaluations."""
    out = []
    for run in Repeats.of(value):
        if not isinstance(run, tuple) or len(run) < 2:
            continue
        steps, events = run[0], run[1]
        summary = run[3] if len(run) > 3 else None
        curve = an.held_out_curve(events, steps, summary)
        if curve is None or steps is None or steps.empty:
            continue
        start = an.start_time(events)
        t = np.sort(steps["t"].to_numpy(dtype="float64"))
        curve = curve.assign(elapsed=curve["t"] - (start if start is not None else t[0]))
        out.append((curve, pd.Series(t.searchsorted(curve["t"].to_numpy(), side="right"))))
    return out


def has_held_out(runs: Mapping[str, Any]) -> bool:
    """Whether any run of ``runs`` (label -> run tuple or :class:`Repeats`) logged held-out evaluations."""
    return any(held_out_points(v) for v in runs.values())


def held_out_figure(runs: Mapping[str, Any], target: float | None = None) -> Figure:
    """Two panels, one colour per label: held-out loss against wall time (from the start barrier) and against
    minibatches processed, with the target as a dotted line. Values: ``(steps, events, config, summary)``
    tuples or :class:`Repeats` of them (each repetition drawn, thinner)."""
    fig = NotebookFigure(figsize=(11, 3.8), layout="constrained")
    ax_t, ax_m = fig.subplots(1, 2)
    every = evaluated_every(an.run_options(r[2]).eval_every for v in runs.values() for r in Repeats.of(v)
                            if isinstance(r, tuple) and len(r) > 2)
    fig.suptitle(f"held-out loss (worker 0's evaluations {every}, and the final one)")
    losses = []
    for i, (label, value) in enumerate(runs.items()):
        curves = held_out_points(value)
        lw = 0.9 if len(curves) > 1 else 1.5
        for r, (curve, minibatches) in enumerate(curves):
            name = str(label) if r == 0 else None
            ax_t.plot(curve["elapsed"], curve["eval_loss"], color=color(i, len(runs)), lw=lw, marker=".", label=name)
            ax_m.plot(minibatches, curve["eval_loss"], color=color(i, len(runs)), lw=lw, marker=".", label=name)
            losses.append(curve["eval_loss"])
    for ax, xlabel in ((ax_t, "wall time (s)"), (ax_m, "minibatches processed")):
        ax.set(xlabel=xlabel, ylabel="held-out loss")
        if losses:
            set_loss_scale(ax, losses)
        if target is not None:
            draw_target(ax, target, label="target" if ax is ax_t else None)
    ax_t.set_title("held-out loss vs wall time")
    ax_m.set_title("held-out loss vs minibatches")
    handles, labels = ax_t.get_legend_handles_labels()
    if len(handles) > LEGEND_INSIDE:  # 13 entries in a panel hid the curve that climbed
        legend_below(fig, handles, labels)
    elif handles:
        ax_t.legend(fontsize="small")
    return fig
