"""The error–runtime figure: for each setting, from sync to async, the minibatches it needed to reach the target
(what staleness costs), its steps/s (what staleness buys) and its time to the target (both together), with the
repeats' spread; the fastest is starred only when :func:`ssptk.analysis.tradeoff_verdict` finds its lead real.
:func:`tradeoff_lines` says the same in words, for the report and the terminal."""
from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ssptk.analysis.tradeoff import TradeoffVerdict, tradeoff_table, tradeoff_verdict
from ssptk.render.style import NOTE_COLOR, NotebookFigure

__all__ = ["WHERE_THE_TRADEOFF_IS", "tradeoff_figure", "tradeoff_lines"]

_PRICE, _GAIN, _TIME, _BAD = "tab:blue", "tab:green", "tab:purple", "tab:red"
#: Where a newcomer sees both sides of the tradeoff, when a run does not show them.
WHERE_THE_TRADEOFF_IS = ('notebooks/sync_ssp_async.ipynb, "Both axes" (non-IID data with transient pauses, where '
                         "sync loses to waiting, async to staleness and a middle bound wins)")
_NO_STAR = {"early": "no winner: reached early,\nthe times measure start-up", "noise": "no winner: within noise",
            "unreliable": "no winner: the fastest\nmissed the target in some runs"}


def tradeoff_lines(table: pd.DataFrame) -> list[str]:
    """What the time to the target says about the tradeoff, in words (none for fewer than two settings, or
    when none reached the target: :func:`ssptk.render.tables.target_lines` says so): the real winner, or why
    there is none; when the times say nothing (reached early, or within noise), that the tradeoff is not in
    this run and where it is."""
    if len(table) < 2:
        return []
    verdict = tradeoff_verdict(table)
    if verdict.kind == "none":
        return []
    if verdict.best is not None and verdict.same_cost is not None:
        lo, hi = verdict.same_cost
        return [f"Fastest to the target: {verdict.best}, ahead by more than the spread of its time; but staleness "
                f"cost no progress per update here (every setting needed {lo:.4g}-{hi:.4g} minibatches), so it is "
                f"first only because its steps are faster: the tradeoff is not in this run. Where both sides show: "
                f"{WHERE_THE_TRADEOFF_IS}."]
    if verdict.best is not None:
        return [f"Fastest to the target: {verdict.best}, ahead of every other setting by more than the spread "
                "of its time."]
    if not verdict.no_tradeoff:
        return [f"No winner on time to the target: {verdict.why_not}."]
    return [f"The staleness tradeoff is not in this run: {verdict.why_not}. This run shows what staleness buys "
            f"(steps/s, wait) and lets drift (skew, staleness); both sides: {WHERE_THE_TRADEOFF_IS}."]


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


def _time_panel(ax: Axes, rows: pd.DataFrame, verdict: TradeoffVerdict) -> None:
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
    elif verdict.kind in _NO_STAR:
        ax.text(0.5, 0.96, _NO_STAR[verdict.kind], transform=ax.transAxes, ha="center", va="top",
                color=NOTE_COLOR, fontsize="medium", bbox={"fc": "white", "ec": "0.8", "alpha": 0.9})
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="medium", loc="lower left")
    ax.set(title="time to target (both together)", ylabel="seconds")
    ax.set_ylim(0, _top(hi.fillna(times)) * (1.35 if not len(best) and verdict.kind in _NO_STAR else 1.0))
    _misses(ax, rows, times)


def tradeoff_figure(table: pd.DataFrame, target: float | None = None) -> Figure:
    """Two panels over the settings of a comparison table, most synchronous left: minibatches to target with
    steps/s on a second axis, and time to target (the repeats' min–max as error bars) with the best setting
    starred, only when :func:`ssptk.analysis.tradeoff_verdict` finds its lead more than noise (else the panel
    says why there is no winner)."""
    rows = tradeoff_table(table)
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
    _misses(ax_price, rows, steps)
    ax_price.set_title("cost per update vs speed")
    _time_panel(ax_time, rows, rows.attrs["verdict"])
    for ax in (ax_price, ax_time):
        ax.set_xticks(x, [str(label) for label in rows["label"]])
        ax.set_xlim(-0.5, len(rows) - 0.5)
        ax.set_xlabel("more synchronous ← setting → less synchronous")
    return fig
