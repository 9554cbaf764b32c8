"""The simulator: real runs against it (issue 4's "within 10% of the prediction once the per-step overhead is
calibrated"), and its own speed.

Listed in ``run.py``'s ``BENCHMARKS``; the helpers (``Row``, targets, the context) are
:mod:`harness`'s.
"""
from __future__ import annotations

import time
from typing import Any

from harness import (
    Context,
    Row,
    Target,
    at_least,
    at_most,
    best,
    fmt_value,
    median,
    more_than,
    opts_text,
    rates,
    ratio,
    values_line,
)

MODES: dict[str, dict[str, Any]] = {
    "sync": dict(mode="sync"), "ssp:1": dict(mode="ssp", staleness=1),
    "ssp:4": dict(mode="ssp", staleness=4), "async": dict(mode="async"),
}


def within(lo: float, hi: float) -> Target:
    return Target(f"{lo:g}..{hi:g}", lambda v: lo <= v <= hi)


def predicted(label: str, common: dict[str, Any], overhead_ms: float | None) -> float | None:
    """The simulator's steps/s for ``label`` with the same options and ``overhead_ms`` per step."""
    from ssptk import simulate

    if overhead_ms is None:
        return None
    kw = MODES[label]
    return simulate(kw["mode"], common["workers"], common["steps"], staleness=kw.get("staleness"),
                    jitter=common["jitter"], seed=common["seed"], overhead=overhead_ms / 1000.0).steps_per_s


def mode_rows(n: str, res: dict[str, list[dict[str, Any]]]) -> list[Row]:
    """Throughput against sync, waiting, skew against the bound, and final loss of each mode."""
    sync_med, sync_best = median(rates(res["sync"])), best(rates(res["sync"]))
    rows: list[Row] = []
    for label in MODES:
        if label != "sync":
            # SSP and async exist to not wait for the slowest worker at every step: under jitter they
            # should beat sync.
            r = rates(res[label])
            rows.append(Row(f"{n}: {label}/sync (medians)", ratio(median(r), sync_med), more_than(1.0)))
            rows.append(Row(f"{n}: {label}/sync (bests)", ratio(best(r), sync_best)))
    for label in MODES:
        rows.append(Row(f"{n}: {label} wait_fraction", median(rates(res[label], "wait_fraction")), fmt=".3f"))
    for label, kw in MODES.items():
        skews = rates(res[label], "max_skew")
        # Under SSP a worker ticks its clock and only then checks the bound, so completed steps can be
        # S + 1 apart for a moment (docs/run-directory.md's example: staleness 2, max_skew 3).
        target = at_most(kw["staleness"] + 1) if kw.get("staleness") is not None else None
        rows.append(Row(f"{n}: {label} max_skew (max over runs)", max(skews) if skews else None, target, fmt=".0f"))
    for label in MODES:
        rows.append(Row(f"{n}: {label} final_loss", median(rates(res[label], "final_loss")), fmt=".4f"))
    return rows


def bench_sim_vs_real(ctx: Context) -> list[Row]:
    """sync, ssp:1, ssp:4 and async under ``--jitter exp:0.03`` with 3 workers: measured steps/s over
    the simulator's prediction, and what each mode buys over sync. Two calibrations of the per-step
    overhead: each run's own (what
    summary.json's ``measured_over_ideal`` uses; target 0.9..1.1), and async's for every mode (what is
    left when one constant overhead must explain all four; informational)."""
    common = dict(model="linear", workers=3, steps=60 if ctx.quick else 200, seed=0, jitter="exp:0.03")
    configs = {label: dict(common, **kw) for label, kw in MODES.items()}
    ctx.note(f"Options: {opts_text(common)}; modes in alternation ({', '.join(MODES)}), {ctx.repeat} round(s). "
             "`measured / ideal`: each run's steps/s over the simulator's, the overhead calibrated from that "
             "run's own records (median over workers of the time between a worker's steps minus its injected "
             "delay and its wait); the figure is the median over rounds.")
    res = ctx.alternate(configs)
    ctx.note("steps/s of each run, in order: " + "; ".join(values_line(k, v) for k, v in res.items()))
    ctx.note("measured / ideal of each run: "
             + "; ".join(values_line(k, v, "measured_over_ideal", ".3f") for k, v in res.items()))
    ctx.note("calibrated overhead ms of each run: "
             + "; ".join(values_line(k, v, "overhead_ms", ".2f") for k, v in res.items()))
    n = "sim_vs_real"
    rows: list[Row] = []
    async_overhead = median(rates(res["async"], "overhead_ms"))
    for label in MODES:
        moi = median(rates(res[label], "measured_over_ideal"))
        rows.append(Row(f"{n}: {label} measured / ideal (own overhead)", moi, within(0.9, 1.1)))
    for label in MODES:
        measured = median(rates(res[label]))
        rows.append(Row(f"{n}: {label} median steps/s", measured, fmt=".1f"))
        rows.append(Row(f"{n}: {label} overhead ms (median)", median(rates(res[label], "overhead_ms")), fmt=".2f"))
        if label != "async":
            pred = predicted(label, common, async_overhead)
            rows.append(Row(f"{n}: {label} measured / predicted with async's overhead", ratio(measured, pred)))
    ctx.note(f"async's median overhead {fmt_value(async_overhead, '.2f')} ms, used for every mode in the "
             "`predicted with async's overhead` rows: sync's token round trip and SSP's blocking run are "
             "costs of those modes that a single constant cannot hold.")
    return rows + mode_rows(n, res)


#: The modes ``sim_speed`` times, as ``ssptk.simulate`` takes them.
SPEED_MODES: dict[str, dict[str, Any]] = {
    "sync": dict(mode="sync"), "sync backup 4": dict(mode="sync", backup=4), "async": dict(mode="async"),
    "ssp:2": dict(mode="ssp:2"), "local:4": dict(mode="local:4"),
}
#: Simulated step records per CPU-second, at the least: a 64-worker, 300-step ``ssptk sim`` (19,200 records) in
#: under 0.1 s of simulation. Measured 2026-11-28 on the 2-core VM, loaded: 400-470 k records/s in every mode.
SIM_RECORDS_PER_S = 200_000


def bench_sim_speed(ctx: Context) -> list[Row]:
    """``ssptk.simulate`` alone (the timing, no model): step records per CPU-second at 64 workers x 300 steps
    (100 with ``--quick``), ``exp:0.01`` jitter, each mode's best of ``5 x ctx.repeat`` runs; the bound is
    :data:`SIM_RECORDS_PER_S`."""
    from ssptk import simulate

    steps = 100 if ctx.quick else 300
    ctx.note(f"64 workers x {steps} steps, jitter exp:0.01, overhead 5 ms, seed 1; CPU time (process_time) of "
             f"simulate(), best of {5 * ctx.repeat} runs per mode.")
    rows: list[Row] = []
    for label, kw in SPEED_MODES.items():
        best_s, records = float("inf"), 0
        for _ in range(5 * ctx.repeat):
            t0 = time.process_time()
            r = simulate(workers=64, steps=steps, jitter="exp:0.01", overhead=0.005, seed=1, **kw)
            best_s, records = min(best_s, time.process_time() - t0), r.total_steps
        print(f"    {label:<14} {records} records in {1000 * best_s:.1f} ms", flush=True)
        rows.append(Row(f"sim_speed: {label}, records per CPU-second", records / best_s if best_s > 0 else None,
                        at_least(SIM_RECORDS_PER_S), fmt=".0f"))
    return rows
