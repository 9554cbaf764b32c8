"""Issue 22's sweep: a shrinking PS link x PS shards x mode, to a held-out target, measured here and predicted at
64 workers. Where does the PS link's bound make SSP/async or shards pay, and where not?

Real runs: ``mlp:256`` (85 k parameters, 0.34 MB per pull and per push), 4 workers in the shared layout (one
process: a grid of 27 configurations must fit 2 cores), ``--eval-every 10``, the PS link shaped to each rate
(``--network ps=RATE``: the PS tasks' links only; the workers' are free), seeds ``0 .. repeat-1``. The target is
one held-out loss for every run: 1.25 x the best final held-out loss of all of them (``compare_table``'s rule).

Predicted: every configuration at 4 workers (the timing-only simulator with the overhead calibrated on the
10 Gbit/s run of the same mode, shards and seed: the accuracy of the link model) and at 64 workers (``predict``:
the schedule through the links replayed with the model's gradients, so minibatches and time to the same target
too; overhead: the 4-worker 10 Gbit/s runs' median for that mode and shard count).

``SSPTK_BENCH_KEEP=DIR`` keeps every run directory under ``DIR/sweep``; with ``SSPTK_BENCH_REUSE=1`` a kept run
that ended ok is read back instead of run again (a grid interrupted half way goes on where it stopped).
``SSPTK_BENCH_SWEEP_RATES`` (``100mbit,1gbit``) picks other rates.
"""
from __future__ import annotations

import json
import os
import shutil
from typing import Any

from harness import Context, Row, Target, median

MODEL, WORKERS, STEPS, EVAL_EVERY = "mlp:256", 4, 60, 10
RATES = ("10gbit", "1gbit", "100mbit")
SHARDS = (1, 2, 4)
MODES = ("sync", "ssp:2", "async")
BIG_WORKERS, BIG_STEPS = 64, 20


def _rates() -> tuple[str, ...]:
    text = os.environ.get("SSPTK_BENCH_SWEEP_RATES")
    return tuple(text.split(",")) if text else RATES


def _within(rel: float) -> Target:
    return Target(f"within {rel:.0%}", lambda v: abs(v - 1.0) <= rel)


def _key(rate: str, mode: str, ps: int) -> str:
    return f"{rate} {mode} ps={ps}"


def _dir(base: str, key: str, seed: int) -> str:
    return os.path.join(base, key.replace(" ", "_").replace(":", "").replace("=", "") + f"_s{seed}")


def _real(ctx: Context, base: str, key: str, seed: int, opts: dict[str, Any]) -> dict[str, Any]:
    """One real run, kept at its directory (or read back from it, with ``SSPTK_BENCH_REUSE``)."""
    keep = _dir(base, key, seed)
    done = os.path.join(keep, "summary.json")
    if os.environ.get("SSPTK_BENCH_REUSE") and os.path.exists(done):
        with open(done) as f:
            summary = json.load(f)
        if summary.get("status") == "ok":
            print(f"    {key} s{seed}: kept, {summary.get('steps_per_s'):.1f} steps/s", flush=True)
            return dict(summary, kept=keep)
    shutil.rmtree(keep, ignore_errors=True)

    def inspect(run_dir: str, summary: dict[str, Any]) -> dict[str, Any]:
        shutil.copytree(run_dir, keep, dirs_exist_ok=True)
        return {"kept": keep}
    return ctx.run(f"{key} s{seed}", inspect=inspect, **opts)


def _variable_bytes() -> list[float]:
    from bench_network import mlp_variable_bytes

    return mlp_variable_bytes(int(MODEL.split(":")[1]))


def _sim_rate(mode: str, workers: int, rate: str, ps: int, overhead_ms: float | None, seed: int) -> float | None:
    from ssptk import simulate

    if overhead_ms is None:
        return None
    return float(simulate(mode, workers, STEPS, overhead=overhead_ms / 1000.0, network=f"ps={rate}", ps=ps,
                          model_bytes=_variable_bytes(), seed=seed).steps_per_s)


def _spread(xs: list[float], fmt: str) -> str:
    xs = [x for x in xs if x == x]
    if not xs:
        return "-"
    mid = format(median(xs), fmt)  # type: ignore[arg-type]
    return mid if len(xs) == 1 else f"{mid} ({format(min(xs), fmt)}-{format(max(xs), fmt)})"


def _num(x: Any) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")


def bench_network_sweep(ctx: Context) -> list[Row]:
    """The PS link's rate x shards x mode to a held-out target: real runs (4 workers) and predictions (4, 64)."""
    from ssptk.analysis import compare_table
    from ssptk.rundir import load_run

    rates_, seeds = _rates(), list(range(ctx.repeat))
    steps = 30 if ctx.quick else STEPS
    base = os.path.join(os.environ.get("SSPTK_BENCH_KEEP") or ctx.tmp, "sweep")
    configs = [(rate, mode, ps) for rate in rates_ for ps in SHARDS for mode in MODES]
    runs: dict[tuple[str, int], dict[str, Any]] = {}
    for seed in seeds:
        print(f"  seed {seed}", flush=True)
        for rate, mode, ps in configs if seed % 2 == 0 else configs[::-1]:
            opts = dict(model=MODEL, workers=WORKERS, steps=steps, eval_every=EVAL_EVERY, layout="shared",
                        mode=mode, ps=ps, network=f"ps={rate}", seed=seed)
            runs[(_key(rate, mode, ps), seed)] = _real(ctx, base, _key(rate, mode, ps), seed, opts)
    kept = {f"{k} s{seed}": s["kept"] for (k, seed), s in runs.items() if s.get("status") == "ok" and s.get("kept")}
    table = compare_table({label: load_run(d) for label, d in kept.items()}).set_index("label")
    target = table.attrs["target"]
    ctx.note(f"Real: `--model {MODEL} --workers {WORKERS} --steps {steps} --eval-every {EVAL_EVERY} --layout shared "
             f"--network ps=RATE --ps K`, seeds {seeds}; held-out target {target:.4f} "
             f"({table.attrs.get('target_on')}: 1.25 x the best final held-out loss of all {len(kept)} runs). "
             "Each cell: median over seeds (min-max). Predicted at 4 workers: the simulator with the overhead "
             "calibrated on the 10 Gbit/s run of the same mode, shards and seed.")
    ctx.note("")
    ctx.note("| PS link | mode | --ps | steps/s | PS link busy | minibatches to target | s to target | "
             "predicted steps/s (4) | predicted / measured |")
    ctx.note("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    rows: list[Row] = []
    cal: dict[tuple[str, int], list[float]] = {}
    for rate, mode, ps in configs:
        key = _key(rate, mode, ps)
        got = [(seed, table.loc[f"{key} s{seed}"]) for seed in seeds if f"{key} s{seed}" in table.index]
        speed = [_num(r["steps_per_s"]) for _, r in got]
        preds = []
        for seed, r in got:
            free = runs.get((_key(rates_[0], mode, ps), seed), {})
            if rate == rates_[0] and free.get("overhead_ms"):
                cal.setdefault((mode, ps), []).append(float(free["overhead_ms"]))
            p = _sim_rate(mode, WORKERS, rate, ps, free.get("overhead_ms"), seed)
            preds.append(_num(p) / _num(r["steps_per_s"]) if p else float("nan"))
        pred_speed = [_num(_sim_rate(mode, WORKERS, rate, ps, runs.get((_key(rates_[0], mode, ps), seed), {})
                                     .get("overhead_ms"), seed)) for seed, _ in got]
        ctx.note(f"| {rate} | {mode} | {ps} | {_spread(speed, '.1f')} | "
                 f"{_spread([_num(r['link_busy']) for _, r in got], '.2f')} | "
                 f"{_spread([_num(r['steps_to_target']) for _, r in got], '.0f')} | "
                 f"{_spread([_num(r['time_to_target_s']) for _, r in got], '.1f')} | "
                 f"{_spread(pred_speed, '.1f')} | {_spread(preds, '.2f')} |")
        name = f"network_sweep: {key}"
        rows.append(Row(f"{name}: steps/s (median over seeds)", median([x for x in speed if x == x]), fmt=".1f"))
        to_target = [_num(r["time_to_target_s"]) for _, r in got]
        rows.append(Row(f"{name}: s to target", median([x for x in to_target if x == x]), fmt=".1f"))
        if rate != rates_[0]:
            ok = [x for x in preds if x == x]
            rows.append(Row(f"{name}: predicted / measured steps/s (4 workers)", median(ok), _within(0.15),
                            note=f"seeds: {', '.join(format(x, '.2f') for x in ok)}"))
    rows += _big(ctx, base, rates_, target, {k: median(v) for k, v in cal.items()})
    return rows


def _big(ctx: Context, base: str, rates_: tuple[str, ...], target: float,
         overhead_ms: dict[tuple[str, int], float | None]) -> list[Row]:
    """The same grid predicted at :data:`BIG_WORKERS` workers, to the real runs' target."""
    from ssptk.analysis import compare_table
    from ssptk.experiment.predicted_runs import plan, predict
    from ssptk.rundir import load_run

    configs = [(rate, mode, ps) for rate in rates_ for ps in SHARDS for mode in MODES if overhead_ms.get((mode, ps))]
    pdir = os.path.join(base, f"predicted-{BIG_WORKERS}")
    shutil.rmtree(pdir, ignore_errors=True)
    plans = [plan(overhead_ms[(mode, ps)] / 1000.0, run_dir=_dir(pdir, _key(rate, mode, ps), 0), model=MODEL,
                  workers=BIG_WORKERS, steps=BIG_STEPS, eval_every=EVAL_EVERY, mode=mode, ps=ps,
                  network=f"ps={rate}", gpus="none", stall_timeout=0, seed=0)
             for rate, mode, ps in configs]
    results = predict(plans, raise_on_failure=False)
    table = compare_table({_key(*c): load_run(r.run_dir) for c, r in zip(configs, results)},
                          target=target).set_index("label")
    ctx.note("")
    ctx.note(f"**Predicted at {BIG_WORKERS} workers** (`predict`: `--steps {BIG_STEPS}`, the schedule through the "
             "links replayed with the model's gradients; overhead: the median of the 4-worker 10 Gbit/s runs' for "
             f"that mode and shard count), to the same held-out target {target:.4f}:")
    ctx.note("")
    ctx.note("| PS link | mode | --ps | overhead ms | steps/s | minibatches to target | s to target | final held-out |")
    ctx.note("|---|---|---:|---:|---:|---:|---:|---:|")
    rows: list[Row] = []
    for (rate, mode, ps), res in zip(configs, results):
        key = _key(rate, mode, ps)
        r = table.loc[key]
        ctx.note(f"| {rate} | {mode} | {ps} | {overhead_ms[(mode, ps)]:.1f} | {_num(r['steps_per_s']):.1f} | "
                 f"{_spread([_num(r['steps_to_target'])], '.0f')} | {_spread([_num(r['time_to_target_s'])], '.1f')} | "
                 f"{_num(res.summary.get('final_loss')):.3f} |")
        rows.append(Row(f"network_sweep: {BIG_WORKERS} workers predicted {key}: steps/s", _num(r["steps_per_s"]),
                        fmt=".1f"))
        t = _num(r["time_to_target_s"])
        rows.append(Row(f"network_sweep: {BIG_WORKERS} workers predicted {key}: s to target", t if t == t else None,
                        fmt=".1f"))
    return rows

