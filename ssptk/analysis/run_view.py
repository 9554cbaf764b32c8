"""What the six panels of one run's figure show, computed once for the report and for the live dashboard.

:func:`view_of_run` turns a run's step and event records (a finished run's, or the part of a run read so
far) into a :class:`RunView`: typed arrays for each panel, nothing drawn. :func:`view_of_records` is the
computation itself, on arrays of step records in time order; the live dashboard calls it with the arrays it
grows while the run goes on (:class:`ssptk.notebook.live_state.LiveRun`), so that the live figure and the
report's (:func:`ssptk.render.figures.run_figure`) draw the same numbers with one drawing
(:class:`ssptk.render.run_panels.RunPanels`).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ssptk.analysis.metrics import (
    ALL_WORKERS,
    finish_times,
    n_workers,
    prepare_steps,
    run_options,
    skew_timeline,
    staleness_bound,
    staleness_counts,
    start_time,
    wait_by_worker,
)
from ssptk.analysis.progress import MANY_WORKERS, extreme_workers, loss_band, progress_band
from ssptk.core.divergence import smoothing_window
from ssptk.rundir import RunConfig, StoredOptions

__all__ = ["Band", "Line", "LossPanel", "ProgressPanel", "RunFacts", "RunView", "StepArrays", "WaitPanel",
           "view_of_records", "view_of_run"]


def _floats(values: Any = ()) -> np.ndarray:
    return np.asarray(values, dtype="float64")


@dataclass(frozen=True)
class Line:
    """One curve: ``x`` and ``y`` (float64 arrays of one length)."""

    x: np.ndarray = field(default_factory=_floats)
    y: np.ndarray = field(default_factory=_floats)

    def __len__(self) -> int:
        return len(self.x)


@dataclass(frozen=True)
class Band:
    """A spread over ``x``: from ``lo`` to ``hi``; ``q25``/``median``/``q75`` where the band has a middle."""

    x: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    q25: np.ndarray | None = None
    median: np.ndarray | None = None
    q75: np.ndarray | None = None


@dataclass(frozen=True)
class LossPanel:
    """Training loss against one x (wall time or minibatches processed)."""

    #: Each worker's raw loss (empty with many workers).
    per_worker: Mapping[int, Line]
    #: The overall loss, rolling mean over :attr:`RunView.smooth` step records.
    overall: Line
    #: Many workers: the 10-90% rolling quantiles of the step records over :attr:`RunView.smooth` records.
    band: Band | None = None


@dataclass(frozen=True)
class ProgressPanel:
    """Completed steps against wall time."""

    #: Each worker's completed steps (empty with many workers).
    per_worker: Mapping[int, Line]
    #: Many workers: the quantiles of the workers' completed steps (:func:`ssptk.analysis.progress_band`).
    band: Band | None = None
    #: Many workers: ``(worker, line)`` of the slowest and the fastest worker
    #: (:func:`ssptk.analysis.extreme_workers`).
    slowest: tuple[int, Line] | None = None
    fastest: tuple[int, Line] | None = None


@dataclass(frozen=True)
class WaitPanel:
    """Per worker (``worker``, in order): seconds waited for consistency and injected delay, in total."""

    worker: np.ndarray
    wait_s: np.ndarray
    delay_s: np.ndarray

    @property
    def most_wait(self) -> tuple[int, float] | None:
        """``(worker, seconds)`` of the worker that waited most; ``None`` when nobody waited."""
        if not len(self.wait_s) or not np.nanmax(self.wait_s) > 0:
            return None
        i = int(np.nanargmax(self.wait_s))
        return int(self.worker[i]), float(self.wait_s[i])


@dataclass(frozen=True)
class RunView:
    """Everything a run's six panels show. Times are seconds from the start barrier (else the first record).

    ``bound`` is the SSP staleness bound S (``None`` for other modes): the skew panel's line is at S+1
    (:func:`ssptk.core.options.skew_bound`). ``options`` are the run's (mode, staleness, workers, model; empty
    when unknown) for the figure's title.
    """

    options: StoredOptions
    bound: int | None
    predicted: bool
    #: Workers the run has (at least those with records): line colours are ``color(w, workers)``.
    workers: int
    #: The workers drawn one line each (few workers), in order.
    ids: tuple[int, ...]
    #: Dozens of workers (:data:`ssptk.analysis.MANY_WORKERS`): bands and the extreme workers, no line per worker.
    many: bool
    #: Rolling window of the overall loss (step records).
    smooth: int
    n_records: int
    #: Smallest and largest finite loss, and whether any loss is <= 0 (what the loss axis's scale follows).
    loss_range: tuple[float, float, bool]
    #: Latest wall time and most completed steps of any record (0 without records).
    t_end: float
    steps_max: float
    loss_time: LossPanel
    loss_samples: LossPanel
    progress: ProgressPanel
    skew: Line
    waits: WaitPanel
    #: Step records per measured staleness value (``x``: the values, ascending; ``y``: the counts).
    staleness_counts: Line


def _loss_range(loss: np.ndarray) -> tuple[float, float, bool]:
    finite = loss[np.isfinite(loss)]
    if not len(finite):
        return math.inf, -math.inf, False
    return float(finite.min()), float(finite.max()), bool((finite <= 0).any())


def _many_panels(elapsed: np.ndarray, worker: np.ndarray, step: np.ndarray, loss: np.ndarray,
                 smooth: int) -> tuple[Band, Band, ProgressPanel]:
    """Bands of the loss (against wall time and minibatches) and of the progress, and the extreme workers."""
    samples = np.arange(1, len(loss) + 1, dtype="float64")
    spread = loss_band(pd.DataFrame({"elapsed": elapsed, "worker": ALL_WORKERS, "loss": loss}), "elapsed", smooth)
    lo, hi = spread["lo"].to_numpy(dtype="float64"), spread["hi"].to_numpy(dtype="float64")
    frame = pd.DataFrame({"t": elapsed, "elapsed": elapsed, "worker": worker, "step": step})
    b = progress_band(frame)
    band = Band(*(b[c].to_numpy(dtype="float64") for c in ("elapsed", "lo", "hi", "q25", "median", "q75")))
    ends = extreme_workers(frame)
    lines = {} if ends is None else {w: Line(elapsed[worker == w], step[worker == w]) for w in ends}
    progress = ProgressPanel({}, band, None if ends is None else (ends[0], lines[ends[0]]),
                             None if ends is None else (ends[1], lines[ends[1]]))
    return Band(elapsed, lo, hi), Band(samples, lo, hi), progress


@dataclass(frozen=True)
class StepArrays:
    """Step records in time order, a value per record: ``elapsed`` (seconds from the start), ``worker``, ``step``,
    ``loss``."""

    elapsed: np.ndarray
    worker: np.ndarray
    step: np.ndarray
    loss: np.ndarray


@dataclass(frozen=True)
class RunFacts:
    """What a run's figure says of the run itself: its ``options`` as stored (the title, the mode), the ``workers``
    it has, its SSP ``bound`` S (``None`` in the other modes) and whether it was ``predicted``."""

    options: StoredOptions
    workers: int
    bound: int | None = None
    predicted: bool = False


def view_of_records(records: StepArrays, *, skew: Line, waits: WaitPanel, counts: Line, run: RunFacts,
                    ids: Iterable[int] | None = None) -> RunView:
    """The :class:`RunView` of step ``records`` of ``run``, with the skew, waits and staleness counts computed by
    the caller (incrementally, for a live run). ``ids``: the workers to draw, every one with records among them
    (default: those with records). Cost O(records * workers) with few workers, O(records) with many."""
    elapsed, step, loss, workers = records.elapsed, records.step, records.loss, run.workers
    worker = np.asarray(records.worker).astype("int64", copy=False)
    ids_all = tuple(sorted({int(i) for i in (np.unique(worker).tolist() if ids is None else ids)}))
    n = max(int(workers), len(ids_all), (max(ids_all) + 1) if ids_all else 0)
    smooth = smoothing_window(max(int(workers) or len(ids_all), 1))
    many = n >= MANY_WORKERS
    samples = np.arange(1, len(loss) + 1, dtype="float64")
    smoothed = pd.Series(loss).rolling(smooth, min_periods=1).mean().to_numpy(dtype="float64")
    if many:
        band_t, band_s, progress = _many_panels(elapsed, worker, step, loss, smooth)
        loss_t, loss_s = LossPanel({}, Line(elapsed, smoothed), band_t), LossPanel({}, Line(samples, smoothed), band_s)
    else:
        masks = {w: worker == w for w in ids_all}
        loss_t = LossPanel({w: Line(elapsed[m], loss[m]) for w, m in masks.items()}, Line(elapsed, smoothed))
        loss_s = LossPanel({w: Line(samples[m], loss[m]) for w, m in masks.items()}, Line(samples, smoothed))
        progress = ProgressPanel({w: Line(elapsed[m], step[m]) for w, m in masks.items()})
    finite_steps = step[np.isfinite(step)]
    finite_t = elapsed[np.isfinite(elapsed)]
    return RunView(
        options=run.options, bound=run.bound, predicted=run.predicted, workers=n,
        ids=() if many else ids_all, many=many, smooth=smooth, n_records=len(elapsed),
        loss_range=_loss_range(loss), t_end=float(finite_t.max()) if len(finite_t) else 0.0,
        steps_max=float(finite_steps.max()) if len(finite_steps) else 0.0,
        loss_time=loss_t, loss_samples=loss_s, progress=progress, skew=skew, waits=waits, staleness_counts=counts)


def view_of_run(
    steps: pd.DataFrame | None,
    events: pd.DataFrame | None = None,
    config: Mapping[str, Any] | None = None,
    bound: int | None = None,
    *,
    ended: bool = True,
) -> RunView:
    """The :class:`RunView` of a run's step and event frames (:mod:`ssptk.rundir.logs`).

    ``bound``: the SSP staleness bound S (default: the config's, for an ``ssp`` run). ``ended``: the run is
    over, so a worker without a ``done`` event finished at its last record; with ``ended=False`` (a run
    read part way) such a worker is still training (:func:`ssptk.analysis.finish_times`). The skew ends
    once fewer than two workers train (:func:`ssptk.analysis.skew_timeline`'s ``end_when_one_left``).
    """
    opts = run_options(config)
    if bound is None:
        bound = staleness_bound(config)
    if steps is None or steps.empty:
        steps = pd.DataFrame({"t": _floats(), "worker": np.zeros(0, dtype="int64"), "step": _floats(),
                              "loss": _floats()})
    df = prepare_steps(steps, start_time(events))
    worker = df["worker"].to_numpy(dtype="int64")
    ids = sorted(int(w) for w in np.unique(worker))
    skew = skew_timeline(df, finish_times(df, events, fallback_last=ended), workers=ids, end_when_one_left=True)
    waits = wait_by_worker(df)
    counts = staleness_counts(df)
    loss = df["loss"] if "loss" in df.columns else pd.Series(np.nan, index=df.index)
    return view_of_records(
        StepArrays(df["elapsed"].to_numpy(dtype="float64"), worker, df["step"].to_numpy(dtype="float64"),
                   pd.to_numeric(loss, errors="coerce").to_numpy(dtype="float64")),
        skew=Line(skew["elapsed"].to_numpy(dtype="float64"), skew["skew"].to_numpy(dtype="float64")),
        waits=WaitPanel(waits["worker"].to_numpy(dtype="int64"), waits["wait_s"].to_numpy(dtype="float64"),
                        waits["delay_s"].to_numpy(dtype="float64")),
        counts=Line(counts.index.to_numpy(dtype="float64"), counts.to_numpy(dtype="float64")),
        run=RunFacts(opts, n_workers(config, steps), bound, bool(RunConfig.of(config).predicted)))
