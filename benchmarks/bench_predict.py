"""Predicted runs (issue 15): how fast the simulator's replay is at scale, and how close its predictions come to
real runs with the same options and seed.

``predict_speed``: a predicted run (``ssptk sim --model digits``, ``predict_run``) from the call to its result
(process start and the TensorFlow import included), 8 to 256 workers x 300 steps, and a staleness sweep 0..16 at 32
workers in one predicting process. Targets: 64 workers in under 30 s, 256 workers run, the sweep in under 5 minutes.

``predicted_vs_real``: ``ssptk.compare(..., predict=True)`` on three scenarios, each real run beside its
prediction, held to the real runs' target: IID digits at 4 workers (processes layout) and at 8 (both
layouts), and the tradeoff scenario of ``bench_tradeoff.py`` (8 workers, non-IID data, transient
stragglers, held-out target). Targets: minibatches to target within 20%, the same runs diverging, the same
best setting.

``predicted_vs_real_semi_sync``: the same check for the semi-synchronous family (issue 24): local SGD (``local:1``,
``local:4``) and delay-compensated async (``async+dc``) beside sync and async, IID digits at 4 workers.
"""
from __future__ import annotations

import os
import time
from typing import Any

import pandas as pd
from harness import Context, Row, at_least, at_most, opts_text

WORKERS = (8, 16, 32, 64, 128, 256)
SPEED: dict[str, Any] = dict(model="digits", steps=300, jitter="exp:0.01", seed=0)
SWEEP = list(range(17))

IID: dict[str, Any] = dict(model="digits", steps=200, lr=0.1, jitter="exp:0.01", seed=0, gpus="none")
SCENARIOS: dict[str, tuple[list[str], dict[str, Any]]] = {
    "iid-4": (["sync", "ssp:1", "ssp:4", "async"], dict(IID, workers=4, layout="processes")),
    "iid-8-processes": (["sync", "ssp:1", "ssp:4", "async"], dict(IID, workers=8, layout="processes")),
    "iid-8-shared": (["sync", "ssp:1", "ssp:4", "async"], dict(IID, workers=8, layout="shared")),
    "tradeoff-8": (["sync", "ssp:8", "ssp:32", "async"],
                   dict(model="digits", workers=8, steps=300, lr=0.1, jitter="pause:0.01:2", data_split="label",
                        eval_every=10, seed=0, gpus="none")),
}
SEMI_SYNC: dict[str, tuple[list[str], dict[str, Any]]] = {
    "semi-sync-4": (["sync", "local:1", "local:4", "async", "async+dc"], dict(IID, workers=4, layout="processes")),
}


def bench_predict_speed(ctx: Context) -> list[Row]:
    """Seconds per predicted run as the cluster grows, and a 17-point staleness sweep in one process."""
    from ssptk.experiment.predicted_runs import plan, predict, predict_run

    steps = 60 if ctx.quick else SPEED["steps"]
    seconds: dict[str, float] = {}
    for n in WORKERS if not ctx.quick else (8, 64):
        for label in (["async", "ssp:4", "sync"] if n == 64 else ["async"]):
            t0 = time.perf_counter()
            r = predict_run(label, workers=n, out=os.path.join(ctx.tmp, f"speed-{n}-{label.replace(':', '-')}"),
                             raise_on_failure=False, **dict(SPEED, steps=steps))
            seconds[f"{n} {label}"] = dt = time.perf_counter() - t0
            print(f"    {n:>4} workers {label:<6} {dt:6.1f} s  {r.summary.get('total_steps')} minibatches, "
                  f"held-out loss {r.summary.get('final_loss')}", flush=True)
    t0 = time.perf_counter()
    plans = [plan(None, run_dir=os.path.join(ctx.tmp, f"sweep-{s}"), mode="ssp", staleness=s, workers=32,
                  stall_timeout=0, **dict(SPEED, steps=steps)) for s in SWEEP]
    swept = predict(plans, raise_on_failure=False)
    sweep_s = time.perf_counter() - t0
    ctx.note(f"Options: --model digits --steps {steps} --jitter exp:0.01 --seed 0 (per-step overhead 5 ms, the "
             "default); seconds from the ssptk.simulate() call to its result, the predicting process's start and "
             "TensorFlow import included.")
    ctx.note("")
    ctx.note("| workers | mode | minibatches | seconds | minibatches / s |")
    ctx.note("|---:|---|---:|---:|---:|")
    for key, dt in seconds.items():
        n, label = key.split()
        mb = int(n) * steps
        ctx.note(f"| {n} | {label} | {mb} | {dt:.1f} | {mb / dt:.0f} |")
    ctx.note("")
    best = min(swept, key=lambda r: r.summary.get("final_loss") or float("inf"))
    ctx.note(f"Sweep: ssp:0..16 at 32 workers ({len(SWEEP)} predicted runs, one process): {sweep_s:.0f} s; lowest "
             f"held-out loss at the end: {best.options.label} ({best.summary.get('final_loss'):.3f}).")
    n = "predict_speed"
    return [
        Row(f"{n}: 64 workers x {steps} steps, async (s)", seconds.get("64 async"), at_most(30), fmt=".1f"),
        Row(f"{n}: 64 workers, ssp:4 (s)", seconds.get("64 ssp:4"), fmt=".1f"),
        Row(f"{n}: 64 workers, sync (s)", seconds.get("64 sync"), fmt=".1f"),
        Row(f"{n}: 256 workers x {steps} steps, async (s)", seconds.get("256 async"), fmt=".1f"),
        Row(f"{n}: staleness sweep 0..16 at 32 workers (s)", sweep_s, at_most(300), fmt=".0f"),
    ]


def bench_predicted_vs_real(ctx: Context) -> list[Row]:
    """Real runs beside their predictions (``compare --predict``), per scenario."""
    return _predicted_vs_real(ctx, SCENARIOS, "predicted_vs_real")


def bench_predicted_vs_real_semi_sync(ctx: Context) -> list[Row]:
    """Local SGD and delay-compensated async, real beside predicted (``compare --predict``)."""
    rows = _predicted_vs_real(ctx, SEMI_SYNC, "predicted_vs_real_semi_sync")
    ctx.note("")
    ctx.note(SEMI_SYNC_NOTE)
    return rows


SEMI_SYNC_NOTE = ("Seconds: a prediction's clock is its run's calibrated per-step overhead; for local:H the gaps "
                  "between a worker's records are averaged within each round first, so the round's push, wait and "
                  "pull count, spread over its H steps (a local step alone has no PS traffic).")


def _predicted_vs_real(ctx: Context, scenarios: dict[str, tuple[list[str], dict[str, Any]]], bench: str
                       ) -> list[Row]:
    from ssptk import api

    rows: list[Row] = []
    ctx.note("Each scenario is one `ssptk.compare(labels, predict=True, ...)`: the real runs, then each label "
             "predicted with the same options and seed (the same delays and minibatches), its clock from that "
             "run's calibrated per-step overhead; both held to the real runs' target. Loss gap: the median, over the "
             "minibatches both processed, of |predicted - measured| / measured smoothed training loss (the whole "
             "curve, where minibatches to target is one crossing).")
    for name, (labels, options) in scenarios.items():
        opts = dict(options, steps=60 if ctx.quick else options["steps"])
        print(f"  {name}", flush=True)
        cmp = api.compare(labels, out=os.path.join(ctx.tmp, f"pvr-{name}"), predict=True, **opts)
        table = cmp.report.predicted
        ctx.note("")
        ctx.note(f"**{name}**: `{opts_text(opts)}`; target "
                 f"{table.attrs.get('target_on')} loss {_num(table.attrs.get('target'), '.4f')}.")
        ctx.note("")
        ctx.note("| label | minibatches to target, measured | predicted | predicted / measured | loss gap | seconds "
                 "to target, measured | predicted | diverged (measured / predicted) | final loss (measured / "
                 "predicted) |")
        ctx.note("|---|---:|---:|---:|---:|---:|---:|---|---|")
        for r in table.to_dict("records"):
            ctx.note(f"| {r['label']} | {_num(r['steps_to_target'], '.0f')} | "
                     f"{_num(r['steps_to_target_predicted'], '.0f')} | {_num(r['predicted_over_measured'], '.2f')} | "
                     f"{_num(None if r['loss_gap'] is None else 100 * r['loss_gap'], '.0f')}% | "
                     f"{_num(r['time_to_target_s'], '.1f')} | {_num(r['time_to_target_s_predicted'], '.1f')} | "
                     f"{_yes(r['diverged'])} / {_yes(r['diverged_predicted'])} | "
                     f"{_num(r['final_loss'], '.3f')} / {_num(r['final_loss_predicted'], '.3f')} |")
        ratios = pd.to_numeric(table["predicted_over_measured"], errors="coerce").dropna()
        within = int(((ratios - 1).abs() <= 0.2).sum())
        same_div = int(sum(bool(a) == bool(b) for a, b in zip(table["diverged"], table["diverged_predicted"])))
        best, best_p = table.attrs.get("best"), table.attrs.get("best_predicted")
        ctx.note("")
        ctx.note(f"First to the target: measured {best}, predicted {best_p}.")
        print(f"    within 20%: {within} of {len(ratios)}; best {best} / {best_p}", flush=True)
        gaps = pd.to_numeric(table["loss_gap"], errors="coerce").dropna()
        rows += [
            Row(f"{bench}: {name}: minibatches to target within 20% (of {len(ratios)} reached by both)",
                within, at_least(len(ratios)), fmt=".0f"),
            Row(f"{bench}: {name}: largest loss gap (median relative distance of the training-loss curves)",
                float(gaps.max()) if len(gaps) else None, fmt=".3f"),
            Row(f"{bench}: {name}: runs diverging alike (of {len(table)})", same_div, at_least(len(table)),
                fmt=".0f"),
            Row(f"{bench}: {name}: the same setting first to the target (1 = yes)",
                int(best == best_p), at_least(1), fmt=".0f"),
        ]
    return rows


def _num(x: Any, fmt: str) -> str:
    return "-" if x is None or pd.isna(x) else format(float(x), fmt)


def _yes(x: Any) -> str:
    return "?" if x is None else ("yes" if x else "no")
