"""The held-out loss during a run: worker 0's ``eval`` events (``--eval-every K``) as a curve, and when it
first reached a target.

With non-IID data (``--data-split label``) each worker's training loss is measured on its own labels, and
the fastest workers dominate the step records, so a smoothed training loss can look best exactly where a
model is worst. The held-out loss is measured on the same data for every run and every mode.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from ssptk.analysis.values import clean
from ssptk.core.divergence import find_held_out_divergence
from ssptk.rundir import Summary

__all__ = ["HELD_OUT_COLUMNS", "held_out_curve", "held_out_divergence", "held_out_to_target", "untrained_loss"]

#: Columns of :func:`held_out_curve`.
HELD_OUT_COLUMNS = ("t", "global_step", "eval_loss", "eval_accuracy")


def held_out_curve(events: pd.DataFrame | None, steps: pd.DataFrame | None = None,
                   summary: Mapping[str, Any] | None = None) -> pd.DataFrame | None:
    """The run's ``eval`` events in time order (:data:`HELD_OUT_COLUMNS`), ended by the final evaluation
    (the summary's ``final_loss`` at the last step's time) when it is later; ``None`` if the run logged none."""
    if events is None or events.empty or "event" not in events.columns or "eval_loss" not in events.columns:
        return None
    rows = events[events["event"] == "eval"].dropna(subset=["t", "eval_loss"])
    if rows.empty:
        return None
    curve = pd.DataFrame({c: (rows[c] if c in rows.columns else np.nan) for c in HELD_OUT_COLUMNS})
    curve = curve.sort_values("t", kind="mergesort").reset_index(drop=True)
    summary = Summary.of(summary)
    final = clean(summary.final_loss)
    if final is not None and steps is not None and not steps.empty:
        end = float(steps["t"].max())
        if end > float(curve["t"].iloc[-1]):
            last = {"t": end, "global_step": steps["global_step"].max() if "global_step" in steps else np.nan,
                    "eval_loss": float(final), "eval_accuracy": clean(summary.final_accuracy)}
            curve = pd.concat([curve, pd.DataFrame([last])], ignore_index=True)
    for c in ("t", "eval_loss", "eval_accuracy"):
        curve[c] = pd.to_numeric(curve[c], errors="coerce").astype("float64")
    return curve


def held_out_to_target(curve: pd.DataFrame, prepared_steps: pd.DataFrame, target: float,
                       t0: float | None) -> tuple[float | None, int | None]:
    """``(seconds from t0, minibatches by then)`` at the first held-out loss ``<= target``, or ``(None, None)``.
    ``prepared_steps``: the run's step records (any order); minibatches are those that landed by then (local SGD:
    the applied steps of the rounds the evaluated model holds, ``local_round`` <= the evaluation's global step)."""
    hits = np.flatnonzero(curve["eval_loss"].to_numpy(dtype="float64") <= target)
    if not len(hits):
        return None, None
    t = float(curve["t"].iloc[int(hits[0])])
    start = t0 if t0 is not None else (float(prepared_steps["t"].min()) if len(prepared_steps) else t)
    landed = int((prepared_steps["t"].to_numpy(dtype="float64") <= t).sum()) if len(prepared_steps) else 0
    if "local_round" in prepared_steps and "global_step" in curve:  # local SGD: a step lands when its round does
        applied = prepared_steps["applied"].astype(bool) if "applied" in prepared_steps else True
        landed = int(((prepared_steps["local_round"] <= curve["global_step"].iloc[int(hits[0])]) & applied).sum())
    return max(0.0, t - start), landed


def untrained_loss(steps: pd.DataFrame | None, window: int) -> float | None:
    """The loss the model started from: the mean training loss of the first ``window`` step records in time order
    (the start :mod:`ssptk.core.divergence` holds a run to); ``None`` with fewer records or no finite loss."""
    if steps is None or steps.empty or "loss" not in steps.columns or len(steps) < window:
        return None
    first = pd.to_numeric(steps.sort_values("t", kind="mergesort")["loss"].iloc[:window], errors="coerce")
    value = float(first.mean())
    return value if np.isfinite(value) else None


def held_out_divergence(curve: pd.DataFrame | None, steps: pd.DataFrame | None, window: int) -> dict[str, Any]:
    """``{"diverged": bool, "diverged_at_step": global step or None}`` of a run's held-out evaluations
    (:func:`held_out_curve`) by :func:`ssptk.core.divergence.find_held_out_divergence`, against
    :func:`untrained_loss` of its step records (``window``: 5 x workers records). No curve: not diverged."""
    if curve is None or curve.empty:
        return {"diverged": False, "diverged_at_step": None}
    steps_at = curve["global_step"].tolist() if "global_step" in curve.columns else [None] * len(curve)
    losses = [None if pd.isna(v) else float(v) for v in curve["eval_loss"].tolist()]
    diverged, at = find_held_out_divergence(losses, steps_at, untrained_loss(steps, window))
    return {"diverged": diverged, "diverged_at_step": None if at is None or pd.isna(at) else int(at)}
