"""The process that predicts runs: :class:`Predictor`, one ``python -m ssptk.worker --task predict``.

A :class:`~ssptk.launch.cluster.LocalCluster` with a single task and no TensorFlow servers: the same life
cycle (its own session, output to ``logs/predict.log``, TERM -> wait -> KILL on its process group, dies with
its parent, a private network namespace where the OS allows), so predictions leave nothing behind either.
TensorFlow is imported in that process, not in the caller's (a notebook's kernel stays light).
"""
from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable

from ssptk.core.errors import TaskFailure, raise_if_stopped
from ssptk.launch.cluster import LocalCluster
from ssptk.rundir import RunDir
from ssptk.runtime.protocol import PREDICT

__all__ = ["PREDICT_TASK", "Predictor", "run_predictor"]

#: The predicting task's name (and its log's: ``logs/predict.log``).
PREDICT_TASK = "predict"
#: ``progress(job, gradients done, of)``; ``done == of`` once the job's logs are written.
PredictProgress = Callable[[int, int, int], None]


class Predictor(LocalCluster):
    """One predicting process for ``jobs`` (run directories with their per-step overhead and start time);
    its log and job file go in ``log_dir``'s ``logs/``."""

    def __init__(self, log_dir: str) -> None:
        super().__init__(1, log_dir, {}, with_ps=False)

    @property
    def task_names(self) -> list[str]:
        return [PREDICT_TASK]

    def start_jobs(self, jobs: list[dict[str, object]]) -> None:
        """Start the process on ``jobs`` (``{"run_dir", "overhead", "t0"}`` each; each ``config.json`` written)."""
        env = self._prepare(False)
        self.forks = self._fork_server(env)
        path = RunDir(self.run_dir).predict_jobs_path
        with open(path, "w") as f:
            json.dump({"jobs": jobs}, f)
        self._launch(PREDICT_TASK, dict(env, CUDA_VISIBLE_DEVICES=""), ["--task", PREDICT_TASK, "--jobs", path])

    def progress(self) -> dict[int, tuple[int, int]]:
        """``job -> (gradients done, of)`` from the process's log (``(1, 1)`` for a job whose logs are written)."""
        out: dict[int, tuple[int, int]] = {}
        try:
            with open(self.tasks[0].log_path, "rb") as f:
                text = f.read().decode(errors="replace")
        except (OSError, IndexError):
            return out
        for job, a, b in re.findall(rf"^{PREDICT} (\d+) (\d+|done) ?(\d*)$", text, flags=re.M):
            out[int(job)] = (1, 1) if a == "done" else (int(a), int(b))
        return out


def run_predictor(log_dir: str, jobs: list[dict[str, object]], progress: PredictProgress | None = None,
                  cancel: threading.Event | None = None, poll_s: float = 0.2) -> TaskFailure | None:
    """Predict ``jobs`` in one process and wait for it; its failure (``None``: every job's logs are written;
    a process that exits 0 before it said every job done failed too).

    Setting ``cancel`` stops the process and raises :class:`~ssptk.core.errors.RunInterrupted`; so does a
    ``KeyboardInterrupt``. The process is gone when this returns or raises."""
    seen: dict[int, tuple[int, int]] = {}
    p = Predictor(log_dir)
    try:
        p.start_jobs(jobs)
        while True:
            raise_if_stopped(cancel, "stopped by the user while predicting")
            code = p.tasks[0].exit_code
            if progress is not None:
                for job, state in sorted(p.progress().items()):
                    if seen.get(job) != state:
                        seen[job] = state
                        progress(job, *state)
            if code is not None:
                return p.poll() if code != 0 else _unfinished(p, len(jobs))
            time.sleep(poll_s)
    finally:
        p.stop()


def _unfinished(p: Predictor, jobs: int) -> TaskFailure | None:
    """The process exited 0: its failure if it had not finished every job (user code calling ``exit()``)."""
    done = sum(1 for job, state in p.progress().items() if job < jobs and state == (1, 1))
    if done == jobs:
        return None
    return p.failure(PREDICT_TASK, f"exited without finishing: its process ended (exit code 0) after "
                                 f"{done} of {jobs} predictions; does the model's code call exit()?", 0)
