"""A paused PS never applies a minibatch twice or skips one (issue 26, point 1).

With ``--restart-failed``, a PS stopped (SIGSTOP) longer than half the stall time-out hangs the workers' steps;
each hung worker ends and is started again. Its dead self's update can still land when the PS goes on: before,
the restarted worker then trained that minibatch a second time and the one its dead self had claimed never
(4 of 9 tries). Now the claim and the update are one fact on the PS (``ssptk.runtime.fence``), the restart reads
it, and an update its dead self made but could not log is named in the ``restart`` event (``unlogged``).
The soak, with repeated pauses and kills in every mode that restarts, is ``benchmarks/bench_ps_pause.py``.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT, assert_gone, cluster_processes, ssptk_cmd


def trained(run: Path) -> tuple[list[int], list[int], list[dict]]:
    """Every minibatch and global step the logs say was applied (step records and the ``unlogged`` updates
    of restart events), and the restart events."""
    minibatches, steps, restarts = [], [], []
    for f in sorted((run / "workers").glob("worker-*.jsonl")):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            if "step" in r and r.get("applied", True):
                minibatches.append(r["minibatch"])
                steps.append(r["global_step"])
            elif r.get("event") == "restart":
                restarts.append(r)
                if r.get("unlogged"):
                    minibatches.append(r["unlogged"]["minibatch"])
                    steps.append(r["unlogged"]["global_step"])
    return minibatches, steps, restarts


def _pause_ps(run: Path, after_records: int, seconds: float, paused: list[int]) -> threading.Thread:
    def pause() -> None:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            logs = list((run / "workers").glob("worker-*.jsonl")) if (run / "workers").exists() else []
            if sum(f.read_text().count('"step"') for f in logs) >= after_records:
                ps = [p for p in cluster_processes(str(run)) if "ps:0" in p.cmdline()]
                for p in ps:
                    os.kill(p.pid, signal.SIGSTOP)
                    paused.append(p.pid)
                time.sleep(seconds)
                for p in ps:
                    os.kill(p.pid, signal.SIGCONT)
                return
            time.sleep(0.02)

    t = threading.Thread(target=pause)
    t.start()
    return t


@pytest.mark.slow
def test_a_paused_ps_applies_every_minibatch_once(run_dir: Path) -> None:
    workers, steps = 2, 400
    paused: list[int] = []
    pauser = _pause_ps(run_dir, 100, 7.0, paused)
    proc = subprocess.run(ssptk_cmd() + ["run", "--mode", "ssp", "--workers", str(workers), "--steps", str(steps),
                                         "--gpus", "none", "--stall-timeout", "10", "--restart-failed", "3",
                                         "--out", str(run_dir)], capture_output=True, text=True, timeout=400)
    pauser.join()
    assert paused, "the PS was never paused: the test proves nothing"
    assert proc.returncode == 0, proc.stderr[-3000:]
    minibatches, global_steps, restarts = trained(run_dir)
    assert restarts, "no worker was restarted: the pause hung no step, and the test proves nothing"
    twice = sorted(m for m, k in Counter(minibatches).items() if k > 1)
    assert not twice, f"minibatches applied twice: {twice} (restarts: {restarts})"
    assert sorted(minibatches) == list(range(workers * steps)), f"minibatches missing (restarts: {restarts})"
    assert sorted(global_steps) == list(range(1, workers * steps + 1))
    assert_gone(str(run_dir))


@pytest.mark.slow
def test_a_step_of_a_replaced_worker_changes_nothing_on_the_ps() -> None:
    """The fence itself, without timing: a restart takes worker 0's slot over; its dead self's next step then fails
    on the PS and leaves the parameters, the global step and the ledger as they were."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, str(FIXTURES / "fence_probe.py"), "async", "sync"], capture_output=True,
                          text=True, timeout=180, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    for mode in ("async", "sync"):
        assert seen[mode]["fenced"] is True and seen[mode]["unchanged"] is True, seen
    # sync: pushed for step 0, and the update is in (global step 1)
    assert seen["sync"]["rejoin"] == [0, -1, -1, 1] and seen["sync"]["ledger"] == [0, -1, -1, 1], seen
    # async: claimed minibatch 0, applied it (global step 1), claimed minibatch 1: held 1, last 0 at global step 1
    a = seen["async"]
    assert a["claimed"] == 1 and a["applied"] == [1, 2] and a["rejoin"] == [1, 0, 1] == a["ledger"], seen


def test_what_a_restarted_worker_reads_of_its_log_and_errors(tmp_path: Path) -> None:
    from ssptk.runtime.rejoin import logged_tail, unreached

    log = tmp_path / "worker-1.jsonl"
    assert logged_tail(str(log)) == (0, None)
    log.write_text('{"event":"start","worker":1}\n{"t":1,"worker":1,"step":1,"minibatch":4}\n'
                   '{"t":2,"worker":1,"step":2,"minibatch":7}\n{"event":"hung","minibatch":9}\n{"t":3,"wor')
    assert logged_tail(str(log)) == (2, 7)  # the hung step's minibatch is not a record; a partial line is skipped
    with log.open("a") as f:  # a restart named an update its dead self did not log: accounted for, and counted
        f.write('\n{"event":"restart","worker":1,"after_step":3,"unlogged":{"minibatch":8,"global_step":20}}\n')
    assert logged_tail(str(log)) == (3, 8)
    refused = ("UNAVAILABLE: From /job:ps/replica:0/task:0:\nfailed to connect to all addresses; last error: "
               "UNKNOWN: ipv4:127.0.0.1:41234: Failed to connect to remote host: Connection refused")
    assert unreached(RuntimeError(refused), "127.0.0.1:41234")
    assert not unreached(RuntimeError(refused), "127.0.0.1:41235")  # another task's port: a real failure
    assert not unreached(RuntimeError("loss went wrong"), "127.0.0.1:41234")
