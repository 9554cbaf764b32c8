"""Issue 22's sweep: a shrinking PS link x PS shards x mode, to a held-out target, measured here and predicted at
64 workers. Where does the PS link's bound make SSP/async or shards pay, and where not?

Real runs: ``mlp:256`` (85 k parameters, 0.34 MB per pull and per push), 4 workers in the shared layout (one
process: a grid of 27 configurations must fit 2 cores), ``--eval-every 10``, the PS link shaped to each rate
(``--network ps=RATE``: the PS tasks' links only; the workers' are free), seeds ``0 .. repeat-1``. The target is
one held-out loss for every run: 1.25 x the best final held-out loss of all of them (``compare_table``'s rule).

Predicted: every configuration at 4 workers (the timing-only simulator with the overhead calibrated on the
10 Gbit/s run of the same mode, shards and seed), before and after the shared CPU (``simulate(cores=...)``): the
accuracy of the link model; and at 64 workers (the timing-only simulator, each worker on a machine of its own).
Loss at 64 workers: ``predict`` (the 64-worker schedule replayed with the model's gradients) at the model's
default learning rate diverged there (sync sums 64 gradients, async reads ~64 updates stale), so it is predicted
with the learning rate scaled by 4/64 (:data:`BIG_LR_SCALE`): sync's update (LR x the sum of N gradients) is then
the 4-worker runs' update, and async's LR x staleness (~N-1 updates) what it was at 4 workers, the product async
SGD's stability depends on; to the 4-worker runs' held-out target, for the rates of ``SSPTK_BENCH_SWEEP_BIG_RATES``
(default: the grid's; each prediction ~25 s here at load 3-7, all in one process).

``SSPTK_BENCH_KEEP=DIR`` keeps every run directory under ``DIR/sweep``; with ``SSPTK_BENCH_REUSE=1`` a kept run
that ended ok is read back instead of run again (a grid interrupted half way goes on where it stopped).
``SSPTK_BENCH_SWEEP_RATES`` (``10gbit,20mbit``: the first is the free one the predictions are calibrated on),
``SSPTK_BENCH_SWEEP_SHARDS`` (``1,4``) and ``SSPTK_BENCH_SWEEP_LAYOUT`` (``processes``) pick another grid.
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
BIG_WORKERS, BIG_STEPS = 64, 30
#: the 64-worker loss predictions: steps per worker (the target takes ~14x the 4-worker runs' minibatches at 4/64
#: of the learning rate) and the learning rate's scale
BIG_LOSS_STEPS, BIG_LR_SCALE = 60, WORKERS / BIG_WORKERS


def _rates() -> tuple[str, ...]:
    text = os.environ.get("SSPTK_BENCH_SWEEP_RATES")
    return tuple(text.split(",")) if text else RATES


def _shards() -> tuple[int, ...]:
    text = os.environ.get("SSPTK_BENCH_SWEEP_SHARDS")
    return tuple(int(k) for k in text.split(",")) if text else SHARDS


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


def _sim_rate(mode: str, workers: int, rate: str, ps: int, overhead_ms: float | None, seed: int,
              cores: int, gap_ms: float | None = None) -> float:
    """Predicted steps/s from the free run's per-step ``overhead_ms`` and ``gap_ms`` (async, ssp: its landing to
    next read): ``cores`` 0, each worker its own CPU (the model before the shared CPU); else the workers sharing
    ``cores`` cores (``--cores``: the overhead's CPU work, :func:`ssptk.sim.link_model.cpu_seconds`, is taken by the
    simulator)."""
    from ssptk import simulate

    if not overhead_ms:
        return float("nan")
    return float(simulate(mode, workers, STEPS, overhead=overhead_ms / 1000.0, network=f"ps={rate}", ps=ps,
                          model_bytes=_variable_bytes(), seed=seed, cores=cores,
                          gap=_gap_s(gap_ms, overhead_ms)).steps_per_s)


def _gap_s(gap_ms: float | None, overhead_ms: float) -> float:
    """A free run's gap, in seconds, as a prediction takes it (at most the step's overhead; none where it has
    none: sync)."""
    return min(float(gap_ms or 0.0), float(overhead_ms)) / 1000.0


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
    layout = os.environ.get("SSPTK_BENCH_SWEEP_LAYOUT") or "shared"
    configs = [(rate, mode, ps) for rate in rates_ for ps in _shards() for mode in MODES]
    runs: dict[tuple[str, int], dict[str, Any]] = {}
    for seed in seeds:
        print(f"  seed {seed}", flush=True)
        for rate, mode, ps in configs if seed % 2 == 0 else configs[::-1]:
            opts = dict(model=MODEL, workers=WORKERS, steps=steps, eval_every=EVAL_EVERY, layout=layout,
                        mode=mode, ps=ps, network=f"ps={rate}", seed=seed)
            runs[(_key(rate, mode, ps), seed)] = _real(ctx, base, _key(rate, mode, ps), seed, opts)
    kept = {f"{k} s{seed}": s["kept"] for (k, seed), s in runs.items() if s.get("status") == "ok" and s.get("kept")}
    table = compare_table({label: load_run(d) for label, d in kept.items()}).set_index("label")
    target = table.attrs["target"]
    from ssptk.core.resources import machine_cores

    cores = machine_cores()
    ctx.note(f"Real: `--model {MODEL} --workers {WORKERS} --steps {steps} --eval-every {EVAL_EVERY} --layout {layout} "
             f"--network ps=RATE --ps K` (the PS tasks' links shaped; the workers' free), seeds {seeds}; held-out "
             f"target {target:.4f} ({table.attrs.get('target_on')}: 1.25 x the best final held-out loss of all "
             f"{len(kept)} runs). Each cell: median over seeds (min-max). Predicted at 4 workers: the simulator "
             f"with the per-step overhead calibrated on the {rates_[0]} run of the same mode, shards and seed, "
             f"*before* (the overhead a step's fixed time) and *after* (that time CPU work shared by {cores} cores, "
             f"`simulate(cores={cores})`, before: `cores=0`); *pred/meas*: predicted over measured steps/s; "
             "*link cost*: the "
             f"predicted slowdown from {rates_[0]} over the measured one (what the link model alone gets right, "
             "free of the calibration's bias).")
    ctx.note("")
    ctx.note("| PS link | mode | --ps | steps/s | PS link busy | minibatches to target | s to target | "
             "pred/meas before | after | link cost before | after |")
    ctx.note("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    rows: list[Row] = []
    cal: dict[tuple[str, int], list[float]] = {}
    gaps: list[float] = []  # the free async and ssp runs' gaps (ms)
    for rate, mode, ps in configs:
        key = _key(rate, mode, ps)
        got = [(seed, table.loc[f"{key} s{seed}"]) for seed in seeds if f"{key} s{seed}" in table.index]
        speed = [_num(r["steps_per_s"]) for _, r in got]
        acc: dict[str, list[float]] = {"abs0": [], "abs1": [], "rel0": [], "rel1": []}
        for seed, r in got:
            free = runs.get((_key(rates_[0], mode, ps), seed), {})
            o, g = free.get("overhead_ms"), free.get("gap_ms")
            if rate == rates_[0] and o:
                cal.setdefault((mode, ps), []).append(float(o))
                if g is not None:
                    gaps.append(float(g))
            for tag, c in (("0", 0), ("1", cores)):
                p, p_free = (_sim_rate(mode, WORKERS, x, ps, o, seed, c, g) for x in (rate, rates_[0]))
                acc["abs" + tag].append(p / _num(r["steps_per_s"]))
                acc["rel" + tag].append((p_free / p) / (_num(free.get("steps_per_s")) / _num(r["steps_per_s"])))
        ctx.note(f"| {rate} | {mode} | {ps} | {_spread(speed, '.1f')} | "
                 f"{_spread([_num(r['link_busy']) for _, r in got], '.2f')} | "
                 f"{_spread([_num(r['steps_to_target']) for _, r in got], '.0f')} | "
                 f"{_spread([_num(r['time_to_target_s']) for _, r in got], '.1f')} | "
                 + " | ".join(_spread(acc[k], ".2f") for k in ("abs0", "abs1", "rel0", "rel1")) + " |")
        name = f"network_sweep: {key}"
        rows.append(Row(f"{name}: steps/s (median over seeds)", median([x for x in speed if x == x]), fmt=".1f"))
        to_target = [_num(r["time_to_target_s"]) for _, r in got]
        rows.append(Row(f"{name}: s to target", median([x for x in to_target if x == x]), fmt=".1f"))
        if rate != rates_[0]:
            for k, what, aim in (("abs1", "predicted / measured steps/s", _within(0.15)),
                                 ("rel1", "link cost predicted / measured", None)):
                ok = [x for x in acc[k] if x == x]
                before = [x for x in acc[k.replace("1", "0")] if x == x]
                rows.append(Row(f"{name}: {what} (4 workers, shared CPU)", median(ok), aim,
                                fmt=".2f", note=f"seeds {_spread(ok, '.2f')}; before {_spread(before, '.2f')}"))
    overhead = median([x for v in cal.values() for x in v])
    gap = median(gaps) if gaps else 0.0
    rows += _big(ctx, rates_, overhead, cores, gap)
    rows += _big_loss(ctx, rates_, overhead, cores, target, gap)
    return rows


def _big(ctx: Context, rates_: tuple[str, ...], overhead_ms: float | None, cores: int,
         gap_ms: float = 0.0) -> list[Row]:
    """The same grid's steps/s predicted at :data:`BIG_WORKERS` workers (the timing-only simulator): each worker
    on a machine of its own, so a step's overhead is the CPU work of the 4-worker free runs' step here, one figure
    for every mode and shard count (the median over all of them), so that the grid shows the network and the mode;
    async and ssp read ``gap_ms`` (the free async and ssp runs' median, as CPU work) into the step."""
    from ssptk import simulate
    from ssptk.sim.link_model import cpu_seconds

    if not overhead_ms:
        return []
    work = cpu_seconds(overhead_ms / 1000.0, WORKERS, cores)
    gap = cpu_seconds(_gap_s(gap_ms, overhead_ms), WORKERS, cores)
    ctx.note("")
    ctx.note(f"**Predicted at {BIG_WORKERS} workers** (`ssptk.simulate(mode, {BIG_WORKERS}, {BIG_STEPS}, "
             f"overhead={work:.4f}, network='ps=RATE', ps=K, model_bytes=..., cores=0, gap={gap:.4f})`, median of "
             "seeds 0 and 1; the gap, async's and ssp's only: the free async and ssp runs' median, as CPU work): "
             "each "
             f"worker on a machine of its own, its step's overhead the CPU work of the 4-worker {rates_[0]} runs' "
             f"steps on {cores} cores ({overhead_ms:.1f} ms a step with 4 workers, median over all of them: "
             f"{1000 * work:.1f} ms of CPU). *vs --ps 1*: steps/s over the same rate and mode with one PS; *vs sync*: "
             "over sync's at the same rate and shards; *PS link busy*: the busiest PS link's share of its rate.")
    ctx.note("")
    ctx.note("| PS link | mode | --ps | steps/s | vs --ps 1 | vs sync | wait share | PS link busy |")
    ctx.note("|---|---|---:|---:|---:|---:|---:|---:|")
    rows: list[Row] = []
    got: dict[tuple[str, str, int], float] = {}
    wire = 8.0 * 1.05 * sum(_variable_bytes())
    for rate in rates_:
        bits = float(parse_rate(rate))
        for ps in _shards():
            for mode in MODES:
                sims = [simulate(mode, BIG_WORKERS, BIG_STEPS, overhead=work, network=f"ps={rate}", ps=ps,
                                 model_bytes=_variable_bytes(), seed=seed, cores=0,
                                 gap=gap if mode != "sync" else 0.0) for seed in (0, 1)]
                speed = float(median([x.steps_per_s for x in sims]))  # type: ignore[arg-type]
                wait = float(median([x.wait_fraction for x in sims]))  # type: ignore[arg-type]
                got[(rate, mode, ps)] = speed
                busy = speed * wire / ps / bits  # the shards hold the model about evenly
                ctx.note(f"| {rate} | {mode} | {ps} | {speed:.0f} | {speed / got[(rate, mode, 1)]:.2f} | "
                         f"{speed / got[(rate, 'sync', ps)]:.2f} | {wait:.2f} | {busy:.2f} |")
                rows.append(Row(f"network_sweep: {BIG_WORKERS} workers predicted {_key(rate, mode, ps)}: steps/s",
                                speed, fmt=".0f"))
    return rows


def _big_loss(ctx: Context, rates_: tuple[str, ...], overhead_ms: float | None, cores: int,
              target: float | None, gap_ms: float = 0.0) -> list[Row]:
    """Minibatches and seconds to the 4-worker runs' held-out ``target`` at :data:`BIG_WORKERS` workers, predicted
    (``predict``, one process) with the learning rate scaled by :data:`BIG_LR_SCALE`, each worker on a machine of
    its own (``cores=0``) with :func:`_big`'s CPU work a step."""
    import time

    from ssptk.analysis import compare_table
    from ssptk.core.models import load_model
    from ssptk.experiment.predicted_runs import plan, predict
    from ssptk.rundir import load_run
    from ssptk.sim.link_model import cpu_seconds

    text = os.environ.get("SSPTK_BENCH_SWEEP_BIG_RATES")
    rates_ = tuple(text.split(",")) if text else rates_
    if not overhead_ms or target is None or not rates_:
        return []
    work = cpu_seconds(overhead_ms / 1000.0, WORKERS, cores)
    gap = cpu_seconds(_gap_s(gap_ms, overhead_ms), WORKERS, cores)
    lr = load_model(MODEL).lr * BIG_LR_SCALE
    keys = [_key(rate, mode, ps) for rate in rates_ for ps in _shards() for mode in MODES]
    plans = []
    for key in keys:
        rate, mode, ps = key.split(" ")
        plans.append(plan(work, gap=gap if mode != "sync" else None,
                          run_dir=os.path.join(ctx.tmp, "big-loss", _dir("", key, 0)), model=MODEL, mode=mode,
                          workers=BIG_WORKERS, steps=BIG_LOSS_STEPS, lr=lr, network=f"ps={rate}", ps=int(ps[3:]),
                          eval_every=1 if mode == "sync" else BIG_WORKERS, cores=0, seed=0, stall_timeout=0))
    t0 = time.perf_counter()
    made = predict(plans, raise_on_failure=False)
    took = time.perf_counter() - t0
    table = compare_table({key: load_run(r.run_dir) for key, r in zip(keys, made)}, target=target).set_index("label")
    ctx.note("")
    ctx.note(f"**Loss at {BIG_WORKERS} workers, predicted** (`ssptk.predict`: the schedule at {BIG_WORKERS} workers "
             f"replayed with {MODEL}'s gradients; `--workers {BIG_WORKERS} --steps {BIG_LOSS_STEPS} --lr {lr:g} "
             f"--cores 0 --overhead {work:.4f}`, the gap {gap:.4f} s for async and ssp, seed 0, held-out loss every "
             f"{BIG_WORKERS} minibatches): the learning "
             f"rate is the model's {load_model(MODEL).lr:g} x {WORKERS}/{BIG_WORKERS}, so that sync's update (LR x "
             f"the sum of {BIG_WORKERS} gradients) is the {WORKERS}-worker runs' and async's LR x staleness (~"
             f"{BIG_WORKERS - 1} updates) what it was at {WORKERS} workers (at the default LR they diverged); "
             f"target: the {WORKERS}-worker runs' held-out {target:.4f}. {len(plans)} predictions in one process, "
             f"{took:.0f} s. *vs sync*: seconds to target over sync's at the same shards.")
    ctx.note("")
    ctx.note("| PS link | mode | --ps | steps/s | minibatches to target | s to target | vs sync | final loss |")
    ctx.note("|---|---|---:|---:|---:|---:|---:|---:|")
    rows: list[Row] = []
    for key in keys:
        rate, mode, ps = key.split(" ")
        r = table.loc[key]
        sync = table.loc[_key(rate, "sync", int(ps[3:]))]
        vs = _num(r["time_to_target_s"]) / _num(sync["time_to_target_s"])
        ctx.note(f"| {rate} | {mode} | {ps[3:]} | {_num(r['steps_per_s']):.0f} | {_num(r['steps_to_target']):.0f} | "
                 f"{_num(r['time_to_target_s']):.1f} | {vs:.2f} | {_num(r['final_loss']):.4f} |")
        name = f"network_sweep: {BIG_WORKERS} workers predicted {key}"
        rows += [Row(f"{name}: minibatches to target", _num(r["steps_to_target"]), fmt=".0f"),
                 Row(f"{name}: s to target", _num(r["time_to_target_s"]), fmt=".1f")]
    return rows


def parse_rate(rate: str) -> float:
    """``100mbit`` in bits per second."""
    from ssptk.core.network import parse_network

    net = parse_network(f"ps={rate}")
    assert net is not None
    return float(net.rates["ps"] or 0.0)
