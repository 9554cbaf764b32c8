"""Predicted runs for the notebook's widgets: every value of a slider (SSP's staleness S, local SGD's local steps H)
at once, in one predicting
process (:mod:`ssptk.experiment.predicted_runs`), cached for the kernel's life like the widgets' real runs."""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ssptk.analysis.verdict_facts import STEADY_RATE_SPREAD, same_pace
from ssptk.core.labels import label_of
from ssptk.experiment.sweep import knob_of
from ssptk.notebook.runner import CacheKey, cache_key
from ssptk.rundir import ComparisonDir, RunDir

if TYPE_CHECKING:
    from ssptk.experiment.result import RunResult

__all__ = ["PREDICTED", "STEADY_RATE_SPREAD", "calibrated_gap", "calibrated_overhead", "predict_staleness",
           "steady_straggler_note"]


#: Every predicted run of this kernel's widgets, by :func:`ssptk.notebook.runner.cache_key` of its options.
PREDICTED: dict[CacheKey, RunResult] = {}


def calibrated_overhead(runs: Iterable[RunResult]) -> float | None:
    """The median per-step overhead (seconds) of real runs, for a prediction's clock (``None`` without any)."""
    measured = [float(r.summary.overhead_ms) / 1000.0 for r in runs
                if r.summary.overhead_ms and not r.summary.predicted]
    return float(np.median(measured)) if measured else None


def calibrated_gap(runs: Iterable[RunResult]) -> float | None:
    """The median ``gap_ms`` of real runs in seconds (where their steps read: :func:`ssptk.sim.calibrate_gap`), for
    a prediction's staleness (``None`` without any)."""
    measured = [float(r.summary.gap_ms) / 1000.0 for r in runs
                if r.summary.gap_ms is not None and not r.summary.predicted]
    return float(np.median(measured)) if measured else None


def predict_staleness(options: Mapping[str, Any], values: Iterable[int], overhead: float | None = None,
                      out: str | None = None, progress: Callable[[int, int], None] | None = None,
                      gap: float | None = None) -> dict[CacheKey, RunResult]:
    """Predict ``options`` at every value of ``values`` not predicted yet: its staleness S (mode ssp, the default) or
    its local steps H (mode local); returns every prediction of those values, by cache key. Runs go to
    ``out/predicted-<n>/ssp-S`` (``local-H``; default under ``runs/``). ``progress(done, of)``: predicted runs
    written so far. ``gap``: :func:`calibrated_gap`'s. A prediction that fails (a NaN loss) is kept."""
    from ssptk.experiment.predicted_runs import plan, predict

    knob = knob_of(options.get("mode"))

    def at(value: int) -> dict[str, Any]:
        return {k: v for k, v in options.items() if k != "out"} | {"mode": knob.mode, knob.option: int(value)}

    todo = {}
    for s in values:
        opts = at(s)
        key = cache_key(opts)
        if key not in PREDICTED:
            todo[key] = opts
    if todo:
        parent = RunDir.create(out if out is None else os.path.join(out, f"predicted-{len(PREDICTED)}"),
                               "predicted").path
        plans = [plan(overhead, run_dir=ComparisonDir(parent).run_path(label_of(knob.mode, o[knob.option])), gap=gap,
                      **{"stall_timeout": 0, **o}) for o in todo.values()]

        def heard(job: int, done: int, total: int) -> None:
            if progress is not None and done == total:
                progress(job + 1, len(plans))

        for key, result in zip(todo, predict(plans, log_dir=parent, progress=heard, raise_on_failure=False)):
            PREDICTED[key] = result
    wanted = {cache_key(at(s)) for s in values}
    return {k: r for k, r in PREDICTED.items() if k in wanted}


def steady_straggler_note(table: pd.DataFrame, workers: int, straggler: Any) -> str | None:
    """What predictions with a steady straggler show and what they do not, in one line (``None`` when there is no
    straggler or the predicted steps/s differ by :data:`STEADY_RATE_SPREAD` or more across the staleness values).

    With a worker that is always slower, SSP holds the others to its pace at every S (benchmarks/FINDINGS.md,
    stop 23): the steps/s are the same. The times to an early target still fall with S, by a head start the
    fast workers take once, at the start ((N-1)(S+1) minibatches before they wait); a real run's start-up (its
    first steps after the start barrier, 0.2-0.5 s on 2 cores, varying by as much between runs) can hide it."""
    pace = same_pace(table) if straggler else None  # decided in analysis, worded here
    if pace is None:
        return None
    return (f"a steady straggler: every S runs at its pace ({pace[0]:.0f}-{pace[1]:.0f} steps/s);\n"
            f"the time to target falls only by the fast workers' one-off head start ({int(workers) - 1}x(S+1) "
            "minibatches at the start), which a real run's start-up can hide")
