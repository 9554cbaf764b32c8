"""Predicted runs drawn over the measured ones: where the simulator's replay agrees with reality, and where not."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from ssptk import analysis as an
from ssptk.render.figures import Repeats
from ssptk.render.fit import LEGEND_INSIDE, foot_note, label_ticks, legend_below
from ssptk.render.held_out_plot import held_out_points
from ssptk.render.style import NotebookFigure, color, draw_target, set_loss_scale
from ssptk.render.verdict_words import marker, pace_lines, why_no_winner

__all__ = ["predicted_figure", "predicted_lines"]


def _curve(run: Any, held_out: bool) -> tuple[Any, Any]:
    """``(minibatches, loss)`` of one run tuple: its held-out evaluations, or its smoothed overall training
    loss; ``(None, None)`` when it has none."""
    if not isinstance(run, tuple) or run[0] is None or run[0].empty:
        return None, None
    if held_out:
        points = held_out_points(run)
        return (points[0][1], points[0][0]["eval_loss"]) if points else (None, None)
    steps, events = run[0], run[1]
    df = an.prepare_steps(steps, an.start_time(events))
    c = an.loss_curves(df, by="samples", smooth=an.smoothing_window(df["worker"].nunique()))
    c = c[c["worker"] == an.ALL_WORKERS]
    return c["samples"], c["smoothed"]


def predicted_figure(runs: Mapping[str, Any], predicted: Mapping[str, Any], table: pd.DataFrame) -> Figure:
    """Two panels: each label's smoothed training loss against minibatches, measured (solid, its first run)
    and predicted (dashed, same colour), with the target; and minibatches to that target, measured beside
    predicted (:func:`ssptk.analysis.predicted_vs_measured.predicted_table` is ``table``), a missing bar said in
    words. The legend names each label's colour once and the two line styles once; more than
    :data:`~ssptk.render.fit.LEGEND_INSIDE` entries go below the panels (a legend of 25 covered a third of one)."""
    fig = NotebookFigure(figsize=(13, 4.4), layout="constrained")
    ax_loss, ax_bar = fig.subplots(1, 2, width_ratios=[3, 2])
    labels = list(runs)
    n = len(labels)
    held_out = table.attrs.get("target_on") == "held-out"  # then the loss the target is on is drawn
    drawn: list[pd.Series] = []
    handles: list[Any] = []
    for i, label in enumerate(labels):
        c = color(i, n)
        handles.append(Line2D([], [], color=c, lw=1.4, label=label))
        for value, style in ((Repeats.of(runs[label])[:1], "-"), ([predicted.get(label)], "--")):
            x, y = _curve(value[0] if value else None, held_out)
            if x is not None:
                ax_loss.plot(x, y, style, color=c, lw=1.4, marker="." if held_out else None)
                drawn.append(y)
    handles += [Line2D([], [], color="0.2", lw=1.4, ls=style, label=name)
                for style, name in (("-", "measured"), ("--", "predicted"))]
    target = table.attrs.get("target")
    if target is not None:
        handles.append(draw_target(ax_loss, target, label=f"target {target:.3g}"))
    set_loss_scale(ax_loss, drawn)
    which = "held-out loss" if held_out else "training loss (smoothed)"
    ax_loss.set(title=f"{which.split(' (')[0]} vs minibatches:\nmeasured (solid) and predicted (dashed)",
                xlabel="minibatches processed", ylabel=which)
    if len(handles) <= LEGEND_INSIDE:
        ax_loss.legend(handles=handles, fontsize="small")
    else:
        legend_below(fig, handles, [str(h.get_label()) for h in handles])
    _bars(ax_bar, table, n)
    return fig


def _bars(ax: Axes, table: pd.DataFrame, n: int) -> None:
    """Minibatches to the target per label: measured and predicted side by side."""
    x = np.arange(len(table))
    top = 0.0
    for k, (col, hatch, name) in enumerate((("steps_to_target", "", "measured"),
                                            ("steps_to_target_predicted", "//", "predicted"))):
        values = pd.to_numeric(table[col], errors="coerce").to_numpy(dtype="float64")
        colors = [color(i, n) for i in range(len(table))]
        ax.bar(x + (k - 0.5) * 0.38, np.nan_to_num(values), width=0.36, color=colors, hatch=hatch,
               edgecolor="white" if not hatch else "0.2", alpha=1.0 if not hatch else 0.55, label=name)
        top = max(top, float(np.nanmax(values)) if not np.isnan(values).all() else 0.0)
    for k, col, which in ((0, "steps_to_target", "verdict"), (1, "steps_to_target_predicted", "verdict_predicted")):
        verdict = table.attrs.get(which)
        for i, (v, label) in enumerate(zip(table[col], table["label"].astype(str))):
            if pd.isna(v) and verdict is not None and label in {o.label for o in verdict.outcomes}:
                foot_note(ax, i + (k - 0.5) * 0.38, " ".join(marker(verdict.outcome(label)).lstrip("× ").split()))
    on = "held-out" if table.attrs.get("target_on") == "held-out" else "training"
    ax.set(title=f"minibatches to the {on} target\n(lower is better)", ylabel="minibatches")
    label_ticks(ax, table["label"].astype(str).tolist())
    ax.set_ylim(0, 1.3 * max(top, 1.0))  # room above the bars for the legend: it hid the tallest one
    ax.legend(fontsize="small", loc="upper right", ncols=2)


def predicted_lines(table: pd.DataFrame) -> list[str]:
    """What the prediction table says, in sentences for the report and the terminal."""
    if not len(table):
        return []
    ratios = pd.to_numeric(table["predicted_over_measured"], errors="coerce").dropna()
    lines = ["Predicted (dashed): each run's options replayed by the simulator with the model's real gradients, "
             "its clock simulated with the run's own calibrated per-step overhead; minibatches to the target do "
             "not depend on that clock."]
    if len(ratios):
        lines.append(f"Minibatches to the target, predicted / measured: {', '.join(f'{r:.2f}' for r in ratios)} "
                     f"({int(((ratios - 1).abs() <= 0.2).sum())} of {len(ratios)} within 20%).")
    gaps = pd.to_numeric(table["loss_gap"], errors="coerce").dropna() if "loss_gap" in table else pd.Series()
    if len(gaps):
        lines.append("Loss gap (the median relative distance between the measured and predicted smoothed training "
                     f"loss over the minibatches both processed): {', '.join(f'{100 * g:.0f}%' for g in gaps)}.")
    mismatch = [str(r["label"]) for r in table.to_dict("records")
                if r["diverged_predicted"] is not None and bool(r["diverged"]) != bool(r["diverged_predicted"])]
    if mismatch:
        lines.append(f"Diverged in one but not the other: {', '.join(mismatch)}.")
    measured, predicted = table.attrs.get("verdict"), table.attrs.get("verdict_predicted")
    if measured is not None and predicted is not None and (measured.fastest or predicted.fastest):
        lines.append(f"Fastest to the target: measured {_first(measured)}; predicted {_first(predicted)}.")
    return lines + pace_lines(table.attrs.get("pace") or ())


def _first(verdict: Any) -> str:
    """The first to the target as its comparison's verdict has it: ``ssp:4 (best)``, ``ssp:4 and async (tied)``,
    ``ssp:4 (no winner: ...)``, ``none``."""
    if verdict.fastest is None:
        return "none"
    if verdict.winner is not None:
        return f"{verdict.winner} (a real lead)"
    return f"{verdict.fastest} (no winner: {why_no_winner(verdict)})"
