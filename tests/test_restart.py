"""--restart-failed: a worker that dies is started again, rejoins the training, and the run finishes."""
from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import assert_gone, cluster_processes, kill_worker_when
from helpers import records

import ssptk
from ssptk.core.errors import UsageError


@pytest.mark.slow
@pytest.mark.parametrize("mode, worker", [("async", 1), ("ssp", 0), ("sync", 2), ("local:4", 2)])
def test_a_worker_killed_halfway_is_restarted_and_the_run_converges(run_dir: Path, mode: str, worker: int) -> None:
    killed: list[int] = []
    # Slow steps (40 ms each) so that the run outlasts the restart (TensorFlow's start-up, seconds); local SGD's
    # rounds wait for the restarted worker as sync's steps do, so fewer steps outlast it.
    steps = 120 if mode.startswith("local") else 300
    killer = kill_worker_when(run_dir, worker, 30, killed)
    extra = {"staleness": 2} if mode == "ssp" else {}
    r = ssptk.run(mode=mode, workers=3, steps=steps, restart_failed=1, out=str(run_dir),
                  straggler=["0:0.04", "1:0.04", "2:0.04"], raise_on_failure=False, **extra)
    killer.join()
    assert killed, "the worker was not killed: the test proves nothing"
    assert r.ok, r.summary["reason"]
    df, event_list = records(run_dir)
    events = pd.DataFrame(event_list)
    restarts = events[events["event"] == "restart"]
    assert list(restarts["worker"]) == [worker] and list(restarts["attempt"]) == [1]
    if mode == "sync":
        # every update applied once, all from distinct workers; the dead worker's gradient for at most
        # two updates (the one it was computing, one applied but not logged) is missing from the logs
        applied = df[df["applied"]].groupby("global_step")["worker"].agg(list)
        assert list(applied.index) == list(range(1, steps + 1))
        assert all(len(set(w)) == len(w) for w in applied) and sum(len(w) < 3 for w in applied) <= 2
    elif mode == "local:4":
        _assert_local_rejoined(df, restarts.iloc[0], worker, steps, h=4)
    else:
        # the budget is done: every minibatch claimed once. Missing from the logs: at most the minibatch the
        # dead worker was computing, and one step it may have applied without logging it before it died.
        assert len(df) >= 3 * steps - 2 and df["minibatch"].is_unique
    # the restarted worker went on counting its steps and carried on training
    mine = df[df["worker"] == worker].sort_values("t")
    assert mine["step"].is_monotonic_increasing and mine["step"].is_unique
    assert (mine["t"] > float(restarts["t"].iloc[0])).sum() > 0
    assert abs(r.summary["params"]["w"] - 2.0) < 0.15 and abs(r.summary["params"]["b"] - 10.0) < 0.15
    log = (run_dir / "logs" / f"worker-{worker}.log").read_text()
    assert log.count("SSPTK_READY") == 2
    assert_gone(str(run_dir))


def _assert_local_rejoined(df: pd.DataFrame, restart: pd.Series, worker: int, steps: int, h: int) -> None:
    """local:H: every round applied once, each from distinct workers; the restarted worker redid the round it joined
    from its first local step, and its log holds every one of its minibatches (the lost local steps twice)."""
    ends = df[df["applied"] & (df["local_step"] == h - 1)]  # a round's last local step: its delta pushed, applied
    applied = ends.groupby("local_round")["worker"].agg(list)
    assert list(applied.index) == list(range(1, steps // h + 1))
    # the dead worker's delta for at most one round is missing from the logs (pushed, applied, not logged)
    assert all(len(set(w)) == len(w) for w in applied) and sum(len(w) < 3 for w in applied) <= 1
    mine = df[df["worker"] == worker]
    before, after = mine[mine["t"] < restart["t"]], mine[mine["t"] > restart["t"]]
    joined = int(restart["local_round"])
    assert int(restart["global_step"]) == joined - 1 and before["local_round"].max() <= joined
    assert restart["lost_local_steps"] == (before["local_round"] == joined).sum()
    assert list(after[["local_round", "local_step"]].iloc[0]) == [joined, 0]
    assert after["step"].iloc[0] == restart["after_step"] + 1
    unlogged = restart["unlogged"]
    assert not isinstance(unlogged, dict) or unlogged["minibatch"] not in set(before["minibatch"])
    trained = set(mine["minibatch"]) | ({unlogged["minibatch"]} if isinstance(unlogged, dict) else set())
    assert trained == {s * 3 + worker for s in range(steps)}


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sync", "local:2"])
def test_sync_and_local_do_not_restart_their_chief(run_dir: Path, mode: str) -> None:
    killed: list[int] = []
    killer = kill_worker_when(run_dir, 0, 20, killed)
    name = mode.partition(":")[0]
    with pytest.raises(ssptk.RunFailed, match=rf"worker:0 \(exit code -9\): was killed by SIGKILL \(not restarted: "
                                              rf"in {name} mode worker:0 runs the aggregator, and the run cannot go on "
                                              r"without it\)") as failed:
        # local: two workers, the fewest that have an aggregator to lose (the test's cost is TensorFlow's start-up)
        ssptk.run(mode=mode, workers=2 if name == "local" else 3, steps=300, restart_failed=1,
                  straggler=["0:0.01", "1:0.01"] if name == "local" else ["0:0.01", "1:0.01", "2:0.01"],
                  out=str(run_dir))
    killer.join()
    assert killed and "\n" not in str(failed.value)
    assert_gone(str(run_dir))


@pytest.mark.parametrize("kw, message", [
    ({"mode": "allreduce", "restart_failed": 1}, r"--restart-failed works with --mode sync, ssp, async or local, not allreduce"),
    ({"mode": "async", "restart_failed": -1}, r"--restart-failed must be >= 0"),
])
def test_bad_restart_options(tmp_path: Path, kw: dict, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        ssptk.run(out=str(tmp_path / "r"), **kw)
    assert not (tmp_path / "r").exists()


def test_local_takes_restart_failed_in_the_processes_layout_only() -> None:
    """local:H restarts a worker that dies (as sync); the shared layout, whose workers are threads, cannot."""
    from ssptk.core.options import resolve

    assert resolve(mode="local:2", workers=2, restart_failed=1).restart_failed == 1
    with pytest.raises(UsageError, match=r"^--restart-failed needs --layout processes"):
        resolve(mode="local:2", workers=2, restart_failed=1, layout="shared")


@pytest.mark.slow
def test_restart_attempts_count_each_workers_restarts_and_are_limited(run_dir: Path) -> None:
    """Regression: worker 1, worker 2, then worker 1 again logged attempts 1, 2, 4 (attempt numbers were
    added up). ``attempt`` is how many times that worker was started again: 1, 1, 2. A fourth death, past
    ``--restart-failed 3``, fails the run naming that worker."""
    killed: list[int] = []

    def kill_in_turn() -> None:
        # (worker, step records in its log first, whether to kill its restarted process, restarts logged first)
        plan = [(1, 10, False, 0), (2, 20, False, 0), (1, 40, True, 1), (2, 60, True, 3)]
        deadline = time.monotonic() + 240
        for worker, after, rejoined, restarted in plan:
            log = run_dir / "workers" / f"worker-{worker}.jsonl"
            while time.monotonic() < deadline:
                text = log.read_text() if log.exists() else ""
                logged = sum(p.read_text().count('"event":"restart"') for p in (run_dir / "workers").glob("*.jsonl"))
                ready = text.count('"step"') >= after and logged >= restarted and (not rejoined
                                                                                   or '"event":"restart"' in text)
                procs = [p for p in cluster_processes(str(run_dir)) if f"worker:{worker}" in " ".join(p.cmdline())
                         and ("--rejoin" in p.cmdline()) == rejoined] if ready else []
                if procs:
                    os.kill(procs[0].pid, signal.SIGKILL)
                    killed.append(worker)
                    break
                time.sleep(0.02)

    killer = threading.Thread(target=kill_in_turn)
    killer.start()
    # 40 ms steps: 450 outlast four deaths (TensorFlow's start-up after each of three) with room on a loaded machine
    r = ssptk.run(mode="async", workers=3, steps=450, restart_failed=3, out=str(run_dir),
                  straggler=["0:0.04", "1:0.04", "2:0.04"], raise_on_failure=False)
    killer.join()
    assert killed == [1, 2, 1, 2], f"the kills did not happen as planned ({killed}): the test proves nothing"
    assert not r.ok and r.summary["status"] == "failed"
    assert r.summary["failed_task"] == "worker:2" and "was killed by SIGKILL" in r.summary["reason"], r.summary
    _, event_list = records(run_dir)
    restarts = [(e["worker"], e["attempt"]) for e in sorted(event_list, key=lambda e: e["t"])
                if e["event"] == "restart"]
    # Kills 1 and 2 can be seen in either order (worker 2 may already have 40 steps when 1 dies); what
    # matters is that each worker counts its own attempts, and that the fourth death was not restarted.
    assert [a for w, a in restarts if w == 1] == [1, 2], restarts
    assert [a for w, a in restarts if w == 2] == [1], restarts
    assert_gone(str(run_dir))
