"""The network (issue 22): measured bytes against the model's, how full a PS-bound run keeps the PS's link, what
shards buy, and the simulator's steps/s against shaped real runs.

Listed in ``run.py``'s ``BENCHMARKS``; the helpers (``Row``, targets, the context) are :mod:`harness`'s. Each
figure is a median over ``--repeat`` alternating rounds (ABBA).
"""
from __future__ import annotations

from typing import Any

from harness import Context, Row, Target, at_least, at_most, median, rates, ratio, values_line

MODEL, WIDTH = "mlp", 1024  # 1.1 M parameters: 4.5 MB per pull and per push


def _within(rel: float) -> Target:
    return Target(f"within {rel:.0%}", lambda v: abs(v - 1.0) <= rel)


def _model_bytes() -> float:
    from ssptk.core.models import mlp_parameters

    return 4.0 * mlp_parameters(WIDTH)


def mlp_variable_bytes(width: int) -> list[float]:
    """``mlp:WIDTH``'s variables' float32 bytes in the order the model makes them (each kernel as
    ``MLP_BLOCKS`` column blocks, then its bias): what ``--ps K`` places shard by shard."""
    import numpy as np

    from ssptk.core.models import MLP_BLOCKS

    out: list[float] = []
    for fan_in, fan_out in ((64, width), (width, width), (width, 10)):
        out += [4.0 * fan_in * len(c) for c in np.array_split(np.arange(fan_out), min(MLP_BLOCKS, fan_out))]
        out.append(4.0 * fan_out)
    return out


def _ps_sent(run_dir: str, summary: dict[str, Any]) -> dict[str, Any]:
    t = summary.get("traffic") or {}
    ps = sum(c["sent"] for task, c in (t.get("tasks") or {}).items() if task.startswith("ps:"))
    n = summary.get("total_steps") or 0
    return {"ps_sent_per_minibatch": ps / n if n else None,
            "busy": (t.get("busiest") or [None, None])[1]}


def _predicted(common: dict[str, Any], mode: str, ps: int, overhead_ms: float | None) -> float | None:
    """The timing-only prediction, the workers sharing this machine's cores (``--cores``' default)."""
    from ssptk import simulate

    if overhead_ms is None:
        return None
    return simulate(mode, common["workers"], common["steps"], overhead=overhead_ms / 1000.0,
                    network=common["network"], ps=ps, model_bytes=mlp_variable_bytes(WIDTH)).steps_per_s


def bench_network(ctx: Context) -> list[Row]:
    """Bytes, link use, shards and predictions under a shaped PS link (``mlp``, 4 workers)."""
    steps = 8 if ctx.quick else 15
    common: dict[str, Any] = dict(model=MODEL, workers=4, steps=steps, network="ps=100mbit", layout="processes")
    free = dict(common, network=None)
    configs = {"async": dict(common, mode="async"), "sync": dict(common, mode="sync"),
               "sync ps=4": dict(common, mode="sync", ps=4), "async free": dict(free, mode="async")}
    res: dict[str, list[dict[str, Any]]] = {label: [] for label in configs}
    for r in range(ctx.repeat):
        order = list(configs) if r % 2 == 0 else list(reversed(configs))
        for label in order:
            res[label].append(ctx.run(label, inspect=_ps_sent, **configs[label]))
    for label in configs:
        ctx.note(values_line(label, res[label]))
    model_bytes = _model_bytes()
    per_pull = median([s["ps_sent_per_minibatch"] for s in res["async"] if s.get("ps_sent_per_minibatch")])
    busy = median([s["busy"] for s in res["async"] if s.get("busy")])
    shards = ratio(median(rates(res["sync ps=4"])), median(rates(res["sync"])))
    rows = [Row("network: PS bytes sent per minibatch / the model's float32 bytes", ratio(per_pull, model_bytes),
                at_most(1.10), note="a pull is the whole model; the rest is gRPC, TCP and IP"),
            Row("network: async PS link busy (share of 100 Mbit/s)", busy, at_least(0.80)),
            Row("network: sync steps/s with --ps 4 / --ps 1", shards, at_least(2.5)),
            Row("network: async steps/s free loopback / ps=100mbit",
                ratio(median(rates(res["async free"])), median(rates(res["async"]))), note="what the link costs")]
    for label, mode, ps in (("async", "async", 1), ("sync", "sync", 1), ("sync ps=4", "sync", 4)):
        measured = median(rates(res[label]))
        overhead = median([s["overhead_ms"] for s in res["async free"] if s.get("overhead_ms")])
        rows.append(Row(f"network: {label} predicted / measured steps/s", ratio(_predicted(common, mode, ps, overhead),
                                                                                  measured), _within(0.15),
                        note="overhead calibrated on the free async run"))
    return rows


# --- predicted against shaped real runs -------------------------------------------------------------------------

PREDICTED_MODEL, PREDICTED_NETWORK = "mlp:256", "ps=20mbit"  # 85 k parameters: 0.36 MB per pull, 7 pulls/s
PREDICTED_MODES, PREDICTED_SHARDS = ("sync", "ssp:2", "async"), (1, 4)
#: (workers, layout, steps per worker): each a group of real runs with one target; ``SSPTK_BENCH_NETWORK_GROUPS``
#: (``4:processes:30,8:shared:15``) picks others, ``SSPTK_BENCH_NETWORK_MODES`` (``sync,async``) and
#: ``SSPTK_BENCH_NETWORK_SHARDS`` (``1,4``) other modes and shard counts; ``SSPTK_BENCH_KEEP=DIR`` keeps the real runs
#: (and the free runs' figures) under ``DIR``, and with ``SSPTK_BENCH_REUSE=1`` only predicts them again
PREDICTED_GROUPS = ((4, "processes", 30), (4, "shared", 30), (8, "processes", 30))


def _groups() -> list[tuple[int, str, int]]:
    import os

    text = os.environ.get("SSPTK_BENCH_NETWORK_GROUPS")
    if not text:
        return list(PREDICTED_GROUPS)
    return [(int(w), layout, int(k)) for w, layout, k in (g.split(":") for g in text.split(","))]


def _labels() -> list[str]:
    import os

    modes = os.environ.get("SSPTK_BENCH_NETWORK_MODES")
    shards = os.environ.get("SSPTK_BENCH_NETWORK_SHARDS")
    return [f"{m} ps={k}" for m in (modes.split(",") if modes else PREDICTED_MODES)
            for k in ([int(x) for x in shards.split(",")] if shards else PREDICTED_SHARDS)]


def _kept(keep: str) -> Any:
    """An ``inspect`` that copies the run directory to ``keep/<label>`` (the harness deletes its own)."""
    import shutil

    def inspect(run_dir: str, summary: dict[str, Any]) -> dict[str, Any]:
        shutil.copytree(run_dir, keep, dirs_exist_ok=True)
        return {"kept": keep}
    return inspect


def _group(ctx: Context, workers: int, layout: str, steps: int) -> list[Row]:
    """One group: each mode and shard count free (its per-step overhead), shaped (measured) and predicted
    (the shaped options, the free run's overhead), the workers sharing this machine's cores (``--cores``'s default,
    as the real runs did) and, beside it, each on a CPU of its own (``--cores 0``: the model before the shared CPU);
    minibatches to one target: the real shaped runs' own."""
    import json
    import os
    import shutil

    from ssptk.analysis import compare_table
    from ssptk.core.resources import machine_cores
    from ssptk.experiment.predicted_runs import plan, predict
    from ssptk.rundir import load_run

    base = os.path.join(os.environ.get("SSPTK_BENCH_KEEP") or ctx.tmp, f"pred-{workers}-{layout}")
    common: dict[str, Any] = dict(model=PREDICTED_MODEL, workers=workers, steps=steps, layout=layout, seed=0)
    labels = _labels()
    shaped: dict[str, dict[str, Any]] = {}
    free: dict[str, dict[str, Any]] = {}
    made_before = os.path.join(base, "free.json")
    if os.environ.get("SSPTK_BENCH_REUSE") and os.path.exists(made_before):  # kept runs, predicted again
        with open(made_before) as f:
            free = {label: v for label, v in json.load(f).items() if label in labels}
        shaped = {label: {"kept": os.path.join(base, "real", label)} for label in free}
        labels = list(free)
        for tag in ("predicted", "predicted-own"):  # an earlier invocation's predictions: made again below
            shutil.rmtree(os.path.join(base, tag), ignore_errors=True)
        ctx.note(f"{workers} workers, {layout}: the real runs read back from {base} (`SSPTK_BENCH_REUSE`, made by an "
                 "earlier invocation with `SSPTK_BENCH_KEEP`); only the predictions are new.")
    else:
        for label in labels:
            mode, k = label.split(" ps=")
            opts = dict(common, mode=mode, ps=int(k))
            free[label] = ctx.run(f"{label} free {workers}{layout[0]}", **opts)
            shaped[label] = ctx.run(f"{label} {workers}{layout[0]}", inspect=_kept(os.path.join(base, "real", label)),
                                    network=PREDICTED_NETWORK, **opts)
        os.makedirs(base, exist_ok=True)
        with open(made_before, "w") as f:  # what the predictions were made from
            json.dump({label: {k: free[label].get(k) for k in ("overhead_ms", "steps_per_s", "cpu_ms_per_step",
                                                                 "gap_ms")} for label in labels}, f)
    plans, planned = [], []
    for tag, cores in (("predicted", None), ("predicted-own", 0)):  # --cores default (this machine's), --cores 0
        for label in labels:
            overhead, gap = free[label].get("overhead_ms"), _gap(free[label], shaped[label])
            if overhead and shaped[label].get("kept"):
                mode, k = label.split(" ps=")
                plans.append(plan(overhead / 1000.0, run_dir=os.path.join(base, tag, label), mode=mode, ps=int(k),
                                  gap=None if gap is None else gap / 1000.0,
                                  network=PREDICTED_NETWORK, gpus="none", stall_timeout=0, cores=cores,
                                  **{**common, "layout": "processes"}))
                planned += [label] if cores is None else []
    made = predict(plans, raise_on_failure=False)  # one predicting process
    predicted, own = dict(zip(planned, made)), dict(zip(planned, made[len(planned):]))
    real = compare_table({label: load_run(shaped[label]["kept"]) for label in planned})
    target = real.attrs["target"]
    pred = compare_table({label: load_run(r.run_dir) for label, r in predicted.items()}, target=target)
    before = compare_table({label: load_run(r.run_dir) for label, r in own.items()}, target=target)
    ctx.note("")
    ctx.note(f"**{workers} workers, {layout}**: `--model {PREDICTED_MODEL} --network {PREDICTED_NETWORK} --steps "
             f"{steps}`; target: training loss {target if target is None else f'{target:.4f}'} (the shaped runs'); "
             f"predicted with the workers sharing {machine_cores()} cores (`--cores`' default: this machine's); "
             "*--cores 0*: predicted / measured steps/s with each worker on a CPU of its own (the model before).")
    ctx.note("")
    ctx.note("| run | free steps/s | overhead ms | shaped steps/s | PS link busy | predicted | predicted / measured | "
             "minibatches to target, measured | predicted | predicted / measured | --cores 0 | gap ms | "
             "staleness, measured | predicted |")
    ctx.note("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    rows: list[Row] = []
    for label in planned:
        r, p = real.set_index("label").loc[label], pred.set_index("label").loc[label]
        speed = ratio(p["steps_per_s"], r["steps_per_s"])
        own_speed = ratio(before.set_index("label").loc[label]["steps_per_s"], r["steps_per_s"])
        to_target = ratio(_num(p["steps_to_target"]), _num(r["steps_to_target"]))
        line = (f"| {label} | {_f(free[label].get('steps_per_s'))} | {_f(free[label].get('overhead_ms'))} | "
                f"{_f(r['steps_per_s'])} | {_f(r['link_busy'], '.2f')} | {_f(p['steps_per_s'])} | {_f(speed, '.2f')} | "
                f"{_f(r['steps_to_target'], '.0f')} | {_f(p['steps_to_target'], '.0f')} | {_f(to_target, '.2f')} | "
                f"{_f(own_speed, '.2f')} | {_f(free[label].get('gap_ms'))} | {_f(r['mean_staleness'], '.2f')} | "
                f"{_f(p['mean_staleness'], '.2f')} |")
        ctx.note(line)
        print(f"    {line}", flush=True)
        name = f"network_predicted: {workers} {layout} {label}"
        rows += [Row(f"{name}: predicted / measured steps/s", speed, _within(0.15),
                     note=f"--cores 0: {_f(own_speed, '.2f')}"),
                 Row(f"{name}: predicted / measured minibatches to target", to_target, _within(0.20))]
    return rows


def _gap(free: dict[str, Any], shaped: dict[str, Any]) -> float | None:
    """The gap (ms) a prediction takes: the free run's (``SSPTK_BENCH_GAP=none``: none; ``=shaped``: the shaped run's
    own, a diagnosis of what the staleness costs, not a prediction)."""
    import json
    import os

    how = os.environ.get("SSPTK_BENCH_GAP", "free")
    if how == "shaped" and shaped.get("kept"):
        with open(os.path.join(shaped["kept"], "summary.json")) as f:
            return json.load(f).get("gap_ms")
    return None if how == "none" else free.get("gap_ms")


def _num(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if v != v else v


def _f(x: Any, fmt: str = ".1f") -> str:
    v = _num(x)
    return "-" if v is None else format(v, fmt)


def bench_network_predicted(ctx: Context) -> list[Row]:
    """The simulator's steps/s and minibatches to target against shaped real runs: sync, ssp:2 and async, with
    ``--ps 1`` and ``--ps 4``, per group of :data:`PREDICTED_GROUPS` (``--quick``: the first group, 10 steps)."""
    ctx.note(f"Each run is made free (`--network` left out: its calibrated per-step overhead, the prediction's "
             f"clock) and shaped (`--network {PREDICTED_NETWORK}`: measured); the prediction is `ssptk.predict` "
             "with the shaped options and the free run's overhead (the schedule simulated through the links, "
             "replayed with the model's gradients), the workers sharing this machine's cores as the real runs did "
             "(`--cores`: the free run's step is CPU work they share; since 2026-11-27), and beside it with "
             f"`--cores 0` (each worker its own CPU, as before). One round: a group takes {2 * len(_labels())} runs.")
    rows: list[Row] = []
    groups = _groups()
    for workers, layout, steps in groups[:1] if ctx.quick else groups:
        print(f"  {workers} workers, {layout}", flush=True)
        rows += _group(ctx, workers, layout, 10 if ctx.quick else steps)
    return rows
