"""The shared layout (``--layout shared``): the PS and every worker in one process, each task with its own
TensorFlow server. The same log invariants as the per-process layout, its failure semantics, and scale."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import psutil
import pytest
from conftest import assert_gone, cluster_processes, ssptk_cmd
from helpers import max_skew, records

import ssptk
from ssptk.core.errors import RunFailed, UsageError

pytestmark = pytest.mark.slow
COMMON = {"model": "linear", "gpus": "none", "layout": "shared"}


def _one_process(run_dir: Path) -> None:
    """The run had one task process, logging to logs/shared.log, and said so in config.json."""
    assert [p.name for p in (run_dir / "logs").iterdir()] == ["shared.log"]
    assert json.loads((run_dir / "config.json").read_text())["tasks"]["layout"] == "shared"


def test_async_every_minibatch_once_and_staleness_measured(run_dir: Path) -> None:
    r = ssptk.run(mode="async", workers=3, steps=100, out=str(run_dir), **COMMON)
    df, events = records(run_dir)
    assert len(df) == 300 and sorted(df["minibatch"]) == list(range(300))
    assert sorted(df["global_step"]) == list(range(1, 301))
    assert df["staleness"].max() >= 1 and (df["wait_s"] == 0).all()
    assert {e["event"] for e in events} == {"barrier", "start", "done"} and len(events) == 9
    assert all("process_cpu_s" in e and "cpu_s" not in e for e in events if e["event"] in ("start", "done"))
    assert r.summary["status"] == "ok" and r.summary["params"]["w"] == pytest.approx(2.0, abs=0.15)
    assert r.summary["train_cpu_s"] > 0 and r.summary["cpu_ms_per_step"] > 0
    _one_process(run_dir)


def test_a_paused_worker_holds_up_no_other(run_dir: Path) -> None:
    """An injected delay sleeps inside a TensorFlow op, and TensorFlow runs every server of a process on one
    thread pool (a thread per core by default): with as many sleeping workers as cores, a pool that size
    stalled the rest of the cluster. Here more workers than cores sleep 0.3 s every step; the one that does not
    must run free, as it would in a process of its own."""
    slow = min(8, (os.cpu_count() or 2) + 1)
    r = ssptk.run(mode="async", workers=slow + 1, steps=12, straggler=[f"{i}:0.3" for i in range(slow)],
                  out=str(run_dir), stall_timeout=0, **COMMON)
    df, _ = records(run_dir)
    steps = df.groupby("worker").size()
    assert steps[slow] >= 0.6 * len(df), steps.to_dict()  # the free worker did most of the work
    assert r.summary["wall_s"] < 3.0, r.summary["wall_s"]


def test_ssp_bound_holds_under_a_straggler(run_dir: Path) -> None:
    ssptk.run(mode="ssp", staleness=1, workers=3, steps=60, straggler=["2:0.02"], out=str(run_dir), **COMMON)
    df, events = records(run_dir)
    assert [e["safety_timeouts"] for e in events if e["event"] == "done"] == [0, 0, 0]
    assert len(df) == 180 and sorted(df["minibatch"]) == list(range(180))
    assert max_skew(df, 3) <= 2
    assert df[df["worker"] != 2]["wait_s"].sum() > 0.3  # the fast workers were held back


def test_sync_is_lock_step_with_keras(run_dir: Path) -> None:
    r = ssptk.run(mode="sync", workers=3, steps=40, straggler=["1:0.01"], out=str(run_dir),
                  **{**COMMON, "model": "keras"})
    df, _ = records(run_dir)
    assert df.groupby("worker").size().to_dict() == {0: 40, 1: 40, 2: 40}
    assert max_skew(df, 3) <= 1 and df["applied"].all() and (df["staleness"] == 0).all()
    per_update = df.groupby("global_step")["worker"].apply(sorted)
    assert list(per_update.index) == list(range(1, 41)) and all(v == [0, 1, 2] for v in per_update)
    assert r.ok


def test_a_failing_worker_thread_fails_the_run_naming_it(run_dir: Path, user_model_path: str) -> None:
    t0 = time.monotonic()
    with pytest.raises(RunFailed, match=r"worker:1 .*RuntimeError: worker 1's data source broke") as info:
        ssptk.run(mode="async", workers=3, steps=200, out=str(run_dir), **{**COMMON, "model": "usermodels:raises_on_worker1"})
    assert time.monotonic() - t0 < 40
    failure = info.value.failure
    assert failure.task == "worker:1" and failure.exit_code == 1
    assert info.value.result.summary["failed_task"] == "worker:1"


def test_killed_process_fails_the_run_at_once(run_dir: Path) -> None:
    box: dict[str, object] = {}

    def kill_when_training() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            procs = cluster_processes(str(run_dir))
            if procs and list((run_dir / "workers").glob("*.jsonl")) and any(
                    f.stat().st_size > 2000 for f in (run_dir / "workers").glob("*.jsonl")):
                procs[0].kill()
                box["killed"] = time.monotonic()
                return
            time.sleep(0.05)

    t = threading.Thread(target=kill_when_training)
    t.start()
    r = ssptk.run(mode="ssp", workers=2, steps=100_000, out=str(run_dir), raise_on_failure=False, **COMMON)
    t.join()
    assert "killed" in box
    assert r.failure is not None and r.failure.task == "shared" and "SIGKILL" in r.failure.reason
    assert r.summary["status"] == "failed"


def test_cli_interrupt_stops_the_process_and_keeps_the_summary(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = subprocess.Popen([*ssptk_cmd(), "run", "--mode", "async", "--workers", "2", "--steps", "100000",
                             "--layout", "shared", "--gpus", "none", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any(f.stat().st_size > 2000 for f in (out / "workers").glob("*.jsonl")):
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert json.loads((out / "summary.json").read_text())["status"] == "interrupted"
    assert_gone(str(tmp_path))


def test_sixteen_workers_auto_layout_is_shared(run_dir: Path) -> None:
    r = ssptk.run(mode="ssp", staleness=2, workers=16, steps=20, out=str(run_dir), model="linear", gpus="none")
    df, _ = records(run_dir)
    assert r.ok and len(df) == 320 and sorted(df["minibatch"]) == list(range(320))
    assert max_skew(df, 16) <= 3
    _one_process(run_dir)


def _own_shared_processes() -> set[int]:
    """Live ``--task shared`` processes this test process started (directly, or through its fork servers): never
    another process's (another test process, another user's suite) that happens to run one."""
    found = set()
    for p in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            argv = p.cmdline()
            if "ssptk.worker" in argv and "--task" in argv and argv[argv.index("--task") + 1] == "shared" \
                    and p.status() != psutil.STATUS_ZOMBIE:
                found.add(p.pid)
    return found


def test_warm_runs_reuse_the_shared_process(tmp_path: Path, warm_pool: None) -> None:
    before = _own_shared_processes()  # none, normally: warm_pool ends every earlier test's
    first = ssptk.run(mode="async", workers=2, steps=30, out=str(tmp_path / "a"), warm=True, **COMMON)
    pid = _own_shared_processes() - before
    second = ssptk.run(mode="ssp", staleness=0, workers=2, steps=30, out=str(tmp_path / "b"), warm=True, **COMMON)
    assert first.ok and second.ok and second.config["tasks"]["reused"]
    assert len(pid) == 1 and _own_shared_processes() - before == pid
    df, _ = records(tmp_path / "b")
    assert len(df) == 60 and max_skew(df, 2) <= 1 and sorted(df["global_step"]) == list(range(1, 61))
    assert (tmp_path / "b" / "logs" / "shared.log").exists()
    assert ssptk.shutdown() == 1
    psutil.wait_procs([psutil.Process(p) for p in pid if psutil.pid_exists(p)], timeout=10)
    assert not _own_shared_processes() & pid


@pytest.mark.parametrize(("extra", "match"), [
    ({"mode": "allreduce"}, r"--layout shared cannot run allreduce .*use --layout processes"),
    ({"mode": "async", "restart_failed": 1}, r"--restart-failed needs --layout processes"),
    ({"mode": "async", "layout": "threads"}, r"--layout must be auto, processes, shared, got 'threads'"),
])
def test_refused_before_start(extra: dict, match: str, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=match):
        ssptk.run(**{**COMMON, **extra}, out=str(tmp_path / "r"))
    assert not os.path.exists(tmp_path / "r")


def test_auto_layout_rule() -> None:
    from ssptk.core.options import AUTO_SHARED_FROM, resolve

    assert not resolve(workers=AUTO_SHARED_FROM - 1, mode="async").shared
    assert resolve(workers=AUTO_SHARED_FROM, mode="async").shared
    assert not resolve(workers=AUTO_SHARED_FROM, mode="allreduce").shared
    assert not resolve(workers=AUTO_SHARED_FROM, mode="async", restart_failed=1).shared
    assert resolve(workers=2, mode="sync", layout="shared").shared
    assert not resolve(workers=64, mode="sync", layout="processes").shared
