"""The engine's own costs: SSP whose bound never binds against async (what the bound costs when it does
nothing), and a warm cluster's re-run against a cold start (what ``%dtrain`` does from its second run on).

Listed in ``run.py``'s ``BENCHMARKS``; the helpers are :mod:`harness`'s.
"""
from __future__ import annotations

from harness import (
    Context,
    Row,
    at_least,
    at_most,
    best,
    fmt_value,
    median,
    ok_or_none,
    opts_text,
    rates,
    ratio,
    values_line,
)


def bench_ssp_nonbinding_vs_async(ctx: Context) -> list[Row]:
    """SSP whose bound never binds costs (almost) nothing over async: target >= 0.95 of async's steps/s."""
    common = dict(model="linear", workers=3, steps=300 if ctx.quick else 1500, seed=0)
    configs = {"async": dict(common, mode="async"), "ssp:1000": dict(common, mode="ssp", staleness=1000)}
    ctx.note(f"Options: {opts_text(common)}, no delays; async vs ssp staleness 1000 "
             f"(never binds), alternating, {ctx.repeat} round(s).")
    res = ctx.alternate(configs)
    a, s = rates(res["async"]), rates(res["ssp:1000"])
    ctx.note("steps/s of each run, in order: " + "; ".join(values_line(k, v) for k, v in res.items()))
    pairs = [ratio(y, x) for x, y in zip(ok_or_none(res["async"]), ok_or_none(res["ssp:1000"]))]
    ctx.note("per-round ratio ssp/async: " + ", ".join(fmt_value(p, ".3f") for p in pairs))
    waits = rates(res["ssp:1000"], "wait_fraction")
    ctx.note("ssp:1000 wait_fraction (should be 0: the bound never binds): " + ", ".join(f"{w:.4f}" for w in waits))
    walls = [fmt_value(x.get("wall_s"), ".2f") for x in res["async"] + res["ssp:1000"]]
    ctx.note("training seconds per run (async runs, then ssp runs): " + ", ".join(walls))
    n = "ssp_nonbinding_vs_async"
    return [
        Row(f"{n}: ratio of medians", ratio(median(s), median(a)), at_least(0.95)),
        Row(f"{n}: ratio of bests", ratio(best(s), best(a)), at_least(0.95)),
        Row(f"{n}: async median steps/s", median(a), fmt=".1f"),
        Row(f"{n}: ssp:1000 median steps/s", median(s), fmt=".1f"),
        Row(f"{n}: async best steps/s", best(a), fmt=".1f"),
        Row(f"{n}: ssp:1000 best steps/s", best(s), fmt=".1f"),
        # CPU per minibatch while training (all tasks): steadier than steps/s when the machine is shared,
        # and on 2 cores the tasks are CPU-bound, so steps/s goes as its inverse.
        Row(f"{n}: CPU per minibatch, async/ssp (medians)",
            ratio(median(rates(res["async"], "cpu_ms_per_step")), median(rates(res["ssp:1000"], "cpu_ms_per_step"))),
            at_least(0.95), fmt=".3f"),
        Row(f"{n}: async CPU ms per minibatch (median)", median(rates(res["async"], "cpu_ms_per_step")), fmt=".3f"),
        Row(f"{n}: ssp:1000 CPU ms per minibatch (median)", median(rates(res["ssp:1000"], "cpu_ms_per_step")),
            fmt=".3f"),
    ]


def bench_warm_rerun(ctx: Context) -> list[Row]:
    """Time from ``run()`` to the first step: a cold cluster against warm re-runs on the same tasks
    (what ``%dtrain`` does from the second run on). Target: a warm re-run reaches its first step in <= 1.5 s."""
    from ssptk.launch import warm

    common = dict(model="linear", workers=3, steps=40 if ctx.quick else 100, seed=0)
    cold, hot = [], []
    for r in range(ctx.repeat):
        print(f"  round {r + 1}/{ctx.repeat}", flush=True)
        warm.shutdown_warm()
        cold.append(ctx.run("cold", mode="ssp", staleness=2, **common))
        hot.append(ctx.run("warm-first", mode="ssp", staleness=2, warm=True, **common))  # starts the warm cluster
        for s in (0, 4, 8):
            hot.append(ctx.run(f"warm-ssp:{s}", mode="ssp", staleness=s, warm=True, **common))
        warm.shutdown_warm()
    cold_t = rates(cold, "first_step_s")
    warm_t = rates([h for h in hot if h.get("warm_reused")], "first_step_s")
    ctx.note(f"Options: {opts_text(common)}. Per round: one cold run, then one warm run that starts the warm "
             "cluster (not counted as warm), then staleness 0, 4, 8 on it.")
    ctx.note("cold first_step_s: " + ", ".join(f"{v:.2f}" for v in cold_t))
    ctx.note("warm re-run first_step_s: " + ", ".join(f"{v:.3f}" for v in warm_t))
    n = "warm_rerun"
    return [
        Row(f"{n}: warm re-run time to first step, median (s)", median(warm_t), at_most(1.5), fmt=".3f"),
        Row(f"{n}: warm re-run time to first step, worst (s)", max(warm_t) if warm_t else None, at_most(1.5),
            fmt=".3f"),
        Row(f"{n}: cold run time to first step, median (s)", median(cold_t), fmt=".2f"),
        Row(f"{n}: cold / warm (medians)", ratio(median(cold_t), median(warm_t)), fmt=".1f"),
    ]
