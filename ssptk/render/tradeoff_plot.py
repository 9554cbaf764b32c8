"""The error–runtime figure: for each setting, from sync to async, the minibatches it needed to reach the target
(what staleness costs), its steps/s (what staleness buys) and its time to the target (both together), with the
repeats' spread; the fastest is starred only when the comparison's verdict (:class:`ssptk.analysis.Verdict`) finds
its lead real, and every setting without a value says why, as the verdict has it. :func:`tradeoff_lines` says the
same in words, for the report and the terminal."""
from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ssptk.analysis.tradeoff import tradeoff_table
from ssptk.analysis.verdict import Verdict, verdict_of
from ssptk.render.fit import foot_note, label_ticks
from ssptk.render.style import NOTE_COLOR, NotebookFigure
from ssptk.render.verdict_words import WHERE_THE_TRADEOFF_IS, marker, no_winner_box, verdict_lines

__all__ = ["WHERE_THE_TRADEOFF_IS", "tradeoff_figure", "tradeoff_lines"]

_PRICE, _GAIN, _TIME, _BAD = "tab:blue", "tab:green", "tab:purple", "tab:red"


def tradeoff_lines(table: pd.DataFrame, verdict: Verdict | None = None) -> list[str]:
    """What the time to the target says about the tradeoff, in words:
    :func:`ssptk.render.verdict_words.verdict_lines` of the comparison's verdict (``verdict``, else the one ``table``
    carries)."""
    return verdict_lines(verdict_of(table) if verdict is None else verdict)


def _misses(ax: Axes, rows: pd.DataFrame, values: pd.Series, verdict: Verdict) -> None:
    """At settings without a value: why (the verdict's outcome: diverged, failed, not reached), in red at the foot
    of the axis."""
    for x, label in enumerate(rows["label"].astype(str)):
        if pd.isna(values.iloc[x]):
            foot_note(ax, x, marker(verdict.outcome(label)), color=_BAD, fontsize="small")


def _top(values: pd.Series) -> float:
    """An axis top with room above the largest value (1 when there is none)."""
    top = values.max()
    return 1.0 if pd.isna(top) or top <= 0 else float(top) * 1.15


def _time_panel(ax: Axes, rows: pd.DataFrame, verdict: Verdict) -> None:
    """Time to target with the repeats' min–max as error bars; the winner starred, or why there is none."""
    x = np.arange(len(rows))
    times = pd.to_numeric(rows["time_to_target_s"], errors="coerce").astype("float64")
    lo = pd.to_numeric(rows["time_lo"], errors="coerce").astype("float64")
    hi = pd.to_numeric(rows["time_hi"], errors="coerce").astype("float64")
    ax.plot(x, times, "o-", color=_TIME)
    spread = (hi - lo).fillna(0) > 0
    if spread.any():
        ax.errorbar(x[spread], times[spread], yerr=[(times - lo)[spread], (hi - times)[spread]], fmt="none",
                    ecolor=_TIME, capsize=4, lw=1, label="min–max over the repeats")
    best = rows.index[rows["best"]]
    if len(best):
        ax.plot([best[0]], [times.iloc[best[0]]], "*", ms=16, color="gold", mec="black",
                label=f"best: {rows['label'].iloc[best[0]]}")
    box = None if len(best) else no_winner_box(verdict)
    if box:
        ax.text(0.5, 0.96, box, transform=ax.transAxes, ha="center", va="top",
                color=NOTE_COLOR, fontsize="medium", bbox={"fc": "white", "ec": "0.8", "alpha": 0.9})
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="medium", loc="lower left")
    ax.set(title="time to target (both together)", ylabel="seconds")
    ax.set_ylim(0, _top(hi.fillna(times)) * (1.35 if box else 1.0))
    _misses(ax, rows, times, verdict)


def tradeoff_figure(table: pd.DataFrame, target: float | None = None, verdict: Verdict | None = None) -> Figure:
    """Two panels over the settings of a comparison table, most synchronous left: minibatches to target with
    steps/s on a second axis, and time to target (the repeats' min–max as error bars) with the verdict's winner
    starred (``verdict``: the comparison's, else the one ``table`` carries); without one, the panel says why."""
    verdict = verdict_of(table) if verdict is None else verdict
    rows = tradeoff_table(table, verdict)
    x = np.arange(len(rows))
    fig = NotebookFigure(figsize=(11, 3.8), layout="constrained")
    ax_price, ax_time = fig.subplots(1, 2)
    goal = "the target" if target is None else f"loss {target:.3g}"
    fig.suptitle(f"what staleness costs and buys: minibatches and time to {goal}")
    steps = pd.to_numeric(rows["steps_to_target"], errors="coerce").astype("float64")
    rate = pd.to_numeric(rows["steps_per_s"], errors="coerce").astype("float64")
    ax_price.plot(x, steps, "o-", color=_PRICE, label="minibatches to target (cost)")
    ax_price.set_ylabel("minibatches to target", color=_PRICE)
    ax_price.set_ylim(0, _top(steps))
    ax_gain = ax_price.twinx()
    ax_gain.plot(x, rate, "s--", color=_GAIN, label="steps/s (gain)")
    ax_gain.set_ylabel("steps/s", color=_GAIN)
    ax_gain.set_ylim(0, _top(rate))
    _misses(ax_price, rows, steps, verdict)
    ax_price.set_title("cost per update vs speed")
    _time_panel(ax_time, rows, verdict)
    for ax in (ax_price, ax_time):
        label_ticks(ax, [str(label) for label in rows["label"]])
        ax.set_xlim(-0.5, len(rows) - 0.5)
        ax.set_xlabel("more synchronous ← setting → less synchronous")
    return fig
