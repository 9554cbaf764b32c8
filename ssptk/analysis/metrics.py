"""Pure analysis of one run's logs: DataFrames in, DataFrames / dicts out. No plotting, no I/O.

Step and event frames are those of :mod:`ssptk.rundir.logs` (columns as in ``docs/run-directory.md``).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from ssptk.analysis.values import clean
from ssptk.core.divergence import find_divergence, smoothing_window
from ssptk.rundir import RunConfig, StoredOptions, Summary

__all__ = [
    "ALL_WORKERS", "run_options", "smoothing_window", "n_workers", "start_time", "finish_times", "prepare_steps",
    "skew_timeline", "max_skew", "summarize", "time_to_target", "loss_curves", "wait_by_worker", "staleness_counts",
    "staleness_bound", "divergence",
]

#: ``worker`` value of the overall (all workers) curve in :func:`loss_curves`.
ALL_WORKERS = -1


def run_options(config: Mapping[str, Any] | None) -> StoredOptions:
    """The ``options`` of a config.json (:class:`~ssptk.rundir.StoredOptions`; a flat options dict is taken as
    the options themselves)."""
    if not config:
        return StoredOptions()
    return RunConfig.of(config).options or StoredOptions.of(config)


def staleness_bound(config: Mapping[str, Any] | None) -> int | None:
    """The SSP staleness S of a run's config (``None`` unless its mode is ``ssp`` with an integer S)."""
    return run_options(config).ssp_bound


def n_workers(config: Mapping[str, Any] | None, steps: pd.DataFrame | None = None) -> int:
    """Number of workers: ``options.workers`` of the config, else distinct workers in ``steps``."""
    value = run_options(config).workers
    if value is not None:
        return value
    if steps is not None and len(steps) and "worker" in steps.columns:
        return int(steps["worker"].nunique())
    return 0


def start_time(events: pd.DataFrame | None) -> float | None:
    """Time of the earliest ``start`` event (the start barrier), or None if there is none."""
    if events is None or events.empty or "event" not in events.columns:
        return None
    t = events.loc[events["event"] == "start", "t"].dropna()
    return float(t.min()) if len(t) else None


def finish_times(
    steps: pd.DataFrame | None, events: pd.DataFrame | None = None, fallback_last: bool = True
) -> dict[int, float]:
    """When each worker finished: its first ``done`` (or ``error``) event time.

    With ``fallback_last`` a worker without such an event counts as finished at its last step
    record (right for an ended run); without it such a worker is left out of the result, which
    :func:`skew_timeline` reads as "still running" (right for a live run).
    """
    out: dict[int, float] = {}
    if events is not None and not events.empty and "event" in events.columns:
        ends = events[events["event"].isin(["done", "error"])].dropna(subset=["t", "worker"])
        first = ends.groupby("worker")["t"].min()
        for worker, t in zip(first.index.to_numpy(), first.to_numpy()):
            out[int(worker)] = float(t)
    if fallback_last and steps is not None and len(steps):
        last = steps.groupby("worker")["t"].max()
        for worker, t in zip(last.index.to_numpy(), last.to_numpy()):
            out.setdefault(int(worker), float(t))
    return out


def prepare_steps(steps: pd.DataFrame, t0: float | None = None, batch: int = 1) -> pd.DataFrame:
    """Sort step records by ``t`` and add ``elapsed``, ``samples`` and ``completed``.

    ``elapsed`` = ``t - t0``; pass the start barrier time (:func:`start_time`) as ``t0``; by
    default ``t0`` is the earliest record's ``t``. ``samples`` = cumulative minibatches over all
    workers in time order times ``batch`` (``batch=1`` counts minibatches). ``completed`` = the
    worker's completed steps after this record (its ``step``). Returns a new frame.
    """
    if len(steps):
        df = steps.sort_values("t", kind="mergesort").reset_index(drop=True)
    else:
        df = steps.copy()
    if "t" not in df.columns:
        df["t"] = pd.Series(dtype="float64")
    if t0 is None:
        t0 = float(df["t"].min()) if len(df) else 0.0
    df["elapsed"] = df["t"].astype("float64") - float(t0)
    df["samples"] = np.arange(1, len(df) + 1, dtype=np.int64) * int(batch)
    df["completed"] = df["step"] if "step" in df.columns else pd.Series(dtype="int64")
    return df


def skew_timeline(
    steps: pd.DataFrame,
    finished: Mapping[int, float] | None = None,
    workers: int | Iterable[int] | None = None,
    end_when_one_left: bool = False,
) -> pd.DataFrame:
    """Step skew after every step record: most minus least advanced unfinished worker.

    Returns columns ``elapsed`` (``t`` if ``steps`` has no ``elapsed``) and ``skew`` (int), one row
    per record in time order. A worker's completed steps are its latest ``step`` so far (0 before
    its first record). A worker is left out once it has finished, i.e. at records strictly later
    than its finish time (it still counts at its finish time). ``finished`` maps worker -> finish
    time; by default every worker finishes at its last record; when a mapping is given, workers
    missing from it never finish. ``workers`` (a count or indices) adds workers that may have no
    record yet (0 completed steps); with ``finished=None`` such a worker is left out entirely.
    ``end_when_one_left`` drops the records after which fewer than two workers are still training: the
    skew of one worker is 0 by definition, and a curve that falls to 0 there reads as if the straggler had
    caught up (figures use it; :func:`max_skew` does not need it).
    Cost O(records * workers) time, O(records) memory.
    """
    xcol = "elapsed" if "elapsed" in steps.columns else "t"
    if steps.empty:
        return pd.DataFrame({xcol: pd.Series(dtype="float64"), "skew": pd.Series(dtype="int64")})
    df = steps.sort_values("t", kind="mergesort")
    t = df["t"].to_numpy(dtype="float64")
    w = df["worker"].to_numpy(dtype="int64")
    s = df["step"].to_numpy(dtype="float64")
    ids = set(np.unique(w).tolist())
    if isinstance(workers, (int, np.integer)):
        ids |= set(range(int(workers)))
    elif workers is not None:
        ids |= {int(i) for i in workers}
    if finished is None:
        last = df.groupby("worker")["t"].max()
        fin = {int(k): float(v) for k, v in last.items()}
        default = -math.inf
    else:
        fin = {int(k): float(v) for k, v in finished.items()}
        default = math.inf
    n = len(df)
    hi = np.full(n, -np.inf)
    lo = np.full(n, np.inf)
    positions = np.arange(n)
    training = np.zeros(n, dtype=np.int64)
    for worker in sorted(ids):
        latest = np.maximum.accumulate(np.where(w == worker, positions, -1))
        completed = np.where(latest >= 0, s[np.maximum(latest, 0)], 0.0)
        active = t <= fin.get(worker, default)
        training += active
        np.maximum(hi, np.where(active, completed, -np.inf), out=hi)
        np.minimum(lo, np.where(active, completed, np.inf), out=lo)
    skew = np.where(np.isfinite(hi) & np.isfinite(lo), hi - lo, 0.0)
    out = pd.DataFrame({xcol: df[xcol].to_numpy(), "skew": skew.astype("int64")})
    if end_when_one_left and len(ids) > 1:
        out = out[training >= 2].reset_index(drop=True)
    return out


def max_skew(
    steps: pd.DataFrame,
    finished: Mapping[int, float] | None = None,
    workers: int | Iterable[int] | None = None,
) -> int:
    """Largest value of :func:`skew_timeline` (0 for no records)."""
    skew = skew_timeline(steps, finished, workers)["skew"]
    return int(skew.max()) if len(skew) else 0


def _mean_tail(values: pd.Series, k: int) -> float | None:
    tail = values.iloc[-k:].dropna() if k > 0 else values.iloc[0:0]
    return clean(float(tail.mean())) if len(tail) else None


def summarize(
    steps: pd.DataFrame, events: pd.DataFrame | None, config: Mapping[str, Any] | None
) -> Summary:
    """The summary.json fields that come from the logs (plain JSON-ready values), as a
    :class:`~ssptk.rundir.Summary`.

    Keys: ``workers``, ``total_steps`` (step records, i.e. minibatches computed, dropped backup
    gradients included), ``wall_s`` (earliest ``start`` event, else first record, to the last
    record), ``steps_per_s``, ``train_loss_last`` (mean loss of the last ``workers`` records),
    ``loss_smoothed_last`` (mean loss of the last :func:`smoothing_window` records), ``max_skew``
    (finished workers left out, see :func:`finish_times`), ``wait_fraction`` (sum ``wait_s`` /
    (``workers`` * ``wall_s``)), ``mean_staleness``, ``max_staleness`` and ``per_worker_steps``
    (worker index -> records; JSON turns the keys into strings), ``diverged`` and
    ``diverged_at_step`` (the global step; :mod:`ssptk.core.divergence` has the rule). Undefined values
    (no records, zero wall time, non-finite numbers) are None; an empty run gives zeros and Nones.
    """
    workers = n_workers(config, steps)
    out = Summary(workers=workers, total_steps=0, wall_s=None, steps_per_s=None, train_loss_last=None,
                  loss_smoothed_last=None, max_skew=0, wait_fraction=None, mean_staleness=None, max_staleness=None,
                  per_worker_steps={}, diverged=False, diverged_at_step=None)
    if steps is None or steps.empty:
        return out
    df = steps.sort_values("t", kind="mergesort").reset_index(drop=True)
    first, last = float(df["t"].min()), float(df["t"].max())
    start = start_time(events)
    t_start = first if start is None else min(start, first)
    wall = last - t_start
    n = len(df)
    out.update(total_steps=n, wall_s=clean(wall), steps_per_s=clean(n / wall) if wall > 0 else None)
    if "loss" in df.columns:
        out.update(train_loss_last=_mean_tail(df["loss"], max(1, workers)),
                   loss_smoothed_last=_mean_tail(df["loss"], smoothing_window(workers)))
    out.update(max_skew=max_skew(df, finish_times(df, events)))
    if "wait_s" in df.columns and wall > 0 and workers > 0:
        out.update(wait_fraction=clean(float(df["wait_s"].fillna(0).sum()) / (workers * wall)))
    if "staleness" in df.columns and df["staleness"].notna().any():
        out.update(mean_staleness=clean(float(df["staleness"].mean())), max_staleness=int(df["staleness"].max()))
    out.update(per_worker_steps={int(k): int(v) for k, v in df.groupby("worker").size().items()})
    out.update(divergence(df, smoothing_window(workers)))
    return out


def divergence(steps: pd.DataFrame, window: int) -> dict[str, Any]:
    """``{"diverged": bool, "diverged_at_step": global step or None}`` of a run's step records (the rule of
    :mod:`ssptk.core.divergence`, on the overall training loss in time order)."""
    if steps is None or steps.empty or "loss" not in steps.columns:
        return {"diverged": False, "diverged_at_step": None}
    df = steps.sort_values("t", kind="mergesort")
    losses = pd.to_numeric(df["loss"], errors="coerce").astype("float64").tolist()
    gs = df["global_step"].tolist() if "global_step" in df.columns else [None] * len(df)
    diverged, at = find_divergence(losses, gs, window)
    return {"diverged": diverged, "diverged_at_step": None if at is None or at != at else int(at)}

def time_to_target(
    steps: pd.DataFrame, target: float, window: int | None = None
) -> tuple[float | None, int | None]:
    """When the rolling mean training loss first drops to ``<= target``.

    The rolling mean runs over the last ``window`` step records in time order (default
    :func:`smoothing_window` of the number of distinct workers); while fewer records than
    ``window`` exist it is undefined, except that a run with fewer records in all uses all of
    them. Returns ``(elapsed seconds, records so far)`` at that record, or ``(None, None)``.
    ``elapsed`` comes from :func:`prepare_steps` (pass prepared steps to measure from the start
    barrier; otherwise from the first record).
    """
    if steps is None or steps.empty or "loss" not in steps.columns:
        return None, None
    df = steps if "elapsed" in steps.columns else prepare_steps(steps)
    df = df.sort_values("t", kind="mergesort").reset_index(drop=True)
    if window is None:
        window = smoothing_window(df["worker"].nunique())
    window = max(1, int(window))
    rolled = df["loss"].rolling(window, min_periods=min(window, len(df))).mean().to_numpy()
    hits = np.flatnonzero(rolled <= target)
    if not len(hits):
        return None, None
    i = int(hits[0])
    return float(df["elapsed"].iloc[i]), i + 1


def loss_curves(steps: pd.DataFrame, by: str = "elapsed", smooth: int = 20) -> pd.DataFrame:
    """Loss curves for plotting: per worker and overall, raw and rolling mean.

    Long format with columns ``<by>``, ``worker`` (:data:`ALL_WORKERS` = -1 for the overall
    curve), ``loss`` and ``smoothed`` (rolling mean over ``smooth`` records of that curve,
    partial windows at the start). ``by`` is ``"elapsed"``, ``"samples"`` (global minibatches so
    far, so all curves share one axis) or ``"global_step"`` (updates applied so far: one per minibatch in
    ssp and async, one per N - B minibatches in sync); steps without those columns are prepared first.
    """
    if by not in ("elapsed", "samples", "global_step"):
        raise ValueError(f"by must be 'elapsed', 'samples' or 'global_step', not {by!r}")
    columns = [by, "worker", "loss", "smoothed"]
    if steps is None or steps.empty:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in columns})
    df = steps if by in steps.columns else prepare_steps(steps)
    df = df.sort_values("t", kind="mergesort").reset_index(drop=True)
    smooth = max(1, int(smooth))
    per_worker = df[[by, "worker", "loss"]].copy()
    per_worker["smoothed"] = (df.groupby("worker")["loss"]
                              .transform(lambda s: s.rolling(smooth, min_periods=1).mean()))
    per_worker = per_worker.sort_values(["worker", by], kind="mergesort")
    overall = pd.DataFrame({by: df[by], "worker": ALL_WORKERS, "loss": df["loss"],
                            "smoothed": df["loss"].rolling(smooth, min_periods=1).mean()})
    out = pd.concat([per_worker, overall], ignore_index=True)
    out["worker"] = out["worker"].astype("int64")
    return out[columns]


def wait_by_worker(steps: pd.DataFrame) -> pd.DataFrame:
    """Per worker: ``steps`` (records), total ``wait_s`` and total injected ``delay_s``."""
    if steps is None or steps.empty:
        return pd.DataFrame({"worker": pd.Series(dtype="int64"), "steps": pd.Series(dtype="int64"),
                             "wait_s": pd.Series(dtype="float64"),
                             "delay_s": pd.Series(dtype="float64")})
    df = steps.copy()
    for col in ("wait_s", "delay_s"):
        if col not in df.columns:
            df[col] = 0.0
    g = df.groupby("worker")
    out = pd.DataFrame({"steps": g.size(), "wait_s": g["wait_s"].sum(min_count=0),
                        "delay_s": g["delay_s"].sum(min_count=0)})
    out = out.rename_axis("worker").reset_index()
    out["worker"] = out["worker"].astype("int64")
    return out


def staleness_counts(steps: pd.DataFrame) -> pd.Series:
    """Number of step records per measured staleness value (index: staleness, sorted)."""
    if steps is None or steps.empty or "staleness" not in steps.columns:
        return pd.Series(dtype="int64", name="count")
    counts = steps["staleness"].dropna().astype("int64").value_counts().sort_index()
    counts.name = "count"
    counts.index.name = "staleness"
    return counts
