"""The shared layout: every task of a local cluster in one process (``ssptk worker --task shared``).

Each task keeps its own ``tf.train.Server``, so every parameter read, update, queue and barrier still
goes through TensorFlow's distributed runtime (gRPC between the servers, on localhost), exactly as
in the one-process-per-task layout; only the Python side differs: each worker's loop is a thread,
and TensorFlow is imported once instead of once per task (far less memory, a faster start).

Failure semantics: a worker thread that fails logs its ``error`` event (or ``hung``) as a worker
process would, writes its status file (``failed``: the first failure of the process is the one written,
see :mod:`ssptk.runtime.protocol`), prints ``SSPTK_TASK_FAILED worker:I`` and ends the whole process at
once with the worker's exit code, so the launcher names that worker. Each task's status file says
``ready`` once its server is up. A worker cannot be restarted on its own
(``--restart-failed`` needs the processes layout). allreduce needs a process per worker.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from ssptk.core.models import ModelSpec
from ssptk.core.network import task_view
from ssptk.core.options import RunOptions
from ssptk.runtime.protocol import READY, TASK_FAILED, report_failure, report_ready
from ssptk.runtime.reaper import exit_with_descendants

__all__ = ["SharedTasks"]

_fail_lock = threading.Lock()


def fail(task: str, code: int) -> None:
    """End the shared process because ``task`` failed (it logged why): the launcher reads its status file."""
    with _fail_lock:  # the first failing worker is the one named
        named = report_failure(task)  # a no-op if a worker's error was reported already: that one is named
        with contextlib.suppress(OSError):
            sys.stderr.flush()
            print(f"{TASK_FAILED} {named} {code}", flush=True)
        exit_with_descendants(code)


class SharedTasks:
    """The servers of every task of ``cluster`` in this process, and the worker threads of each run."""

    def __init__(self, cluster: dict[str, list[str]], worker_gpus: list[int | None]) -> None:
        import tensorflow as tf

        for gpu in tf.config.list_physical_devices("GPU"):
            tf.config.experimental.set_memory_growth(gpu, True)
        self.cluster = cluster
        self.worker_gpus = worker_gpus
        if any(g is not None for g in worker_gpus):
            where = ", ".join(f"worker:{i} on {'CPU' if g is None else f'GPU:{g}'}" for i, g in enumerate(worker_gpus))
            visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
            print(f"ssptk shared: CUDA_VISIBLE_DEVICES={visible}; {where}", flush=True)
        # TensorFlow runs every server's ops on ONE process-wide pool, sized by the first server's config (its
        # default: a thread per core). An injected delay is an op that sleeps on a pool thread, so with a thread
        # per core a paused worker stalled every other worker and the PS (8 async workers under pause jitter ran
        # at a third of the processes layout's speed). A thread per worker more than that: a pause holds up no one.
        config = tf.compat.v1.ConfigProto(
            inter_op_parallelism_threads=(os.cpu_count() or 2) + len(cluster.get("worker", [])) + 1)
        self.servers: dict[str, Any] = {}
        for job in ("ps", "worker"):
            for i in range(len(cluster.get(job, []))):
                # with --network each server sees the others at their links' addresses (ssptk.core.network)
                spec = tf.compat.v1.train.ClusterSpec(task_view(cluster, f"{job}:{i}", os.environ))
                self.servers[f"{job}:{i}"] = tf.compat.v1.train.Server(spec, job_name=job, task_index=i, start=True,
                                                                      config=config)
                print(f"{READY} {job}:{i}", flush=True)
                report_ready(f"{job}:{i}")

    def train(self, spec_of: Callable[[], ModelSpec], opts: RunOptions, run_dir: str, run_id: str,
              guard: Callable[[Callable[[], None], str, int, Callable[[int], None]], None],
              reset_container: bool = False) -> None:
        """One run: a thread per worker, each under ``guard(fn, run_dir, index, on_failure)`` (the task's
        error handling, which logs the failure and calls ``on_failure(code)``); returns when all finished."""
        from ssptk.runtime.local_loop import trainer_for

        spec = spec_of()
        n = len(self.cluster["worker"])

        def worker(i: int) -> None:
            def on_failure(code: int) -> None:
                fail(f"worker:{i}", code)

            def body() -> None:
                gpu = self.worker_gpus[i] if i < len(self.worker_gpus) else None
                trainer = trainer_for(opts.mode)(spec, opts, self.cluster, i, self.servers[f"worker:{i}"].target,
                                                 run_dir, container=run_id, gpu=gpu)
                trainer.exit, trainer.own_process = on_failure, False
                trainer.run(reset_container=reset_container)

            guard(body, run_dir, i, on_failure)

        threads = [threading.Thread(target=worker, args=(i,), name=f"worker:{i}", daemon=True) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
