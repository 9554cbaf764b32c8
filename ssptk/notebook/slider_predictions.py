"""Predicted runs for the notebook's widgets: every staleness value of a slider at once, in one predicting
process (:mod:`ssptk.experiment.predicted_runs`), cached for the kernel's life like the widgets' real runs."""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ssptk.core.labels import label_of
from ssptk.notebook.runner import Key, cache_key
from ssptk.rundir import ComparisonDir, RunDir

if TYPE_CHECKING:
    from ssptk.experiment.result import RunResult

__all__ = ["PREDICTED", "calibrated_overhead", "predict_staleness"]

#: Every predicted run of this kernel's widgets, by :func:`ssptk.notebook.runner.cache_key` of its options.
PREDICTED: dict[Key, RunResult] = {}


def calibrated_overhead(runs: Iterable[RunResult]) -> float | None:
    """The median per-step overhead (seconds) of real runs, for a prediction's clock (``None`` without any)."""
    measured = [float(r.summary["overhead_ms"]) / 1000.0 for r in runs
                if r.summary.get("overhead_ms") and not r.summary.get("predicted")]
    return float(np.median(measured)) if measured else None


def predict_staleness(options: Mapping[str, Any], values: Iterable[int], overhead: float | None = None,
                      out: str | None = None, progress: Callable[[int, int], None] | None = None
                      ) -> dict[Key, RunResult]:
    """Predict ``options`` (mode ssp) at every staleness of ``values`` not predicted yet; returns every
    prediction of those values, by cache key. Runs go to ``out/predicted-<n>/ssp-S`` (default under ``runs/``).
    ``progress(done, of)``: predicted runs written so far. A prediction that fails (a NaN loss) is kept."""
    from ssptk.experiment.predicted_runs import plan, predict

    todo = {}
    for s in values:
        opts = {k: v for k, v in options.items() if k != "out"} | {"mode": "ssp", "staleness": int(s)}
        key = cache_key(opts)
        if key not in PREDICTED:
            todo[key] = opts
    if todo:
        parent = RunDir.create(out if out is None else os.path.join(out, f"predicted-{len(PREDICTED)}"),
                               "predicted").path
        plans = [plan(overhead, run_dir=ComparisonDir(parent).run_path(label_of("ssp", o["staleness"])),
                      **{"stall_timeout": 0, **o}) for o in todo.values()]

        def heard(job: int, done: int, total: int) -> None:
            if progress is not None and done == total:
                progress(job + 1, len(plans))

        for key, result in zip(todo, predict(plans, log_dir=parent, progress=heard, raise_on_failure=False)):
            PREDICTED[key] = result
    wanted = {cache_key({k: v for k, v in options.items() if k != "out"} | {"mode": "ssp", "staleness": int(s)})
              for s in values}
    return {k: r for k, r in PREDICTED.items() if k in wanted}
