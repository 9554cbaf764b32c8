"""Checks on run logs shared by the cluster tests (computed from the JSONL files, not from summaries)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd


def records(run_dir: Path) -> tuple[pd.DataFrame, list[dict]]:
    steps, events = [], []
    for f in sorted((run_dir / "workers").glob("worker-*.jsonl")):
        for line in f.read_text().splitlines():
            r = json.loads(line)  # every line must be whole, valid JSON
            (events if "event" in r else steps).append(r)
    return pd.DataFrame(steps).sort_values("t", kind="stable").reset_index(drop=True), events


def max_skew(df: pd.DataFrame, workers: int) -> int:
    """Largest (most - least) completed steps over the workers that have not finished, at every record."""
    last = df.groupby("worker")["t"].max().to_dict()
    done = [0] * workers
    worst = 0
    for t, w, step in df[["t", "worker", "step"]].itertuples(index=False):
        done[int(w)] = int(step)
        active = [done[i] for i in range(workers) if last.get(i, 0) >= t]
        worst = max(worst, max(active) - min(active))
    return worst


def ideal(steps_df: Any, mode: str, workers: int, budget: int, model_bytes: Any = None, **options: Any) -> Any:
    """:func:`ssptk.sim.ideal_for` of a run's options given as keywords, resolved as a run's are."""
    from ssptk.core.options import resolve
    from ssptk.sim import SimSpec, ideal_for

    opts = resolve(mode=mode, workers=workers, steps=budget, stall_timeout=0, **options)
    return ideal_for(steps_df, SimSpec.of(opts, model_bytes=model_bytes))
