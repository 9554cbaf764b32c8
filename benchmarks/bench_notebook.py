"""Benchmarks of the notebook layer: what the live dashboard costs a run.

Listed in ``run.py``'s ``BENCHMARKS``; the helpers (``Row``, targets, the context) are
:mod:`harness`'s.
"""
from __future__ import annotations

from typing import Any

from harness import Context, Row, at_least, best, fmt_value, median, rates, ratio


def bench_dashboard_overhead(ctx: Context) -> list[Row]:
    """steps/s with the live dashboard refreshing (every second, as ``%dtrain`` does) against the same
    run without it, alternating. Target >= 0.9. The dashboard renders every frame to PNG as in a
    notebook; only the hand-over to the notebook frontend (a message on the kernel's socket) is left out."""
    common = dict(model="linear", workers=3, steps=200 if ctx.quick else 1000, seed=0, mode="ssp", staleness=2,
                  jitter="exp:0.005")
    return _overhead(ctx, common, "dashboard_overhead")


def bench_dashboard_overhead_64(ctx: Context) -> list[Row]:
    """The same with 64 workers (the shared layout, as ``--layout auto`` picks): the dashboard then draws the
    spread of the workers and its extremes, not a line per worker. Target >= 0.9."""
    common = dict(model="linear", workers=64, steps=20 if ctx.quick else 60, seed=0, mode="ssp", staleness=2,
                  jitter="exp:0.005")
    return _overhead(ctx, common, "dashboard_overhead_64")


def _overhead(ctx: Context, common: dict[str, Any], n: str) -> list[Row]:
    from ssptk.notebook.dashboard import LiveDashboard

    on: list[dict[str, Any]] = []
    off: list[dict[str, Any]] = []
    cpu_share: list[float] = []
    frames: list[int] = []
    for r in range(ctx.repeat):
        print(f"  round {r + 1}/{ctx.repeat}", flush=True)
        order = ("dashboard", "none") if r % 2 == 0 else ("none", "dashboard")
        for label in order:
            if label == "none":
                off.append(ctx.run(label, **common))
                continue
            dash = LiveDashboard(sink=lambda png, progress, final: None)
            s = ctx.run(label, observer=dash, **common)
            on.append(s)
            if s.get("status") == "ok" and s.get("wall_s"):
                cpu_share.append(sum(dash.render_cpu) / float(s["wall_s"]))
                frames.append(dash.redraws)
    ctx.note(f"Options: {', '.join(f'{k}={v}' for k, v in common.items())}; dashboard refresh 1 s, alternating, "
             f"{ctx.repeat} round(s).")
    ctx.note("steps/s with the dashboard: " + ", ".join(fmt_value(v, ".1f") for v in rates(on)))
    ctx.note("steps/s without: " + ", ".join(fmt_value(v, ".1f") for v in rates(off)))
    ctx.note("frames drawn per run: " + ", ".join(str(f) for f in frames) + "; drawing CPU / training wall time: "
             + ", ".join(f"{100 * c:.1f}%" for c in cpu_share))
    return [
        Row(f"{n}: ratio of medians (on/off)", ratio(median(rates(on)), median(rates(off))), at_least(0.9)),
        Row(f"{n}: ratio of bests (on/off)", ratio(best(rates(on)), best(rates(off))), at_least(0.9)),
        Row(f"{n}: drawing CPU share of training time (median)", median(cpu_share), fmt=".3f"),
    ]
