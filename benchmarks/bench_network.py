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


def _ps_sent(run_dir: str, summary: dict[str, Any]) -> dict[str, Any]:
    t = summary.get("traffic") or {}
    ps = sum(c["sent"] for task, c in (t.get("tasks") or {}).items() if task.startswith("ps:"))
    n = summary.get("total_steps") or 0
    return {"ps_sent_per_minibatch": ps / n if n else None,
            "busy": (t.get("busiest") or [None, None])[1]}


def _predicted(common: dict[str, Any], mode: str, ps: int, overhead_ms: float | None) -> float | None:
    from ssptk import simulate

    if overhead_ms is None:
        return None
    return simulate(mode, common["workers"], common["steps"], overhead=overhead_ms / 1000.0,
                    network=common["network"], ps=ps, model_bytes=_model_bytes()).steps_per_s


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
