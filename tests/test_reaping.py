"""Nothing left behind by user code: processes a model's ``build()`` starts (a plain fork, a ``setsid()``
daemon) end with the run, however it ends. Real clusters; each sleeper notes its start in a file, so the
tests know it really ran before they check that it is gone."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from conftest import FIXTURES, assert_gone, ssptk_cmd, warm_processes

import ssptk
from ssptk.runtime import reaper

pytestmark = pytest.mark.slow

QUICK = ["--workers", "2", "--gpus", "none", "--stall-timeout", "60"]


def sleepers(marker: Path) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        if str(marker) in (p.info["cmdline"] or []) and p.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(p)
    return found


def assert_no_sleepers(marker: Path, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while sleepers(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = sleepers(marker)
    for p in left:  # don't leave them to the next test either
        p.kill()
    assert not left, f"user code's processes outlived the run: {[p.pid for p in left]}"


def _started(marker: Path) -> int:
    return len(marker.read_text()) if marker.exists() else 0


@pytest.fixture
def marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "sleepers-started"
    monkeypatch.setenv("SSPTK_TEST_SLEEPER", str(path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(FIXTURES), os.environ.get("PYTHONPATH")) if p))
    return path


def test_a_daemon_user_code_starts_ends_with_a_successful_run(tmp_path: Path, marker: Path) -> None:
    done = subprocess.run([*ssptk_cmd(), "run", "--model", "usermodels:starts_daemon", "--mode", "async",
                           "--steps", "40", *QUICK, "--out", str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    assert _started(marker) == 2, "each worker's build() should have started its daemon"
    assert_no_sleepers(marker, within=5.0)
    assert_gone(str(tmp_path))


def test_a_child_user_code_forks_ends_when_the_launcher_is_killed(tmp_path: Path, marker: Path) -> None:
    launcher = subprocess.Popen([*ssptk_cmd(), "run", "--model", "usermodels:starts_child", "--mode", "async",
                                 "--steps", "100000", *QUICK, "--out", str(tmp_path / "run")],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while _started(marker) < 2 and time.monotonic() < deadline and launcher.poll() is None:
            time.sleep(0.2)
        assert _started(marker) == 2, "the workers' children did not start"
    finally:
        launcher.kill()  # SIGKILL: no cleanup of its own; the tasks must take their children with them
        launcher.wait()
    assert_no_sleepers(marker)
    assert_gone(str(tmp_path), within=10.0)


def test_a_warm_worker_ends_what_a_run_started_and_lives_on(tmp_path: Path, marker: Path, user_model_path: str,
                                                            warm_pool: None) -> None:
    result = ssptk.run(model="usermodels:starts_daemon", mode="async", workers=2, steps=40, warm=True,
                       out=str(tmp_path / "run"))
    assert result.ok and _started(marker) == 2
    assert_no_sleepers(marker, within=5.0)
    assert len(warm_processes()) == 3, "the warm cluster should have been kept"


def test_descendants_finds_a_reparented_daemon_and_kill_seen_spares_a_new_process() -> None:
    """The launcher's snapshot: a daemon under a subreaper is its descendant; a pid whose start time
    differs (a later process given the same pid) is not killed."""
    child = subprocess.Popen(["sleep", "30"])
    try:
        seen = reaper.descendants(os.getpid())
        assert child.pid in seen
        assert reaper.kill_seen({child.pid: b"0"}) == 0 and child.poll() is None
        assert reaper.kill_seen({child.pid: seen[child.pid]}) == 1
        assert child.wait(5) == -signal.SIGKILL
    finally:
        child.kill()
        child.wait()
