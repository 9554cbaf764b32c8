"""The CLI end to end, and failures: a killed task or a broken model ends the run cleanly with a reason."""
from __future__ import annotations

import json
import os
import pty
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from conftest import assert_gone, cluster_processes, ssptk_cmd
from helpers import records

import ssptk

pytestmark = pytest.mark.slow


def _on_terminal(cmd: list[str], timeout: float) -> tuple[int, str, str]:
    """Run ``cmd`` with its stderr on a pseudo-terminal, as in a shell (progress lines draw only on a
    terminal); returns the exit code, stdout, and what the terminal showed."""
    master, slave = pty.openpty()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=slave, text=True)
    os.close(slave)
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.append(p.stdout.read()))  # type: ignore[union-attr]
    reader.start()
    screen = b""
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: every holder of the terminal has closed it
            break
        if not data:
            break
        screen += data
    os.close(master)
    p.wait(timeout)
    reader.join(timeout)
    return p.returncode, out[0] if out else "", screen.decode(errors="replace")


def test_cli_compare_writes_table_csv_and_report_then_report_rebuilds(tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    code, stdout, screen = _on_terminal([*ssptk_cmd(), "compare", "sync", "ssp:1", "async", "--workers", "2",
                                         "--steps", "30", "--straggler", "1:0.01", "--out", str(out), "--predict"],
                                        timeout=400)
    assert code == 0, screen
    # on a terminal: the cluster's start, once (the runs after the first reuse its tasks, as %dtrain's do), then
    # each run's progress line to its last minibatch
    assert re.search(r"sync starting: \d/3 tasks ready", screen), screen
    assert "ssp:1 starting" not in screen and "async starting" not in screen, screen
    for label in ("sync", "ssp:1", "async"):
        assert re.search(rf"{re.escape(label)} \[#{{30}}\] 60/60", screen), screen
    # the table fits 100 columns, under short headers, with a legend; the rest is in metrics.csv
    lines = stdout.splitlines()
    assert lines[0].split()[:2] == ["run", "steps/s"] and max(len(line) for line in lines[:5]) <= 100
    assert [line.split()[0] for line in lines[2:5]] == ["sync", "ssp:1", "async"]
    assert any(line.startswith("max skew: most minus least completed steps") for line in lines)
    assert f"report: {out / 'report.html'}" in stdout
    assert sorted(os.listdir(out)) == [".ssptk-run", "async", "metrics.csv", "predicted", "report.html", "ssp-1",
                                       "sync"]
    # --predict: each label predicted (one process, its own progress line) with its run's calibrated overhead,
    # held to the runs' target, in the table under the comparison and in the report
    assert re.search(r"async \(predicted\) \[#{30}\] \d+/\d+", screen), screen
    assert "predicted (the simulator's replay) and measured:" in stdout
    assert "Minibatches to the target, predicted / measured:" in stdout
    assert [json.loads((out / label / "config.json").read_text())["tasks"]["reused"] for label in ("sync", "async")] \
        == [False, True]
    for label in ("sync", "ssp-1", "async"):
        predicted = json.loads((out / "predicted" / label / "summary.json").read_text())
        real = json.loads((out / label / "summary.json").read_text())
        assert predicted["predicted"]["overhead_s"] == pytest.approx(real["overhead_ms"] / 1000)
        assert predicted["status"] == "ok"
    csv = (out / "metrics.csv").read_text().splitlines()
    assert csv[0].startswith("label,mode,bound") and len(csv) == 4
    html = (out / "report.html").read_text()
    assert "data:image/png;base64," in html and "ssp:1" in html
    assert "Predicted and measured" in html and "Predicted (dashed) and measured (solid)" in html
    (out / "report.html").unlink()
    p = subprocess.run([*ssptk_cmd(), "report", str(out)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and (out / "report.html").exists() and "ssp:1" in p.stdout
    # the predictions come back with the rebuilt report, and are not mistaken for labels of their own
    assert "predicted (the simulator's replay) and measured:" in p.stdout
    assert "\npredicted " not in p.stdout.split("predicted (the simulator")[0]
    assert_gone(str(tmp_path))


def test_cli_run_prints_summary(run_dir: Path) -> None:
    p = subprocess.run([*ssptk_cmd(), "run", "--mode", "ssp", "--staleness", "1", "--workers", "2", "--steps", "40",
                        "--out", str(run_dir)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "[ok]" in p.stdout and "steps/s" in p.stdout and "params" in p.stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["total_steps"] == 80 and summary["max_skew"] <= 2


def test_killed_worker_fails_the_run_and_leaves_nothing(run_dir: Path) -> None:
    """SIGKILL a worker mid-run: the run fails naming it, every other task is ended, logs stay valid."""

    def kill_worker_1() -> None:
        deadline = time.monotonic() + 120
        log = run_dir / "workers" / "worker-1.jsonl"
        while time.monotonic() < deadline:
            if log.exists() and log.read_text().count('"step"') >= 20:
                for p in cluster_processes(str(run_dir)):
                    if "worker:1" in " ".join(p.cmdline()):
                        os.kill(p.pid, signal.SIGKILL)
                        return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_worker_1)
    killer.start()
    t0 = time.monotonic()
    with pytest.raises(ssptk.RunFailed, match=r"worker:1 \(exit code -9\): was killed by SIGKILL") as info:
        ssptk.run(mode="sync", workers=3, steps=100000, straggler=["0:0.005"], out=str(run_dir))
    killer.join()
    assert time.monotonic() - t0 < 120
    assert info.value.failure.task == "worker:1"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed" and "worker:1" in summary["reason"]
    df, _ = records(run_dir)  # every line written is whole JSON
    assert len(df) >= 20
    assert_gone(str(run_dir))


def test_model_failing_inside_tasks_exits_1_with_reason(run_dir: Path, user_model_path: str) -> None:
    p = subprocess.run([*ssptk_cmd(), "run", "--model", "usermodels:bad_loss", "--workers", "2", "--steps", "10",
                        "--out", str(run_dir)], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": user_model_path})
    assert p.returncode == 1
    assert "ssptk: run failed: worker:" in p.stderr and "Traceback" not in p.stderr.splitlines()[0]
    assert "last lines of worker:" in p.stderr
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "failed"


def test_ctrl_c_stops_every_task_and_keeps_the_logs(run_dir: Path) -> None:
    proc = subprocess.Popen([*ssptk_cmd(), "run", "--mode", "async", "--workers", "2", "--steps", "1000000",
                             "--out", str(run_dir)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = run_dir / "workers" / "worker-0.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (log.exists() and log.read_text().count('"step"') > 10):
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "interrupted" in err
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted" and "interrupted by the user" in summary["reason"]
    assert summary["signal"] == "SIGINT"
    df, _ = records(run_dir)
    assert len(df) > 10
    assert_gone(str(run_dir), within=2.0)


def test_tasks_started_by_hand_like_on_several_hosts(tmp_path: Path) -> None:
    """The README's multi-host recipe, on one host: `ssptk worker` per task, then `ssptk report`."""
    from ssptk.launch.cluster import free_ports

    ports = free_ports(3)
    spec = tmp_path / "cluster.json"
    spec.write_text(json.dumps({"ps": [f"127.0.0.1:{ports[0]}"],
                                "worker": [f"127.0.0.1:{ports[1]}", f"127.0.0.1:{ports[2]}"]}))
    out = tmp_path / "run"
    common = ["--mode", "ssp", "--staleness", "1", "--steps", "30", "--out", str(out)]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""}

    def task(name: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen([*ssptk_cmd(), "worker", "--cluster", f"@{spec}", "--task", name, *common],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)

    ps = task("ps:0")
    try:
        workers = [task("worker:0"), task("worker:1")]
        assert [w.wait(timeout=180) for w in workers] == [0, 0]
        assert ps.wait(timeout=30) == 0  # no launcher stops it: it ends when worker 0 says the run is over
    finally:
        ps.kill()
        ps.wait()
    df, events = records(out)
    assert len(df) == 60 and {e["event"] for e in events} == {"barrier", "start", "done"}
    assert (out / "model" / "final.json").exists() and (out / "config.json").exists()
    p = subprocess.run([*ssptk_cmd(), "report", str(out)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "60 minibatches" in p.stdout
    assert_gone(str(tmp_path))


def test_parent_killed_outright_leaves_no_task(run_dir: Path) -> None:
    """SIGKILL the launcher itself (no cleanup code can run): its tasks must still be gone within seconds."""
    proc = subprocess.Popen([*ssptk_cmd(), "run", "--mode", "sync", "--workers", "2", "--steps", "1000000",
                             "--out", str(run_dir)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = run_dir / "workers" / "worker-1.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (log.exists() and log.read_text().count('"step"') > 5):
        time.sleep(0.1)
    assert len(cluster_processes(str(run_dir))) == 3  # PS and two workers were running
    proc.kill()
    proc.wait()
    assert_gone(str(run_dir), within=5.0)


def test_a_diverged_run_says_diverged_and_exits_3(tmp_path: Path) -> None:
    """The convergence tests' scenario (lr 0.45, SyncReplicasOptimizer's convention, 4 async workers), as a real
    run and as a prediction: the status line says diverged, not ok, and the exit code is 3 (finished, but its
    model is not a trained one); summary.json keeps status ok (it finished) with diverged true."""
    common = ["--model", "linear", "--lr", "0.45", "--lr-convention", "mean", "--mode", "async", "--workers", "4",
              "--steps", "150", "--jitter", "exp:0.01"]
    for command, out, status in (("run", tmp_path / "real", "[diverged]"), ("sim", tmp_path / "predicted",
                                                                           "[diverged, PREDICTED]")):
        p = subprocess.run([*ssptk_cmd(), command, *common, "--out", str(out)], capture_output=True, text=True,
                           timeout=300)
        assert p.returncode == 3, (command, p.stdout, p.stderr)
        assert p.stdout.splitlines()[0] == f"run       {out}  {status}", p.stdout
        assert re.search(r"^DIVERGED  at global step \d+", p.stdout, re.M), p.stdout
        summary = json.loads((out / "summary.json").read_text())
        assert summary["status"] == "ok" and summary["diverged"] is True
    assert_gone(str(tmp_path))
