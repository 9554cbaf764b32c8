"""The clusters people already have: `ssptk worker --cluster tf_config` (Kubernetes, Kubeflow's TFJob) and
`--cluster slurm` (srun), started on localhost with exactly the variables those launchers set; and
`ssptk report` over the run directories of several hosts."""
from __future__ import annotations

import json
import os
import random
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import assert_gone, ssptk_cmd
from helpers import max_skew, records
from slurm_cluster import missing_tools

pytestmark = pytest.mark.slow
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""}
RUN = ["--mode", "ssp", "--staleness", "1", "--steps", "30", "--model", "linear"]


def consecutive_free_ports(n: int) -> int:
    """A base port B such that B .. B+n-1 are free now (Slurm's tasks on a node take consecutive ports)."""
    for _ in range(200):
        base = random.randint(20000, 60000 - n)
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no run of free ports")


def _run_tasks(envs: list[dict[str, str]], argv: list[str], outs: list[Path]) -> None:
    """Start one `ssptk worker` per environment (rank order: the PS first); every task, the PS too, exits 0."""
    procs = [subprocess.Popen([*ssptk_cmd(), "worker", *argv, "--out", str(out)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for env, out in zip(envs, outs)]
    try:
        codes = [p.wait(timeout=240) for p in procs[1:]] + [procs[0].wait(timeout=30)]  # the PS ends by itself
        assert codes == [0] * len(codes), [p.stdout.read().decode()[-1500:] for p in procs]  # type: ignore[union-attr]
    finally:
        for p in procs:
            p.kill()
            p.wait()
            p.stdout.close()  # type: ignore[union-attr]


def test_tf_config_as_a_tfjob_sets_it(tmp_path: Path) -> None:
    base = consecutive_free_ports(3)
    cluster = {"ps": [f"localhost:{base}"], "worker": [f"localhost:{base + 1}", f"localhost:{base + 2}"]}
    tasks = [("ps", 0), ("worker", 0), ("worker", 1)]
    envs = [{**ENV, "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": t, "index": i},
                                             "environment": "cloud"})} for t, i in tasks]
    out = tmp_path / "run"
    _run_tasks(envs, ["--cluster", "tf_config", *RUN], [out] * 3)
    df, events = records(out)
    assert len(df) == 60 and sorted(df["minibatch"]) == list(range(60)) and max_skew(df, 2) <= 2
    config = json.loads((out / "config.json").read_text())
    assert config["started_by"] == "tf_config" and config["cluster"] == cluster
    assert config["options"]["workers"] == 2  # from the cluster, not the default of 3
    assert (out / "model" / "final.json").exists()
    p = subprocess.run([*ssptk_cmd(), "report", str(out)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "60 minibatches" in p.stdout
    assert_gone(str(tmp_path))


def test_slurm_as_srun_sets_it_and_a_report_over_the_hosts_directories(tmp_path: Path) -> None:
    """Three tasks of one job step on one node; each "host" (rank) writes to its own directory, as on
    nodes without a shared file system; `ssptk report` merges them."""
    base = consecutive_free_ports(3)
    common = {"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "3", "SLURM_STEP_NUM_TASKS": "3",
              "SLURM_NNODES": "1", "SLURM_STEP_NUM_NODES": "1", "SLURM_NODELIST": "localhost",
              "SLURM_JOB_NODELIST": "localhost", "SLURM_STEP_NODELIST": "localhost", "SLURM_TASKS_PER_NODE": "3",
              "SLURM_STEP_TASKS_PER_NODE": "3", "SLURM_NODEID": "0", "SLURMD_NODENAME": "localhost"}
    envs = [{**ENV, **common, "SLURM_PROCID": str(r), "SLURM_LOCALID": str(r)} for r in range(3)]
    outs = [tmp_path / f"host{r}" for r in range(3)]
    _run_tasks(envs, ["--cluster", "slurm", "--port-base", str(base), *RUN], outs)
    config = json.loads((outs[1] / "config.json").read_text())  # rank 1 is worker 0
    assert config["started_by"] == "slurm"
    assert config["cluster"] == {"ps": [f"localhost:{base}"], "worker": [f"localhost:{base + 1}", f"localhost:{base + 2}"]}
    assert [p.name for p in (outs[2] / "workers").iterdir()] == ["worker-1.jsonl"]
    gathered = tmp_path / "gathered"  # the default: beside the hosts' directories
    for hosts in ([outs[1], outs[2]], [outs[1], outs[2], gathered]):  # again, as `report OUT/*` lists it: rebuilt
        p = subprocess.run([*ssptk_cmd(), "report", *map(str, hosts)], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        assert "60 minibatches" in p.stdout and f"merged from 2 directories into {gathered}" in p.stdout
    df, _ = records(gathered)
    assert len(df) == 60 and set(df["worker"]) == {0, 1}
    # a gathered run is a run: it ends as a local one does
    summary = json.loads((gathered / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["total_steps"] == 60 and summary["failed_task"] is None
    assert (gathered / "report.html").stat().st_size > 10_000 and "ssp:1" in (gathered / "metrics.csv").read_text()
    assert list((gathered / "tensorboard").rglob("events.out.tfevents.*"))
    assert not (outs[1] / "summary.json").exists()  # the hosts' directories were only read
    assert_gone(str(tmp_path))


#: tests/test_slurm_real.py runs the recipe on a real Slurm where this host can (CI installs it): there the emulations
#: below that it covers (the recipe's tasks, a scancel) are left to it
REAL_SLURM = pytest.mark.skipif(not missing_tools(), reason="tests/test_slurm_real.py runs this on a real Slurm")


@pytest.mark.parametrize("ending", ["kill-9", pytest.param("scancel", marks=REAL_SLURM)])
def test_a_gathered_run_names_the_task_that_failed_first_or_says_it_was_cancelled(tmp_path: Path,
                                                                                   ending: str) -> None:
    """kill -9 of worker:1 (then srun --kill-on-bad-exit's SIGTERM to the rest) blames worker:1, not worker:0;
    scancel (SIGTERM to every task) is an interrupted run."""
    import signal
    import time

    base = consecutive_free_ports(3)
    cluster = json.dumps({"ps": [f"localhost:{base}"], "worker": [f"localhost:{base + 1}", f"localhost:{base + 2}"]})
    outs = [tmp_path / f"host{r}" for r in range(3)]
    argv = ["--mode", "ssp", "--staleness", "1", "--steps", "5000", "--model", "linear", "--cluster", cluster]
    procs = [subprocess.Popen([*ssptk_cmd(), "worker", *argv, "--task", task, "--out", str(out)], env=ENV,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for task, out in zip(("ps:0", "worker:0", "worker:1"), outs)]
    try:
        log = outs[2] / "workers" / "worker-1.jsonl"
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and (not log.exists() or log.read_text().count('"step"') < 20):
            time.sleep(0.2)
        assert log.exists() and log.read_text().count('"step"') >= 20, "worker:1 never trained"
        if ending == "kill-9":
            procs[2].send_signal(signal.SIGKILL)
            procs[2].wait(timeout=30)
            time.sleep(1.0)
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(timeout=60)
    finally:
        for p in procs:
            p.kill()
            p.wait()
    p = subprocess.run([*ssptk_cmd(), "report", str(outs[1]), str(outs[2])], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    summary = json.loads((tmp_path / "gathered" / "summary.json").read_text())
    if ending == "kill-9":
        assert summary["status"] == "failed" and summary["failed_task"] == "worker:1", summary["reason"]
        assert "its log ends after step" in summary["reason"] and "worker:0 stopped by SIGTERM" in summary["reason"]
    else:
        assert summary["status"] == "interrupted" and summary["signal"] == "SIGTERM", summary["reason"]
    assert (tmp_path / "gathered" / "report.html").exists()
    assert_gone(str(tmp_path))


@pytest.mark.parametrize(("argv", "env", "match"), [
    (["--cluster", "tf_config"], {}, "TF_CONFIG is not set"),
    (["--cluster", "tf_config"], {"TF_CONFIG": json.dumps({"cluster": {"chief": ["a:1"], "worker": ["b:1"]},
                                                           "task": {"type": "chief", "index": 0}})},
     "TF_CONFIG has a 'chief' job"),
    (["--cluster", "slurm"], {"SLURM_PROCID": "0"}, "SLURM_STEP_NUM_TASKS is not set: run .* as the command of srun"),
    (["--cluster", '{"ps": ["a:1"], "worker": ["b:1"]}'], {}, "--task is needed"),
    (["--cluster", '{"ps": ["a:1"], "worker": ["b:1"]}', "--task", "worker:0", "--workers", "3"], {},
     "--workers 3 does not match the cluster's 1 workers"),
])
def test_wrong_environment_is_one_line(argv: list[str], env: dict[str, str], match: str) -> None:
    clean = {k: v for k, v in ENV.items() if not k.startswith(("SLURM", "TF_CONFIG"))}
    p = subprocess.run([*ssptk_cmd(), "worker", *argv], env={**clean, **env}, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ssptk worker: error:")
    assert re.search(match, lines[0]), lines[0]


def test_report_refuses_directories_of_different_runs(tmp_path: Path) -> None:
    for name, mode in (("a", "ssp"), ("b", "async")):
        d = tmp_path / name
        (d / "workers").mkdir(parents=True)
        (d / "config.json").write_text(json.dumps({"options": {"mode": mode}}))
    p = subprocess.run([*ssptk_cmd(), "report", str(tmp_path / "a"), str(tmp_path / "b")], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and "are not one run: their config.json options differ" in p.stderr


EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _with_cli_on_path(env: dict[str, str]) -> dict[str, str]:
    """The recipes call `ssptk`: the console script installed next to this Python."""
    return {**env, "PATH": os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])}


@REAL_SLURM
def test_the_sbatch_recipe_runs_as_srun_would_start_it(tmp_path: Path) -> None:
    """examples/slurm/ssptk.sbatch, unchanged: its run options and srun command, run once per task of the job step
    with the variables srun sets (one node here; the sbatch's task count; fewer steps); then the report it names
    ends the run in runs/<job>/gathered."""
    script = (EXAMPLES / "slurm" / "ssptk.sbatch").read_text()
    ntasks = int(re.search(r"^#SBATCH --ntasks=(\d+)", script, re.M).group(1))  # type: ignore[union-attr]
    body = script[script.index("\nMODE="):].replace("srun --kill-on-bad-exit=1 ", "")  # what srun runs per task
    assert "--port-base" not in body and "8888" not in body  # ports from the job: no two jobs collide
    job = str(random.randint(1000, 999999))
    out = tmp_path / "runs" / job
    common = {"SLURM_JOB_ID": job, "SLURM_STEP_ID": "0", "SLURM_NTASKS": str(ntasks),
              "SLURM_STEP_NUM_TASKS": str(ntasks), "SLURM_NNODES": "1", "SLURM_STEP_NUM_NODES": "1",
              "SLURM_NODELIST": "localhost", "SLURM_STEP_NODELIST": "localhost",
              "SLURM_STEP_TASKS_PER_NODE": str(ntasks), "SLURM_TASKS_PER_NODE": str(ntasks), "SLURM_NODEID": "0",
              "STEPS": "40"}
    env = {k: v for k, v in ENV.items() if k != "TF_CPP_MIN_LOG_LEVEL"}  # the recipe sets it
    procs = [subprocess.Popen(["bash", "-c", body], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              env=_with_cli_on_path({**env, **common, "SLURM_PROCID": str(r), "SLURM_LOCALID": str(r)}))
             for r in range(ntasks)]
    try:
        assert [p.wait(timeout=300) for p in procs] == [0] * ntasks  # the PS too: srun waits for every task
        output = [p.stdout.read().decode() for p in procs]  # type: ignore[union-attr]
    finally:
        for p in procs:
            p.kill()
            p.wait()
            p.stdout.close()  # type: ignore[union-attr]
    assert not any("I tensorflow" in o or "W tensorflow" in o for o in output), output[0][-2000:]  # quiet
    (host,) = list(out.iterdir())
    df, _ = records(host)
    assert len(df) == (ntasks - 1) * 40 and max_skew(df, ntasks - 1) <= 2 + 1  # the recipe's ssp:2
    assert json.loads((host / "config.json").read_text())["started_by"] == "slurm"
    p = subprocess.run(f"{' '.join(ssptk_cmd())} report runs/{job}/*", shell=True, cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert json.loads((out / "gathered" / "summary.json").read_text())["status"] == "ok"
    assert_gone(str(tmp_path))


def test_the_tfjob_recipe_runs_as_the_operator_would_start_it(tmp_path: Path) -> None:
    """examples/kubernetes/tfjob.yaml: each replica's command with the TF_CONFIG and HOSTNAME the training
    operator gives it (services on localhost here; /runs is a temporary directory)."""
    import yaml

    job = yaml.safe_load((EXAMPLES / "kubernetes" / "tfjob.yaml").read_text())
    specs = job["spec"]["tfReplicaSpecs"]
    assert set(specs) == {"PS", "Worker"}
    counts = {"ps": specs["PS"]["replicas"], "worker": specs["Worker"]["replicas"]}
    base = consecutive_free_ports(sum(counts.values()))
    ports = iter(range(base, base + sum(counts.values())))
    cluster = {job_: [f"localhost:{next(ports)}" for _ in range(k)] for job_, k in counts.items()}
    runs = tmp_path / "runs"
    procs = []
    for kind, spec in specs.items():
        command = spec["template"]["spec"]["containers"][0]["command"]
        assert command[:2] == ["sh", "-c"]
        for i in range(spec["replicas"]):
            tf_config = {"cluster": cluster, "task": {"type": kind.lower(), "index": i}, "environment": "cloud"}
            env = {**ENV, "TF_CONFIG": json.dumps(tf_config), "HOSTNAME": f"{job['metadata']['name']}-{kind.lower()}-{i}"}
            procs.append(subprocess.Popen(["sh", "-c", command[2].replace("/runs", str(runs))], env=_with_cli_on_path(env),
                                          stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
    try:
        assert [p.wait(timeout=300) for p in procs] == [0] * len(procs)  # the PS exits when the run is over
    finally:
        for p in procs:
            p.kill()
            p.wait()
    dirs = sorted(str(d) for d in runs.iterdir())  # `ssptk report /runs/*`, as the recipe says: the PS's pod's too
    assert len(dirs) == len(procs)
    p = subprocess.run([*ssptk_cmd(), "report", *dirs], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    steps = int(re.search(r"--steps (\d+)", specs["Worker"]["template"]["spec"]["containers"][0]["command"][2])
                .group(1))  # type: ignore[union-attr]
    assert f"{counts['worker'] * steps} minibatches" in p.stdout
    assert f"merged from {len(procs)} directories" in p.stdout
    assert_gone(str(tmp_path))
