"""Tasks no launcher started (a cluster spec given by hand, TF_CONFIG) keep their status and log in their own host's
directory, the PS too (issue 36, points 4 and 5): a killed PS is named ps:0 from the hosts' directories, its own
directory is a valid input to `ssptk report`, the tasks' stderr says the cause in a line, and a gather never merges
two runs. Real tasks on localhost, each with a directory of its own as on separate hosts."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import assert_gone, ssptk_cmd
from test_cluster_env import consecutive_free_ports

pytestmark = pytest.mark.slow
TASKS = ("ps:0", "worker:0", "worker:1")
#: as a user's shell has it: no TF_CPP_MIN_LOG_LEVEL (TensorFlow's INFO lines are on), no launcher's variables
ENV = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "SSPTK_WATCH_PARENT", "SSPTK_TF_LOGS")}


def _start(how: str, cluster: dict[str, list[str]], hosts: list[Path], argv: list[str], tmp: Path,
           ) -> list[subprocess.Popen[str]]:
    """One `ssptk worker` per task of ``cluster``, each writing to its own host's directory; the cluster given as a
    spec file (``hand``) or as the TF_CONFIG a TFJob sets (``tf_config``)."""
    tmp.mkdir(parents=True, exist_ok=True)
    spec = tmp / "cluster.json"
    spec.write_text(json.dumps(cluster))
    procs = []
    for task, host in zip(TASKS, hosts):
        env = {**ENV, "CUDA_VISIBLE_DEVICES": ""}
        if how == "tf_config":
            kind, i = task.split(":")
            env["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": kind, "index": int(i)}})
            where = ["--cluster", "tf_config"]
        else:
            where = ["--cluster", f"@{spec}", "--task", task]
        procs.append(subprocess.Popen([*ssptk_cmd(), "worker", *where, *argv, "--out", str(host)], env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    return procs


def _end(procs: list[subprocess.Popen[str]], timeout: float = 240) -> list[tuple[int, str, str]]:
    """Each task's exit code, stdout and stderr (every task killed if one outlives ``timeout``)."""
    try:
        return [(p.wait(timeout=timeout), *p.communicate()) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()


def _status(host: Path, task: str) -> dict:
    return json.loads((host / "tasks" / f"{task.replace(':', '-')}.json").read_text())


def _report(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ssptk_cmd(), "report", *argv], capture_output=True, text=True, timeout=180)


@pytest.mark.parametrize("how", ["hand", "tf_config"])
def test_a_killed_ps_is_named_ps0_from_the_hosts_directories(tmp_path: Path, how: str) -> None:
    """kill -9 of the PS while the workers train: each worker says in one line that it lost ps:0 (the traceback and
    gRPC's lines go to its log), every host's directory says so, the PS's own directory holds its status (never
    finished) and log, and `ssptk report` over the three names ps:0, in its summary and its report.html."""
    base = consecutive_free_ports(3)
    cluster = {"ps": [f"localhost:{base}"], "worker": [f"localhost:{base + 1}", f"localhost:{base + 2}"]}
    hosts = [tmp_path / f"host{i}" for i in range(3)]
    procs = _start(how, cluster, hosts, ["--mode", "ssp", "--staleness", "1", "--steps", "100000", "--model",
                                         "linear"], tmp_path)
    try:
        log = hosts[2] / "workers" / "worker-1.jsonl"
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and (not log.exists() or log.read_text().count('"step"') < 20):
            assert all(p.poll() is None for p in procs), [p.poll() for p in procs]
            time.sleep(0.2)
        assert log.exists() and log.read_text().count('"step"') >= 20, "worker:1 never trained"
        procs[0].send_signal(signal.SIGKILL)
    finally:
        ended = _end(procs, timeout=120)
    assert [code for code, _, _ in ended] == [-signal.SIGKILL, 1, 1], [e[2][-2000:] for e in ended]
    assert [out for _, out, _ in ended] == [f"SSPTK_READY {t}\n" for t in TASKS]
    assert ended[0][2] == ""  # no "I0000 ... grpc_server_lib" line, nor any other of TensorFlow's
    identities = {_status(h, t)["identity"] for h, t in zip(hosts, TASKS)}
    assert len(identities) == 1 and None not in identities
    assert _status(hosts[0], "ps:0")["state"] == "ready"  # killed outright: it never said it finished
    ps_log = (hosts[0] / "logs" / "ps-0.log").read_text()
    assert "SSPTK_READY ps:0" in ps_log and "grpc_server_lib" in ps_log  # what its stderr left out is here
    for i, (host, (_, _, err)) in enumerate(zip(hosts[1:], ended[1:])):
        said = f"ssptk worker: error: worker:{i}: lost ps:0 at localhost:{base} ("
        assert err.startswith(said) and err.count("\n") == 1, err[-3000:]  # one line: no traceback, no E0000
        error = json.loads((host / "workers" / f"worker-{i}.jsonl").read_text().splitlines()[-1])
        assert error["event"] == "error" and error["lost"] == "ps:0", error
        status = _status(host, f"worker:{i}")
        assert status["state"] == "failed" and status["error"]["message"].startswith("lost ps:0"), status
        assert "Traceback" in (host / "logs" / f"worker-{i}.log").read_text()

    alone = _report(str(hosts[0]))  # the PS's directory is a run's directory now, not "not a directory"
    assert alone.returncode == 2 and alone.stderr.strip().splitlines() == [
        "ssptk: error: none of these directories has config.json: give the one of worker 0's host too"], alone.stderr
    p = _report(*map(str, hosts))
    assert p.returncode == 0, p.stderr
    assert "failed    ps:0: ended without finishing or saying why" in p.stdout, p.stdout
    gathered = tmp_path / "gathered"
    summary = json.loads((gathered / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["failed_task"] == "ps:0", summary["reason"]
    assert summary["reason"].endswith("after it: worker:0 lost it, worker:1 lost it") or \
        summary["reason"].endswith("after it: worker:1 lost it, worker:0 lost it"), summary["reason"]
    assert "Run ssp:1 failed: ps:0: ended without finishing" in (gathered / "report.html").read_text()
    assert sorted(os.listdir(gathered / "tasks")) == ["ps-0.json", "worker-0.json", "worker-1.json"]
    assert_gone(str(tmp_path))


def test_a_gather_of_two_runs_is_refused_and_a_local_sgd_run_keeps_its_label(tmp_path: Path) -> None:
    """Two runs started by hand (other ports, mode and seed): their hosts' directories are refused together in one
    line naming both; each run's own directories, the PS's included, gather (local SGD as local:4, not local)."""
    runs = {"a": ["--mode", "local:4", "--steps", "8", "--seed", "0"], "b": ["--mode", "ssp", "--steps", "12",
                                                                            "--seed", "1"]}
    hosts, said = {}, []
    for name, argv in runs.items():
        base = consecutive_free_ports(3)
        cluster = {"ps": [f"localhost:{base}"], "worker": [f"localhost:{base + 1}", f"localhost:{base + 2}"]}
        hosts[name] = [tmp_path / name / f"host{i}" for i in range(3)]
        ended = _end(_start("hand", cluster, hosts[name], [*argv, "--model", "linear"], tmp_path / name))
        assert [code for code, _, _ in ended] == [0, 0, 0], [e[2][-2000:] for e in ended]
        said += [e[2] for e in ended]

    mixed = tmp_path / "mixed"
    p = _report(str(hosts["a"][1]), str(hosts["b"][2]), "--gather", str(mixed))
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert lines[0].startswith(f"ssptk: error: {hosts['a'][1]} and {hosts['b'][2]} are not one run: their tasks "
                               "recorded run run:"), lines[0]
    assert not mixed.exists()
    p = _report(*map(str, hosts["a"]))
    assert p.returncode == 0 and "[ok]" in p.stdout and "16 minibatches" in p.stdout, p.stdout + p.stderr
    gathered = tmp_path / "a" / "gathered"
    assert "local:4" in (gathered / "metrics.csv").read_text().splitlines()[1]
    assert "<title>ssptk run local:4 (gathered from its hosts)</title>" in (gathered / "report.html").read_text()
    assert said == [""] * 6  # a good run says nothing on stderr (no "I0000 ... grpc_server_lib" line)
    assert [_status(h, t)["state"] for name in runs for h, t in zip(hosts[name], TASKS)] == ["done"] * 6
    assert_gone(str(tmp_path))


def test_a_ps_that_cannot_start_says_so_in_its_status(tmp_path: Path) -> None:
    """Its port is taken: the PS's server cannot start. Its status says failed and why (an exception no training
    loop caught), and gRPC's line saying why is still on its stderr (an error that is not a peer's death)."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        cluster = {"ps": [f"localhost:{taken.getsockname()[1]}"], "worker": ["localhost:1"]}
        host = tmp_path / "host0"
        p = subprocess.run([*ssptk_cmd(), "worker", "--cluster", json.dumps(cluster), "--task", "ps:0", "--out",
                            str(host)], capture_output=True, text=True, timeout=180, env={**ENV, "CUDA_VISIBLE_DEVICES": ""})
    assert p.returncode == 1 and "Failed to add port to server" in p.stderr, p.stderr[-3000:]
    status = _status(host, "ps:0")
    assert status["state"] == "failed" and status["error"]["message"] == "UnknownError: Could not start gRPC server"
    assert "Could not start gRPC server" in (host / "logs" / "ps-0.log").read_text()
