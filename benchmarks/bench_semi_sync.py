"""The semi-synchronous family side by side (issue 24, point 5): sync, SSP, async, delay-compensated async and
local SGD (several H) through two scenarios, to one held-out target per scenario, in alternating rounds.

1. **Non-IID data with transient pauses** (the scenario of ``bench_tradeoff``, where ssp:8 won; FINDINGS.md,
   "where the staleness bound pays"): ``digits``, 8 workers, each on one label-sorted slice, 1% of steps held 2 s.
2. **Communication-bound**: ``mlp:256`` (85k parameters, 340 KB per pull and per push) under a 50 Mbit/s PS link
   (``--network ps=50mbit``), IID data: every pull and push crosses the PS's link, so sync waits for the transfers
   of every worker, async overlaps them, and local:H makes one push and one pull every H steps.

``--lr-convention minibatch`` (the default) everywhere: every minibatch moves the parameters by LR x its gradient,
so local:H sums the round's deltas by default (local:1 is sync); ``avg`` rows set ``--outer-lr 1``, plain periodic
averaging (torch's ``PeriodicModelAverager``), and ``+outer`` rows DiLoCo's outer step (outer lr 0.7 on the
deltas' mean, Nesterov momentum 0.9), for the reader who knows local SGD by those rules.

Target, per scenario: the SSP setting reaches the target in at most 0.9 of sync's time (the bound's point: a
transient pause or a busy link holds sync's barrier every step, SSP only when a worker runs S steps ahead;
measured 0.48 and 0.56, ``benchmarks/FINDINGS.md``, 2026-11-27). The other settings' rows are for information.
"""
from __future__ import annotations

from typing import Any

import pandas as pd
from harness import Context, Row, at_most, opts_text, ratio
from settings_runs import mean_times, note_table, num, run_settings

from ssptk.core.labels import label_options

PAUSES: dict[str, Any] = dict(model="digits", workers=8, steps=300, lr=0.1, jitter="pause:0.01:2",
                              data_split="label", eval_every=50, seed=0, gpus="none")
LINK: dict[str, Any] = dict(model="mlp:256", workers=4, steps=60, network="ps=50mbit", eval_every=20, seed=0,
                            gpus="none")


def _settings(staleness: int, hs: tuple[int, ...]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {
        "sync": {"mode": "sync"}, f"ssp:{staleness}": {"mode": "ssp", "staleness": staleness},
        "async": {"mode": "async"}, "async+dc": {"mode": "async", "lr_staleness": "dc"}}
    for h in hs:
        out[f"local:{h}"] = {"mode": "local", "local_steps": h}
    h = hs[-1]
    out[f"local:{h} avg"] = {"mode": "local", "local_steps": h, "outer_lr": 1.0}
    out[f"local:{h}+outer"] = label_options(f"local:{h}+outer")
    return out


SCENARIOS: dict[str, tuple[dict[str, Any], dict[str, dict[str, Any]]]] = {
    "pauses": (PAUSES, _settings(8, (2, 8))),
    "link": (LINK, _settings(4, (4, 16))),
}


def bench_semi_sync(ctx: Context) -> list[Row]:
    """Per scenario and setting: time and minibatches to the held-out target, over ``ctx.repeat`` rounds; SSP's mean
    time to it over sync's (the target)."""
    rows: list[Row] = []
    for name, (scenario, settings) in SCENARIOS.items():
        common = dict(scenario, steps=scenario["steps"] // 2 if ctx.quick else scenario["steps"])
        print(f"  scenario {name}: {opts_text(common)}", flush=True)
        table = run_settings(ctx, f"semi-{name}", common, settings)
        ctx.note(f"**Scenario {name}.** Options: {opts_text(common)}. Target: {table.attrs.get('target_on')} loss "
                 f"{num(table.attrs.get('target'), '.4f')} (1.25 x the best final held-out loss of all runs that "
                 "converged). `avg`: --outer-lr 1 (plain averaging of the deltas); `+outer`: DiLoCo's outer step, "
                 "outer lr 0.7 on the deltas' mean and Nesterov momentum 0.9.")
        ctx.note("")
        note_table(ctx, table, settings, {"MB per minibatch": "mb_per_minibatch", "wait": "wait_fraction",
                                          "PS link busy": "link_busy"})
        ctx.note("")
        means = mean_times(table, settings)
        bound = next(label for label in settings if label.startswith("ssp:"))
        rows.append(Row(f"semi_sync {name}: {bound} / sync, mean time to target", ratio(means.get(bound),
                        means.get("sync")), at_most(0.9), fmt=".2f"))
        best = min(means, key=means.__getitem__) if means else None
        ctx.note(f"Fastest to the target in every round ({name}): {best or 'none reached it in every round'}.")
        ctx.note("")
        for label in settings:  # a setting that missed the target in a round has no mean time: its count says so
            reached = int(pd.to_numeric(table.loc[table["label"] == label, "time_to_target_s"],
                                        errors="coerce").notna().sum())
            rows.append(Row(f"semi_sync {name}: {label}, mean time to target (s)", means[label], fmt=".1f")
                        if label in means else
                        Row(f"semi_sync {name}: {label}, rounds that reached the target", float(reached), fmt=".0f"))
    return rows
