"""A step's time on the wire from TensorFlow's step stats (:mod:`ssptk.runtime.step_trace`): the union of its
``RecvTensor`` spans less the worker's own ops. On hand-made ``StepStats``; the real traces are checked with a real
cluster in tests/test_network_runs.py."""
from __future__ import annotations

import pytest

from ssptk.runtime.step_trace import merged, transfer_seconds, uncovered_micros

WORKER = "/job:worker/replica:0/task:1/"


def stats(nodes: list[tuple[str, str, int, int]]):
    """A ``StepStats`` of ``(device, node name, start µs, duration µs)``."""
    from tensorflow.core.framework import step_stats_pb2

    out = step_stats_pb2.StepStats()
    by_device: dict[str, object] = {}
    for device, name, start, duration in nodes:
        if device not in by_device:
            by_device[device] = out.dev_stats.add(device=device)
        by_device[device].node_stats.add(node_name=name, all_start_micros=start, all_end_rel_micros=duration)
    return out


def test_spans_merge_and_what_a_cover_leaves() -> None:
    assert merged([(5, 20), (0, 10), (30, 40), (40, 41)]) == [(0, 20), (30, 41)]
    assert uncovered_micros([(0, 20), (30, 40)], [(8, 12), (15, 35)]) == 8 + 3 + 5
    assert uncovered_micros([(0, 10)], []) == 10 and uncovered_micros([], [(0, 10)]) == 0


def test_a_step_is_on_the_wire_while_some_tensor_travels_and_its_worker_computes_nothing() -> None:
    ps0, ps1, worker = "/job:ps/replica:0/task:0/device:CPU:0", "/job:ps/replica:0/task:1/device:CPU:0", \
        WORKER + "device:CPU:0"
    step = stats([
        (worker, "RecvTensor", 1_000, 40_000),   # the pull from ps:0 ...
        (worker, "RecvTensor", 1_500, 50_000),   # ... and from ps:1, at once: 50.5 ms on the wire together
        (worker, "MatMul", 52_000, 20_000),      # the worker computes: nothing of the step travels
        (ps1, "RecvTensor", 65_000, 30_000),     # a gradient leaves while the last one is computed: 23 ms of it count
        (ps0, "RecvTensor", 72_000, 1_000),      # a message within that push
        (ps0, "ResourceApplyGradientDescent", 95_000, 100),
        (worker, "RecvTensor", 96_000, 2_000),   # what the worker fetches back
        ("/job:worker/replica:0/task:0/device:CPU:0", "MatMul", 0, 100_000),  # another worker's ops: not this one's
    ])
    assert transfer_seconds(step, WORKER) == pytest.approx((50.5 + 23 + 2) / 1000)
    assert transfer_seconds(stats([(worker, "MatMul", 0, 10)]), WORKER) is None  # nothing crossed
    assert transfer_seconds(stats([]), WORKER) is None  # nothing collected
