"""A worker never joins another run's cluster: it reads the run id each PS task keeps and fails in one line when it
is not its own (ssptk.runtime.identity). Real tasks on localhost, as srun or a user starts them by hand."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import assert_gone, ssptk_cmd
from test_cluster_env import ENV, consecutive_free_ports

pytestmark = pytest.mark.slow
RUN = ["--mode", "async", "--steps", "20", "--model", "linear"]


def _start(cluster: dict[str, list[str]], task: str, run_id: str, out: Path,
           run: list[str] = RUN) -> subprocess.Popen[str]:
    env = {k: v for k, v in ENV.items() if k != "SSPTK_WATCH_PARENT"}
    return subprocess.Popen([*ssptk_cmd(), "worker", "--cluster", json.dumps(cluster), "--task", task,
                             "--run-id", run_id, *run, "--out", str(out)], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _end(procs: list[subprocess.Popen[str]]) -> None:
    for p in procs:
        p.kill()
        p.wait()
        p.stdout.close()  # type: ignore[union-attr]


@pytest.mark.parametrize("worker_run", ["slurm-41.0", "slurm-42.0"])
def test_a_worker_of_another_run_fails_in_one_line(tmp_path: Path, worker_run: str) -> None:
    """The PS serves slurm-42.0; its own worker trains, a worker of slurm-41.0 stops before touching any state."""
    base = consecutive_free_ports(2)
    cluster = {"ps": [f"localhost:{base}"], "worker": [f"localhost:{base + 1}"]}
    out = tmp_path / "run"
    procs = [_start(cluster, "ps:0", "slurm-42.0", out), _start(cluster, "worker:0", worker_run, out)]
    try:
        code = procs[1].wait(timeout=180)
        text = procs[1].stdout.read()  # type: ignore[union-attr]
        if worker_run == "slurm-42.0":
            assert code == 0 and procs[0].wait(timeout=30) == 0, text[-1500:]
            assert (out / "model" / "final.json").exists()
        else:
            assert code == 1, text[-1500:]
            errors = [ln for ln in text.splitlines() if ln.startswith("ssptk worker:")]
            assert errors == [f"ssptk worker: error: worker:0: this worker (run 'slurm-41.0') reached ps:0 at "
                              f"localhost:{base}, which serves run 'slurm-42.0': two runs share these ports (give "
                              "each job its own --port-base, or leave it auto under Slurm)"], text[-1500:]
            assert "Traceback" not in text
            events = [json.loads(ln) for ln in (out / "workers" / "worker-0.jsonl").read_text().splitlines()]
            assert [e.get("event") for e in events] == ["error"] and "slurm-42.0" in events[0]["message"]
            assert procs[0].poll() is None  # the other run's PS is untouched: its own workers may still come
    finally:
        _end(procs)
    assert_gone(str(tmp_path))


def test_a_worker_started_with_other_options_fails_at_connect(tmp_path: Path) -> None:
    """The same run id, another --lr: the worker used to train on that PS, and the mix was caught only when the
    run was gathered. The PS serves the run's whole identity (run id, cluster spec, options); the worker stops before
    touching any state, in one line that says what to do."""
    base = consecutive_free_ports(2)
    cluster = {"ps": [f"localhost:{base}"], "worker": [f"localhost:{base + 1}"]}
    out = tmp_path / "run"
    procs = [_start(cluster, "ps:0", "slurm-42.0", out),
             _start(cluster, "worker:0", "slurm-42.0", out, [*RUN, "--lr", "0.01"])]
    try:
        code = procs[1].wait(timeout=180)
        text = procs[1].stdout.read()  # type: ignore[union-attr]
        assert code == 1, text[-1500:]
        errors = [ln for ln in text.splitlines() if ln.startswith("ssptk worker:")]
        assert errors == [f"ssptk worker: error: worker:0: this worker (run 'slurm-42.0') reached ps:0 at "
                          f"localhost:{base}, which serves that run started with other options or another --cluster: "
                          "start every task of a run with the same command line (only --task differs)"], text[-1500:]
        assert not (out / "model" / "final.json").exists() and "Traceback" not in text
        assert procs[0].poll() is None
    finally:
        _end(procs)
    assert_gone(str(tmp_path))

