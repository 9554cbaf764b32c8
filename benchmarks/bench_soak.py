"""Long runs on a loaded machine (issue 12, point 1): every mode trains 200,000+ minibatches while a CPU hog
keeps more runnable processes than cores, and must finish.

Before ssptk re-ran refused requests, such runs died more often than not: TensorFlow refuses a request id it
saw among a task's last 100,000, and its ids come from generators seeded with 32 random bits on every fresh
per-step thread, so a collision is expected once per ~100,000 requests to one task (docs/tf-notes.md). Each row
says whether the mode's run finished; the detail lines give what it met on the way (``duplicate_reruns``:
steps run again after TensorFlow refused their request as a duplicate; ``restarts``: workers started again
after a step hung inside TensorFlow, with ``--restart-failed``) and whether every minibatch was trained exactly
once.
"""
from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path
from typing import Any

from harness import Context, Row, at_least, opts_text

MINIBATCHES = 200_000
SOAK: dict[str, Any] = dict(model="linear", workers=2, batch=16, seed=0, gpus="none")
MODES: dict[str, dict[str, Any]] = {
    "sync": {"mode": "sync"}, "ssp:4": {"mode": "ssp", "staleness": 4}, "async": {"mode": "async"},
    "allreduce": {"mode": "allreduce"},
}


def _spin() -> None:
    while True:
        pass


class CpuHog:
    """``n`` processes that spin until the block ends (the load generator)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.procs: list[multiprocessing.Process] = []

    def __enter__(self) -> CpuHog:
        ctx = multiprocessing.get_context("spawn")
        self.procs = [ctx.Process(target=_spin, daemon=True) for _ in range(self.n)]
        for p in self.procs:
            p.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self.procs:
            p.kill()
            p.join()


def _counts(run_dir: str, summary: dict[str, Any]) -> dict[str, Any]:
    """Re-runs from the ``done`` events, and whether the minibatches trained are exactly the budget's."""
    reruns = hung = 0
    minibatches: list[int] = []
    for f in sorted(Path(run_dir, "workers").glob("worker-*.jsonl")):
        with open(f) as fh:
            for line in fh:
                r = json.loads(line)
                if "minibatch" in r and r.get("applied", True):
                    minibatches.append(int(r["minibatch"]))
                elif r.get("event") == "done":
                    reruns += int(r.get("duplicate_reruns", 0))
                elif r.get("event") == "restart":
                    hung += 1
    once = len(minibatches) == len(set(minibatches))
    return {"duplicate_reruns": reruns, "restarts": hung, "minibatches_logged": len(minibatches),
            "each_once": once, "line": f"re-runs {reruns}, restarts {hung}; {len(minibatches)} minibatches "
                                       f"logged, each once: {once}; load {os.getloadavg()[0]:.1f}"}


def bench_soak(ctx: Context) -> list[Row]:
    """Each mode's long run under a CPU hog: 1 if it finished with every minibatch of its budget trained once."""
    total = 4_000 if ctx.quick else MINIBATCHES
    hogs = os.cpu_count() or 2
    ctx.note(f"Options: {opts_text(SOAK)}, steps = {total:,} minibatches / 2 workers (sync: {total // 2:,} updates "
             f"of 2 minibatches); {hogs} spinning processes run alongside (load average above the {hogs} cores). "
             "Each mode runs once (the soak does not repeat).")
    rows = []
    with CpuHog(hogs):
        for label, mode in MODES.items():
            restart = {} if mode["mode"] == "allreduce" else {"restart_failed": 3}  # allreduce refuses it
            s = ctx.run(label, inspect=_counts, steps=total // SOAK["workers"], stall_timeout=120, **restart,
                        **SOAK, **mode)
            ok = s.get("status") == "ok" and bool(s.get("each_once")) and s.get("minibatches_logged") == total
            ctx.note(f"{label}: {s.get('status')}, {s.get('wall_s') or 0:.0f} s of training, "
                     f"{s.get('minibatches_logged', 0):,} minibatches logged (each once: {s.get('each_once')}), "
                     f"re-runs: {s.get('duplicate_reruns', 0)} steps run again, "
                     f"{s.get('restarts', 0)} workers restarted"
                     + ("" if s.get("status") == "ok" else f"; reason: {s.get('reason')}"))
            rows.append(Row(f"soak: {label} finished {total:,} minibatches under load (1 = yes)", float(ok),
                            at_least(1), fmt=".0f"))
    return rows
