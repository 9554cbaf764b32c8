"""The error–runtime tradeoff of a comparison: per setting, what staleness costs (minibatches to the target),
what it buys (steps/s) and what the two give together (time to the target), ordered from the most synchronous
setting to the least: sync, allreduce, ssp:0, ssp:1, ..., async; and whether the fastest to the target won
by more than noise (:func:`tradeoff_verdict`), so that a figure stars only a real winner."""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from ssptk.analysis.compare import first_to_target

__all__ = ["EARLY_PER_WORKER", "EARLY_SHARE", "SINGLE_RUN_SPREAD", "TRADEOFF_COLUMNS", "TradeoffVerdict",
           "tradeoff_table", "tradeoff_verdict"]

#: Columns of :func:`tradeoff_table`.
TRADEOFF_COLUMNS: tuple[str, ...] = ("label", "order", "steps_per_s", "steps_to_target", "time_to_target_s",
                                     "time_lo", "time_hi", "share_at_target", "diverged", "status", "best")
#: A target reached within this share of a run's minibatches, or within :data:`EARLY_PER_WORKER` minibatches
#: per worker, measures its start, not what staleness costs per update: such a lead is never starred.
EARLY_SHARE = 0.1
#: Each worker's first steps run at a fraction of its pace while the graphs warm up (the main job's first ten
#: steps took 20-75 ms against a 5-20 ms median), so a target reached within this many minibatches per worker
#: is mostly start-up.
EARLY_PER_WORKER = 25
#: Without repeats a run has no measured spread; this share of the fastest time stands for it. The tradeoff
#: benchmark's three repeats per setting spanned up to 24% of their mean time to target (sync 48.3-60.7 s,
#: benchmarks/RESULTS.md), so a lead below a quarter may be one run's luck.
SINGLE_RUN_SPREAD = 0.25


@dataclass(frozen=True)
class TradeoffVerdict:
    """Whether the fastest setting to the target won by more than noise.

    ``fastest``: the label with the least (mean) time to the target, or ``None`` when none reached it;
    ``best``: the same label when its lead is real, else ``None`` (what a figure stars). ``why_not``: when
    ``fastest`` is not ``best``, the reason in words; ``kind`` names it: ``"none"`` (no setting reached the
    target), ``"unreliable"`` (the fastest diverged, failed or missed the target in some repeats), ``"early"``
    (reached within :data:`EARLY_SHARE` of its run or :data:`EARLY_PER_WORKER` minibatches per worker),
    ``"noise"`` (another setting within its spread), or ``""`` for a real winner. ``close``: the settings
    within noise of the fastest."""

    fastest: str | None
    best: str | None
    kind: str
    why_not: str
    close: tuple[str, ...] = ()
    #: ``(least, most)`` minibatches to the target when every setting that reached it needed about as many
    #: (within :data:`SINGLE_RUN_SPREAD`): staleness cost no progress per update, so time only ranks speed.
    same_cost: tuple[float, float] | None = None

    @property
    def no_tradeoff(self) -> bool:
        """The times to the target say nothing about the tradeoff (early or within noise)."""
        return self.kind in ("early", "noise")


def _order(mode: object, staleness: object) -> float:
    """Where a setting sits between lock-step and free-running: sync and allreduce first, ssp by its bound,
    async last."""
    if mode in ("sync", "allreduce"):
        return -1.0
    if mode == "ssp":
        try:
            return float(staleness)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return 0.0
    return float("inf")


def _num(table: pd.DataFrame, column: str) -> pd.Series:
    if column not in table.columns:
        return pd.Series(float("nan"), index=table.index, dtype="float64")
    return pd.to_numeric(table[column], errors="coerce").astype("float64")


def _with_spread(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with ``time_lo``/``time_hi`` (the repeats' min and max time to target, else the time itself)
    and ``share_at_target`` (minibatches to target over the run's minibatches, steps/s x wall seconds)."""
    time = _num(table, "time_to_target_s")
    lo, hi = _num(table, "time_to_target_s_min"), _num(table, "time_to_target_s_max")
    total = _num(table, "steps_per_s") * _num(table, "wall_s")
    return table.assign(time_lo=lo.fillna(time), time_hi=hi.fillna(time),
                        share_at_target=_num(table, "steps_to_target") / total.where(total > 0))


def _reached(table: pd.DataFrame) -> Mapping[str, tuple[int, int]]:
    """label -> (repeats that reached the target, repeats): from the table's ``reached`` attribute
    (:func:`ssptk.analysis.aggregate_repeats`), else one run each, reached when it has a time."""
    given = table.attrs.get("reached") or {}
    out: dict[str, tuple[int, int]] = {}
    for row in table.to_dict("records"):
        label = str(row["label"])
        reps = row.get("repeats")
        n = 1 if reps is None or pd.isna(reps) else int(reps)
        has_time = not pd.isna(row.get("time_to_target_s"))
        out[label] = (int(given[label]) if label in given else (n if has_time else 0), n)
    return out


def tradeoff_verdict(table: pd.DataFrame) -> TradeoffVerdict:
    """Whether the fastest setting to the target (of a comparison table, or its repeats' aggregate) won.

    Never a winner: a setting that diverged, failed or missed the target in any repeat; one that reached the
    target within the first :data:`EARLY_SHARE` of its minibatches or :data:`EARLY_PER_WORKER` minibatches per
    worker (the time then measures start-up); one whose lead over another setting is within the spread: with
    repeats, their ``[min–max]`` times overlap; without, the other's time is within :data:`SINGLE_RUN_SPREAD` of
    its own. A setting that never reached the target is no rival. A real winner whose settings all needed about
    as many minibatches has ``same_cost``: it won on speed alone."""
    fastest = first_to_target(table)
    if fastest is None:
        return TradeoffVerdict(None, None, "none", "no setting reached the target")
    rows = _with_spread(table).set_index(table["label"].astype(str))
    me = rows.loc[fastest]
    reached, runs = _reached(table)[fastest]
    diverged, failed = bool(me.get("diverged")), str(me.get("status")) != "ok"
    if diverged or failed or reached < runs:
        missed = (f"reached it in only {reached} of its {runs} runs" if reached < runs
                  else f"{'diverged' if diverged else 'failed'} in {'some of its runs' if runs > 1 else 'its run'}")
        return TradeoffVerdict(fastest, None, "unreliable", f"{fastest}, the fastest to the target, {missed}")
    share = _first(me["share_at_target"], math.nan)
    per_worker = _first(me["steps_to_target"], math.nan) / max(1.0, _first(me.get("workers"), 1.0))
    if share < EARLY_SHARE or per_worker < EARLY_PER_WORKER:
        of_run = f" ({_pct(share)} of its run)" if math.isfinite(share) else ""
        return TradeoffVerdict(fastest, None, "early",
                               f"{fastest} reached the target after {per_worker:.3g} minibatches per worker{of_run}, "
                               "so the times to it measure start-up, not what staleness costs per update")
    repeated = "time_to_target_s_min" in table.columns and bool((_num(table, "repeats") > 1).any())
    close: list[str] = []
    for label, row in rows.iterrows():
        if label == fastest or pd.isna(row["time_to_target_s"]):
            continue
        if (row["time_lo"] <= me["time_hi"]) if repeated else \
                (row["time_to_target_s"] <= me["time_to_target_s"] * (1 + SINGLE_RUN_SPREAD)):
            close.append(str(label))
    if close:
        spread = "their min–max times overlap" if repeated else \
            f"within {SINGLE_RUN_SPREAD:.0%}, what one run varies by from the next"
        return TradeoffVerdict(fastest, None, "noise",
                               f"{fastest}'s lead over {', '.join(close)} is within noise ({spread})", tuple(close))
    costs = _num(table, "steps_to_target").dropna()
    same = (float(costs.min()), float(costs.max())) if len(costs) > 1 and \
        costs.max() <= costs.min() * (1 + SINGLE_RUN_SPREAD) else None
    return TradeoffVerdict(fastest, fastest, "", "", same_cost=same)


def _first(value: Any, default: float) -> float:
    """``value`` as a float, ``default`` when missing."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        return default
    return default if math.isnan(out) else out


def _pct(share: Any) -> str:
    p = 100.0 * float(share)
    return f"{p:.0f}%" if p >= 1 else "under 1%"


def tradeoff_table(table: pd.DataFrame) -> pd.DataFrame:
    """From a comparison table (:func:`ssptk.analysis.compare.compare_table` or its repeats' aggregate): one
    row per setting in :data:`TRADEOFF_COLUMNS`, most synchronous first. ``time_lo``/``time_hi``: the repeats'
    min–max time to target (the time itself for one run); ``share_at_target``: the share of the run's
    minibatches spent before reaching it. ``best`` marks the setting :func:`tradeoff_verdict` finds a real
    winner (none when the lead is within noise, early, or no run reached the target); diverged and failed
    settings have no time or minibatches to target, so they can never be best. ``attrs["verdict"]`` is the
    :class:`TradeoffVerdict`."""
    verdict = tradeoff_verdict(table)
    rows = _with_spread(table)
    rows = rows.assign(order=[_order(m, s) for m, s in zip(table["mode"], table["staleness"])])
    rows = rows.sort_values(["order", "label"], kind="mergesort").reset_index(drop=True)
    rows["best"] = rows["label"] == verdict.best
    if "diverged" not in rows.columns:
        rows["diverged"] = False
    out = rows[list(TRADEOFF_COLUMNS)]
    out.attrs["verdict"] = verdict
    return out
