"""Local clusters run in a private network namespace: nobody outside it can reach their ports.

The reachability checks probe every task's port from this (the launcher's) namespace, on 127.0.0.1
and on a non-loopback address of the host, while the tasks are alive; a probe from inside the
namespace shows the ports are really listening, and ``SSPTK_NO_NETNS=1`` shows the probe can fail.
"""
from __future__ import annotations

import ipaddress
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from conftest import assert_gone, cluster_processes, skip_or_fail, ssptk_cmd, traffic_here, warm_processes

import ssptk
from ssptk.core.resources import machine_cores
from ssptk.launch import netns, tracking, warm
from ssptk.launch.cluster import LocalCluster

COMMON = dict(model="linear", mode="async", workers=2)
REFUSED = "unshare: unshare failed: Operation not permitted"


def host_address() -> str | None:
    """A non-loopback IPv4 address of this host, if it has one."""
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family == socket.AF_INET and not ipaddress.ip_address(a.address).is_loopback:
                return a.address
    return None


def reachable(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=1).close()
        return True
    except OSError:  # refused or timed out
        return False


def ports(spec: dict[str, list[str]]) -> list[int]:
    return [int(addr.rsplit(":", 1)[1]) for job in spec.values() for addr in job]


def reachable_inside(ns: netns.Namespace, port: int) -> bool:
    """Connect to 127.0.0.1:port from a process started in the namespace the way tasks are."""
    code = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2).close()"
    return subprocess.run(ns.wrap([sys.executable, "-I", "-S", "-c", code]), pass_fds=ns.fds,
                          capture_output=True, timeout=30).returncode == 0


@pytest.fixture
def fresh_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """This test's own per-process cache of whether namespaces work (and of the warning)."""
    monkeypatch.setattr(netns, "_state", netns._State())
    monkeypatch.delenv(netns.NETNS_OFF_ENV, raising=False)


@pytest.fixture
def refusing_unshare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_state: None) -> None:
    """``unshare`` as it behaves where user namespaces are disabled."""
    fake = tmp_path / "unshare"
    fake.write_text(f"#!/bin/sh\necho '{REFUSED}' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(netns, "UNSHARE", str(fake))


def _needs_netns() -> None:
    ns, why = netns.isolate()
    if ns is None:
        skip_or_fail(f"this machine does not allow unprivileged network namespaces: {why}")
    ns.close()


# --- fast: the namespace itself, no TensorFlow -------------------------------------------------------

def test_helper_ready_line_matches() -> None:
    src = Path(netns.HELPER).read_text()
    assert f'NETNS_READY = "{netns.NETNS_READY}"' in src


def test_namespace_has_its_own_working_loopback(fresh_state: None) -> None:
    _needs_netns()
    ns, why = netns.isolate()
    assert why == "netns" and ns is not None
    try:
        code = ("import os, socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen();"
                "socket.create_connection(s.getsockname(), timeout=2); print(os.stat('/proc/self/ns/net').st_ino)")
        p = subprocess.run(ns.wrap([sys.executable, "-I", "-S", "-c", code]), pass_fds=ns.fds,
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, p.stderr
        assert int(p.stdout) == os.fstat(ns.net_fd).st_ino != os.stat("/proc/self/ns/net").st_ino
    finally:
        ns.close()
    assert ns.fds == (-1, -1) and ns.helper is None  # closed, helper reaped
    ns.close()  # idempotent


def test_opt_out_and_non_loopback_hosts_start_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                      fresh_state: None, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv(netns.NETNS_OFF_ENV, "1")
    with caplog.at_level(logging.WARNING, logger="ssptk"):
        assert netns.isolate() == (None, "none (SSPTK_NO_NETNS=1)")
        assert netns.isolate() == (None, "none (SSPTK_NO_NETNS=1)")
    said = [r.getMessage() for r in caplog.records if r.name == "ssptk"]
    assert len(said) == 1, "the opt-out is said once per process"
    assert said[0].startswith("ssptk: SSPTK_NO_NETNS=1: local clusters run without network isolation, as asked")
    c = LocalCluster(1, str(tmp_path), {}, with_ps=False)
    assert c.namespace is None and c.isolation == "none (SSPTK_NO_NETNS=1)"
    monkeypatch.delenv(netns.NETNS_OFF_ENV)
    c = LocalCluster(1, str(tmp_path), {}, with_ps=False, host="0.0.0.0")
    assert c.namespace is None and c.isolation == "none (host 0.0.0.0 is not a loopback address)"


def test_refusal_warns_once_per_process_and_is_remembered(refusing_unshare: None, tmp_path: Path,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="ssptk"):
        first = LocalCluster(1, str(tmp_path), {}, with_ps=False)
        second = LocalCluster(2, str(tmp_path), {}, with_ps=True)
    expected = f"none (unshare not permitted: {REFUSED.removeprefix('unshare: ')})"
    assert first.isolation == second.isolation == expected
    assert first.namespace is None and second.namespace is None
    warnings = [r for r in caplog.records if r.name == "ssptk"]
    assert len(warnings) == 1 and "\n" not in warnings[0].getMessage()
    assert "without network isolation" in warnings[0].getMessage() and netns.NETNS_OFF_ENV in warnings[0].getMessage()


def test_missing_nsenter_falls_back(monkeypatch: pytest.MonkeyPatch, fresh_state: None,
                                    caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(netns, "NSENTER", "ssptk-no-such-nsenter")
    with caplog.at_level(logging.WARNING, logger="ssptk"):
        assert netns.isolate() == (None, "none (ssptk-no-such-nsenter not found (util-linux))")


# --- slow: real clusters ----------------------------------------------------------------------------

@pytest.mark.slow
def test_warm_cluster_ports_reachable_only_inside_its_namespace(tmp_path: Path, warm_pool: None,
                                                                 fresh_state: None) -> None:
    _needs_netns()
    addr = host_address()
    r = ssptk.run(out=str(tmp_path / "a"), warm=True, steps=20, **COMMON)
    assert r.ok and r.config["tasks"]["isolation"] == "netns"
    (cluster,) = warm.idle_clusters()
    assert cluster.alive() and cluster.isolation == "netns" and cluster.namespace is not None
    assert len(warm_processes()) == 3  # nsenter exec'd in place: the tasks are this process's children
    for port in ports(cluster.spec):
        assert reachable_inside(cluster.namespace, port), f"task port {port} is not listening in the namespace"
        assert not reachable("127.0.0.1", port), f"port {port} reachable on this host's loopback"
        if addr is not None:
            assert not reachable(addr, port), f"port {port} reachable on {addr}"
    for t in cluster.tasks:  # /proc still reads the tasks' CPU time
        assert cluster.cpu_seconds(t.name) is not None and cluster.cpu_seconds(t.name) > 0
    again = ssptk.run(out=str(tmp_path / "b"), warm=True, steps=20, **COMMON)
    assert again.ok and again.config["tasks"] == {"warm": True, "reused": True, "runs_served": 2,
                                                   "layout": "processes", "isolation": "netns",
                                                   "cores": machine_cores(), "traffic": traffic_here(),
                                                   "tracking": tracking.method()}
    assert ssptk.shutdown() == 1
    assert cluster.namespace is None  # closed with the cluster
    if addr is None:
        pytest.skip("checked 127.0.0.1 only: this host has no non-loopback IPv4 address")


@pytest.mark.slow
def test_cold_run_is_isolated_while_it_trains_and_its_files_are_ours(tmp_path: Path, fresh_state: None) -> None:
    _needs_netns()
    addr = host_address()
    out = tmp_path / "run"
    probes: dict[int, list[bool]] = {}

    def probe() -> None:
        log = out / "workers" / "worker-0.jsonl"
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not (log.exists() and log.read_text().count('"step"') >= 5):
            time.sleep(0.05)
        spec = json.loads((out / "config.json").read_text())["cluster"]
        for port in ports(spec):
            probes[port] = [reachable(h, port) for h in ("127.0.0.1", addr) if h]
        probes[0] = [len(cluster_processes(str(out))) == 3]  # all tasks still alive after the probes

    t = threading.Thread(target=probe)
    t.start()
    r = ssptk.run(out=str(out), steps=300, straggler=["0:0.01", "1:0.01"], **COMMON)
    t.join()
    assert r.ok and r.config["tasks"] == {"warm": False, "layout": "processes", "isolation": "netns",
                                          "cores": machine_cores(), "traffic": traffic_here(),
                                          "tracking": tracking.method()}
    assert probes.pop(0) == [True], "the tasks ended before the ports were probed"
    assert len(probes) == 3 and not any(any(v) for v in probes.values()), probes
    uid, gid = os.getuid(), os.getgid()
    written = [out / "workers" / "worker-0.jsonl", out / "model" / "final.json", out / "logs" / "ps-0.log"]
    assert all((p.stat().st_uid, p.stat().st_gid) == (uid, gid) for p in written)
    assert_gone(str(tmp_path))


@pytest.mark.slow
def test_opting_out_makes_the_ports_reachable(tmp_path: Path, warm_pool: None, fresh_state: None,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The same probe finds the ports open without the namespace (so the checks above can fail)."""
    monkeypatch.setenv(netns.NETNS_OFF_ENV, "1")
    addr = host_address()
    r = ssptk.run(out=str(tmp_path / "a"), warm=True, steps=20, **COMMON)
    assert r.ok and r.config["tasks"]["isolation"] == "none (SSPTK_NO_NETNS=1)"
    (cluster,) = warm.idle_clusters()
    for port in ports(cluster.spec):
        assert reachable("127.0.0.1", port)
        if addr is not None:
            assert reachable(addr, port)


@pytest.mark.slow
def test_refused_namespace_falls_back_and_the_run_works(tmp_path: Path, refusing_unshare: None,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="ssptk"):
        r = ssptk.run(out=str(tmp_path / "run"), steps=30, **COMMON)
    assert r.ok and len(r.df) == 60
    assert r.config["tasks"]["isolation"] == "none (unshare not permitted: unshare failed: Operation not permitted)"
    assert len([rec for rec in caplog.records if rec.name == "ssptk"]) == 1
    assert_gone(str(tmp_path))


@pytest.mark.slow
def test_cli_where_the_kernel_refuses_user_namespaces(tmp_path: Path) -> None:
    """A real refusal, not a fake: the CLI in a user namespace whose own limit on user namespaces is 0
    (a per-namespace sysctl, so the host is untouched). The run works, unisolated, with one warning."""
    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "--user", "--map-root-user", "true"]).returncode != 0:
        skip_or_fail("needs unprivileged user namespaces to build the refusing one")
    out = tmp_path / "cmp"
    cmd = " ".join(f"'{a}'" for a in [*ssptk_cmd(), "compare", "sync", "async", "--workers", "2", "--steps", "10",
                                      "--out", str(out)])
    env = {k: v for k, v in os.environ.items() if k != netns.NETNS_OFF_ENV}
    p = subprocess.run([unshare, "--user", "--map-root-user", "sh", "-c",
                        f"echo 0 > /proc/sys/user/max_user_namespaces && exec {cmd}"],
                       capture_output=True, text=True, timeout=400, env=env)
    assert p.returncode == 0, p.stderr
    warned = [ln for ln in p.stderr.splitlines() if "without network isolation" in ln]
    assert len(warned) == 1, p.stderr  # two runs in one process, one warning
    for label in ("sync", "async"):
        iso = json.loads((out / label / "config.json").read_text())["tasks"]["isolation"]
        assert iso.startswith("none (unshare not permitted: ") and "No space left on device" in iso
    assert_gone(str(tmp_path))


def test_a_failure_after_the_namespace_was_made_leaks_no_descriptor(tmp_path: Path, fresh_state: None,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: writing config.json failed after LocalCluster had opened the namespace's two descriptors,
    outside the ``with`` that closes them."""
    from ssptk.rundir import RunDir

    def full_disk(self: RunDir, *args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(RunDir, "write_config", full_disk)
    for attempt in range(2):  # the first makes the process's one nsenter check; count from the second
        before = set(os.listdir("/proc/self/fd"))
        with pytest.raises(OSError, match="No space left on device"):
            ssptk.run(mode="async", workers=2, steps=5, out=str(tmp_path / f"r{attempt}"))
        leaked = set(os.listdir("/proc/self/fd")) - before
        assert not leaked, [os.readlink(f"/proc/self/fd/{fd}") for fd in leaked if os.path.exists(f"/proc/self/fd/{fd}")]
    assert not cluster_processes(str(tmp_path))
