"""What a real run's step records say a simulated step costs: its fixed seconds (:func:`calibrate_overhead`) and how
many of them lie between an update's landing and the worker's next read (:func:`calibrate_gap`)."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from ssptk.core.errors import UsageError

__all__ = ["calibrate_gap", "calibrate_overhead"]


def calibrate_overhead(steps_df: pd.DataFrame, workers: int) -> float:
    """Estimate the fixed per-step overhead (seconds) from a REAL run's step records.

    The time between two consecutive records of one worker is that step's duration: overhead
    (including the model's real compute) plus its injected ``delay_s`` plus the time the mode kept it
    waiting (``wait_s``, 0 in async; subtracted when the column is there). For each worker with at
    least two records (ordered by ``step`` if present, else ``t``) take the median of
    ``t[j] - t[j-1] - delay_s[j] - wait_s[j]``; return the median over workers, clipped at 0. Median,
    not mean, so a few hiccups (GC, scheduling) do not move it. Pass the result as ``overhead=`` with
    ``compute=0``. Needs columns ``t``, ``worker``, ``delay_s``; rows with an ``event`` are ignored.

    Local SGD's records (a ``local_round`` column): a local step has no PS traffic, the round's last one pushes,
    waits and pulls; so the gaps are averaged within each round first (the round's traffic spread over its
    steps, which is how :func:`simulate` then charges it) and the median taken over rounds.
    """
    missing = [c for c in ("t", "worker", "delay_s") if c not in steps_df.columns]
    if missing:
        raise UsageError(f"calibrate_overhead needs step records with columns t, worker, delay_s; missing {missing}")
    def gaps(rows: pd.DataFrame, t: np.ndarray) -> np.ndarray:
        d = rows["delay_s"].to_numpy(dtype=float)
        if "wait_s" in rows.columns:
            d = d + rows["wait_s"].fillna(0.0).to_numpy(dtype=float)
        between = np.diff(t) - d[1:]
        if "local_round" in rows.columns and rows["local_round"].notna().all():
            between = pd.Series(between).groupby(rows["local_round"].to_numpy()[1:]).mean().to_numpy()
        return between

    per_worker = _per_worker_medians(steps_df, workers, "delay_s", gaps)
    if not per_worker:
        raise UsageError("calibrate_overhead needs at least one worker with two or more step records")
    return max(0.0, float(np.median(per_worker)))


def calibrate_gap(steps_df: pd.DataFrame, workers: int) -> float | None:
    """The seconds of a step's fixed cost that lie between its worker's last update landing and its parameter read,
    from a REAL ``async`` or ``ssp`` run's step records (their ``read_s``: ps:0's clock from the read to the landing).

    What happens there (the step's result reaching the worker, its bookkeeping, the next run's dispatch to the PS)
    is outside the step's window, so other workers' updates that land then are seen, not stale: a run whose steps
    spend a share ``g`` of their time there has a mean staleness near ``(N - 1)(1 - g)``, not ``N - 1``. For each
    worker with at least two records (ordered by ``step``) the median of ``t[j] - read_s[j] - wait_s[j] - t[j-1]``
    (the SSP wait is spent there too, and is not a cost); the median over workers, clipped at 0. ``None`` where the
    records have no ``read_s`` (sync, local SGD, allreduce, a run made before ssptk recorded it).
    """
    if "read_s" not in steps_df.columns or not steps_df["read_s"].notna().any():
        return None
    def gaps(rows: pd.DataFrame, t: np.ndarray) -> np.ndarray:
        read = t - rows["read_s"].to_numpy(dtype=float)
        if "wait_s" in rows.columns:
            read = read - rows["wait_s"].fillna(0.0).to_numpy(dtype=float)
        return read[1:] - t[:-1]

    per_worker = _per_worker_medians(steps_df, workers, "read_s", gaps)
    return max(0.0, float(np.median(per_worker))) if per_worker else None


def _per_worker_medians(steps_df: pd.DataFrame, workers: int, column: str,
                        gaps: Callable[[pd.DataFrame, np.ndarray], np.ndarray]) -> list[float]:
    """For each worker with two or more step records that have ``column`` (in ``step`` order, else ``t``; event rows
    left out), the median of ``gaps(its rows, their t)``."""
    df = steps_df
    if "event" in df.columns:
        df = df[df["event"].isna()]
    df = df.dropna(subset=["t", "worker", column])
    order = "step" if "step" in df.columns else "t"
    per_worker = []
    for w in range(int(workers)):
        rows = df[df["worker"] == w].sort_values(order)
        if len(rows) >= 2:
            per_worker.append(float(np.median(gaps(rows, rows["t"].to_numpy(dtype=float)))))
    return per_worker
