"""The error–runtime tradeoff of a comparison: per setting, what staleness costs (minibatches to the target),
what it buys (steps/s) and what the two give together (time to the target), ordered from the most synchronous
setting to the least: sync, allreduce, ssp:0, ssp:1, ..., async."""
from __future__ import annotations

import pandas as pd

from ssptk.analysis.compare import first_to_target

__all__ = ["TRADEOFF_COLUMNS", "tradeoff_table"]

#: Columns of :func:`tradeoff_table`.
TRADEOFF_COLUMNS: tuple[str, ...] = ("label", "order", "steps_per_s", "steps_to_target", "time_to_target_s",
                                     "diverged", "status", "best")


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


def tradeoff_table(table: pd.DataFrame) -> pd.DataFrame:
    """From a comparison table (:func:`ssptk.analysis.compare.compare_table` or its repeats' aggregate): one
    row per setting in :data:`TRADEOFF_COLUMNS`, most synchronous first. ``best`` marks the setting that
    reached the target in the least time (none when no run reached it); diverged and failed settings have no
    time or minibatches to target, so they can never be best."""
    rows = table.assign(order=[_order(m, s) for m, s in zip(table["mode"], table["staleness"])])
    rows = rows.sort_values(["order", "label"], kind="mergesort").reset_index(drop=True)
    rows["best"] = rows["label"] == first_to_target(table)
    if "diverged" not in rows.columns:
        rows["diverged"] = False
    return rows[list(TRADEOFF_COLUMNS)]
