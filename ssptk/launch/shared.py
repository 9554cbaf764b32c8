"""The shared layout's cluster: one process holds the PS and every worker (``--layout shared``).

:class:`SharedCluster` is a :class:`~ssptk.launch.cluster.LocalCluster` with a single process,
``python -m ssptk.worker --task shared`` (see :mod:`ssptk.runtime.shared`), whose output goes to
``logs/shared.log``. Its life cycle (start, namespace, stop: TERM -> wait -> KILL on the process group)
is the base class's; what differs is how tasks map to that one process: every task is ready when the
process says so, a failed worker is the one the process names before it exits, a worker cannot be
restarted alone, and a stopped process stops them all.
"""
from __future__ import annotations

import json
import os

from ssptk.core.errors import TaskFailure
from ssptk.launch.cluster import LocalCluster, Task, log_has, log_words
from ssptk.rundir import RunDir
from ssptk.rundir.space import disk_full
from ssptk.runtime.protocol import EXIT_DISK_FULL, RUN_DONE, TASK_FAILED

__all__ = ["SharedCluster", "SHARED_TASK"]

#: The name of the one process (and of its log, ``logs/shared.log``).
SHARED_TASK = "shared"


class SharedCluster(LocalCluster):
    """A local cluster whose tasks all live in one process (the arguments as :class:`LocalCluster`'s)."""

    def start(self, worker_args: list[str], run_id: str = "run", serve: bool = False) -> None:
        base_env = self._prepare(serve)
        # the process sees every GPU a worker was given; each worker's ops go to its own one
        workers = [self.gpu_assignment.get(f"worker:{i}", "") for i in range(len(self.spec["worker"]))]
        visible = list(dict.fromkeys(g for g in workers if g))
        env = dict(base_env, CUDA_VISIBLE_DEVICES=",".join(visible))
        placement = ",".join(str(visible.index(g)) if g else "-" for g in workers)
        self._launch(SHARED_TASK, env, ["--task", SHARED_TASK, "--run-id", run_id,
                                        *(["--worker-gpus", placement] if visible else []),
                                        *(["--serve"] if serve else worker_args)])

    @property
    def process(self) -> Task:
        return self.tasks[0]

    def restart(self, name: str) -> int:
        raise RuntimeError("the shared layout cannot restart one worker (options refuse --restart-failed)")

    def log_path(self, name: str) -> str | None:
        return self.process.log_path if self.tasks and (name in self.task_names or name == SHARED_TASK) else None

    def wait_exit(self, name: str, timeout: float) -> int | None:
        return super().wait_exit(SHARED_TASK, timeout) if self.log_path(name) else None

    def failure(self, name: str, reason: str, code: int | None = None) -> TaskFailure:
        return TaskFailure.of(name, reason, code, self.process.log_path, explain=True)

    def submit(self, run_dir: str, worker_args: list[str], run_id: str) -> None:
        if not self.serving:
            raise RuntimeError("submit() needs a cluster started with serve=True")
        self.run_id = run_id
        self.runs_served += 1
        t = self.process
        t.log_path = RunDir(run_dir).task_log(SHARED_TASK)
        t.proc.stdin.write((json.dumps({"run_id": run_id, "argv": worker_args}) + "\n").encode())  # type: ignore[union-attr]
        t.proc.stdin.flush()  # type: ignore[union-attr]

    def poll(self) -> TaskFailure | None:
        """The process's failure, named after the worker whose failure ended it (if it said which)."""
        code = self.process.exit_code
        if code is None or (code == 0 and not self.serving):
            return None
        # the task the process named before it exited (``SSPTK_TASK_FAILED worker:1 1``)
        named = next(iter(log_words(self.process.log_path, TASK_FAILED)), None) if code != 0 else None
        if code == EXIT_DISK_FULL:  # the worker's own log may not have taken the message: the code says it
            index = int(named.rpartition(":")[2]) if named and named.startswith("worker:") else 0
            return TaskFailure.of(named or SHARED_TASK, str(disk_full(RunDir(self._run_dir()).worker_log(index))), code)
        if named is not None:
            return self.failure(named, "failed", code)
        return super().poll()

    def _run_dir(self) -> str:
        """The run directory the process writes to now (a warm one's changes with each run)."""
        return os.path.dirname(os.path.dirname(self.process.log_path))

    def workers_finished(self) -> bool:
        if self.serving:
            return log_has(self.process.log_path, f"{RUN_DONE} {self.run_id}", tail=4096)
        return self.process.exit_code == 0

    def exited_workers(self) -> list[str]:
        """Every worker once the process exited 0 (the supervisor then checks that each logged ``done``)."""
        if self.serving or self.process.exit_code != 0:
            return []
        return [n for n in self.task_names if n.startswith("worker:")]

    def cpu_seconds(self, name: str) -> float | None:
        """The one process's CPU time (every task's together), for any of its tasks."""
        return super().cpu_seconds(SHARED_TASK) if self.log_path(name) else None

