"""Shared fixtures. Every test that starts a cluster must prove its processes are gone afterwards."""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import psutil
import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def under_ci() -> bool:
    """Whether ``CI`` is set (to anything but empty, ``0``, ``false`` or ``no``), as ``.ci/run`` sets it."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def skip_or_fail(why: str) -> NoReturn:
    """Skip the calling test (or module) because a precondition is missing: ``why`` says which and how to get
    it. Under CI it fails instead, so a check that never ran cannot pass for one that did."""
    if under_ci():
        pytest.fail(f"{why}; CI is set, so this is a failure, not a skip", pytrace=False)
    pytest.skip(why, allow_module_level=True)


def cluster_processes(marker: str) -> list[psutil.Process]:
    """Live ``ssptk.worker`` processes whose command line mentions ``marker`` (a run directory)."""
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if "ssptk.worker" in cmd and marker in cmd and p.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(p)
    return found


def kill_worker_when(run_dir: Path, worker: int, after_steps: int, killed: list[int]) -> threading.Thread:
    """A thread that SIGKILLs ``worker:WORKER``'s task (not a restarted one) of the run in ``run_dir`` once its log
    has ``after_steps`` step records, noting the pid in ``killed``."""

    def kill() -> None:
        deadline = time.monotonic() + 120
        log = run_dir / "workers" / f"worker-{worker}.jsonl"
        while time.monotonic() < deadline:
            if log.exists() and log.read_text().count('"step"') >= after_steps:
                for p in cluster_processes(str(run_dir)):
                    if f"worker:{worker}" in " ".join(p.cmdline()) and "--rejoin" not in p.cmdline():
                        os.kill(p.pid, signal.SIGKILL)
                        killed.append(p.pid)
                        return
            time.sleep(0.02)

    t = threading.Thread(target=kill)
    t.start()
    return t


def assert_gone(marker: str, within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while cluster_processes(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = cluster_processes(marker)
    assert not left, f"cluster processes left behind: {[p.pid for p in left]}"


@pytest.fixture
def run_dir(tmp_path: Path):
    """A fresh path for a run; after the test, no task of it may still be running."""
    path = tmp_path / "run"
    yield path
    assert_gone(str(tmp_path))


@pytest.fixture
def user_model_path(monkeypatch: pytest.MonkeyPatch) -> str:
    """Make ``tests/fixtures`` importable for this process and the tasks it starts."""
    monkeypatch.syspath_prepend(str(FIXTURES))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(FIXTURES), os.environ.get("PYTHONPATH", "")]))
    return str(FIXTURES)


def listening_fork_server(path: str) -> list[str]:
    return [sys.executable, "-m", "ssptk.worker", "--fork-server", "--listen", path]


def fork_server_env(**extra: str) -> dict[str, str]:
    """The environment of a shared fork server whose tasks are this process's clusters': what a launcher adds to its
    tasks' (a server started without these suits them too, ssptk.launch.fork_trust.unsuitable; with them, the
    environment a test gives a launcher and the server's are the same by construction)."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1", **extra)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


@pytest.fixture(scope="session", autouse=True)
def shared_fork_server() -> Iterator[str | None]:
    """One fork server for everything this test process starts (its own clusters, its CLI commands, its notebooks'
    kernels: ``SSPTK_FORK_SERVER=PATH``, ssptk.launch.forking), so that TensorFlow is imported once per test
    process rather than once per command (a command's clusters fork from it, entering their own namespaces). A test
    of a process's own server takes it out with ``monkeypatch.delenv("SSPTK_FORK_SERVER")``;
    ``SSPTK_TEST_SHARED_FORK_SERVER=0`` runs the suite without it. Its end is checked: nothing it forked is left."""
    import subprocess
    import tempfile

    import ssptk
    from ssptk.runtime import fork_server

    if os.environ.get("SSPTK_TEST_SHARED_FORK_SERVER", "1") == "0" or "SSPTK_FORK_SERVER" in os.environ:
        yield None
        return
    here = tempfile.mkdtemp(prefix="ssptk-fs-")
    path = os.path.join(here, "socket")
    package_root = str(Path(ssptk.__file__).resolve().parent.parent)
    with open(os.path.join(here, "server.log"), "wb") as log:
        server = subprocess.Popen(listening_fork_server(path), cwd=package_root, stdout=log, stderr=subprocess.STDOUT,
                                  env=fork_server_env(PYTHONPATH=package_root, SSPTK_FORK_SERVER_IDLE_S="1200"),
                                  stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 10
    while not os.path.exists(path + fork_server.DESCRIPTION) and server.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # it listens before it imports TensorFlow (a launcher that comes first starts its own)
    os.environ["SSPTK_FORK_SERVER"] = path
    try:
        yield path
    finally:
        os.environ.pop("SSPTK_FORK_SERVER", None)
        forked = [c.pid for c in psutil.Process(server.pid).children()] if server.poll() is None else []
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(10)
        left = [pid for pid in forked if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
        assert not left, f"tasks of the shared fork server left at the end of the session: {left}"


def ssptk_cmd() -> list[str]:
    return [sys.executable, "-m", "ssptk.cli"]


def warm_processes() -> list[psutil.Process]:
    """Serving (warm) ``ssptk.worker`` tasks started by this test process (itself, or its clusters' fork servers)."""
    me = os.getpid()
    forks = {p.pid for p in psutil.process_iter(["cmdline", "ppid"])
             if p.info["ppid"] == me and "--fork-server" in (p.info["cmdline"] or [])}
    found = []
    for p in psutil.process_iter(["cmdline", "status", "ppid"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if "ssptk.worker" in cmd and "--serve" in cmd and p.info["ppid"] in {me, *forks} \
                and p.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(p)
    return found


@pytest.fixture(scope="module")
def module_warm_clusters() -> Iterator[None]:
    """The module's warm clusters end with it, leaving no serving task (a module takes it with
    ``pytestmark = pytest.mark.usefixtures("module_warm_clusters")``)."""
    yield
    import ssptk

    ssptk.shutdown()
    assert not warm_processes(), "warm cluster tasks left after ssptk.shutdown()"


@pytest.fixture
def warm_pool():
    """For tests of warm clusters: afterwards ``ssptk.shutdown()`` must leave no serving task."""
    import ssptk

    yield
    ssptk.shutdown()
    deadline = time.monotonic() + 5.0
    while warm_processes() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not warm_processes(), "warm cluster tasks left after ssptk.shutdown()"


#: The files that take longest (measured), first. With ``--dist loadfile`` a file runs whole on one worker, in
#: collection order as workers come free: a long file reached last keeps the other worker idle until it ends (CI:
#: the notebooks came last and ran ~8 minutes alone; pyproject.toml turns off xdist's own order, by test count).
#: The rest keep their order.
LONG_FIRST = ("test_notebooks.py", "test_runs_cli.py", "test_restart.py", "test_cluster_env.py", "test_network_runs.py",
              "test_reliability.py", "test_local_front.py", "test_long_runs.py", "test_modes.py", "test_browser.py",
              "test_convergence.py", "test_isolation.py", "test_predict.py", "test_shared_layout.py", "test_widgets.py",
              "test_repeat.py", "test_warm.py", "test_watchdog.py")


#: Why a test that shapes links is skipped (or, under CI, fails) where iproute2 is not installed.
NEEDS_TC = "shapes links with --network: needs iproute2's tc and ip (sudo apt-get install iproute2)"


def has_tc() -> bool:
    """Whether ``tc`` and ``ip`` are here (on PATH or where the system keeps them), as ``--network`` needs them."""
    from ssptk.launch import tools

    return tools.find("tc") is not None and tools.find("ip") is not None


def traffic_here() -> str:
    """What a run's ``config.json`` says of its traffic on this machine (``tasks.traffic``): measured, or, where
    iproute2 is missing, not measured and why."""
    return "measured" if has_tc() else "not measured (tc is not on PATH, in /usr/sbin or /sbin; package iproute2 has it)"


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked ``needs_tc`` where iproute2 is missing: skipped, saying so (a failure under CI)."""
    if item.get_closest_marker("needs_tc") is not None and not has_tc():
        skip_or_fail(NEEDS_TC)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
