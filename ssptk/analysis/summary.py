"""``summary.json``: what a run's logs add up to (see ``docs/run-directory.md``)."""
from __future__ import annotations

from typing import Any

import pandas as pd

from ssptk.analysis.comparison_table import RunTuple
from ssptk.analysis.delay_comp_summary import dc_correction_summary
from ssptk.analysis.held_out import held_out_curve, held_out_divergence
from ssptk.analysis.metrics import smoothing_window, summarize
from ssptk.analysis.traffic import traffic_summary, worker_cpu_s
from ssptk.core.errors import TaskFailure
from ssptk.core.models import builtin_parameters
from ssptk.core.options import RunOptions
from ssptk.rundir import RunConfig, RunDir, Summary, load_run
from ssptk.sim import SimSpec, calibrate_gap, ideal_for

__all__ = ["run_summary"]


def run_summary(run_dir: str | RunDir, opts: RunOptions, failure: TaskFailure | None,
                ps_cpu_s: float | None = None) -> tuple[Summary, RunTuple]:
    """What ``summary.json`` holds, computed from the run directory's logs: ``(summary, loaded)``, where
    ``loaded`` is what :func:`ssptk.rundir.load_run` read (so callers need not read the logs again).

    ``ps_cpu_s``: CPU seconds the PS used between the start barrier and the end (the launcher measures
    it); with the workers' own figures from their start/done events it gives ``cpu_ms_per_step``.
    """
    rd = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    steps, events, config, _ = load_run(rd.path)
    final = rd.final()
    if failure is None and not final:
        failure = TaskFailure.of("worker:0", "finished without writing model/final.json")
    s = Summary(status="ok" if failure is None else failure.status,
                reason=None if failure is None else str(failure),
                failed_task=None if failure is None else failure.task,
                signal=None if failure is None else failure.signal,
                mode=opts.mode, model=opts.model, workers=opts.workers,
                staleness=opts.bound, local_steps=opts.local_steps, backup=opts.backup,
                steps=opts.steps, lr_staleness=opts.lr_staleness, optimizer=opts.optimizer)
    s.update(summarize(steps, events, config))
    s.update(_startup(steps, config))
    s.update(dc_correction_summary(steps))
    s.update(traffic_summary(rd.traffic(), s.total_steps, s.wall_s, opts.workers, s.wait_fraction,
                             worker_cpu_s(events), steps))
    s.update(traffic_not_measured=config.tasks.traffic_not_measured if s.traffic is None else None)
    s.update(_training_cpu(events, ps_cpu_s, s.total_steps))
    predicted = config.predicted
    if predicted is None:
        s.update(_ideal(steps, opts, config))
        gap = calibrate_gap(steps, opts.workers)
        ideal, measured = s.ideal_steps_per_s, s.steps_per_s
        s.update(gap_ms=None if gap is None else 1000.0 * gap,
                 measured_over_ideal=measured / ideal if ideal and measured else None)
    else:  # the simulator's own clock: nothing measured to hold against it
        s.update(overhead_ms=1000.0 * float(predicted.overhead_s or 0.0), ideal_steps_per_s=None,
                 measured_over_ideal=None, gap_ms=1000.0 * float(predicted.gap_s or 0.0), predicted=dict(predicted))
    s.update(final_loss=final.eval_loss, final_accuracy=final.eval_accuracy)
    s.update(_diverged_on(steps, events, s))
    s.update(params=final.params if opts.model == "linear" else None, run_dir=rd.path)
    return s, (steps, events, config, s)


def _diverged_on(steps: pd.DataFrame, events: pd.DataFrame, s: Summary) -> dict[str, Any]:
    """``diverged`` on the training loss (as :func:`summarize` found) or on the held-out loss
    (:func:`ssptk.analysis.held_out.held_out_divergence`, the final evaluation included), ``diverged_at_step`` where
    the first rule that held did, and ``diverged_on``: ``"training"``, ``"held-out"`` or ``None``."""
    if s.diverged:
        return {"diverged_on": "training"}
    held = held_out_divergence(held_out_curve(events, steps, s), steps, smoothing_window(int(s.workers or 1)))
    if not held["diverged"]:
        return {"diverged_on": None}
    return {"diverged": True, "diverged_at_step": held["diverged_at_step"], "diverged_on": "held-out"}


def _startup(steps: pd.DataFrame, config: RunConfig) -> dict[str, Any]:
    """Seconds from the ``run()`` call to the first step record, and whether the tasks were warm."""
    launched = config.launched
    first = None if steps.empty or not launched else float(steps["t"].min()) - float(launched)
    return {"first_step_s": first, "warm_reused": config.tasks.reused}


def _ideal(steps: pd.DataFrame, opts: RunOptions, config: RunConfig) -> dict[str, Any]:
    """The simulator's steps/s for these options with this run's calibrated per-step overhead, its workers sharing
    the cores the run had (``--cores``, else config.json's ``tasks.cores``)."""
    if steps.empty:
        return {"overhead_ms": None, "ideal_steps_per_s": None}
    # A failed run simulates only the budget it got through (a run that stopped at step 12 of --steps
    # 1000000 must not spend minutes simulating the rest); a finished run has >= (N-B)*K records: all of it.
    budget = min(opts.steps, max(1, -(-len(steps) // max(1, opts.workers - opts.backup))))
    size = builtin_parameters(opts.model)  # under --network the calibrated overhead leaves the transfers out
    return ideal_for(steps, SimSpec.of(opts, machine_cores=config.tasks.cores, steps=budget,
                                       model_bytes=None if size is None else 4.0 * size))


def _training_cpu(events: pd.DataFrame, ps_cpu_s: float | None, steps: int | None) -> dict[str, Any]:
    """CPU seconds all tasks spent training (start barrier to done), and per minibatch.

    On a machine where the tasks share few cores, throughput is bound by this, and unlike steps/s it
    barely moves when other programs take turns on the cores: the steadier measure of overhead.
    """
    out: dict[str, Any] = {"train_cpu_s": None, "cpu_ms_per_step": None}
    if events.empty or not steps or (ps_cpu_s is None and "process_cpu_s" not in events):
        return out
    if (events["event"] == "restart").any():  # a restarted worker's CPU clock started again at 0
        return out
    if "process_cpu_s" in events:  # the shared layout: one process (the PS too), its clock in every event
        clock = events.dropna(subset=["process_cpu_s"]).groupby("event")["process_cpu_s"]
        if {"start", "done"} <= set(clock.groups):
            total = float(clock.max()["done"] - clock.min()["start"])
            return {"train_cpu_s": total, "cpu_ms_per_step": 1000.0 * total / steps}
        return out
    if "cpu_s" not in events or ps_cpu_s is None:
        return out
    by = events.dropna(subset=["cpu_s"]).groupby(["worker", "event"])["cpu_s"].first().unstack()
    if not {"start", "done"} <= set(by.columns) or by[["start", "done"]].isna().any().any():
        return out
    total = float((by["done"] - by["start"]).sum()) + ps_cpu_s
    return {"train_cpu_s": total, "cpu_ms_per_step": 1000.0 * total / steps}
