"""The clusters people already have: `ssptk worker --cluster tf_config` (Kubernetes, Kubeflow's TFJob) and
`--cluster slurm` (srun), started on localhost with exactly the variables those launchers set; and
`ssptk report` over the run directories of several hosts."""
from __future__ import annotations

import json
import os
import random
import socket
import subprocess
from pathlib import Path

import pytest
from conftest import assert_gone, ssptk_cmd
from helpers import max_skew, records

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
    gathered = tmp_path / "gathered"
    p = subprocess.run([*ssptk_cmd(), "report", str(outs[1]), str(outs[2]), "--gather", str(gathered)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "60 minibatches" in p.stdout and "merged from 2 directories" in p.stdout
    df, _ = records(gathered)
    assert len(df) == 60 and set(df["worker"]) == {0, 1}
    assert not (outs[1] / "summary.json").exists()  # the hosts' directories were only read
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
    import re

    assert re.search(match, lines[0]), lines[0]


def test_report_refuses_directories_of_different_runs(tmp_path: Path) -> None:
    for name, mode in (("a", "ssp"), ("b", "async")):
        d = tmp_path / name
        (d / "workers").mkdir(parents=True)
        (d / "config.json").write_text(json.dumps({"options": {"mode": mode}}))
    p = subprocess.run([*ssptk_cmd(), "report", str(tmp_path / "a"), str(tmp_path / "b")], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and "are not one run: their config.json options differ" in p.stderr
