"""Many short runs on one shared listening fork server (issue 36, point 8): none may hang or fail.

A CI run once had workers log ``ev_epoll1_linux.cc:309] epoll_ctl failed: Invalid argument (22)`` and stall, in
runs forked from one shared server (``SSPTK_FORK_SERVER=PATH``, as the test suite runs its CLI commands); commit
00bfec2 made forked tasks close the server's sockets through their objects, a guess at the cause, and 94 runs on
one server did not reproduce it. This soak keeps looking: one server started as the README says (``python -m
ssptk.worker --fork-server --listen PATH``, in a plain environment), then ``RUNS`` CLI runs one after another, each
a process of its own forking its tasks from that server, the modes in turn. Each run must finish within
:data:`RUN_TIMEOUT_S`, have been forked by the server (its reaped CPU time grows), and no task may log
``epoll_ctl failed``. For the first run that hangs, the detail lines list each of its live tasks' descriptors (what
a forked task still holds of the server's would show there).
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import HERE, Context, Row, at_most

RUNS = 100
#: a run's own time is 2-6 s here; what takes this long hangs
RUN_TIMEOUT_S = 180
MODES = [["--mode", "sync"], ["--mode", "ssp", "--staleness", "2"], ["--mode", "async"], ["--mode", "allreduce"]]
COMMON = ["--workers", "2", "--steps", "200", "--model", "linear", "--gpus", "none", "--stall-timeout", "60"]
#: what a launcher adds to its tasks' environment and a plain shell lacks (the server must suit it without them)
_LAUNCHER_ADDS = ("TF_CPP_MIN_LOG_LEVEL", "CUDA_VISIBLE_DEVICES", "PYTHONUNBUFFERED", "SSPTK_FORK_SERVER")


def _plain_env(**extra: str) -> dict[str, str]:
    root = os.path.dirname(HERE)
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCHER_ADDS}
    return {**env, "PYTHONPATH": os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p), **extra}


def _reaped_cpu(pid: int) -> float:
    """CPU seconds of the children process ``pid`` has reaped (``/proc/<pid>/stat``: cutime + cstime)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


def _tasks_of(run_dir: str) -> list[int]:
    """Live ``ssptk.worker`` processes of the run at ``run_dir``."""
    found = []
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace")
        except OSError:
            continue
        if name.isdigit() and "ssptk.worker" in argv and run_dir in argv:
            found.append(int(name))
    return found


def _descriptors(pid: int) -> str:
    """Task ``pid``'s descriptors: ``N -> target`` each."""
    try:
        fds = sorted(os.listdir(f"/proc/{pid}/fd"), key=int)
    except OSError as e:
        return f"pid {pid}: {e.strerror}"
    shown = []
    for fd in fds:
        try:
            shown.append(f"{fd}->{os.readlink(f'/proc/{pid}/fd/{fd}')}")
        except OSError:
            pass
    return f"pid {pid}: " + ", ".join(shown)


def _epoll_lines(run_dir: str) -> int:
    logs = Path(run_dir, "logs")
    return sum(p.read_text(errors="replace").count("epoll_ctl failed") for p in logs.glob("*.log")) \
        if logs.is_dir() else 0


def _one_run(i: int, path: str, tmp: str, ctx: Context, server: int) -> tuple[str, float, bool, int]:
    """Run ``i``: (outcome: ok / failed / hung, seconds, forked by the server, epoll_ctl lines)."""
    run_dir = os.path.join(tmp, f"run-{i:03d}")
    before = _reaped_cpu(server)
    t0 = time.monotonic()
    cli = subprocess.Popen([sys.executable, "-m", "ssptk.cli", "run", *MODES[i % len(MODES)], *COMMON, "--seed",
                            str(i), "--out", run_dir], env=_plain_env(SSPTK_FORK_SERVER=path), cwd=tmp,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _, err = cli.communicate(timeout=RUN_TIMEOUT_S)
        outcome = "ok" if cli.returncode == 0 else "failed"
        if outcome == "failed":
            ctx.note(f"run {i} ({' '.join(MODES[i % len(MODES)])}) failed: {err.strip().splitlines()[-1:]}")
    except subprocess.TimeoutExpired:
        outcome = "hung"
        if not any("descriptors" in d for d in ctx.detail):
            ctx.note(f"run {i} hung; its tasks' descriptors: " + "; ".join(map(_descriptors, _tasks_of(run_dir))))
        cli.kill()  # its tasks end with its connection to the server
        cli.communicate()
    seconds = time.monotonic() - t0
    deadline = time.monotonic() + 10  # the server reaps the last task a moment after the launcher is done
    while _reaped_cpu(server) <= before and time.monotonic() < deadline:
        time.sleep(0.05)
    return outcome, seconds, _reaped_cpu(server) > before, _epoll_lines(run_dir)


def bench_fork_server_soak(ctx: Context) -> list[Row]:
    """``RUNS`` CLI runs on one shared fork server: how many hung or failed (0), were not forked by it (0), logged
    ``epoll_ctl failed`` (0)."""
    runs = 8 if ctx.quick else RUNS
    ctx.note(f"One listening fork server in a plain environment; {runs} CLI runs one after another with "
             f"SSPTK_FORK_SERVER=PATH, the modes in turn ({', '.join(' '.join(m[1:]) for m in MODES)}), each "
             f"{' '.join(COMMON)}; a run hangs if it takes over {RUN_TIMEOUT_S} s. Runs once (no repeats).")
    tmp = tempfile.mkdtemp(prefix="ssptk-fs-soak-", dir=ctx.tmp)
    path = os.path.join(tmp, "fork-server")
    with open(os.path.join(tmp, "server.log"), "wb") as log:
        server = subprocess.Popen([sys.executable, "-m", "ssptk.worker", "--fork-server", "--listen", path],
                                  env=_plain_env(SSPTK_FORK_SERVER_IDLE_S="600"), cwd="/", stdout=log,
                                  stderr=subprocess.STDOUT, start_new_session=True)
    outcomes: list[str] = []
    seconds: list[float] = []
    forked = epoll = 0
    try:
        deadline = time.monotonic() + 120
        while not os.path.exists(path + ".server") and server.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        for i in range(runs):
            outcome, took, by_server, lines = _one_run(i, path, tmp, ctx, server.pid)
            outcomes.append(outcome)
            seconds.append(took)
            forked += by_server
            epoll += lines
            print(f"    run {i + 1}/{runs}: {outcome} in {took:.1f} s{'' if by_server else ' (NOT forked by it)'}"
                  f"{f', {lines} epoll_ctl lines' if lines else ''}", flush=True)
            if server.poll() is not None:
                ctx.note(f"the server ended after run {i} (exit code {server.returncode})")
                break
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(10)
    bad = sum(o != "ok" for o in outcomes) + (runs - len(outcomes))
    ctx.note(f"outcomes: {outcomes.count('ok')} ok, {outcomes.count('failed')} failed, {outcomes.count('hung')} "
             f"hung, of {runs}; forked by the shared server: {forked}; a run's wall time median "
             f"{statistics.median(seconds) if seconds else 0:.1f} s, longest {max(seconds, default=0):.1f} s; "
             f"load average at the end {os.getloadavg()[0]:.1f}")
    return [Row(f"fork_server_soak: runs of {runs} on one shared fork server that hung or failed", float(bad),
                at_most(0), fmt=".0f"),
            Row(f"fork_server_soak: runs of {runs} not forked by the shared server", float(runs - forked),
                at_most(0), fmt=".0f"),
            Row("fork_server_soak: task log lines 'epoll_ctl failed'", float(epoll), at_most(0), fmt=".0f"),
            Row("fork_server_soak: median seconds per CLI run", statistics.median(seconds) if seconds else None,
                fmt=".1f")]
