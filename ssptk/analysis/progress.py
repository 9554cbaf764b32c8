"""Many workers at a glance: the spread of the workers' progress over time, and the ones at its ends.

With dozens of workers one line per worker is a smear; figures draw instead a band of quantiles of the
completed steps (:func:`progress_band`) and name the slowest and the fastest worker
(:func:`extreme_workers`).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ssptk.analysis.metrics import ALL_WORKERS

__all__ = ["MANY_WORKERS", "extreme_workers", "loss_band", "progress_band"]

#: From this many workers on, figures draw bands and the extreme workers instead of a line per worker.
MANY_WORKERS = 16
#: The most time points a band has (records are sampled evenly beyond it): enough for any figure's width.
BAND_POINTS = 2000


def progress_band(steps: pd.DataFrame, points: int = BAND_POINTS) -> pd.DataFrame:
    """Quantiles over the workers of their completed steps, at (up to ``points``) step records in time order.

    Columns: ``elapsed`` (``t`` if ``steps`` has no ``elapsed``), ``lo``, ``q25``, ``median``, ``q75``,
    ``hi``. A worker's completed steps are its latest ``step`` so far (0 before its first record; a worker
    that finished keeps its count). Cost O(points * workers + records).
    """
    xcol = "elapsed" if "elapsed" in steps.columns else "t"
    cols = ["lo", "q25", "median", "q75", "hi"]
    if steps.empty:
        return pd.DataFrame({xcol: pd.Series(dtype="float64"), **{c: pd.Series(dtype="float64") for c in cols}})
    df = steps.sort_values("t", kind="mergesort")
    n = len(df)
    at = np.unique(np.linspace(0, n - 1, min(points, n)).round().astype(np.int64))
    w = df["worker"].to_numpy(dtype="int64")
    s = df["step"].to_numpy(dtype="float64")
    positions = np.arange(n)
    completed = np.zeros((len(at), len(np.unique(w))))
    for j, worker in enumerate(np.unique(w)):
        mine = positions[w == worker]
        k = np.searchsorted(mine, at, side="right") - 1  # this worker's latest record at or before each point
        completed[:, j] = np.where(k >= 0, s[mine[np.maximum(k, 0)]], 0.0)
    q = np.quantile(completed, [0.0, 0.25, 0.5, 0.75, 1.0], axis=1)
    out = pd.DataFrame({xcol: df[xcol].to_numpy(dtype="float64")[at]})
    for c, row in zip(cols, q):
        out[c] = row
    return out


def extreme_workers(steps: pd.DataFrame) -> tuple[int, int] | None:
    """``(slowest, fastest)``: the workers with the fewest and the most completed steps at the end (ties:
    the one that got there later is slower); ``None`` without records."""
    if steps.empty:
        return None
    last = steps.sort_values("t", kind="mergesort").groupby("worker").agg(steps=("step", "max"), t=("t", "max"))
    order = last.sort_values(["steps", "t"], ascending=[True, False]).index
    return int(order[0]), int(order[-1])


def loss_band(curves: pd.DataFrame, by: str, smooth: int, low: float = 0.1, high: float = 0.9) -> pd.DataFrame:
    """The spread of the training loss among the step records: rolling ``low`` and ``high`` quantiles over
    ``smooth`` records of the overall curve of :func:`ssptk.analysis.loss_curves` (columns ``<by>``, ``lo``,
    ``hi``); what a figure draws instead of one thin line per worker when there are many."""
    c = curves[curves["worker"] == ALL_WORKERS]
    roll = c["loss"].rolling(max(1, int(smooth)), min_periods=1)
    return pd.DataFrame({by: c[by].to_numpy(), "lo": roll.quantile(low).to_numpy(),
                         "hi": roll.quantile(high).to_numpy()})
