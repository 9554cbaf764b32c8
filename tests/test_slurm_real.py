"""examples/slurm/ssptk.sbatch on a real Slurm: Debian's slurm-wlm and munge, two nodes emulated on this host (each
slurmd in its own network namespace: tests/slurm_cluster.py), jobs submitted with sbatch, ended by `ssptk report`.

Covers what a user on a department's cluster meets: two jobs at once on the same nodes (ports from the job ids, no
collision), scancel of a running job (an interrupted run) and kill -9 of one task (that task is blamed, the PS too),
each reported from the hosts' directories. Needs root, `slurm-wlm` and `munge` (.ci/run installs them): under CI=true a
host without them fails this test instead of skipping it.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurm_cluster import NODES, SlurmCluster, missing_tools

pytestmark = pytest.mark.slow
RECIPE = Path(__file__).resolve().parent.parent / "examples" / "slurm" / "ssptk.sbatch"
#: the recipe as it is (its nodes, ssp:2, ...); the options at its top set from the environment, --ntasks from sbatch
STEPS = 60
RUN = {"MODEL": "linear", "STEPS": str(STEPS)}
LONG = {"MODEL": "linear", "STEPS": "20000"}  # a run still training when it is cancelled or a task is killed
TASKS = ("--ntasks=3",)  # 1 PS + 2 workers (the recipe's 5 tasks, 3 jobs at once, would crowd 2 cores)


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    missing = missing_tools()
    if missing:
        why = f"a real Slurm needs {', '.join(missing)} (apt-get install slurm-wlm munge, as root)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI: {why}")
        pytest.skip(why)
    cluster = SlurmCluster(str(tmp_path_factory.mktemp("slurm")))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        left = cluster.leftovers()
        assert not left, f"processes of the Slurm cluster left behind: {left}"
        assert not [p for p in _pids_named(("slurmctld", "slurmd", "slurmstepd", "munged"))
                    if cluster.base in _cmdline(p)], "a Slurm daemon was left running"


def _pids_named(names: tuple[str, ...]) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/comm") as f:
                    if f.read().strip() in names:
                        out.append(int(d))
            except OSError:
                pass
    return out


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _env(extra: dict[str, str]) -> dict[str, str]:
    """The job's environment (sbatch exports the submitter's): the `ssptk` installed next to this Python first on
    PATH, the run options the recipe reads at its top."""
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    return {"PATH": path, "CUDA_VISIBLE_DEVICES": "", **extra}


def _reports(work: Path, jobs: list[int]) -> dict[int, tuple[subprocess.CompletedProcess[str], dict, list[Path]]]:
    """`ssptk report runs/<job>/*` as the recipe says, for each job (at once: each takes ~10 CPU-seconds); per job
    its output, the gathered summary and the hosts' directories."""
    procs = {job: subprocess.Popen(f"ssptk report runs/{job}/*", shell=True, cwd=work, text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, **_env({})})
             for job in jobs}
    out = {}
    for job, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=300)
        p = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
        hosts = sorted(d for d in (work / "runs" / str(job)).iterdir() if d.name != "gathered")
        gathered = work / "runs" / str(job) / "gathered" / "summary.json"
        out[job] = (p, json.loads(gathered.read_text()) if gathered.exists() else {}, hosts)
    return out


def _wait_training(work: Path, job: int, steps: int = 10, timeout: float = 240) -> None:
    """Until every worker of the job has logged ``steps`` steps."""
    deadline = time.monotonic() + timeout
    counts: list[int] = []
    while time.monotonic() < deadline:
        logs = list((work / "runs" / str(job)).glob("*/workers/worker-*.jsonl"))
        counts = [log.read_text().count('"step"') for log in logs]
        if len(counts) == 2 and min(counts) >= steps:
            return
        time.sleep(0.3)
    raise AssertionError(f"job {job}'s workers never trained: steps logged per worker {counts}")


def test_three_jobs_at_once_end_in_reports_with_the_right_blame(slurm: SlurmCluster, tmp_path: Path) -> None:
    """The recipe submitted three times at once (1 PS + 2 workers each, both nodes shared by all three jobs):

    - each job takes its own ports (from its id) and none joins another's cluster;
    - the first trains to the end: COMPLETED, its report "ok" with every worker's steps, slurm-N.out quiet (no
      TensorFlow shutdown chatter);
    - the second is scancelled while it trains: the report says interrupted by SIGTERM, not finished;
    - in the third, worker:1 (Slurm rank 2) is killed with SIGKILL: srun --kill-on-bad-exit ends the others, and the
      report blames worker:1, the task that failed first (not worker:0, whose model was never written).
    """
    t0 = time.monotonic()
    done, cancelled, killed = jobs = [slurm.sbatch(str(RECIPE), str(tmp_path), *TASKS, env=_env(run))
                                      for run in (RUN, LONG, LONG)]
    _wait_training(tmp_path, cancelled)
    slurm.scancel(cancelled)
    _wait_training(tmp_path, killed)
    pid = slurm.task_pid(killed, rank=2)
    assert pid is not None, "worker:1's process (SLURM_PROCID=2) not found"
    os.kill(pid, signal.SIGKILL)
    states = [slurm.wait(j, timeout=400) for j in jobs]
    took = time.monotonic() - t0
    outs = [(tmp_path / f"slurm-{j}.out").read_text() for j in jobs]
    assert states == ["COMPLETED", "CANCELLED", "FAILED"], outs
    for out in outs:
        assert sorted(re.findall(r"SSPTK_READY (\S+)", out)) == ["ps:0", "worker:0", "worker:1"], out
        assert "another run" not in out and "serves run" not in out, out  # nobody reached another job's PS
    assert "Connection reset by peer" not in outs[0] and "Traceback" not in outs[0], outs[0][-3000:]
    assert not re.search(r"^[IW]\d{4} |[IW] tensorflow", outs[0], re.M), outs[0][-3000:]  # TF's logging off

    reports = _reports(tmp_path, jobs)
    for p, _, hosts in reports.values():
        assert p.returncode == 0, p.stderr
        assert [h.name for h in hosts] == list(NODES)  # every job's tasks ran on both nodes
    _, summary, _ = reports[done]
    assert summary["status"] == "ok" and summary["total_steps"] == 2 * STEPS, summary
    assert sorted(summary["per_worker_steps"]) == ["0", "1"] and min(summary["per_worker_steps"].values()) > 0
    assert summary["max_skew"] <= 3 and summary["final_loss"] < 1.0  # the recipe's ssp:2: skew at most S + 1
    gathered = tmp_path / "runs" / str(done) / "gathered"
    assert (gathered / "report.html").exists() and (gathered / "metrics.csv").exists()
    assert list((gathered / "tensorboard").rglob("events.out.tfevents.*"))

    p, summary, _ = reports[cancelled]
    assert summary["status"] == "interrupted" and summary["signal"] == "SIGTERM", summary.get("reason")
    assert "interrupted" in p.stdout and "finished" not in p.stdout, p.stdout
    _, summary, _ = reports[killed]
    assert summary["status"] == "failed" and summary["failed_task"] == "worker:1", summary.get("reason")

    configs = [json.loads((tmp_path / "runs" / str(j) / "gathered" / "config.json").read_text()) for j in jobs]
    assert all(c["started_by"] == "slurm" for c in configs)
    ports = [{a.rsplit(":", 1)[1] for addrs in c["cluster"].values() for a in addrs} for c in configs]
    assert not (ports[0] & ports[1] or ports[0] & ports[2] or ports[1] & ports[2]), [c["cluster"] for c in configs]
    print(f"three recipe jobs of 3 tasks at once on 2 Slurm nodes: {took:.1f} s to their ends, "
          f"{time.monotonic() - t0:.1f} s with the reports (load {os.getloadavg()[0]:.1f})")


def test_a_killed_ps_is_named_and_slurm_out_says_so_in_a_few_lines(slurm: SlurmCluster, tmp_path: Path) -> None:
    """kill -9 of the PS (rank 0) while the job trains: the report over every node's directory names ps:0 (not the
    worker that noticed first), its report.html says so, and slurm-N.out holds a few lines naming the cause, not
    every task's traceback and TensorFlow's gRPC errors (those stay in each task's log file on its node)."""
    job = slurm.sbatch(str(RECIPE), str(tmp_path), *TASKS, env=_env(LONG))
    _wait_training(tmp_path, job)
    pid = slurm.task_pid(job, rank=0)
    assert pid is not None, "ps:0's process (SLURM_PROCID=0) not found"
    os.kill(pid, signal.SIGKILL)
    assert slurm.wait(job, timeout=300) == "FAILED"
    out = (tmp_path / f"slurm-{job}.out").read_text()
    said = [ln for ln in out.splitlines() if ln.strip() and not ln.startswith("SSPTK_READY")]
    assert len(said) <= 12, out[-4000:]  # a line per worker, and srun's six or so
    assert "Traceback" not in out and not re.search(r"^[EW]\d{4} ", out, re.M), out[-4000:]
    assert re.search(r"lost ps:0|task 0: Killed", out), out[-4000:]
    p, summary, hosts = _reports(tmp_path, [job])[job]
    assert p.returncode == 0, p.stderr
    assert summary["status"] == "failed" and summary["failed_task"] == "ps:0", summary.get("reason")
    ps_host = next(h for h in hosts if (h / "tasks" / "ps-0.json").exists())  # rank 0's node
    assert json.loads((ps_host / "tasks" / "ps-0.json").read_text())["state"] == "ready"  # never finished
    assert "SSPTK_READY ps:0" in (ps_host / "logs" / "ps-0.log").read_text()
    assert "Run ssp:2 failed: ps:0: " in (tmp_path / "runs" / str(job) / "gathered" / "report.html").read_text()
    print(f"slurm-{job}.out after ps:0's kill -9: {len(said)} lines besides SSPTK_READY:\n" + "\n".join(said))
