"""``--network`` and ``--ps`` with real clusters: a shaped link holds a run to what its measured bytes allow, the
host's own loopback is untouched, K shards each carry their share, and every mode and layout trains through
them."""
from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import pytest
from conftest import assert_gone

import ssptk
from ssptk.core.errors import RunFailed, UsageError

pytestmark = [pytest.mark.slow, pytest.mark.needs_tc]
MLP = {"model": "mlp:256", "gpus": "none", "workers": 2}  # 85 k parameters: ~0.35 MB per pull and per push


def traffic(run_dir: Path) -> dict:
    return json.loads((run_dir / "traffic.json").read_text())


def test_a_shaped_run_is_held_to_its_links_bytes(tmp_path: Path) -> None:
    free = ssptk.run(mode="async", steps=20, out=str(tmp_path / "free"), **MLP)
    shaped = ssptk.run(mode="async", steps=20, network="ps=16mbit", out=str(tmp_path / "shaped"), **MLP)
    assert shaped.summary["traffic"]["network"] == "ps=16mbit" and free.summary["traffic"]["network"] is None
    t = traffic(tmp_path / "shaped")
    assert t["rates"]["ps:0"] == 16e6 and t["rates"]["worker:0"] is None
    # the PS sends each pull: the model's bytes (85 k float32) and a few percent of protocol, per minibatch
    ps_out = t["tasks"]["ps:0"]["sent"] / shaped.summary["total_steps"]
    assert 340_000 <= ps_out < 340_000 * 1.15, ps_out
    # the physical limit: no faster than the PS's link can send the pulls, and near it (nothing else is slow)
    limit = 16e6 / 8 / ps_out
    assert shaped.summary["steps_per_s"] <= 1.1 * limit
    assert shaped.summary["steps_per_s"] >= 0.5 * limit
    assert free.summary["steps_per_s"] > 2 * shaped.summary["steps_per_s"]
    busiest, share = shaped.summary["traffic"]["busiest"]
    # over the training time, with the start-up's bytes (initial values, first pulls) counted: a little over 1 at most
    assert busiest == "ps:0" and 0.5 < share <= 1.15
    # a worker's step: the CPU its process spent (measured) and its time on the wire, timed on every 10th step
    split, ps = shaped.summary["traffic"], t["tasks"]["ps:0"]
    assert 0 < split["compute_ms"] < split["step_ms"] and free.summary["traffic"]["transfer_ms"] is None
    df = shaped.df
    traced = df.dropna(subset=["transfer_s"])
    assert len(traced) >= 3 and (traced["step"] % 10 == 0).all()  # every 10th step of each worker
    assert split["transfer_timed_steps"] == len(traced)
    assert split["transfer_ms"] == pytest.approx(1e3 * traced["transfer_s"].mean())
    # at least most of what its own bytes need at the link's rate (a gradient leaving while the next is computed counts
    # as compute), and no more than the step
    floor = (ps["sent"] + ps["received"]) * 8e3 / 16e6 / shaped.summary["total_steps"]
    assert 0.7 * floor < split["transfer_ms"] < split["step_ms"], (floor, split)
    assert "transfer_s" not in free.df  # no trace without a shaped link


def test_the_hosts_loopback_keeps_its_speed_during_a_shaped_run(tmp_path: Path) -> None:
    """While a cluster's PS link is held to 8 Mbit/s, 40 MB cross the host's own loopback in well under a second
    (at 8 Mbit/s they would take 40 s)."""
    result: dict = {}
    run = threading.Thread(target=lambda: result.update(r=ssptk.run(
        mode="async", steps=15, network="8mbit", out=str(tmp_path / "run"), **MLP)))
    run.start()
    deadline = time.monotonic() + 120
    while not list((tmp_path / "run" / "workers").glob("*.jsonl")) and time.monotonic() < deadline:
        time.sleep(0.1)  # until the shaped cluster is training
    assert run.is_alive(), "the shaped run ended before the host's loopback was measured"
    server = socket.create_server(("127.0.0.1", 0))
    got: list[int] = []

    def drain() -> None:
        conn, _ = server.accept()
        n = 0
        while chunk := conn.recv(1 << 20):
            n += len(chunk)
        got.append(n)

    reader = threading.Thread(target=drain)
    reader.start()
    start = time.perf_counter()
    with socket.create_connection(server.getsockname()) as c:
        c.sendall(b"x" * 40_000_000)
    reader.join()
    seconds = time.perf_counter() - start
    assert run.is_alive(), "the shaped run must still be going while the host's loopback is measured"
    run.join()
    assert got == [40_000_000] and seconds < 2.0, seconds
    assert result["r"].summary["status"] == "ok"


@pytest.mark.parametrize("mode, layout", [("sync", "processes"), ("ssp:1", "processes"), ("async", "shared")])
def test_shards_carry_their_share_in_every_mode(tmp_path: Path, mode: str, layout: str) -> None:
    r = ssptk.run(mode=mode, steps=25, ps=2, layout=layout, network="ps=1gbit", lr=0.1, out=str(tmp_path / "r"),
                  **MLP)
    assert r.summary["status"] == "ok"
    config = json.loads((tmp_path / "r" / "config.json").read_text())
    assert len(config["cluster"]["ps"]) == 2
    t = traffic(tmp_path / "r")["tasks"]
    a, b = t["ps:0"]["sent"], t["ps:1"]["sent"]
    assert a > 0 and b > 0 and 0.8 < a / b < 1.25, (a, b)  # the variables balanced by bytes
    assert r.summary["final_accuracy"] > 0.3  # trained: a 10-class guess gets 0.1
    assert_gone(str(tmp_path / "r"))


def test_allreduce_trains_through_shaped_worker_links(tmp_path: Path) -> None:
    r = ssptk.run(mode="allreduce", steps=10, network="worker=200mbit", out=str(tmp_path / "r"), **MLP)
    t = traffic(tmp_path / "r")
    assert r.summary["status"] == "ok" and set(t["tasks"]) == {"worker:0", "worker:1"}
    assert min(c["sent"] for c in t["tasks"].values()) > 10 * 340_000  # each step moves the gradients around


def test_a_warm_cluster_keeps_its_links_and_counts_each_run(tmp_path: Path, warm_pool: None) -> None:
    runs = [ssptk.run(mode="async", steps=10, network="ps=1gbit", warm=True, out=str(tmp_path / f"r{i}"), **MLP)
            for i in range(2)]
    assert runs[1].summary["traffic"]["network"] == "ps=1gbit"
    sent = [traffic(tmp_path / f"r{i}")["tasks"]["ps:0"]["sent"] for i in range(2)]
    assert 0.7 < sent[1] / sent[0] < 1.3, sent  # each run's own bytes, not the cluster's total so far


def test_no_network_without_a_namespace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SSPTK_NO_NETNS", "1")
    with pytest.raises(UsageError, match="shapes links inside the cluster's private network namespace"):
        ssptk.run(mode="async", steps=5, network="100mbit", out=str(tmp_path / "r"), **MLP)


@pytest.mark.parametrize("options, match", [({"ps": 0}, "--ps must be from 1 to 16"),
                                            ({"ps": 2, "mode": "allreduce"}, "allreduce has no parameter server"),
                                            ({"network": "fast"}, "not a rate")])
def test_bad_shards_and_networks_are_refused_before_start(tmp_path: Path, options: dict, match: str) -> None:
    with pytest.raises(UsageError, match=match):
        ssptk.run(**{"mode": "async", "steps": 5, "out": str(tmp_path / "r"), **MLP, **options})
    assert not (tmp_path / "r").exists()


def test_a_link_too_slow_for_one_step_is_named_with_its_rate(tmp_path: Path) -> None:
    """A step of mlp:1024 (4.5 MB each way) takes ~18 s through a 4 Mbit/s PS link, more than --stall-timeout 5: the
    run stalled and blamed ps:0 as if it no longer answered ("no step logged for 5 s"); the link is named instead.
    Only the PS's link is shaped: with every link at 4mbit the worker's is as busy, and either may be named."""
    with pytest.raises(RunFailed) as failed:
        ssptk.run(mode="async", workers=1, steps=3, model="mlp:1024", gpus="none", network="ps=4mbit",
                  stall_timeout=5, out=str(tmp_path / "r"))
    f = failed.value.failure
    assert f.task == "ps:0" and f.reason.startswith("stalled on its link: ps:0's link (--network 4mbit) was "), \
        f.reason
    assert "than --stall-timeout 5 s allows: give --network a faster rate (or use a smaller model), or a " \
           "--stall-timeout longer than a step takes" in f.reason, f.reason
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["failed_task"] == "ps:0" and "ps:0's link (--network 4mbit)" in summary["reason"]
    assert_gone(str(tmp_path))
