"""The error–runtime tradeoff of a comparison: per setting, what staleness costs (minibatches to the target),
what it buys (steps/s) and what the two give together (time to the target), ordered from the most synchronous
setting to the least: sync, allreduce, ssp:0, ssp:1, ..., async. Who won, and why not, is the comparison's
:class:`ssptk.analysis.verdict.Verdict`; this table only orders the settings and marks its winner."""
from __future__ import annotations

import pandas as pd

from ssptk.analysis.verdict import Verdict, verdict_of

__all__ = ["TRADEOFF_COLUMNS", "tradeoff_table"]

#: Columns of :func:`tradeoff_table`.
TRADEOFF_COLUMNS: tuple[str, ...] = ("label", "order", "steps_per_s", "steps_to_target", "time_to_target_s",
                                     "time_lo", "time_hi", "share_at_target", "diverged", "status", "best")


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


def tradeoff_table(table: pd.DataFrame, verdict: Verdict | None = None) -> pd.DataFrame:
    """From a comparison table (:func:`ssptk.analysis.comparison_table.compare_table` or its repeats' aggregate): one
    row per setting in :data:`TRADEOFF_COLUMNS`, most synchronous first. ``time_lo``/``time_hi``: the repeats'
    min–max time to target (the time itself for one run); ``share_at_target``: the share of the run's
    minibatches spent before reaching it. ``best`` marks the verdict's winner (``verdict``: the table's own,
    :func:`ssptk.analysis.verdict.verdict_of`). ``attrs["verdict"]`` is the verdict."""
    verdict = verdict_of(table) if verdict is None else verdict
    by_label = {o.label: o for o in verdict.outcomes}
    labels = table["label"].astype(str)
    def column(field: str) -> pd.Series:
        values = [getattr(by_label[x], field) if x in by_label else None for x in labels]
        return pd.to_numeric(pd.Series(values, index=table.index, dtype="object"), errors="coerce").astype("float64")

    rows = table.assign(time_lo=column("time_lo"), time_hi=column("time_hi"), share_at_target=column("share"),
                        order=[_order(m, s) for m, s in zip(table["mode"], table["bound"])])
    rows = rows.sort_values(["order", "label"], kind="mergesort").reset_index(drop=True)
    rows["best"] = rows["label"].astype(str) == verdict.winner
    if "diverged" not in rows.columns:
        rows["diverged"] = False
    out = rows[list(TRADEOFF_COLUMNS)]
    out.attrs["verdict"] = verdict
    return out
