"""The task status file (ssptk.rundir.task_status, written through ssptk.runtime.protocol) and one task's
process (ssptk.launch.process): a task says it is ready or why it failed in a typed file, and the launcher
reads that file, not the task's log."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ssptk.launch.cluster import LocalCluster
from ssptk.launch.process import TaskProcess
from ssptk.rundir.task_status import (
    FAILED_STATE,
    READY_STATE,
    STATUS_DIR_ENV,
    TaskError,
    TaskStatus,
    read_status,
    read_statuses,
    status_path,
    write_status,
)

# a stand-in task: reports through the runtime's own calls, then does what the test says
PRELUDE = ("import sys, time\nfrom ssptk.rundir.task_status import TaskError\n"
           "from ssptk.runtime.protocol import report_failure, report_ready, report_run_done\n")


def test_a_status_round_trips_and_is_written_whole(tmp_path: Path) -> None:
    error = TaskError("ValueError", "ValueError: boom", ("Traceback (most recent call last):", "ValueError: boom"))
    status = TaskStatus("worker:1", 4711, FAILED_STATE, 1.7e9, "run1", error, "slurm-7.0:0123456789ab")
    write_status(str(tmp_path), status)
    assert os.listdir(tmp_path) == ["worker-1.json"]  # no temporary file left
    assert read_status(str(tmp_path), "worker:1") == status
    assert json.loads(Path(status_path(str(tmp_path), "worker:1")).read_text()) == {
        "task": "worker:1", "pid": 4711, "state": "failed", "time": 1.7e9, "run": "run1",
        "error": {"type": "ValueError", "message": "ValueError: boom",
                  "traceback_tail": ["Traceback (most recent call last):", "ValueError: boom"]},
        "identity": "slurm-7.0:0123456789ab"}


def test_a_hosts_status_files_are_read_without_trusting_them(tmp_path: Path) -> None:
    """A host's tasks/ (a run directory from anywhere): well-formed files named after their task, the states of a
    task no launcher started included; a FIFO is never waited on, a file naming another task is left out."""
    write_status(str(tmp_path), TaskStatus("ps:0", 1, "ready", 1.0, identity="run:1"))
    write_status(str(tmp_path), TaskStatus("worker:0", 2, "done", 2.0, identity="run:1"))
    write_status(str(tmp_path), TaskStatus("worker:1", 3, "stopped", 3.0, identity="run:1"))
    os.mkfifo(tmp_path / "worker-2.json")
    (tmp_path / "worker-3.json").write_text(Path(status_path(str(tmp_path), "ps:0")).read_text())
    found = read_statuses(str(tmp_path))
    assert {t: s.state for t, s in found.items()} == {"ps:0": "ready", "worker:0": "done", "worker:1": "stopped"}
    assert {s.identity for s in found.values()} == {"run:1"}
    assert read_statuses(str(tmp_path / "missing")) == {}


@pytest.mark.parametrize("text", ["", "{", "[]", '{"task": "worker:0"}',
                                  '{"task": "worker:0", "pid": "1", "state": "ready", "time": 1}',
                                  '{"task": "worker:0", "pid": 1, "state": "sleeping", "time": 1}',
                                  '{"task": "worker:0", "pid": 1, "state": "failed", "time": 1, "error": "boom"}'])
def test_a_malformed_status_reads_as_none(tmp_path: Path, text: str) -> None:
    Path(status_path(str(tmp_path), "worker:0")).write_text(text)
    assert read_status(str(tmp_path), "worker:0") is None
    assert read_status(str(tmp_path), "worker:9") is None  # none written


def test_a_process_reports_its_first_failure_only(tmp_path: Path) -> None:
    script = PRELUDE + textwrap.dedent("""
        report_ready("worker:0"); report_ready("worker:1")
        report_run_done(["worker:0", "worker:1"], "run7")
        print(report_failure("worker:1", TaskError("KeyError", "KeyError: 'x'")))
        print(report_failure("worker:0"))
    """)
    out = subprocess.run([sys.executable, "-c", script], env=dict(os.environ, **{STATUS_DIR_ENV: str(tmp_path)}),
                         capture_output=True, text=True, check=True).stdout
    assert out.split() == ["worker:1", "worker:1"]  # the first failure is the one named
    first, other = read_status(str(tmp_path), "worker:1"), read_status(str(tmp_path), "worker:0")
    assert first is not None and first.state == FAILED_STATE and first.run == "run7"
    assert first.error == TaskError("KeyError", "KeyError: 'x'")
    assert other is not None and other.state == READY_STATE and other.run == "run7"


def test_without_a_status_directory_a_task_writes_nothing(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != STATUS_DIR_ENV}
    subprocess.run([sys.executable, "-c", PRELUDE + 'report_ready("ps:0"); report_failure("ps:0")'], env=env,
                   cwd=tmp_path, check=True)
    assert os.listdir(tmp_path) == []


# --- the launcher's side: stand-in tasks in a LocalCluster ------------------------------------------------

@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SSPTK_NO_NETNS", "1")
    c = LocalCluster(1, str(tmp_path), {}, with_ps=True)
    yield c
    c.stop(grace=0.5)
    assert all(t.exit_code is not None for t in c.tasks)


def add(cluster: LocalCluster, tmp_path: Path, name: str, body: str, hosts: tuple[str, ...] = ()) -> TaskProcess:
    status_dir = tmp_path / "status"
    status_dir.mkdir(exist_ok=True)
    env = dict(os.environ, **{STATUS_DIR_ENV: str(status_dir)})
    task = TaskProcess(name, [sys.executable, "-c", PRELUDE + textwrap.dedent(body)], env,
                       str(tmp_path / f"{name.replace(':', '-')}.log"), str(status_dir), hosts)
    task.start()
    cluster.tasks.append(task)
    return task


def test_readiness_and_a_failure_come_from_the_status_files(cluster: LocalCluster, tmp_path: Path) -> None:
    add(cluster, tmp_path, "ps:0", 'report_ready("ps:0"); time.sleep(60)')
    add(cluster, tmp_path, "worker:0", """
        import os
        report_ready("worker:0")
        while not os.path.exists(os.path.join(os.environ["SSPTK_STATUS_DIR"], "ps-0.json")):
            time.sleep(0.01)
        time.sleep(0.5)  # the launcher sees both ready first
        print("SSPTK_READY is no longer what the launcher reads; ValueError: a decoy", flush=True)
        try:
            raise ValueError("boom")
        except ValueError as e:
            report_failure("worker:0", TaskError("ValueError", "ValueError: boom"))
            sys.exit(1)
    """)
    seen: list[tuple[list[str], list[str]]] = []
    failure = cluster.wait_ready(timeout=60, progress=lambda r, p: seen.append((r, p)))
    assert seen[0] == ([], ["ps:0", "worker:0"])
    assert seen[-1] == (["ps:0", "worker:0"], [])
    failure = failure or cluster.poll()
    while failure is None:
        cluster.wait_exit("worker:0", 5)
        failure = cluster.poll()
    assert (failure.task, failure.exit_code, failure.reason) == ("worker:0", 1, "failed: ValueError: boom")
    assert any("a decoy" in line for line in failure.log_tail)  # the log still comes along


def test_a_task_that_never_becomes_ready_is_named(cluster: LocalCluster, tmp_path: Path) -> None:
    add(cluster, tmp_path, "ps:0", 'report_ready("ps:0"); time.sleep(60)')
    worker = add(cluster, tmp_path, "worker:0", "print('RuntimeError: still importing', flush=True); time.sleep(60)")
    # the 1 s runs from here: on a loaded machine a Python start-up alone can take longer
    for _ in range(600):
        if (tmp_path / "status" / "ps-0.json").exists() and "still importing" in Path(worker.log_path).read_text():
            break
        time.sleep(0.1)
    failure = cluster.wait_ready(timeout=1)
    assert failure is not None and failure.task == "worker:0"
    assert failure.reason == "not ready after 1 s: RuntimeError: still importing"


def test_a_task_that_dies_without_a_word_falls_back_to_its_log(cluster: LocalCluster, tmp_path: Path) -> None:
    add(cluster, tmp_path, "ps:0", "print('OSError: address in use', flush=True); sys.exit(1)")
    failure = cluster.wait_ready(timeout=60)
    assert failure is not None and (failure.task, failure.exit_code) == ("ps:0", 1)
    assert failure.reason == "failed: OSError: address in use"


def test_a_process_holding_every_task_names_the_one_that_failed(cluster: LocalCluster, tmp_path: Path) -> None:
    add(cluster, tmp_path, "shared", """
        for t in ("ps:0", "worker:0"):
            report_ready(t)
        time.sleep(0.5)
        report_failure("worker:0", TaskError("LossNotFinite", "loss became nan at step 3"))
        report_failure("ps:0")
        sys.exit(1)
    """, hosts=("shared", "ps:0", "worker:0"))
    assert cluster.wait_ready(timeout=60) is None
    assert cluster.log_path("worker:0") == cluster.log_path("shared")
    assert cluster.wait_exit("worker:0", 30) == 1
    failure = cluster.poll()
    assert failure is not None and (failure.task, failure.reason) == ("worker:0", "failed: loss became nan at step 3")


def test_a_restart_forgets_the_dead_process_status(cluster: LocalCluster, tmp_path: Path) -> None:
    task = add(cluster, tmp_path, "worker:0", """
        if "--rejoin" not in sys.argv:
            report_failure("worker:0", TaskError("ValueError", "ValueError: first life"))
            sys.exit(1)
        time.sleep(60)
    """)
    assert task.wait(30) == 1 and task.failed_status() is not None
    assert cluster.restart("worker:0") == 1
    assert task.failed_status() is None and task.status() is None and task.exit_code is None
    assert task.proc is not None and task.proc.args[-2:] == ["--rejoin", "1"]
