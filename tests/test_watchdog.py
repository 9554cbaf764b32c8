"""A NaN or infinite loss stops the run (unless --allow-nan); a run that stops making progress (a PS
that no longer answers, a stuck worker) is ended by the stall watchdog instead of hanging the launcher."""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pytest
from conftest import cluster_processes, ssptk_cmd, warm_processes

import ssptk
from ssptk.core.errors import LossNotFinite, UsageError, check_loss
from ssptk.core.option_args import to_argv
from ssptk.core.options import resolve
from ssptk.launch import supervisor as watch_module
from ssptk.launch.supervisor import StallWatch

NAN_MESSAGE = "lower --lr, check the model, or pass --allow-nan"


def strict_json(text: str) -> Any:
    """json.loads that refuses NaN and Infinity (Python's json accepts them; JSON does not)."""
    def refuse(token: str) -> Any:
        raise ValueError(f"not JSON: {token}")

    return json.loads(text, parse_constant=refuse)


def strict_records(run_dir: Path) -> list[dict[str, Any]]:
    out = []
    for f in sorted((run_dir / "workers").glob("worker-*.jsonl")):
        out += [strict_json(line) for line in f.read_text().splitlines()]
    return out


# --- options ------------------------------------------------------------------------------------

def test_allow_nan_and_stall_timeout_reach_the_workers() -> None:
    o = resolve(allow_nan=True, stall_timeout=7.5)
    argv = to_argv(o)
    assert "--allow-nan" in argv and argv[argv.index("--stall-timeout") + 1] == "7.5"
    from ssptk.runtime.task import parser

    ns = parser().parse_args(["--cluster", "{}", "--task", "worker:0", *argv])
    from ssptk.core.option_args import from_namespace

    assert from_namespace(ns) == o
    d = resolve()
    assert d.allow_nan is False and d.stall_timeout == 60 and "--allow-nan" not in to_argv(d)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"stall_timeout": -1}, r"--stall-timeout must be >= 0 seconds \(0 turns the watchdog off\)"),
    ({"stall_timeout": "soon"}, r"--stall-timeout must be a number of seconds"),
    ({"straggler": ["0:100"]}, r"--stall-timeout 60 is too short for the injected delays \(a step can take 100 s "
                               r"longer\): give more than 126 seconds, or 0 to turn the stall watchdog off"),
    ({"jitter": "uniform:0:50"}, r"--stall-timeout 60 is too short"),
    ({"straggler": ["1:2"], "stall_timeout": 3}, r"--stall-timeout 3 is too short"),
])
def test_bad_stall_timeouts_say_what_to_do(kwargs: dict, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        resolve(**kwargs)


def test_stall_timeouts_that_fit_the_delays_are_accepted() -> None:
    assert resolve(straggler=["0:100"], stall_timeout=0).stall_timeout == 0
    assert resolve(straggler=["0:100"], stall_timeout=130).stall_timeout == 130
    assert resolve(straggler=["0:0.02"], jitter="exp:0.01", stall_timeout=3).stall_timeout == 3


def test_cli_refuses_a_too_short_stall_timeout_before_starting(tmp_path: Path) -> None:
    p = subprocess.run([*ssptk_cmd(), "run", "--straggler", "0:100", "--out", str(tmp_path / "r")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "--stall-timeout 60 is too short" in p.stderr
    assert not (tmp_path / "r").exists()


# --- the loss check and what it writes ----------------------------------------------------------

def test_non_finite_loss_message_is_one_line() -> None:
    check_loss(1.5, False, 3, 0, 7)
    check_loss(math.nan, True, 3, 0, 7)  # --allow-nan
    with pytest.raises(LossNotFinite) as info:
        check_loss(math.nan, False, 12, 1, 35)
    assert str(info.value) == f"loss became nan at step 12 (worker 1, global step 35): {NAN_MESSAGE}"
    with pytest.raises(LossNotFinite, match=r"^loss became inf at step 1 "):
        check_loss(math.inf, False, 1, 0, 1)
    with pytest.raises(LossNotFinite, match=r"^loss became -inf at step 1 "):
        check_loss(-math.inf, False, 1, 0, 1)


def test_non_finite_numbers_are_written_as_null(tmp_path: Path) -> None:
    import numpy as np

    from ssptk.core.records import StepRecord
    from ssptk.rundir import RunDir
    from ssptk.runtime.recorder import Recorder

    rec = Recorder(str(tmp_path / "w.jsonl"), 0)
    for k, loss in enumerate([float("nan"), np.float32("inf"), 0.5]):
        rec.step(StepRecord(t=1.0 + k, worker=0, step=k + 1, global_step=k + 1, loss=loss, wait_s=0.0, staleness=0,
                            minibatch=k, delay_s=0.0))
    rec.close()
    losses = [strict_json(line)["loss"] for line in (tmp_path / "w.jsonl").read_text().splitlines()]
    assert losses == [None, None, 0.5]
    RunDir(tmp_path).write_final(float("nan"), ["w"], [np.array(float("nan"))])
    final = strict_json((tmp_path / "model" / "final.json").read_text())
    assert final["eval_loss"] is None and final["params"] == {"w": None}


# --- the stall watchdog's logic (a stand-in cluster) --------------------------------------------

class FakeCluster:
    def __init__(self, workers: int = 3, with_ps: bool = True, stopped: tuple[str, ...] = ()) -> None:
        self.spec = {"worker": ["h:1"] * workers}
        self.with_ps = with_ps
        names = (["ps:0"] if with_ps else []) + [f"worker:{i}" for i in range(workers)]
        self.tasks = [SimpleNamespace(name=n, log_path="/nonexistent") for n in names]
        self.stopped = list(stopped)

    def stopped_tasks(self) -> list[str]:
        return self.stopped

    def log_path(self, name: str) -> str:
        return "/nonexistent"


class Clock:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = 1000.0
        monkeypatch.setattr(watch_module.time, "monotonic", lambda: self.now)


def step(worker: int, t: float = 1.7e9, gs: int = 5) -> dict[str, Any]:
    return {"t": t, "worker": worker, "step": 1, "global_step": gs, "loss": 1.0}


def started(watch: StallWatch, workers: int = 3) -> None:
    watch.saw([], [{"event": "start", "t": 1.7e9, "worker": w} for w in range(workers)])


def test_stall_watch_blames_the_ps_when_every_worker_went_silent_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(monkeypatch)
    watch = StallWatch(5.0)
    started(watch)
    watch.saw([step(0), step(1), step(2, gs=42)], [])
    clock.now += 5.0
    assert watch.check(FakeCluster()) is None
    clock.now += 0.2
    f = watch.check(FakeCluster())
    assert f is not None and f.task == "ps:0"
    assert f.reason.startswith("stalled: no step logged for 5 s (last step at ")
    assert "global step 42); use --stall-timeout to wait longer" in f.reason


def test_stall_watch_blames_the_worker_that_went_silent_first(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(monkeypatch)
    watch = StallWatch(5.0)
    started(watch)
    watch.saw([step(0), step(1), step(2)], [])
    clock.now += 3.0
    watch.saw([step(0), step(2)], [{"event": "done", "t": 1.7e9, "worker": 0}])
    clock.now += 5.1
    assert watch.check(FakeCluster()).task == "worker:1"
    assert watch.check(FakeCluster(with_ps=False)).task == "worker:1"


def test_stall_watch_names_a_stopped_process_first(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(monkeypatch)
    watch = StallWatch(2.0)
    started(watch)
    clock.now += 2.5
    f = watch.check(FakeCluster(stopped=("worker:2",)))
    assert f.task == "worker:2" and "no step since the start barrier at" in f.reason
    assert f.reason.startswith("stalled: worker:2 is stopped (SIGSTOP or a debugger, state T): no step logged")


def test_stall_watch_gives_the_start_more_time_and_can_be_off(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(monkeypatch)
    monkeypatch.setattr(watch_module, "START_TIMEOUT_S", 30.0)
    watch, off, quiet = StallWatch(5.0), StallWatch(0), StallWatch(5.0, steps_logged=False)
    clock.now += 29.0
    assert watch.check(FakeCluster()) is None
    clock.now += 2.0
    f = watch.check(FakeCluster())
    assert f.task == "ps:0" and "did not pass the start barrier within 30 s" in f.reason
    started(quiet)  # --no-log: no step records to watch once training runs
    clock.now += 1000.0
    assert off.check(FakeCluster()) is None and quiet.check(FakeCluster()) is None


def test_stall_watch_names_the_worker_that_never_reached_the_start_barrier(monkeypatch: pytest.MonkeyPatch) -> None:
    """A build() hanging on worker:1 only was blamed on ps:0: the others' ``barrier`` events now name it."""
    clock = Clock(monkeypatch)
    monkeypatch.setattr(watch_module, "START_TIMEOUT_S", 30.0)
    watch = StallWatch(5.0)
    watch.saw([], [{"event": "barrier", "t": 1.7e9, "worker": w} for w in (0, 2)])
    clock.now += 31.0
    f = watch.check(FakeCluster())
    assert f.task == "worker:1"
    assert f.reason.startswith("stalled: did not reach the start barrier within 30 s, while the other workers did")
    watch.saw([], [{"event": "barrier", "t": 1.7e9, "worker": 1}])  # all there, none released: the usual
    assert watch.check(FakeCluster()).task == "worker:0"  # suspect: the first to go silent, here the chief


# --- real runs ----------------------------------------------------------------------------------

def _error_time(run_dir: Path) -> float:
    return min(r["t"] for r in strict_records(run_dir) if r.get("event") == "error")


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["async", "sync"])
def test_nan_loss_stops_the_run_with_one_line(mode: str, run_dir: Path, user_model_path: str) -> None:
    p = subprocess.run([*ssptk_cmd(), "run", "--model", "usermodels:nan_loss", "--mode", mode, "--workers", "3",
                        "--steps", "50", "--out", str(run_dir)], capture_output=True, text=True, timeout=300)
    ended = time.time()
    assert p.returncode == 1, p.stderr
    first = p.stderr.splitlines()[0]
    assert first.startswith("ssptk: run failed: worker:") and " (exit code 1): error: loss became nan at step 1 (worker " \
        in first and first.endswith(NAN_MESSAGE), first
    assert ended - _error_time(run_dir) < 15  # the launcher stopped the cluster; nobody waited in a queue
    records = strict_records(run_dir)  # every line is whole, strict JSON (the NaN loss is null)
    assert any(r.get("loss", 0) is None for r in records if "event" not in r)
    summary = strict_json((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed" and "loss became nan" in summary["reason"]


@pytest.mark.slow
def test_allow_nan_keeps_training(run_dir: Path, user_model_path: str) -> None:
    p = subprocess.run([*ssptk_cmd(), "run", "--model", "usermodels:nan_loss", "--mode", "async", "--workers", "2",
                        "--steps", "20", "--allow-nan", "--out", str(run_dir)], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 3, p.stderr  # it finished, and a NaN loss is a diverged one (exit 3, README)
    assert "[diverged]" in p.stdout
    assert len([r for r in strict_records(run_dir) if "event" not in r]) == 40
    summary = strict_json((run_dir / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["final_loss"] is None and summary["train_loss_last"] is None
    assert strict_json((run_dir / "model" / "final.json").read_text())["eval_loss"] is None


@pytest.mark.slow
def test_nan_loss_in_a_warm_cluster_discards_it(run_dir: Path, user_model_path: str, warm_pool: None) -> None:
    from ssptk.launch import warm

    with pytest.raises(ssptk.RunFailed, match=r"worker:\d \(exit code 1\): error: loss became nan at step 1") as info:
        ssptk.run(model="usermodels:nan_loss", mode="ssp", workers=2, steps=20, warm=True, out=str(run_dir))
    assert info.value.failure.exit_code == 1
    assert warm.idle_clusters() == []
    deadline = time.monotonic() + 5
    while warm_processes() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not warm_processes()


def _wait_for_steps(run_dir: Path, proc: subprocess.Popen[str], n: int) -> None:
    log = run_dir / "workers" / "worker-0.jsonl"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None:
        if log.exists() and log.read_text().count('"step"') >= n:
            return
        time.sleep(0.1)
    raise AssertionError(f"no {n} steps logged (exit code {proc.poll()})")


def _task_pid(run_dir: Path, task: str) -> int:
    found = [p for p in cluster_processes(str(run_dir)) if f"--task {task}" in " ".join(p.cmdline())]
    assert len(found) == 1, found
    return found[0].pid


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "task"), [("async", "ps:0"), ("sync", "worker:1")])
def test_a_stopped_task_ends_the_run_as_stalled(mode: str, task: str, run_dir: Path) -> None:
    """SIGSTOP the PS (or a sync worker) once steps flow: the watchdog ends the run, naming it, and
    every task is gone (SIGKILL ends a stopped process)."""
    proc = subprocess.Popen([*ssptk_cmd(), "run", "--mode", mode, "--workers", "3", "--steps", "1000000",
                             "--stall-timeout", "3", "--out", str(run_dir)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pid = None
    try:
        _wait_for_steps(run_dir, proc, 10)
        pid = _task_pid(run_dir, task)
        os.killpg(pid, signal.SIGSTOP)
        stopped = time.monotonic()
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - stopped
        print(f"{mode}: SIGSTOP of {task} to the end of the run: {took:.1f} s")
        assert proc.returncode == 1, err
        first = err.splitlines()[0]
        assert first.startswith(f"ssptk: run failed: {task}: stalled: {task} is stopped (SIGSTOP or a debugger, "
                                f"state T): no step logged for 3 s (last step at "), first
        assert took < 3 + 7  # typically 4 s: 3 s of silence, then stop and summary (slack for a loaded machine)
        summary = strict_json((run_dir / "summary.json").read_text())
        assert summary["status"] == "failed" and summary["failed_task"] == task
        strict_records(run_dir)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for p in cluster_processes(str(run_dir)):  # a failed test must not leave a stopped TF server
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if pid is not None and psutil.pid_exists(pid):
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
