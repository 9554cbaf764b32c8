"""Repeated PS pauses under load (issue 26, point 1): every minibatch applied exactly once, in every mode that
restarts workers (sync, ssp, async; the shared layout refuses ``--restart-failed``).

Each run (3 workers, ``--restart-failed``) is paused again and again: the PS task is stopped with SIGSTOP and
continued with SIGCONT, in two ways, alternating:

- ``hang``: the PS stays stopped past half the stall time-out, so the workers' steps hang, the workers end and
  are started again (not in sync: there worker 0 runs the aggregator and is not restarted, so the run would
  end, saying so);
- ``kill``: a worker other than 0 is SIGKILLed while the PS is stopped, and the PS is continued only once that
  worker's restart is up (or after a while): its dead self's step and its restart then meet on the PS.

A CPU hog keeps more runnable processes than cores. The check is the logs': step records plus the updates
restart events name as ``unlogged`` (applied by a dead worker before it could log them) must be the budget's
minibatches, each once, and the global steps 1..K, each once.
"""
from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil
from bench_soak import CpuHog
from harness import Context, Row, at_least, opts_text

PAUSE: dict[str, Any] = dict(model="linear", workers=3, batch=16, seed=0, gpus="none", restart_failed=12,
                             straggler=["0:0.005", "1:0.005", "2:0.005"])
# sync's steps wait for the killed worker's restart (a TensorFlow start, 20-30 s under the hog): a longer time-out,
# so that they do not hang meanwhile
MODES: dict[str, dict[str, Any]] = {"async": {"mode": "async", "stall_timeout": 20},
                                    "ssp:2": {"mode": "ssp", "staleness": 2, "stall_timeout": 20},
                                    "sync": {"mode": "sync", "stall_timeout": 90}}
HANG_S = 13.0  # over half the stall time-out of async and ssp (10 s): the steps hang
KILL_WAIT_S = 15.0  # the most a `kill` pause waits for the restarted worker to be up


def _tasks(run_dir: str, task: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        cmd = p.info["cmdline"] or []
        if "ssptk.worker" in " ".join(cmd) and run_dir in " ".join(cmd) and task in cmd \
                and p.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(p)
    return found


class Pauser:
    """A run observer that pauses the PS each time another ``every`` records are logged (in its own thread:
    the supervisor must go on restarting workers meanwhile)."""

    def __init__(self, every: int, kinds: list[str]) -> None:
        self.every, self.kinds = every, kinds
        self.run_dir = ""
        self.next_at = every
        self.done: list[str] = []
        self.busy = threading.Lock()
        self.threads: list[threading.Thread] = []

    def started(self, run_dir: str, opts: Any, total: int) -> None:
        self.run_dir = os.path.abspath(run_dir)

    def records(self, steps: list[dict[str, Any]], events: list[dict[str, Any]], done: int, total: int) -> None:
        if done >= self.next_at and done < total - self.every // 2 and not self.busy.locked():
            self.next_at = done + self.every
            kind = self.kinds[len(self.done) % len(self.kinds)]
            t = threading.Thread(target=self._pause, args=(kind,), daemon=True)
            self.threads.append(t)
            t.start()

    def finished(self, result: Any) -> None:
        for t in self.threads:
            t.join(60)

    def _pause(self, kind: str) -> None:
        with self.busy:
            ps = _tasks(self.run_dir, "ps:0")
            for p in ps:
                os.kill(p.pid, signal.SIGSTOP)
            try:
                if kind == "hang":
                    time.sleep(HANG_S)
                else:
                    self._kill_one_worker()
            finally:
                for p in ps:
                    os.kill(p.pid, signal.SIGCONT)
            self.done.append(kind)

    def _kill_one_worker(self) -> None:
        name = f"worker:{1 + len(self.done) % 2}"
        log = Path(self.run_dir, "logs", f"{name.replace(':', '-')}.log")
        up = log.read_text().count("SSPTK_READY") if log.exists() else 0
        for p in _tasks(self.run_dir, name):
            os.kill(p.pid, signal.SIGKILL)
        deadline = time.monotonic() + KILL_WAIT_S
        while time.monotonic() < deadline and (log.read_text().count("SSPTK_READY") if log.exists() else 0) <= up:
            time.sleep(0.1)
        time.sleep(1.0)  # its first runs reach the stopped PS


def exactly_once(run_dir: str, summary: dict[str, Any]) -> dict[str, Any]:
    """Whether the logs' applied minibatches (records and restart events' ``unlogged``) are the budget's, each once,
    and the global steps 1..K each once."""
    minibatches, steps, restarts, unlogged = [], [], 0, 0
    for f in sorted(Path(run_dir, "workers").glob("worker-*.jsonl")):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            if "step" in r and r.get("applied", True):
                minibatches.append(int(r["minibatch"]))
                steps.append(int(r["global_step"]))
            elif r.get("event") == "restart":
                restarts += 1
                if r.get("unlogged"):
                    unlogged += 1
                    minibatches.append(int(r["unlogged"]["minibatch"]))
                    steps.append(int(r["unlogged"]["global_step"]))
    config = json.loads(Path(run_dir, "config.json").read_text())["options"]
    n, k = int(config["workers"]), int(config["steps"])
    budget, updates = n * k, (k if config["mode"] == "sync" else n * k)
    twice = sorted(m for m, c in Counter(minibatches).items() if c > 1)
    missing = sorted(set(range(budget)) - set(minibatches))
    steps_ok = sorted(set(steps)) == list(range(1, updates + 1)) and (config["mode"] == "sync"
                                                                     or len(steps) == len(set(steps)))
    once = not twice and not missing and steps_ok
    # steps a restarted worker ran again because the PS could not connect back to it yet (ssptk.runtime.rejoin)
    unreached = sum(f.read_text(errors="replace").count("the PS could not reach this worker")
                    for f in Path(run_dir, "logs").glob("worker-*.log"))
    return {"each_once": once, "restarts": restarts, "unlogged": unlogged, "unreached": unreached,
            "line": f"restarts {restarts} (unlogged updates named: {unlogged}; steps run again, the PS not yet "
                    f"reaching a restarted worker: {unreached}); twice: {twice[:5]}, missing: {missing[:5]}, global "
                    f"steps 1..{updates} each once: {steps_ok}; load {os.getloadavg()[0]:.1f}"}


def bench_ps_pause(ctx: Context) -> list[Row]:
    """Each mode's run under repeated PS pauses: 1 if it ended ok with every minibatch applied exactly once."""
    steps = 400 if ctx.quick else 1000
    every = 500 if ctx.quick else 600
    hogs = os.cpu_count() or 2
    ctx.note(f"Options: {opts_text(PAUSE)} --steps {steps} (--stall-timeout 20, sync 90); a pause every {every} "
             f"records, alternating `hang` (PS stopped {HANG_S:g} s) and `kill` (a worker SIGKILLed while the PS is "
             f"stopped, the PS continued once the restart is up, at most {KILL_WAIT_S:g} s); sync only `kill`. "
             f"{hogs} spinning processes run alongside.")
    rows = []
    with CpuHog(hogs):
        for label, mode in MODES.items():
            pauser = Pauser(every, ["kill"] if mode["mode"] == "sync" else ["hang", "kill"])
            s = ctx.run(label, observer=pauser, inspect=exactly_once, steps=steps, **PAUSE, **mode)
            ok = s.get("status") == "ok" and bool(s.get("each_once")) and bool(pauser.done)
            ctx.note(f"{label}: {s.get('status')}, pauses {', '.join(pauser.done) or 'none'}; restarts "
                     f"{s.get('restarts', 0)}, unlogged updates named {s.get('unlogged', 0)}, steps run again for "
                     f"a PS not yet reaching a restarted worker {s.get('unreached', 0)}; every minibatch once: "
                     f"{s.get('each_once')}" + ("" if s.get("status") == "ok" else f"; reason: {s.get('reason')}"))
            rows.append(Row(f"ps pauses: {label} applied every minibatch exactly once (1 = yes)", float(ok),
                            at_least(1), fmt=".0f"))
    return rows
