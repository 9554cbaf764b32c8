"""A step's time on the wire, timed by TensorFlow's own step stats on a sample of a worker's steps.

Under ``--network`` every :data:`TRACE_EVERY`-th step of a parameter-server worker (sync, ssp, async) runs with
``RunOptions(trace_level=FULL_TRACE)`` (TensorFlow 2.21 collects no remote task's stats at the lighter
``SOFTWARE_TRACE``). The stats hold one ``RecvTensor`` entry per tensor that crossed from one task to another in
that step: the parameters pulled from each shard, the gradients pushed, the control messages between tasks and the
values fetched back. Each entry spans from the tensor being sent (once it was produced and asked for) to its last
byte arriving, so it includes waiting behind other workers' traffic on a shared link. A step's transfer time is the
time in which some tensor of the step was on its way and the worker computed nothing (the union of those spans less
the worker's own ops' spans): the step record's ``transfer_s``. Traced steps take as long as the others
(measured: ``benchmarks/FINDINGS.md``).

Not traced: GPU workers (a full trace asks for CUPTI, which a machine may lack), local SGD and allreduce (their
share stays the estimate from bytes and rates, ``ssptk.analysis.traffic``).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["TRACE_EVERY", "TracedStep", "merged", "transfer_seconds", "uncovered_micros"]

#: every this-many-th step of a worker is traced (the first at this step)
TRACE_EVERY = 10


def transfer_seconds(step_stats: Any, worker: str) -> float | None:
    """Seconds in which some tensor of a step was on its way between tasks while ``worker`` (a device name's prefix,
    ``/job:worker/replica:0/task:3/``) computed nothing: the union of the ``RecvTensor`` spans in ``step_stats`` (a
    ``StepStats`` proto) less the worker's own ops' spans (a gradient that leaves while the next one is computed
    counts once, as compute); ``None`` where the stats have no transfer (nothing crossed, or nothing was
    collected)."""
    wire: list[tuple[int, int]] = []
    busy: list[tuple[int, int]] = []
    for d in step_stats.dev_stats:
        own = d.device.startswith(worker)
        for n in d.node_stats:
            span = (n.all_start_micros, n.all_start_micros + n.all_end_rel_micros)
            if n.node_name == "RecvTensor":
                wire.append(span)
            elif own:
                busy.append(span)
    return None if not wire else uncovered_micros(merged(wire), merged(busy)) / 1e6


def merged(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """``[start, end]`` spans merged into disjoint ones, in order."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def uncovered_micros(spans: list[tuple[int, int]], cover: list[tuple[int, int]]) -> int:
    """The length of disjoint ``spans`` that disjoint ``cover`` leaves uncovered (both in order)."""
    total, i = 0, 0
    for start, end in spans:
        covered = 0
        while i < len(cover) and cover[i][1] <= start:
            i += 1
        j = i
        while j < len(cover) and cover[j][0] < end:
            covered += min(end, cover[j][1]) - max(start, cover[j][0])
            j += 1
        total += (end - start) - covered
    return total


class TracedStep:
    """A step callable that runs every ``every``-th call traced and keeps that call's :func:`transfer_seconds` in
    :attr:`transfer_s` (``None`` after an untraced call).

    ``fast``: the step's usual callable; ``traced``: the same step through ``Session.run``, taking ``options`` and
    ``run_metadata`` (``make_callable(..., accept_options=True)``); ``tf``: the TensorFlow module; ``worker``: the
    worker's index."""

    def __init__(self, fast: Callable[..., Any], traced: Callable[..., Any], tf: Any, worker: int,
                 every: int = TRACE_EVERY) -> None:
        self.fast, self.traced, self.tf, self.every = fast, traced, tf, every
        self.worker = f"/job:worker/replica:0/task:{worker}/"
        self.calls = 0
        self.transfer_s: float | None = None

    def __call__(self, *inputs: Any) -> Any:
        self.calls += 1
        self.transfer_s = None
        if self.calls % self.every:
            return self.fast(*inputs)
        v1 = self.tf.compat.v1
        metadata = v1.RunMetadata()
        out = self.traced(*inputs, options=v1.RunOptions(trace_level=v1.RunOptions.FULL_TRACE),
                          run_metadata=metadata)
        self.transfer_s = transfer_seconds(metadata.step_stats, self.worker)
        return out
