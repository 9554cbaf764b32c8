"""A cluster's stragglers brought home (issue 23, point 4): a source run whose workers are slower than this
machine's own steps (as a cluster's are, with its communication; here by stragglers of 20, 30 and 50 ms and
jitter), then a run that replays its step times with ``--jitter trace:PATH``. Target: each worker's step-time
quantiles (25th, 50th, 90th) within 10% of the source's. (A replay cannot make a step quicker than this
machine's own: source steps near that floor come back as ``max(own, source)``, which is why the source here is
slower than it.) The source is kept as a CSV of
``worker,seconds`` (the trace format a cluster's logs can be turned into), so the CSV path is exercised too.

Listed in ``run.py``'s ``BENCHMARKS``; the helpers are :mod:`harness`'s.
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np
from harness import Context, Row, Target

WORKERS, STEPS = 3, 400
QUANTILES = (0.25, 0.5, 0.9)
SOURCE = {"mode": "async", "workers": WORKERS, "steps": STEPS, "straggler": ["0:0.02", "1:0.03", "2:0.05"],
          "jitter": "exp:0.01"}


def _within(rel: float) -> Target:
    return Target(f"within {rel:.0%}", lambda v: abs(v - 1.0) <= rel)


def _quantiles(run_dir: str) -> dict[int, list[float]]:
    from ssptk.rundir.trace import step_times

    return {w: [float(np.quantile(t, q)) for q in QUANTILES] for w, t in step_times(run_dir).items() if t}


def bench_trace(ctx: Context) -> list[Row]:
    from ssptk.rundir.trace import step_times

    csv = os.path.join(ctx.tmp, "source-trace.csv")

    def keep(run_dir: str, _summary: dict[str, Any]) -> dict[str, Any]:
        with open(csv, "w") as f:
            f.write("worker,seconds\n")
            for w, times in step_times(run_dir).items():
                f.writelines(f"{w},{s:.6f}\n" for s in times)
        return {"quantiles": _quantiles(run_dir)}

    steps = STEPS // 2 if ctx.quick else STEPS
    src = ctx.run("source", inspect=keep, **{**SOURCE, "steps": steps})
    rep = ctx.run("replay", inspect=lambda d, _s: {"quantiles": _quantiles(d)}, mode="async", workers=WORKERS,
                  steps=steps, jitter=f"trace:{csv}")
    rows: list[Row] = []
    for w in range(WORKERS):
        a, b = src.get("quantiles", {}).get(w), rep.get("quantiles", {}).get(w)
        for q, i in zip(QUANTILES, range(len(QUANTILES))):
            value = b[i] / a[i] if a and b and a[i] > 0 else None
            rows.append(Row(f"trace: worker {w} p{int(q * 100)} step time, replay / source", value, _within(0.10),
                            note="" if value is None else f"{a[i] * 1e3:.1f} -> {b[i] * 1e3:.1f} ms"))
    ctx.note(f"source: {SOURCE} ({steps} steps a worker); replay: async with --jitter trace:<the source as CSV>")
    return rows
