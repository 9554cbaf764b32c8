"""A cluster's tasks are forked from one fork server that imported TensorFlow once (ssptk.launch.forking)."""
from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import psutil
import pytest
from conftest import assert_gone, cluster_processes

import ssptk
from ssptk.core.errors import RunFailed
from ssptk.launch import forking

pytestmark = pytest.mark.slow


def _servers() -> list[psutil.Process]:
    """This test process's live fork servers."""
    found = []
    for p in psutil.Process().children():
        try:
            if p.status() != psutil.STATUS_ZOMBIE and "--fork-server" in p.cmdline():
                found.append(p)
        except psutil.Error:  # gone meanwhile
            pass
    return found


def test_tasks_are_forked_from_one_server_each_in_a_session_of_its_own(run_dir: Path) -> None:
    seen: dict[str, tuple[int, int, int, list[str]]] = {}
    servers: list[int] = []

    def progress(done: int, total: int) -> None:
        if seen:
            return
        servers.extend(p.pid for p in _servers())
        for p in cluster_processes(str(run_dir)):
            argv = p.cmdline()
            seen[argv[argv.index("--task") + 1]] = (p.pid, p.ppid(), os.getsid(p.pid), argv)

    r = ssptk.run(mode="ssp", staleness=1, workers=3, steps=30, out=str(run_dir), progress=progress)
    assert r.ok
    assert len(servers) == 1, "one fork server per cluster"
    assert sorted(seen) == ["ps:0", "worker:0", "worker:1", "worker:2"]
    for task, (pid, ppid, sid, argv) in seen.items():
        assert ppid == servers[0], f"{task} was not forked by the server"
        assert sid == pid, f"{task} is not in a session of its own"
        assert argv[1:3] == ["-m", "ssptk.worker"] and str(run_dir) in " ".join(argv)  # ps shows the task
    assert not _servers(), "the fork server outlived its cluster"


def test_without_the_fork_server_each_task_is_started_by_itself(run_dir: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(forking.ENV, "0")
    parents: set[int] = set()

    def progress(done: int, total: int) -> None:
        parents.update(p.ppid() for p in cluster_processes(str(run_dir)))
        assert not _servers()

    r = ssptk.run(mode="async", workers=1, steps=10, out=str(run_dir), progress=progress)  # 2 tasks: it would fork
    assert r.ok and parents == {os.getpid()}


def test_a_server_that_cannot_start_leaves_the_tasks_to_start_by_themselves(run_dir: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forking, "FORK_SERVER_FLAG", "--no-such-option")  # the server exits 2 at once
    parents: set[int] = set()

    def progress(done: int, total: int) -> None:
        parents.update(p.ppid() for p in cluster_processes(str(run_dir)))

    r = ssptk.run(mode="sync", workers=1, steps=10, out=str(run_dir), progress=progress)  # 2 tasks: it would fork
    assert r.ok and r.summary["params"]["w"] != 0
    assert parents == {os.getpid()}, "the tasks were not started by the launcher itself"


def test_a_killed_fork_server_takes_its_tasks_with_it_and_the_run_fails_in_words(run_dir: Path) -> None:
    killed = threading.Event()

    def progress(done: int, total: int) -> None:
        if done >= 10 and not killed.is_set():
            killed.set()
            for p in _servers():
                os.kill(p.pid, signal.SIGKILL)

    start = time.monotonic()
    with pytest.raises(RunFailed, match=r"(worker|ps):\d"):
        ssptk.run(mode="async", workers=2, steps=3000, out=str(run_dir), progress=progress, stall_timeout=60)
    assert killed.is_set() and time.monotonic() - start < 60
    assert_gone(str(run_dir))
