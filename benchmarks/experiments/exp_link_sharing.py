#!/usr/bin/env python
"""How the simulator should share a link: each sharing rule's predicted steps/s against recorded shaped runs; the
experiment that chose ``ssptk.sim.link_model.HEAD_SHARE`` as the default (its value measured by ``exp_tcp_share.py``).

    python benchmarks/experiments/exp_link_sharing.py                     # fair sharing and arrival order 1.5
    python benchmarks/experiments/exp_link_sharing.py --factor 1 --head 2   # the default rule
    python benchmarks/experiments/exp_link_sharing.py --factor 1,1.25,1.5 --sigma 0.3,0.6,1.0
    python benchmarks/experiments/exp_link_sharing.py --kept DIR --write   # runs a SSPTK_BENCH_KEEP=DIR benchmark kept

Reads ``network_predicted_runs.json`` beside it (the real runs of a ``network_predicted`` benchmark: each run's free
per-step overhead and its shaped steps/s; its ``what`` says when and at which commit they were made) and simulates
each run with ``ssptk.simulate`` under every ``(arrival factor, share sigma, head share)`` given
(``ssptk.sim.link_model.LinkFit``'s ``arrival_factor``, ``share_sigma`` and ``head``), seeds 0-2, with the cores
the run had. Prints, per rule, how many runs are predicted within 15% and each run's predicted / measured steps/s.
Simulation only: seconds, no cluster.

What it found, on the 24 runs of 2026-11-28 in the data file: with the simulator of then, head share 2
(``HEAD_SHARE``) predicted 21 of 24 within 15% (mean miss 7.4%), arrival order 1.5 (``ARRIVAL_FACTOR``) 17
(10.3%), fair sharing 8 (20.5%), so head share 2 became the default. Re-run with the simulator of 2026-11-28
evening (a step's gap before its read and its result's way back, which every rule shares): head share 2 21 of 24
(7.9%), arrival order 1.5 20 (9.5%), fair sharing 17 (10.5%). On the runs of 2026-11-27 (before the sharded step's
fix), arrival order 1.5 filled a 4-worker PS link as the real runs did but predicted ``--ps 4`` and 8 workers
1.2-1.8x too fast (``benchmarks/FINDINGS.md``, 2026-11-27 and 2026-11-28).
"""
from __future__ import annotations

import argparse
import functools
import itertools
import json
import statistics
from pathlib import Path
from typing import Any
from unittest import mock

DATA = Path(__file__).with_name("network_predicted_runs.json")


def predicted_over_measured(run: dict[str, Any], network: str, model: str, factor: float, sigma: float,
                            head: float = 1.0) -> float:
    """The simulated steps/s of ``run`` (mean of seeds 0-2) over its measured ones."""
    import ssptk.sim.simulator as simulator
    from ssptk.core.models import builtin_parameters
    from ssptk.sim import simulate
    from ssptk.sim.link_model import LinkFit, LinkModel

    mode, _, s = run["mode"].partition(":")
    kw = {"staleness": int(s)} if s else {}
    fit = LinkFit(arrival_factor=factor, share_sigma=sigma, head=head)
    links = functools.partial(LinkModel, fit=fit)
    with mock.patch.object(simulator, "LinkModel", links):  # the simulator's links, shared as this model shares them
        made = [simulate(mode, run["workers"], run["steps"], overhead=run["free_overhead_ms"] / 1000, network=network,
                         ps=run["ps"], model_bytes=4.0 * (builtin_parameters(model) or 0), cores=run["cores"],
                         seed=seed, **kw).steps_per_s for seed in range(3)]
    return statistics.mean(made) / run["shaped_steps_per_s"]


def kept_runs(keep: str) -> list[dict[str, Any]]:
    """The runs a ``network_predicted`` benchmark kept under ``keep`` (``SSPTK_BENCH_KEEP``), as the data file holds
    them: each ``pred-W-LAYOUT`` group's ``free.json`` and its shaped runs' ``summary.json`` and ``config.json``."""
    runs = []
    for group in sorted(Path(keep).glob("pred-*")):
        free = json.loads((group / "free.json").read_text())
        for label, figures in free.items():
            real = group / "real" / label
            if not (real / "summary.json").exists():
                continue
            summary = json.loads((real / "summary.json").read_text())
            config = json.loads((real / "config.json").read_text())
            opts = config["options"]
            runs.append({"workers": opts["workers"], "layout": config["tasks"]["layout"], "steps": opts["steps"],
                         "mode": label.split(" ps=")[0], "ps": opts["ps"], "cores": config["tasks"]["cores"],
                         "free_overhead_ms": round(figures["overhead_ms"], 2),
                         "free_steps_per_s": round(figures["steps_per_s"], 2),
                         "shaped_steps_per_s": round(summary["steps_per_s"], 3),
                         "ps_link_busy": round(summary["traffic"]["busiest"][1], 3)})
    return runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--factor", default="1,1.5", help="arrival factors, comma-separated (1: fair)")
    ap.add_argument("--sigma", default="0.3", help="share sigmas, comma-separated")
    ap.add_argument("--head", default="1", help="the oldest transfer's weight on a link, comma-separated (1: none)")
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--kept", help="read the runs from a SSPTK_BENCH_KEEP directory instead of --data")
    ap.add_argument("--write", action="store_true", help="with --kept: write them to --data (its 'what' kept)")
    args = ap.parse_args()
    doc = json.loads(Path(args.data).read_text())
    if args.kept:
        doc["runs"] = kept_runs(args.kept)
        if args.write:
            Path(args.data).write_text(json.dumps(doc, indent=1) + "\n")
    for factor, sigma, head in itertools.product(*(map(float, a.split(",")) for a in (args.factor, args.sigma,
                                                                                       args.head))):
        ratios = [predicted_over_measured(r, doc["network"], doc["model"], factor, sigma, head) for r in doc["runs"]]
        within = sum(abs(x - 1) <= 0.15 for x in ratios)
        print(f"arrival factor {factor}, sigma {sigma}, head {head}: {within} of {len(ratios)} within 15%, mean miss "
              f"{statistics.mean(abs(x - 1) for x in ratios):.1%}")
        for r, x in zip(doc["runs"], ratios):
            print(f"  {r['workers']} {r['layout']:<9} {r['mode']:<6} ps={r['ps']}  {x:.2f}")


if __name__ == "__main__":
    main()
