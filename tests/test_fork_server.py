"""A process's clusters' tasks are forked from one fork server that imported TensorFlow once, each into its
cluster's namespace (ssptk.launch.forking)."""
from __future__ import annotations

import json
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
from ssptk.experiment.predicted_runs import predict_run
from ssptk.launch import fork_client, forking
from ssptk.runtime import fork_server

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def own_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about a process's own fork server: not the one the test session shares (conftest.py)."""
    monkeypatch.delenv(forking.FORK_SERVER_ENV, raising=False)


def _servers() -> list[psutil.Process]:
    """This test process's live fork servers (not the session's shared one)."""
    found = []
    for p in psutil.Process().children():
        try:
            if p.status() != psutil.STATUS_ZOMBIE and "--fork-server" in p.cmdline() and "--listen" not in p.cmdline():
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
    assert len(servers) == 1, "one fork server"
    assert sorted(seen) == ["ps:0", "worker:0", "worker:1", "worker:2"]
    for task, (pid, ppid, sid, argv) in seen.items():
        assert ppid == servers[0], f"{task} was not forked by the server"
        assert sid == pid, f"{task} is not in a session of its own"
        assert argv[1:3] == ["-m", "ssptk.worker"] and str(run_dir) in " ".join(argv)  # ps shows the task
    assert_gone(str(run_dir))


def test_clusters_share_the_server_and_each_keeps_its_own_namespace(tmp_path: Path) -> None:
    """The next cluster's tasks come from the same server (no TensorFlow import of its own), each cluster's in one
    network namespace, not the launcher's nor the server's; ``ssptk.shutdown()`` ends the server."""
    tasks: dict[str, list[tuple[int, int]]] = {}  # run -> (parent, net namespace) of each task

    def watch(run: str) -> object:
        def progress(done: int, total: int) -> None:
            if run not in tasks:
                tasks[run] = [(p.ppid(), os.stat(f"/proc/{p.pid}/ns/net").st_ino)
                              for p in cluster_processes(str(tmp_path / run))]
        return progress

    for run in ("a", "b"):
        assert ssptk.run(mode="async", workers=2, steps=20, out=str(tmp_path / run), progress=watch(run)).ok
        assert_gone(str(tmp_path / run))
    (server,) = {parent for parent, _ in tasks["a"] + tasks["b"]}
    assert [p.pid for p in _servers()] == [server], "the server did not stay up for the next cluster"
    nets = {run: {net for _, net in found} for run, found in tasks.items()}
    mine, its = os.stat("/proc/self/ns/net").st_ino, os.stat(f"/proc/{server}/ns/net").st_ino
    if r_isolated(tmp_path / "a"):  # one namespace per cluster (the kernel may reuse a freed one's number)
        assert len(nets["a"]) == len(nets["b"]) == 1
        assert not ({mine, its} & (nets["a"] | nets["b"]))
    # a prediction's one process forks from the server that is up (its TensorFlow import made): the server reaps it
    reaped = _children_cpu(server)
    assert predict_run("async", 2, 20, model="linear", out=str(tmp_path / "p1")).ok
    assert _children_cpu(server) > reaped + 0.1, "the prediction's process was not the server's child"
    ssptk.shutdown()
    deadline = time.monotonic() + 10
    while _servers() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _servers(), "ssptk.shutdown() left the fork server"
    # with none up, it starts by itself: a server started for one task would save nothing (and would stay up)
    assert predict_run("async", 2, 20, model="linear", out=str(tmp_path / "p2")).ok
    assert not _servers()


def _children_cpu(pid: int) -> float:
    """CPU seconds of process ``pid``'s children that it has reaped."""
    t = psutil.Process(pid).cpu_times()
    return float(t.children_user + t.children_system)


def test_an_idle_server_ends_by_itself_and_the_next_cluster_starts_another(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SSPTK_FORK_SERVER_IDLE_S", "2")  # a server of its own: another environment
    assert ssptk.run(mode="async", workers=1, steps=10, out=str(tmp_path / "a")).ok
    (first,) = _servers()
    first.wait(15)  # no task, no request for 2 s: it ends
    assert ssptk.run(mode="async", workers=1, steps=10, out=str(tmp_path / "b")).ok
    assert [p.pid for p in _servers()] != [first.pid]
    ssptk.shutdown()


def r_isolated(run_dir: Path) -> bool:
    """Whether the run's tasks had a network namespace of their own (config.json's ``tasks.isolation``)."""
    return json.loads((run_dir / "config.json").read_text())["tasks"]["isolation"] == "netns"


def test_without_the_fork_server_each_task_is_started_by_itself(run_dir: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(forking.FORK_SERVER_ENV, "0")
    ssptk.shutdown()  # an earlier test's idle server
    parents: set[int] = set()

    def progress(done: int, total: int) -> None:
        parents.update(p.ppid() for p in cluster_processes(str(run_dir)))
        assert not _servers()

    r = ssptk.run(mode="async", workers=1, steps=10, out=str(run_dir), progress=progress)  # 2 tasks: it would fork
    assert r.ok and parents == {os.getpid()}


def test_a_server_that_cannot_start_leaves_the_tasks_to_start_by_themselves(run_dir: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    ssptk.shutdown()  # an earlier test's idle server would fork these tasks
    monkeypatch.setattr(fork_client, "FORK_SERVER_FLAG", "--no-such-option")  # the server exits 2 at once
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
    with pytest.raises(RunFailed, match=r"^fork server: the fork server \(pid \d+\) was killed by SIGKILL: it had "
                                        r"forked (ps|worker):\d, which ended with it") as failed:
        ssptk.run(mode="async", workers=2, steps=3000, out=str(run_dir), progress=progress, stall_timeout=60)
    assert killed.is_set() and time.monotonic() - start < 60
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["failed_task"] == "fork server" == failed.value.failure.task  # not ps:0, "killed by SIGKILL"
    assert_gone(str(run_dir))


def test_shutdown_during_a_run_ends_the_fork_server_when_the_run_ends(run_dir: Path) -> None:
    """``ssptk.shutdown()`` while a run (another thread's, a notebook's background run) holds the server: the run goes
    on to its end, and then the server ends too, rather than waiting out its idle time."""
    ssptk.shutdown()  # an earlier test's idle server
    said: list[object] = []

    def progress(done: int, total: int) -> None:
        if done >= 10 and not said:
            said.append(ssptk.shutdown())

    r = ssptk.run(mode="async", workers=2, steps=400, out=str(run_dir), progress=progress)
    assert r.ok and said, "the run did not go on to its end"
    deadline = time.monotonic() + 15
    while _servers() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _servers(), "the fork server outlived the run that held it at ssptk.shutdown()"


def test_a_listening_server_forks_for_several_launchers_and_ends_each_ones_tasks_with_it(tmp_path: Path) -> None:
    """``SSPTK_FORK_SERVER=PATH``: the CLI's tasks are forked by the server listening there, in the launcher's working
    directory; a launcher killed with SIGKILL takes its tasks with it (its connection ends) and the server serves the
    next launcher; SIGTERM ends the server and the tasks it forked (that run then fails)."""
    import subprocess

    from conftest import fork_server_env, listening_fork_server, ssptk_cmd

    path = str(tmp_path / "socket")
    server = subprocess.Popen(listening_fork_server(path), env=fork_server_env(), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)

    clis: list[subprocess.Popen[bytes]] = []

    def launch(name: str) -> tuple[subprocess.Popen[bytes], list[psutil.Process]]:
        (tmp_path / name).mkdir()
        cli = subprocess.Popen([*ssptk_cmd(), "run", "--mode", "async", "--workers", "2", "--steps", "100000",
                                "--out", str(tmp_path / name / "run")], cwd=tmp_path / name,
                               env=dict(os.environ, SSPTK_FORK_SERVER=path), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
        clis.append(cli)
        deadline = time.monotonic() + 90
        while len(cluster_processes(str(tmp_path / name))) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        tasks = cluster_processes(str(tmp_path / name))
        assert len(tasks) == 3, "the run's three tasks did not start"
        assert {p.ppid() for p in tasks} == {server.pid}, "the tasks were not forked by the listening server"
        assert {p.cwd() for p in tasks} == {str(tmp_path / name)}
        return cli, tasks

    try:
        deadline = time.monotonic() + 30
        while not os.path.exists(path + fork_server.DESCRIPTION) and time.monotonic() < deadline:
            time.sleep(0.05)
        # it suits launchers whose tasks start as it started, in the files it sees; not others
        tasks_env = fork_server_env()
        assert forking.suits(path, tasks_env)
        assert not forking.suits(path, dict(tasks_env, LD_PRELOAD="/no/such.so"))
        assert not forking.suits(path, dict(tasks_env, TF_CPP_MIN_LOG_LEVEL="3"))
        # what TensorFlow's import set in a launcher that imported it (a test process, a kernel) is the server's too
        assert forking.suits(path, dict(tasks_env, KMP_INIT_AT_FORK="FALSE", KMP_DUPLICATE_LIB_OK="True"))
        assert not forking.suits(path, dict(tasks_env, KMP_INIT_AT_FORK="TRUE"))
        first, _ = launch("a")
        first.kill()
        first.wait(10)
        assert_gone(str(tmp_path / "a"), within=10)
        assert server.poll() is None, "the server ended with one of its launchers"
        second, _ = launch("b")
        server.terminate()
        assert server.wait(15) == 0
        assert_gone(str(tmp_path / "b"), within=10)
        assert second.wait(60) != 0
    finally:
        for cli in clis:  # a failed check leaves no run behind
            if cli.poll() is None:
                cli.kill()
                cli.wait(10)
        if server.poll() is None:
            server.kill()
            server.wait(10)
    assert not os.path.exists(path) and not os.path.exists(path + fork_server.DESCRIPTION)


_PID_REUSE = r"""
import os, subprocess, sys
from ssptk.launch import fork_client, forking

env = {k: v for k, v in os.environ.items() if k != forking.FORK_SERVER_ENV}
server = fork_client.ForkServer(sys.executable, env)
server.start(lambda argv, fds: subprocess.Popen(argv, pass_fds=fds, env=env, start_new_session=True))
log = open(os.devnull, "wb")
try:
    first = server.fork([sys.executable, "-m", "ssptk.worker", "--help"], env, log, False, None)
    assert first is not None and first.wait(60) == 0
    for _ in range(20):  # the next task gets the first one's pid (as after pids wrap at pid_max)
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(first.pid - 1))
        second = server.fork([sys.executable, "-m", "ssptk.worker", "--no-such-option"], env, log, False, None)
        assert second is not None
        if second.pid == first.pid:
            break
        second.wait(60)
    else:
        sys.exit("no pid was reused")
    print(second.poll(), second.wait(60))
finally:
    server.close()
"""


def test_a_task_with_an_ended_tasks_pid_is_not_taken_for_ended(tmp_path: Path) -> None:
    """Pids wrap at pid_max (32768 here, and a TensorFlow task's threads take dozens each): a task forked with the pid
    of one that ended earlier is running, not ended with that one's exit code (which made a run fail with "worker:4
    exited without finishing"). Reproduced in a private pid namespace, where the next pid can be set."""
    import subprocess
    import sys

    probe = subprocess.run(["unshare", "-rpf", "--mount-proc", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"no private pid namespace here: {probe.stderr.decode().strip()}")
    out = subprocess.run(["unshare", "-rpf", "--mount-proc", sys.executable, "-c", _PID_REUSE], capture_output=True,
                         text=True, timeout=240, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    right_after, at_end = out.stdout.split()
    assert right_after in ("None", "2"), "the new task was taken for the old one, ended"  # 2: it ended already
    assert at_end == "2"
