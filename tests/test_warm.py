"""Warm clusters: later runs reuse the tasks, never their state; failures discard the cluster."""
from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from conftest import warm_processes

import ssptk
from ssptk.core.errors import RunFailed, UsageError
from ssptk.launch import warm

pytestmark = pytest.mark.slow

COMMON = dict(model="linear", workers=2, steps=60)


def _check_fresh(result: ssptk.api.RunResult) -> None:
    """Counters, claims and parameters start from zero: nothing of an earlier run leaked in."""
    df = result.df
    total = COMMON["workers"] * COMMON["steps"]
    assert len(df) == total
    assert sorted(df["minibatch"]) == list(range(total))
    updates = COMMON["steps"] if result.options.mode == "sync" else total
    assert int(df["global_step"].min()) == 1 and int(df["global_step"].max()) == updates
    assert abs(result.summary["params"]["w"] - 2.0) < 0.15


def test_second_run_reuses_the_tasks_and_none_of_their_state(tmp_path: Path, warm_pool: None) -> None:
    first = ssptk.run(mode="ssp", staleness=1, out=str(tmp_path / "a"), warm=True, **COMMON)
    pids = sorted(p.pid for p in warm_processes())
    assert len(pids) == COMMON["workers"] + 1
    second = ssptk.run(mode="async", out=str(tmp_path / "b"), warm=True, **COMMON)
    third = ssptk.run(mode="sync", out=str(tmp_path / "c"), warm=True, **COMMON)
    assert sorted(p.pid for p in warm_processes()) == pids
    assert [r.config["tasks"]["reused"] for r in (first, second, third)] == [False, True, True]
    for r in (first, second, third):
        assert r.ok
        _check_fresh(r)
    # each run's worker output is in its own directory, ending with the run's end marker
    log = (tmp_path / "b" / "logs" / "worker-1.log").read_text()
    assert "SSPTK_RUN_DONE" in log
    assert ssptk.shutdown() == 1
    assert not warm_processes()


def test_a_different_worker_count_gets_its_own_cluster(tmp_path: Path, warm_pool: None) -> None:
    ssptk.run(mode="async", out=str(tmp_path / "a"), warm=True, **COMMON)
    r = ssptk.run(mode="async", out=str(tmp_path / "b"), warm=True, **{**COMMON, "workers": 3})
    assert not r.config["tasks"]["reused"]
    assert len(warm.idle_clusters()) == 2


def test_a_failed_warm_run_discards_its_cluster(tmp_path: Path, warm_pool: None) -> None:
    ssptk.run(mode="async", out=str(tmp_path / "a"), warm=True, **COMMON)
    (cluster,) = warm.idle_clusters()
    victim = next(t for t in cluster.tasks if t.name == "worker:1")

    def kill_while_training() -> None:  # the second run's, once worker:1 has logged steps of it
        log = tmp_path / "b" / "workers" / "worker-1.jsonl"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (log.exists() and log.read_text().count('"step"') >= 5):
            time.sleep(0.02)
        os.kill(victim.proc.pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_while_training)
    killer.start()
    with pytest.raises(RunFailed, match=r"worker:1.*SIGKILL"):
        ssptk.run(mode="ssp", staleness=1, out=str(tmp_path / "b"), warm=True,
                  straggler=["0:0.02", "1:0.02"], **{**COMMON, "steps": 400})
    killer.join()
    assert not warm.idle_clusters() and not warm_processes()
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert summary["status"] == "failed"
    again = ssptk.run(mode="ssp", staleness=1, out=str(tmp_path / "c"), warm=True, **COMMON)
    assert again.ok and not again.config["tasks"]["reused"]
    _check_fresh(again)


def test_cancel_stops_a_warm_run_and_keeps_its_logs(tmp_path: Path, warm_pool: None) -> None:
    cancel = threading.Event()
    progress = lambda done, total: cancel.set() if done >= 20 else None  # noqa: E731
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        ssptk.run(mode="async", out=str(tmp_path / "a"), warm=True, cancel=cancel, straggler=["1:0.05"],
                  progress=progress, **{**COMMON, "steps": 2000})
    assert time.monotonic() - t0 < 60
    assert not warm_processes()
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert summary["status"] == "interrupted" and "interrupted" in summary["reason"] and summary["signal"] is None
    assert 0 < summary["total_steps"] < 4000


def test_model_source_is_saved_and_repeatable(tmp_path: Path, warm_pool: None) -> None:
    source = (Path(__file__).parent / "fixtures" / "usermodels.py").read_text()
    r = ssptk.run(mode="async", out=str(tmp_path / "a"), warm=True, model_source=source,
                  **{**COMMON, "model": "regression"})
    saved = tmp_path / "a" / "user_model.py"
    assert saved.read_text() == source
    assert r.config["options"]["model"] == f"{saved}:regression"
    again = ssptk.run(mode="async", out=str(tmp_path / "b"), **{**COMMON, "model": r.config["options"]["model"]})
    assert again.ok and len(again.df) == len(r.df)


@pytest.mark.parametrize("name, message", [
    ("nosuch", r"has no function 'nosuch'"),
    ("raises", r"raises\(\) raised RuntimeError"),
    (None, r"needs --model NAME"),
])
def test_bad_model_source_is_refused_before_anything_starts(tmp_path: Path, name: str | None, message: str) -> None:
    source = (Path(__file__).parent / "fixtures" / "usermodels.py").read_text()
    with pytest.raises(UsageError, match=message):
        ssptk.run(out=str(tmp_path / "a"), model_source=source, model=name, workers=2, steps=10)
    assert not (tmp_path / "a").exists()
