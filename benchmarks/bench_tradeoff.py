"""The error-runtime tradeoff (issue 11, points 5 and 6): a scenario where sync loses to waiting, async to
staleness and a middle bound wins, measured with real runs in alternating rounds, and whether
``--lr-staleness inverse`` rescues async there.

Scenario (see FINDINGS.md, "where the staleness bound pays"): ``digits``, 8 workers, non-IID data (each
worker holds one slice of the training set sorted by label), transient stragglers (1% of steps held 2 s),
targets on the held-out loss (every 50 updates). Every run of every label shares one automatic target:
1.25 x the best final held-out loss among the runs that converged.
"""
from __future__ import annotations

from typing import Any

import pandas as pd
from harness import Context, Row, at_most, opts_text
from settings_runs import mean_times, note_table, num, run_settings

SCENARIO: dict[str, Any] = dict(model="digits", workers=8, steps=300, lr=0.1, jitter="pause:0.01:2",
                                data_split="label", eval_every=50, seed=0, gpus="none")
#: label -> the options that differ from the scenario's
SETTINGS: dict[str, dict[str, Any]] = {
    "sync": {"mode": "sync"}, "ssp:8": {"mode": "ssp", "staleness": 8}, "ssp:32": {"mode": "ssp", "staleness": 32},
    "async": {"mode": "async"}, "async+inverse": {"mode": "async", "lr_staleness": "inverse"},
}
_ENDS = ("sync", "async")


def bench_tradeoff(ctx: Context) -> list[Row]:
    """Time and minibatches to the held-out target per setting, over ``ctx.repeat`` alternating rounds."""
    common = dict(SCENARIO, steps=150 if ctx.quick else SCENARIO["steps"])
    table = run_settings(ctx, "tradeoff", common, SETTINGS)
    ctx.note(f"Options: {opts_text(common)}; settings: {', '.join(SETTINGS)} "
             f"(async+inverse: --lr-staleness inverse). Target: {table.attrs.get('target_on')} loss "
             f"{num(table.attrs.get('target'), '.4f')} (1.25 x the best final held-out loss of all runs that "
             "converged).")
    ctx.note("")
    note_table(ctx, table, SETTINGS)
    means = mean_times(table, SETTINGS)
    plain = {k: v for k, v in means.items() if k != "async+inverse"}
    best = min(plain, key=plain.__getitem__) if plain else None
    ends = [plain[k] for k in _ENDS if k in plain]
    ctx.note("")
    ctx.note(f"Best setting (least mean time, among those that reached the target in every round): {best}.")
    rescued = "async+inverse" in means
    ctx.note(f"--lr-staleness inverse: async {'reached' if rescued else 'did not reach'} the target in every round "
             "with it" + (f" ({means['async+inverse']:.1f} s)." if rescued else "."))
    middle = min((v for k, v in plain.items() if k not in _ENDS), default=None)
    n = "tradeoff"
    return [
        Row(f"{n}: best middle bound / best end, mean time to target (< 1: a middle bound wins)",
            None if middle is None else middle / min(ends) if ends else 0.0, at_most(0.999),
            note="0 when neither end reached the target in every round"),
        Row(f"{n}: rounds in which async reached the target", float(int(
            pd.to_numeric(table.loc[table['label'] == 'async', 'time_to_target_s'], errors='coerce').notna().sum())),
            fmt=".0f"),
        Row(f"{n}: rounds in which async with --lr-staleness inverse reached it", float(int(
            pd.to_numeric(table.loc[table['label'] == 'async+inverse', 'time_to_target_s'],
                          errors='coerce').notna().sum())), fmt=".0f"),
    ]

