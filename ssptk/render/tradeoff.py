"""The error–runtime figure: for each setting, from sync to async, the minibatches it needed to reach the target
(what staleness costs), its steps/s (what staleness buys) and its time to the target (both together)."""
from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ssptk.analysis.tradeoff import tradeoff_table
from ssptk.render.style import NotebookFigure

__all__ = ["tradeoff_figure"]

_PRICE, _GAIN, _TIME, _BAD = "tab:blue", "tab:green", "tab:purple", "tab:red"


def _misses(ax: Axes, rows: pd.DataFrame, values: pd.Series) -> None:
    """At settings without a value: why (diverged, failed, not reached), in red at the foot of the axis."""
    for x, (_, row) in enumerate(rows.iterrows()):
        if pd.isna(values.iloc[x]):
            why = "diverged" if row["diverged"] else ("failed" if row["status"] not in ("ok", None) else "not reached")
            ax.annotate(f"× {why}", (x, 0.02), xycoords=("data", "axes fraction"), ha="center", color=_BAD,
                        fontsize="small")


def _top(values: pd.Series) -> float:
    """An axis top with room above the largest value (1 when there is none)."""
    top = values.max()
    return 1.0 if pd.isna(top) or top <= 0 else float(top) * 1.15


def tradeoff_figure(table: pd.DataFrame, target: float | None = None) -> Figure:
    """Two panels over the settings of a comparison table, most synchronous left: minibatches to target with
    steps/s on a second axis, and time to target with the best setting starred."""
    rows = tradeoff_table(table)
    x = np.arange(len(rows))
    fig = NotebookFigure(figsize=(11, 3.8), layout="constrained")
    ax_price, ax_time = fig.subplots(1, 2)
    goal = "the target" if target is None else f"loss {target:.3g}"
    fig.suptitle(f"what staleness costs and buys: minibatches and time to {goal}")
    steps = pd.to_numeric(rows["steps_to_target"], errors="coerce").astype("float64")
    rate = pd.to_numeric(rows["steps_per_s"], errors="coerce").astype("float64")
    times = pd.to_numeric(rows["time_to_target_s"], errors="coerce").astype("float64")
    ax_price.plot(x, steps, "o-", color=_PRICE, label="minibatches to target (cost)")
    ax_price.set_ylabel("minibatches to target", color=_PRICE)
    ax_price.set_ylim(0, _top(steps))
    ax_gain = ax_price.twinx()
    ax_gain.plot(x, rate, "s--", color=_GAIN, label="steps/s (gain)")
    ax_gain.set_ylabel("steps/s", color=_GAIN)
    ax_gain.set_ylim(0, _top(rate))
    _misses(ax_price, rows, steps)
    ax_price.set_title("cost per update vs speed")
    ax_time.plot(x, times, "o-", color=_TIME)
    best = rows.index[rows["best"]]
    if len(best):
        ax_time.plot([best[0]], [times.iloc[best[0]]], "*", ms=16, color="gold", mec="black",
                     label=f"best: {rows['label'].iloc[best[0]]}")
        ax_time.legend(fontsize="small")
    ax_time.set(title="time to target (both together)", ylabel="seconds")
    ax_time.set_ylim(0, _top(times))
    _misses(ax_time, rows, times)
    for ax in (ax_price, ax_time):
        ax.set_xticks(x, [str(label) for label in rows["label"]])
        ax.set_xlim(-0.5, len(rows) - 0.5)
        ax.set_xlabel("more synchronous ← setting → less synchronous")
    return fig
