"""No orphans, whatever ends a task (issue 26.3): what a task's code starts outside its process group (a child
that calls ``setpgid``, a ``setsid()`` daemon) used to survive with parent pid 1 when the task was SIGKILLed or
called ``os._exit(3)`` while the launcher lived on. Each task's :class:`~ssptk.launch.tracking.Tracker` now
follows them (a cgroup, else /proc) and kills them when the task ends. The fast tests drive a
:class:`TaskProcess` running ``tests/fixtures/orphans.py`` both ways; one slow test kills a real worker."""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import FIXTURES, assert_gone, cluster_processes, skip_or_fail, ssptk_cmd

from ssptk.launch import tracking
from ssptk.launch.process import TaskProcess

ORPHANS = str(FIXTURES / "orphans.py")


@pytest.fixture(params=["cgroup", "proc"])
def way(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test both ways: a cgroup per task (where this machine allows one), and /proc (``SSPTK_NO_CGROUP``)."""
    if request.param == "proc":
        monkeypatch.setenv(tracking.CGROUP_OFF_ENV, "1")
    else:
        monkeypatch.delenv(tracking.CGROUP_OFF_ENV, raising=False)
        probe = tracking.tracker("probe")
        probe.close()
        if not isinstance(probe, tracking.CgroupTracker):
            skip_or_fail(f"this machine gives the launcher no cgroup: {probe.how}")
    return str(request.param)


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def sleepers(marker: Path, n: int, within: float = 10.0) -> list[int]:
    """The pids of the first ``n`` sleepers noted in ``marker``, once they are all there."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        lines = marker.read_text().splitlines() if marker.exists() else []
        if len(lines) >= n:
            return [int(line.split()[1]) for line in lines[:n]]
        time.sleep(0.02)
    raise AssertionError(f"the sleepers did not start: {marker}")


def assert_dead(pids: list[int], within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while any(map(alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.02)
    left = [p for p in pids if alive(p)]
    for p in left:  # never leave them to the next test
        os.kill(p, signal.SIGKILL)
    assert not left, f"orphans outlived their task: {left}"


def kill_left(marker: Path) -> None:
    """After a test, pass or fail: no sleeper it started may outlive it."""
    for line in marker.read_text().splitlines() if marker.exists() else []:
        if alive(pid := int(line.split()[1])):
            os.kill(pid, signal.SIGKILL)


def task(tmp_path: Path, how: str) -> tuple[TaskProcess, Path]:
    marker = tmp_path / "sleepers"
    t = TaskProcess("worker:1", [sys.executable, ORPHANS, str(marker), "worker:1", how], dict(os.environ),
                    str(tmp_path / "worker.log"), str(tmp_path))
    t.start()
    return t, marker


@pytest.mark.parametrize("end", ["exit3", "sigkill"])
def test_what_a_task_started_dies_when_the_task_ends_by_itself(way: str, end: str, tmp_path: Path) -> None:
    # sigkill: the group child starts with an empty environment, so the /proc way finds it by its snapshot only
    t, marker = task(tmp_path, "exit3" if end == "exit3" else "wait-clean")
    try:
        orphans = sleepers(marker, 2)
        if end == "sigkill":
            t.track(tracking.proc_table())  # what LocalCluster.poll does every SNAPSHOT_S
            os.kill(t.proc.pid, signal.SIGKILL)  # the task only: it can reap nothing
        assert t.wait(5.0) == (3 if end == "exit3" else -signal.SIGKILL)
        assert all(alive(p) and psutil.Process(p).ppid() != t.proc.pid for p in orphans), \
            "the task's children should be orphans now (what the issue saw)"
        assert t.track() == 2
        assert_dead(orphans)
        assert t.track() == 0  # once
    finally:
        t.kill()
        kill_left(marker)


def test_a_restart_and_a_stop_kill_what_the_task_started(way: str, tmp_path: Path) -> None:
    t, marker = task(tmp_path, "wait")
    try:
        first = sleepers(marker, 2)
        t.track(tracking.proc_table())
        os.kill(t.proc.pid, signal.SIGKILL)
        t.wait(5.0)
        t.restart()  # what the supervisor does with --restart-failed
        assert_dead(first, within=0.5)
        second = sleepers(marker, 4)[2:]
        cgroup = getattr(t.tracker, "path", "")
        assert t.tracker is not None and t.tracker.how == ("cgroup" if way == "cgroup" else f"none ({tracking.CGROUP_OFF_ENV}=1)")
        t.kill()  # the launcher's stop: TERM/KILL the group, then what the tracker holds
        assert_dead([t.proc.pid, *second], within=0.5)
        assert not cgroup or not os.path.exists(cgroup), "the task's cgroup should be removed"
    finally:
        t.kill()
        kill_left(marker)


def test_without_a_cgroup_the_proc_way_is_used_and_said_once(monkeypatch: pytest.MonkeyPatch,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv(tracking.CGROUP_OFF_ENV, raising=False)
    monkeypatch.setattr(tracking, "_state", type(tracking._state)())

    def no_cgroup() -> str:
        raise OSError("cgroup2 is not mounted")

    monkeypatch.setattr(tracking, "_own_cgroup", no_cgroup)
    with caplog.at_level(logging.INFO, logger="ssptk"):
        made = [tracking.tracker(f"worker:{i}") for i in range(2)]
    assert [type(m) for m in made] == [tracking.TreeTracker] * 2
    assert made[0].how == "none (cgroup2 is not mounted)" and made[0].tag != made[1].tag
    said = [r.getMessage() for r in caplog.records if "no cgroup" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("ssptk: no cgroup for the tasks (cgroup2 is not mounted): "), said
    assert all(r.levelno == logging.INFO for r in caplog.records if "no cgroup" in r.getMessage())


def test_the_cgroups_of_a_launcher_that_is_gone_are_emptied_and_removed(tmp_path: Path) -> None:
    probe = tracking.tracker("probe")
    base = os.path.dirname(getattr(probe, "path", ""))
    probe.close()
    if not isinstance(probe, tracking.CgroupTracker):
        skip_or_fail(f"this machine gives the launcher no cgroup: {probe.how}")
    dead = subprocess.Popen(["true"])
    dead.wait()  # a pid no launcher has now
    stale = os.path.join(base, f"ssptk-{dead.pid}-1-1")
    mine = tracking.tracker("worker:0")
    os.mkdir(stale)
    left = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        with open(os.path.join(stale, "cgroup.procs"), "w") as f:
            f.write(str(left.pid))
        assert tracking.sweep_stale_cgroups(base) == [stale]
        assert left.wait(5.0) == -signal.SIGKILL and not os.path.exists(stale)
        assert isinstance(mine, tracking.CgroupTracker) and os.path.isdir(mine.path), "a live launcher's is kept"
    finally:
        left.kill()
        left.wait()
        mine.close()


@pytest.mark.slow
def test_what_a_killed_worker_started_dies_with_it_while_the_run_goes_on(tmp_path: Path, user_model_path: str,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGKILL worker:1 (its process only) in a run with --restart-failed: the child and the daemon its build()
    started die at once, while the run goes on; then Ctrl-C, and nothing is left."""
    marker, run_dir = tmp_path / "sleepers", tmp_path / "run"
    monkeypatch.setenv("SSPTK_TEST_ORPHANS", str(marker))
    launcher = subprocess.Popen([*ssptk_cmd(), "run", "--model", "orphans:leaves_children", "--mode", "async",
                                 "--workers", "2", "--steps", "1000000", "--restart-failed", "1", "--gpus", "none",
                                 "--stall-timeout", "60", "--out", str(run_dir)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        sleepers(marker, 4, within=120)
        steps = run_dir / "workers" / "worker-1.jsonl"
        deadline = time.monotonic() + 120  # past the start barrier: a worker dying before it is not restarted
        while (not steps.exists() or steps.read_text().count('"step"') < 5) and time.monotonic() < deadline:
            time.sleep(0.1)
        lines = marker.read_text().splitlines()[:4]
        orphans = [int(line.split()[1]) for line in lines if line.startswith("worker:1 ")]
        worker1 = [p for p in cluster_processes(str(run_dir)) if "--task worker:1" in " ".join(p.cmdline())]
        assert len(orphans) == 2 and len(worker1) == 1
        worker1[0].kill()
        # while the run goes on (it has a million steps to go): by the supervisor's next look, which on a busy
        # machine without a cgroup (the /proc way, a scan of every process) took more than 5 s once
        assert_dead(orphans, within=30.0)
        assert launcher.poll() is None, "the run should go on (the worker is restarted)"
        launcher.send_signal(signal.SIGINT)
        err = launcher.communicate(timeout=60)[1]
        assert launcher.returncode == 130, err  # stopped by us: the run had not failed
        assert_dead([int(line.split()[1]) for line in marker.read_text().splitlines()])  # the restarted one's too
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
        kill_left(marker)
        assert_gone(str(run_dir))
