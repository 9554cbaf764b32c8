"""Predicted runs: what a run would do, loss included, without a cluster.

:func:`predict` has one process (:func:`ssptk.launch.predictor.run_predictor`) simulate each run's schedule and
replay it with the model's real gradients (:mod:`ssptk.sim.replay`), then leaves in each run directory what
a real run leaves: the workers' logs, ``model/final.json``, ``summary.json`` (with ``"predicted"``). So a
predicted run reads like a real one everywhere (``RunResult``, tables, figures, reports, ``ssptk report``);
only ``config.json`` and ``summary.json`` say ``predicted``, with the per-step overhead its clock was
simulated with and, under a shaped ``--network``, the cores its workers shared (``--cores``: by default this
machine's, as a run here would have; 0: each worker its own machine). :func:`simulate_timing` is ``ssptk.simulate``: the
timing-only simulator (a ``SimResult``); :func:`predict_run` one predicted run with its model (a ``RunResult``).
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ssptk.core.errors import RunFailed, RunInterrupted, TaskFailure, UsageError
from ssptk.core.option_checks import check_memory, check_target
from ssptk.core.options import RunOptions, resolve
from ssptk.core.resources import check_sim, machine_cores
from ssptk.experiment.finish import finish_run, interruption
from ssptk.experiment.result import RunResult
from ssptk.experiment.single import check_model, new_run_dir
from ssptk.launch.predictor import PREDICT_TASK, PredictProgress, run_predictor
from ssptk.rundir import RunDir, load_run
from ssptk.sim import SimResult, SimSpec, simulate_spec
from ssptk.sim.spec import shared_cores

__all__ = ["DEFAULT_OVERHEAD_S", "Prediction", "plan", "plan_resolved", "predict", "predict_run", "simulate_timing",
           "timing"]

#: The per-step cost a prediction assumes when none is given: what a step of the built-in models costs a
#: worker on a 2-core machine with a few workers (FINDINGS.md). Calibrate it from a real run's summary
#: (``overhead_ms``) for times that mean something on your machine; minibatches to a target do not depend on it.
DEFAULT_OVERHEAD_S = 0.005


@dataclass(frozen=True)
class Prediction:
    """A predicted run, planned: its checked options, its claimed directory, the per-step overhead (a free run's
    step with these workers on these cores), the cores its workers share (``None``: each its own machine) and the
    seconds of the overhead between a worker's update landing and its next read (``gap``: a real run's
    ``gap_ms``, :func:`ssptk.sim.simulate`'s ``gap``; 0: none known)."""

    opts: RunOptions
    run_dir: str
    overhead: float
    cores: float | None = None
    gap: float = 0.0

    @property
    def shown_cores(self) -> dict[str, float | None]:
        """What config.json's ``predicted`` says of the cores: ``{"cores": C}`` (``None``: each worker its own
        machine) where they change the prediction (a shaped network), else nothing."""
        net = self.opts.network_spec
        return {"cores": self.cores} if net is not None and net.shaped else {}


def plan(overhead: float | None = None, run_dir: str | None = None, gap: float | None = None,
         **options: Any) -> Prediction:
    """Resolve and check ``options`` (those of ``ssptk run``; a model is required), claim the run directory
    (``run_dir``, else ``--out``, else ``runs/<timestamp>-<mode>-predicted``); ``cores`` (``--cores``) not given:
    this machine's (:func:`ssptk.core.resources.machine_cores`); ``gap`` (:class:`Prediction`'s) at most the overhead.
    Raises :class:`UsageError`."""
    return plan_resolved(resolve(**options), overhead, run_dir, gap)


def plan_resolved(opts: RunOptions, overhead: float | None = None, run_dir: str | None = None,
                  gap: float | None = None) -> Prediction:
    """:func:`plan` of options resolved already (:func:`ssptk.core.options.resolve`)."""
    for name, x in (("--overhead", overhead), ("gap", gap)):
        if x is not None and (isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 <= x < float("inf")):
            raise UsageError(f"{name} must be a number of seconds >= 0, got {x!r}")
    check_model(opts)
    check_memory(opts, predicted=True)
    run_dir = new_run_dir(run_dir if run_dir is not None else opts.out, f"{opts.mode}-predicted")
    opts.out = run_dir
    step = DEFAULT_OVERHEAD_S if overhead is None else float(overhead)
    return Prediction(opts, run_dir, step, shared_cores(opts.cores, machine_cores()), min(float(gap or 0.0), step))


def predict(plans: list[Prediction], *, log_dir: str | None = None, progress: PredictProgress | None = None,
            cancel: threading.Event | None = None, raise_on_failure: bool = True) -> list[RunResult]:
    """Make the planned predictions in one process; their results, in order. ``log_dir``: the run directory
    whose ``logs/predict.log`` gets the process's output (default: the first prediction's). ``progress(job,
    done, of)`` hears each wave. A prediction whose loss became NaN fails as its real run would (it raises
    :class:`RunFailed` unless ``raise_on_failure`` is false); ``cancel`` stops the process (RunInterrupted)."""
    if not plans:
        return []
    t0 = time.time()
    for p in plans:
        RunDir(p.run_dir).write_config(p.opts, {}, {}, launched=t0, tasks={"warm": False, "layout": "predicted"},
                                       predicted={"overhead_s": p.overhead, **p.shown_cores,
                                                  **({"gap_s": p.gap} if p.gap else {})})
    jobs: list[dict[str, object]] = [{"run_dir": p.run_dir, "overhead": p.overhead, "t0": t0, "cores": p.cores,
                                      "gap": p.gap} for p in plans]
    try:
        failure = run_predictor(log_dir or plans[0].run_dir, jobs, progress, cancel)
    except KeyboardInterrupt as e:  # Ctrl-C, a signal or ``cancel``: the process is stopped; summaries say so
        stop = interruption(e)
        for p in plans:
            finish_run(p.run_dir, p.opts, stop)
        if isinstance(e, RunInterrupted):
            raise
        raise RunInterrupted("interrupted; the predicting process was stopped", signal=stop.signal) from None
    results = []
    for p in plans:
        summary, own = finish_run(p.run_dir, p.opts, ended(p.run_dir, failure))
        results.append(RunResult(p.run_dir, p.opts, summary, own))
    failed = next((r for r in results if r.failure is not None), None)
    if failed is not None and raise_on_failure:
        raise RunFailed(failed.failure, failed)  # type: ignore[arg-type]
    return results


def ended(run_dir: str, failure: TaskFailure | None) -> TaskFailure | None:
    """How one prediction ended, its process having ended with ``failure``: the error its replay logged (a
    non-finite loss, a divergence), else ``None`` where it wrote ``model/final.json``, else the process's
    failure: a prediction the process did not finish is failed, whatever the process's exit code said."""
    own = stopped(run_dir)
    if own is not None or RunDir(run_dir).final():
        return own
    return failure or TaskFailure.of(PREDICT_TASK, "finished without writing model/final.json")


def stopped(run_dir: str) -> TaskFailure | None:
    """Why a predicted run ended early: the ``error`` event its replay logged (a non-finite loss), if any."""
    _, events, _, _ = load_run(run_dir)
    if events.empty or "message" not in events:
        return None
    errors = events[events["event"] == "error"]
    if errors.empty:
        return None
    first = errors.iloc[0]
    task = first.get("task")  # ssptk's own stop (--stop-on-divergence), as a real run's launcher names it
    return TaskFailure.of(task if isinstance(task, str) else f"worker:{int(first['worker'])}", str(first["message"]))


def simulate_timing(mode: str = "ssp", workers: int = 3, steps: int = 200, *, overhead: float | None = None,
             gap: float | None = None, model_bytes: Any = None, **options: Any) -> SimResult:
    """``ssptk.simulate``: the timing of a run, from the discrete-event simulator (:func:`ssptk.sim.simulate_spec`, a
    :class:`~ssptk.sim.SimResult`), nothing trained and nothing written. ``mode``: ``sync``, ``ssp:S``, ``async``,
    ``allreduce`` or ``local:H``; ``options``: the other options of ``ssptk run`` it takes (``staleness``,
    ``straggler``, ``jitter``, ``seed``, ``network``, ``ps``, ``cores``, ...), checked as a run's are. ``overhead``
    (seconds per step, default :data:`DEFAULT_OVERHEAD_S`) sets its clock: a free run's step with these workers on
    ``cores`` cores (``--cores``; default this machine's, 0: each worker its own machine, whose step is its CPU work;
    they matter only under a shaped ``network``, whose transfers carry ``model_bytes``). ``gap`` (async and ssp;
    seconds, at most the overhead; default 0): how much of the step comes after a worker's update landed and before
    its next read (a real run's ``gap_ms`` / 1000): updates that land then are seen, so the predicted staleness is
    lower. A predicted run with a model's loss is :func:`ssptk.predict`'s (``ssptk sim --model`` on the command
    line)."""
    if "model" in options:
        raise UsageError("ssptk.simulate predicts the timing only: for a run's loss too, predict it with its model, "
                         "ssptk.predict(['ssp:2'], model=...)")
    if "target" in options:
        raise UsageError("--target needs --model: the timing-only simulator predicts no loss")
    return timing(resolve(mode=mode, workers=workers, steps=steps, **{"stall_timeout": 0, **options}),
                  overhead=overhead, gap=gap, model_bytes=model_bytes)


def timing(opts: RunOptions, overhead: float | None = None, gap: float | None = None,
           model_bytes: Any = None) -> SimResult:
    """The simulated timing of the resolved options ``opts`` (:func:`simulate_timing`), their workers sharing
    ``--cores`` cores or this machine's."""
    check_sim(opts.workers, opts.steps)
    return simulate_spec(SimSpec.of(opts, machine_cores=machine_cores(), model_bytes=model_bytes, gap=gap or 0.0,
                                    overhead=DEFAULT_OVERHEAD_S if overhead is None else overhead))


def predict_run(mode: str = "ssp", workers: int = 3, steps: int = 200, *, model: str,
                overhead: float | None = None, progress: Callable[[int, int, int], None] | None = None,
                raise_on_failure: bool = True, target: float | None = None, gap: float | None = None,
                **options: Any) -> RunResult:
    """One predicted run (``ssptk sim --model``): a :class:`~ssptk.experiment.result.RunResult` whose ``df`` has
    every minibatch's predicted loss, ``summary`` its final held-out loss and accuracy and whether it diverged: the
    simulator's schedule (:func:`timing`'s clock) replayed with ``model``'s real gradients. ``options``: those of
    ``ssptk run`` (``lr``, ``batch``, ``eval_every``, ``data_split``, ``lr_staleness``, ``cores``, ``out``, ...);
    ``target`` (a loss: held-out with ``eval_every``, else smoothed training loss) adds the predicted time and
    minibatches to it to the summary (``time_to_target_s``, ``steps_to_target``; ``None``: not reached)."""
    options.setdefault("stall_timeout", 0)  # nothing runs: no watchdog whose time-out the delays must fit
    target = check_target(target)
    p = plan(overhead, gap=gap, mode=mode, workers=workers, steps=steps, model=model, **options)
    result = predict([p], progress=progress, raise_on_failure=raise_on_failure)[0]
    if target is not None:
        _to_target(result, target)
    return result


def _to_target(result: RunResult, target: float) -> None:
    """Add the predicted time and minibatches to ``target`` to the run's summary (and its summary.json)."""
    import pandas as pd

    from ssptk.analysis import compare_table

    table = compare_table({result.options.label: (result.df, result.events, result.config, result.summary)}, target)
    row = table.iloc[0]
    time_s, steps = row["time_to_target_s"], row["steps_to_target"]
    result.summary.with_target(float(target), table.attrs.get("target_on"),
                               None if pd.isna(time_s) else float(time_s), None if pd.isna(steps) else int(steps))
    RunDir(result.run_dir).write_summary(result.summary)
