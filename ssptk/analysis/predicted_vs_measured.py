"""Predicted against measured: one row per label of a comparison whose runs were also predicted.

Both sides are :func:`ssptk.analysis.compare_table` rows measured against **one target**, the measured runs'
(a prediction never moves the bar the real runs are held to). ``steps_to_target`` (minibatches) does not
depend on the simulated clock, so it is the figure a prediction is judged by; ``time_to_target_s`` also rests
on the per-step overhead the prediction was simulated with (each real run's own, calibrated).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from ssptk.analysis.comparison_table import RunTuple, compare_table
from ssptk.analysis.metrics import ALL_WORKERS, loss_curves, prepare_steps, smoothing_window, start_time
from ssptk.analysis.verdict import verdict_of
from ssptk.analysis.verdict_facts import pace_gaps

__all__ = ["PREDICTED_COLUMNS", "best_label", "loss_gap", "predicted_table"]

#: Columns of :func:`predicted_table`.
PREDICTED_COLUMNS: tuple[str, ...] = (
    "label", "steps_to_target", "steps_to_target_predicted", "predicted_over_measured", "loss_gap",
    "time_to_target_s", "time_to_target_s_predicted", "final_loss", "final_loss_predicted", "diverged",
    "diverged_predicted",
)


def loss_gap(measured: RunTuple, predicted: RunTuple) -> float | None:
    """How far apart two runs' training losses are over their whole course, not at one crossing: the median,
    over the minibatches both processed, of |predicted - measured| / measured for the smoothed overall training
    loss (each run's own smoothing window) against minibatches processed. ``None`` without records."""
    curves = []
    for steps, events, _config, _summary in (measured, predicted):
        if steps is None or steps.empty or "loss" not in steps:
            return None
        df = prepare_steps(steps, start_time(events))
        c = loss_curves(df, by="samples", smooth=smoothing_window(df["worker"].nunique()))
        c = c[c["worker"] == ALL_WORKERS]
        curves.append((c["samples"].to_numpy(float), c["smoothed"].to_numpy(float)))
    (xa, ya), (xb, yb) = curves
    grid = np.arange(1, int(min(xa.max(), xb.max())) + 1)
    if not len(grid):
        return None
    a, b = np.interp(grid, xa, ya), np.interp(grid, xb, yb)
    ok = np.isfinite(a) & np.isfinite(b) & (np.abs(a) > 0)
    return float(np.median(np.abs(b[ok] - a[ok]) / np.abs(a[ok]))) if ok.any() else None


def predicted_table(measured: pd.DataFrame, predicted: Mapping[str, RunTuple],
                    runs: Mapping[str, RunTuple] | None = None) -> pd.DataFrame:
    """Each label of ``measured`` (a comparison table) beside its prediction (``label -> run tuple``), both
    against ``measured.attrs["target"]``. ``predicted_over_measured``: minibatches to target, predicted /
    measured (missing when either did not reach it); ``loss_gap`` (with the measured ``runs``): :func:`loss_gap`.
    ``attrs``: ``target``, ``target_on``, ``best`` and ``best_predicted`` (the label first to the target in
    time, measured and predicted: raw figures), ``verdict`` and ``verdict_predicted`` (each comparison's
    :class:`ssptk.analysis.Verdict`, the one the words and markers come from), ``pace`` (the labels whose predicted
    steps/s differ from the measured run's: :func:`ssptk.analysis.verdict_facts.pace_gaps`)."""
    target = measured.attrs.get("target")
    pred = compare_table(predicted, target) if predicted and target is not None else None
    rows: list[dict[str, Any]] = []
    for row in measured.to_dict("records"):
        label = row["label"]
        p = {} if pred is None else next((r for r in pred.to_dict("records") if r["label"] == label), {})
        a, b = row.get("steps_to_target"), p.get("steps_to_target")
        rows.append({
            "label": label, "steps_to_target": a, "steps_to_target_predicted": b,
            "predicted_over_measured": float(b) / float(a) if _num(a) and _num(b) else None,  # type: ignore[arg-type]
            "loss_gap": loss_gap(runs[label], predicted[label]) if runs and label in runs and label in predicted
            else None,
            "time_to_target_s": row.get("time_to_target_s"), "time_to_target_s_predicted": p.get("time_to_target_s"),
            "final_loss": row.get("final_loss"), "final_loss_predicted": p.get("final_loss"),
            "diverged": bool(row.get("diverged")), "diverged_predicted": bool(p.get("diverged")) if p else None,
        })
    table = pd.DataFrame(rows, columns=list(PREDICTED_COLUMNS))
    for col in ("predicted_over_measured", "loss_gap", "time_to_target_s", "time_to_target_s_predicted", "final_loss",
                "final_loss_predicted"):
        table[col] = pd.to_numeric(table[col], errors="coerce").astype("float64")
    for col in ("steps_to_target", "steps_to_target_predicted"):
        table[col] = pd.to_numeric(table[col], errors="coerce").astype("Int64")
    table.attrs.update(target=target, target_on=measured.attrs.get("target_on"),
                       predicted_cores=[] if pred is None else pred.attrs.get("predicted_cores", []),
                       best=best_label(table, "time_to_target_s"),
                       best_predicted=best_label(table, "time_to_target_s_predicted"),
                       verdict=verdict_of(measured), verdict_predicted=None if pred is None else verdict_of(pred),
                       pace=pace_gaps({label: r[3] for label, r in (runs or {}).items()},
                                      {label: r[3] for label, r in predicted.items()}))
    return table


def best_label(table: pd.DataFrame, column: str) -> str | None:
    """The label with the least ``column`` (``None`` when no row has it)."""
    values = pd.to_numeric(table[column], errors="coerce").to_numpy(dtype="float64")
    return None if np.isnan(values).all() else str(table["label"].iloc[int(np.nanargmin(values))])


def _num(x: Any) -> bool:
    return x is not None and not pd.isna(x) and float(x) > 0
