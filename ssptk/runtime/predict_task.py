"""``ssptk worker --task predict --jobs FILE``: predicted runs, one process for a list of them.

For each job (a run directory whose ``config.json`` the launcher wrote, with the run's options and the
per-step overhead to simulate with) the task simulates the schedule (:func:`ssptk.sim.simulate`), replays it
with the model's real gradients (:func:`ssptk.sim.replay.replay`, local SGD's rounds with
:func:`ssptk.sim.replay_local.replay_local`, with a :class:`~ssptk.runtime.gradients.TFOracle`) and writes what
a real run's workers would have logged:
``workers/worker-<i>.jsonl`` (start, step records with their losses, ``eval`` events with ``--eval-every``,
done; an ``error`` event where a non-finite loss would have stopped the run) and ``model/final.json``.
The launcher then writes ``summary.json`` as for any run. Step times are the simulated seconds after the
job's ``t0``.

Progress goes to stdout (the task's log): ``SSPTK_PREDICT <job> <gradients done> <of>`` after each wave and
``SSPTK_PREDICT <job> done`` at the end of a job.
"""
from __future__ import annotations

import json
import os
from dataclasses import replace
from typing import Any

import numpy as np

from ssptk.core.divergence import DivergenceWatch, divergence_stop, smoothing_window
from ssptk.core.models import ModelSpec, data_source, load_model
from ssptk.core.optimizers import learning_rate
from ssptk.core.options import RunOptions
from ssptk.core.records import OPTIONAL_STEP_COLUMNS, STEP_COLUMNS, StepRecord, finite_or_null, json_line
from ssptk.rundir import RunDir
from ssptk.rundir.space import write_whole
from ssptk.runtime.protocol import PREDICT
from ssptk.sim import SimSpec, simulate_spec
from ssptk.sim.replay import replay
from ssptk.sim.replay_local import replay_local

__all__ = ["MAX_COPIES", "predict_jobs"]

#: Most model copies (gradients per TensorFlow call) one predicting process builds.
MAX_COPIES = 64


def predict_jobs(path: str) -> int:
    """Carry out the jobs in ``path`` (JSON ``{"jobs": [{"run_dir", "overhead", "t0", "cores", "gap"}, ...]}``;
    ``cores``: those the workers share, ``None`` or absent: each its own; ``gap``: :func:`ssptk.sim.simulate`'s,
    absent: 0); exit code 0."""
    with open(path) as f:
        jobs = json.load(f)["jobs"]
    runs = [(job, RunDir(job["run_dir"]).config().stored.resolved()) for job in jobs]
    copies = min(MAX_COPIES, max(opts.workers for _, opts in runs))
    oracles: dict[tuple[str, int], Any] = {}
    for k, (job, opts) in enumerate(runs):
        from ssptk.runtime.gradients import TFOracle

        spec = load_model(opts.model)
        key = (opts.model, opts.seed)
        if key not in oracles:
            oracles[key] = TFOracle(spec, opts.seed, copies)
        _predict_one(k, job, opts, spec, oracles[key])
        print(f"{PREDICT} {k} done", flush=True)
    return 0


def _predict_one(k: int, job: dict[str, Any], opts: RunOptions, spec: ModelSpec, oracle: Any) -> None:
    """Job ``k``: simulate, replay, and write the run directory's logs and final model."""
    model_bytes = [float(p.nbytes) for p in oracle.initial()]  # each variable's: a pull or a push, shard by shard
    cores = job.get("cores")  # those the job's workers share, as planned (None: each its own)
    sim = simulate_spec(replace(SimSpec.of(opts, overhead=float(job["overhead"]), model_bytes=model_bytes,
                                           gap=float(job.get("gap") or 0.0)), cores=cores))
    sources = [data_source(spec, opts.seed, opts.batch, opts.data_split, w, opts.workers) for w in range(opts.workers)]

    def data(worker: int, index: int) -> tuple[np.ndarray, np.ndarray]:
        return sources[worker](index)

    def progress(done: int, total: int) -> None:
        print(f"{PREDICT} {k} {done} {total}", flush=True)

    lr = learning_rate(opts.lr, spec, opts.optimizer)
    if opts.mode == "local":
        replayed = replay_local(sim.steps, oracle, data, lr, opts.outer_scale, opts.outer_momentum,
                                eval_every=opts.eval_period, allow_nan=opts.allow_nan, progress=progress,
                                optimizer=opts.optimizer)
    else:
        replayed = replay(sim.steps, oracle, data, opts.update_lr(lr),
                          inverse_staleness=opts.lr_staleness == "inverse", eval_every=opts.eval_every,
                          allow_nan=opts.allow_nan, progress=progress, delay_comp=opts.delay_comp,
                          optimizer=opts.optimizer)
    if opts.stop_on_divergence and replayed.stopped is None:
        _stop_at_divergence(replayed, opts.workers)
    rd = RunDir(job["run_dir"])
    _write_logs(rd, opts, replayed, float(job["t0"]))
    if replayed.stopped is None:
        rd.write_final(replayed.final_loss, oracle.names, replayed.params, replayed.final_accuracy)


def _stop_at_divergence(replayed: Any, workers: int) -> None:
    """``--stop-on-divergence``: cut the records after the one where the run diverged (the real run's launcher
    stops it there), and say why (``stopped``; the failed task is then ssptk's own, as in a real run)."""
    steps = replayed.steps.sort_values("t", kind="stable")
    watch = DivergenceWatch(smoothing_window(workers))
    for k, (loss, g) in enumerate(zip(steps["loss"].to_numpy(float), steps["global_step"].to_numpy(int))):
        if watch.add(float(loss), int(g)):
            replayed.steps = steps.iloc[:k + 1]
            replayed.stopped = divergence_stop(watch.at)
            replayed.stopped_by = "ssptk"
            return


def _write_logs(rd: RunDir, opts: RunOptions, replayed: Any, t0: float) -> None:
    """Every worker's JSONL log, as its task would have written it (whole files: nothing reads them meanwhile)."""
    steps = replayed.steps
    end = t0 + (float(steps["t"].max()) if len(steps) else 0.0)
    failed_worker, failed_at = None, end
    if replayed.stopped is not None:  # where the real run would have stopped: its first non-finite loss, or the
        bad = steps[~np.isfinite(steps["loss"].to_numpy(float))].sort_values("t")  # record where it diverged
        last = bad if len(bad) else steps.sort_values("t").iloc[-1:]
        failed_worker, failed_at = int(last["worker"].iloc[0]), t0 + float(last["t"].iloc[0])
    columns = list(STEP_COLUMNS) + [c for c in OPTIONAL_STEP_COLUMNS if c in steps]
    os.makedirs(rd.workers_dir, exist_ok=True)
    by_worker = {w: g for w, g in steps.groupby("worker")}
    for w in range(opts.workers):
        lines: list[dict[str, Any]] = [{"event": "start", "t": t0, "worker": w}]
        mine = by_worker.get(w)
        if mine is not None:
            for row in mine[columns].itertuples(index=False):
                r = dict(zip(columns, row))
                lines.append(StepRecord(**{**r, "t": t0 + float(r["t"]), "worker": w}).to_dict())
        if w == 0:  # held-out evaluations, up to where the run ended
            lines += [{"event": "eval", "t": t0 + float(e.t), "worker": 0, "global_step": int(e.global_step),
                       "eval_loss": finite_or_null(e.eval_loss), "eval_accuracy": finite_or_null(e.eval_accuracy),
                       "eval_s": 0.0}
                      for e in replayed.evals.itertuples(index=False) if t0 + float(e.t) <= failed_at]
        if w == failed_worker:
            lines.append({"event": "error", "t": failed_at, "worker": w, "message": replayed.stopped,
                          **({"task": replayed.stopped_by} if replayed.stopped_by else {})})
        elif replayed.stopped is None:
            lines.append({"event": "done", "t": end, "worker": w, "steps": 0 if mine is None else len(mine)})
        lines.sort(key=lambda r: r["t"])
        write_whole(rd.worker_log(w), "".join(json_line(r) for r in lines))

