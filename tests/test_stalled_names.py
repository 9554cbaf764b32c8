"""The right task is named (issue 26.4): a stopped task (SIGSTOP: state T) is told apart from the tasks that
wait on it. A PS stopped long enough for a worker's step to be declared hung was reported as that worker's
hang ("a step of worker 0 hung in TensorFlow ..."), a stopped sync worker as worker 0's, and an async worker
stuck in its own ``data()`` was blamed on ps:0 once it was the last one running."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
from conftest import assert_gone, cluster_processes, ssptk_cmd

from ssptk.core.errors import TaskFailure
from ssptk.launch import supervisor
from ssptk.launch.supervisor import StallWatch


class Cluster:
    """What the stall watch asks of a cluster: its workers, and which tasks are stopped."""

    def __init__(self, workers: int = 2, with_ps: bool = True, stopped: tuple[str, ...] = ()) -> None:
        self.spec = {"worker": ["h:1"] * workers}
        self.with_ps = with_ps
        self.stopped = list(stopped)
        self.tasks = [SimpleNamespace(name=n) for n in (["ps:0"] if with_ps else []) + [f"worker:{i}" for i in range(workers)]]

    def stopped_tasks(self) -> list[str]:
        return self.stopped

    def log_path(self, name: str) -> str:
        return "/nonexistent"


def hung(worker: int) -> TaskFailure:
    return TaskFailure.of(f"worker:{worker}", "failed", 1)


@pytest.mark.parametrize(("stopped", "failed"), [("ps:0", 0), ("worker:1", 0)])
def test_a_worker_that_ended_waiting_on_a_stopped_task_names_the_stopped_one(stopped: str, failed: int) -> None:
    """ps:0 stopped (async), or worker:1 stopped (sync, where worker 0's step waits on its gradient)."""
    f = StallWatch(10.0).held_up_by(Cluster(stopped=(stopped,)), hung(failed))
    assert f is not None and f.task == stopped
    assert f.reason == f"stalled: {stopped} is stopped (SIGSTOP or a debugger, state T), and worker:{failed} " \
                       "ended waiting on it"
    assert StallWatch(10.0).held_up_by(Cluster(), hung(failed)) is None  # nothing stopped: the worker's own failure


def test_the_last_unfinished_worker_is_blamed_not_the_ps(monkeypatch: pytest.MonkeyPatch) -> None:
    """async: worker 0 finished, worker 1 hangs in its own data(): the PS answered worker 0 to the end."""
    now = [1000.0]
    monkeypatch.setattr(supervisor.time, "monotonic", lambda: now[0])
    watch = StallWatch(5.0)
    watch.saw([], [{"event": "start", "t": 1.7e9, "worker": w} for w in (0, 1)])
    now[0] += 1.0
    watch.saw([{"t": 1.7e9, "worker": 1, "step": 3, "global_step": 7, "loss": 1.0}],
              [{"event": "done", "t": 1.7e9, "worker": 0}])
    now[0] += 5.5
    f = watch.check(Cluster())
    assert f is not None and f.task == "worker:1", f
    assert f.reason.startswith("stalled: no step logged for 5 s (last step at ")
    assert watch.check(Cluster(workers=3)).task == "ps:0"  # two unfinished, silent together: they wait on the PS


@pytest.mark.slow
@pytest.mark.parametrize("mode", [["async"], ["sync", "--restart-failed", "2"]], ids=["async", "sync-restarts"])
def test_a_stopped_ps_is_named_when_a_worker_ends_waiting_on_it(tmp_path: Path, mode: list[str]) -> None:
    """--stall-timeout 10: a worker's step is declared hung after 5 s, before the stall watch's 10 s; the
    message names ps:0 as stopped, not the worker. With --restart-failed too (sync: worker:0, which holds the
    aggregator, is not restarted, and the run ends on it): restarting cannot help while the PS is stopped."""
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([*ssptk_cmd(), "run", "--mode", *mode, "--workers", "2", "--steps", "1000000",
                             "--gpus", "none", "--stall-timeout", "10", "--out", str(run_dir)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    ps = None
    try:
        log = run_dir / "workers" / "worker-0.jsonl"
        deadline = time.monotonic() + 180
        while (not log.exists() or log.read_text().count('"step"') < 10) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[1]
            time.sleep(0.1)
        ps = next(p for p in cluster_processes(str(run_dir)) if "--task ps:0" in " ".join(p.cmdline()))
        ps.suspend()  # SIGSTOP
        err = proc.communicate(timeout=90)[1]
        first = err.splitlines()[0]
        assert proc.returncode == 1, err
        assert first.startswith("ssptk: run failed: ps:0: stalled: ps:0 is stopped (SIGSTOP or a debugger, state T), "
                                "and worker:"), first
        assert first.endswith(" ended waiting on it"), first
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for p in cluster_processes(str(run_dir)):  # never leave a stopped TF server behind
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)
        if ps is not None and psutil.pid_exists(ps.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(ps.pid, signal.SIGCONT)
    assert_gone(str(run_dir))
