"""Settings run to one held-out target: labelled run options in alternating rounds, and the table of time and
minibatches to the target every benchmark of the tradeoff family writes (``tradeoff``, ``semi_sync``).

Every run of every setting shares one automatic target (:func:`ssptk.analysis.repeat_table`): 1.25 x the best
final held-out loss among the runs that converged, so a setting that never reaches it says so ("0 of 3").
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np
import pandas as pd
from harness import Context

from ssptk import analysis as an
from ssptk.rundir import load_run

__all__ = ["mean_times", "note_table", "num", "run_settings"]


def run_settings(ctx: Context, name: str, common: dict[str, Any],
                 settings: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """Every setting once per round, ``ctx.repeat`` rounds in ABBA order; the repeats' table
    (:func:`ssptk.analysis.repeat_table`, its ``attrs`` the target)."""
    from ssptk import api

    runs: dict[str, list[Any]] = {label: [] for label in settings}
    for r in range(ctx.repeat):
        print(f"  round {r + 1}/{ctx.repeat}", flush=True)
        order = list(settings.items())
        for label, extra in (order if r % 2 == 0 else order[::-1]):
            out = os.path.join(ctx.tmp, f"{name}-{label.replace(':', '-').replace('+', '_')}-{r + 1}")
            result = api.run(out=out, raise_on_failure=False, **{**common, **extra})
            s = result.summary
            print(f"    {label:<14} {s.get('status')} {s.get('steps_per_s') or 0:7.1f} steps/s  "
                  f"held-out {s.get('final_loss')}", flush=True)
            runs[label].append(load_run(out))
    return an.repeat_table(runs)


def note_table(ctx: Context, table: pd.DataFrame, settings: dict[str, dict[str, Any]],
               extra_columns: dict[str, str] | None = None) -> None:
    """The markdown table: per setting, steps/s, rounds that reached the target, time to it (mean [min-max]),
    minibatches to it, final held-out loss and accuracy (and ``extra_columns``: header -> table column, means)."""
    extra = extra_columns or {}
    ctx.note("| setting | steps/s | reached target | time to target (s), mean [min-max] | minibatches to target | "
             "final held-out loss | accuracy |" + "".join(f" {h} |" for h in extra))
    ctx.note("|---|---:|---:|---|---:|---:|---:|" + "---:|" * len(extra))
    for label in settings:
        rows = table[table["label"] == label]
        times = pd.to_numeric(rows["time_to_target_s"], errors="coerce").dropna()
        spread = "-" if times.empty else f"{times.mean():.1f} [{times.min():.1f}-{times.max():.1f}]"
        more = "".join(f" {num(pd.to_numeric(rows[c], errors='coerce').mean() if c in rows else None, '.3g')} |"
                       for c in extra.values())
        ctx.note(f"| {label} | {num(rows['steps_per_s'].mean(), '.0f')} | {len(times)} of {len(rows)} | {spread} | "
                 f"{num(pd.to_numeric(rows['steps_to_target'], errors='coerce').mean(), '.0f')} | "
                 f"{num(rows['final_loss'].mean(), '.3f')} | {num(rows['final_accuracy'].mean(), '.3f')} |" + more)


def mean_times(table: pd.DataFrame, settings: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Mean time to the target of each setting that reached it in every round (the others have none)."""
    means: dict[str, float] = {}
    for label in settings:
        rows = table[table["label"] == label]
        times = pd.to_numeric(rows["time_to_target_s"], errors="coerce").dropna()
        if len(times) == len(rows) and len(times):
            means[label] = float(times.mean())
    return means


def num(v: Any, fmt: str) -> str:
    """``v`` formatted, or ``-`` for a missing number."""
    return "-" if v is None or (isinstance(v, float) and np.isnan(v)) or pd.isna(v) else format(v, fmt)
