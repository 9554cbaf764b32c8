"""The shared layout's cluster: one process holds the PS and every worker (``--layout shared``).

:class:`SharedCluster` is a :class:`~ssptk.launch.cluster.LocalCluster` with a single
:class:`~ssptk.launch.process.TaskProcess`, ``python -m ssptk.worker --task shared`` (see
:mod:`ssptk.runtime.shared_layout`), whose output goes to ``logs/shared.log``. Its life cycle (start, namespace,
readiness, stop: TERM -> wait -> KILL on the process group) is the base class's: that process holds every
task and writes each one's status file, so a task is ready when its file says so and a failed worker is the
one the process's status files name before it exits. What differs: a worker cannot be restarted alone, and
a stopped process stops them all.
"""
from __future__ import annotations

from ssptk.launch.cluster import LocalCluster
from ssptk.launch.process import TaskProcess

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
                                        *(["--serve"] if serve else worker_args)],
                     hosts=(SHARED_TASK, *self.task_names))

    @property
    def process(self) -> TaskProcess:
        return self.tasks[0]

    def restart(self, name: str) -> int:
        raise RuntimeError("the shared layout cannot restart one worker (options refuse --restart-failed)")

    def _written_by(self, name: str, t: TaskProcess) -> str:
        """A worker's JSONL log: the named worker's, else worker 0's (the process may not have named one)."""
        return super()._written_by(name if name.startswith("worker:") else "worker:0", t)
