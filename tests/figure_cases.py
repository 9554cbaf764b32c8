"""Synthetic runs for the figure checks: step records, events, config and summary of a run of any label and any
number of workers, one that reaches the loss of its peers, one that never does, or one that diverges; with held-out
evaluations and a predicted twin. Pure data (pandas), no cluster."""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ssptk.core.labels import parse_label

__all__ = ["LABELS", "labels", "run", "runs"]

#: Settings in the order a comparison lists them, from the most synchronous to the least.
LABELS = ("sync", "allreduce", "ssp:1", "ssp:2", "ssp:4", "ssp:8", "ssp:16", "ssp:32", "local:4", "local:16", "async",
          "async+dc")


def labels(n: int) -> list[str]:
    """``n`` labels of :data:`LABELS`, spread over it (always sync first and async last when n >= 2)."""
    if n >= len(LABELS):
        return list(LABELS[:n])
    idx = np.linspace(0, len(LABELS) - 2, n).round().astype(int)
    return [LABELS[i] for i in dict.fromkeys(idx)]


def run(label: str = "sync", workers: int = 3, steps: int = 120, fate: str = "ok", seed: int = 0,
        held_out: bool = False, predicted: bool = False, network: str | None = None,
        straggler: bool = False, jitter: str | None = None) -> tuple[Any, ...]:
    """``(steps, events, config, summary)`` of a run: ``workers`` workers of ``steps`` steps each, worker w
    ``1 + w/10`` times slower; the loss falls to ~0.1 (``fate="ok"``), stays near 1 (``"stuck"``: never reaches
    a target set by the others) or blows up half way (``"diverged"``). ``held_out``: worker 0 logs an
    evaluation every 20 steps; ``predicted``: the config says it is a predicted run; ``straggler``: the last worker
    runs twice as slowly and ends with 60% of the steps (a comparison names it at its line's end)."""
    rng = np.random.default_rng(seed)
    mode, number = parse_label(str(label).split("+")[0])
    rows = []
    t0 = 1000.0
    last = {w: steps for w in range(workers)}
    if straggler:
        last[workers - 1] = int(0.6 * steps)
    for w in range(workers):
        pace = 0.01 * (1 + w / 10) * (2 if straggler and w == workers - 1 else 1)
        for n in range(1, last[w] + 1):
            frac = n / steps
            if fate == "ok":
                loss = 0.1 + 2.2 * np.exp(-6 * frac)
            elif fate == "stuck":
                loss = 0.9 + 1.4 * np.exp(-6 * frac)
            else:
                loss = 0.1 + 2.2 * np.exp(-6 * frac) if frac < 0.5 else 0.2 * np.exp(12 * (frac - 0.5))
            loss *= 1 + 0.1 * rng.standard_normal()
            rows.append({"t": t0 + pace * n, "worker": w, "step": n, "global_step": n * workers,
                         "loss": float(abs(loss)), "wait_s": 0.002 * w, "staleness": int(rng.integers(0, 1 + w)),
                         "minibatch": n, "delay_s": 0.0, "applied": True})
    df = pd.DataFrame(rows).sort_values("t", kind="mergesort").reset_index(drop=True)
    events = [{"t": t0, "event": "start", "worker": w} for w in range(workers)]
    ends = df.groupby("worker")["t"].max()
    events += [{"t": float(ends[w]), "event": "done", "worker": w} for w in range(workers)]
    if held_out:
        for n in range(20, steps + 1, 20):
            frac = n / steps
            loss = float(df[(df["worker"] == 0) & (df["step"] == n)]["loss"].iloc[0]) * 1.1
            events.append({"t": t0 + 0.01 * n + 1e-4, "event": "eval", "worker": 0, "global_step": n * workers,
                           "eval_loss": loss, "eval_accuracy": max(0.0, 1 - loss) if frac else None})
    options = {"mode": mode, "workers": workers, "model": "mlp:256", "steps": steps,
               "staleness": number if mode == "ssp" else None, "local_steps": number if mode == "local" else None,
               "network": network, "jitter": jitter, "eval_every": 20 if held_out else None}
    config: dict[str, Any] = {"options": options}
    if predicted:
        config["predicted"] = {"cores": None}
    summary = {"status": "ok", "mode": mode, "workers": workers, "diverged": fate == "diverged",
               "final_loss": float(df["loss"].tail(5 * workers).mean())}
    return df, pd.DataFrame(events), config, summary


def runs(n_labels: int, workers: int = 3, held_out: bool = False, predicted: bool = False,
         fates: dict[str, str] | None = None, straggler: bool = False) -> dict[str, tuple[Any, ...]]:
    """``label -> run`` for ``n_labels`` settings: the least synchronous third never reaches the target, one
    diverges (as async+dc and local:16 do in the issue's scenarios), unless ``fates`` says otherwise."""
    names = labels(n_labels)
    fate = {name: "ok" for name in names}
    if n_labels > 2:
        for name in names[-max(1, n_labels // 3):]:
            fate[name] = "stuck"
        fate[names[-1]] = "diverged"
    fate.update(fates or {})
    return {name: run(name, workers, fate=fate[name], seed=i, held_out=held_out, predicted=predicted,
                      straggler=straggler)
            for i, name in enumerate(names)}
