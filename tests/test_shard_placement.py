"""One shard placement: the engine puts a model's variables on the PS shards (``--ps K``) where the simulator counts
their bytes, because both ask ``ssptk.core.shards`` (no cluster: the worker's graph is built, not run)."""
from __future__ import annotations

import pytest

from ssptk.core.models import load_model
from ssptk.core.shards import GLOBAL_STEP_BYTES, ShardBalancer, shard_bytes


def engine_bytes(model: str, shards: int) -> tuple[list[float], str]:
    """Each shard's bytes as a worker's graph places the model's variables (the global step left out), and the
    global step's device."""
    import tensorflow as tf

    from ssptk.runtime.placement import shard_setter
    from ssptk.runtime.ps_graph import model_graph

    v1 = tf.compat.v1
    cluster = {"ps": [f"127.0.0.1:{2222 + k}" for k in range(shards)], "worker": ["127.0.0.1:3333"]}
    with tf.Graph().as_default(), v1.device(shard_setter(v1, "/job:worker/task:0", cluster)):
        global_step, _, _, _, variables = model_graph(load_model(model), seed=0)
    held = [0.0] * shards
    for v in variables:
        held[tf.DeviceSpec.from_string(v.device).task] += v.shape.num_elements() * v.dtype.base_dtype.size
    return held, global_step.device


@pytest.mark.parametrize("model", ["linear", "keras", "digits", "mlp:48"])
def test_the_engine_places_variables_where_the_simulator_counts_them(model: str) -> None:
    from ssptk.runtime.gradients import TFOracle

    sizes = [float(p.nbytes) for p in TFOracle(load_model(model), 0, 1).initial()]  # what a prediction simulates
    for shards in (2, 3, 4):
        held, step_device = engine_bytes(model, shards)
        assert step_device.endswith("/job:ps/task:0")
        assert held == shard_bytes(sizes, shards), (model, shards)
        assert sum(held) == sum(sizes)


def test_the_balancer_takes_the_lightest_shard_first_in_order() -> None:
    balancer = ShardBalancer(3)
    # 8 | 100 | 4, then 4 to the lightest (shard 2), 50 to the lighter of two equal ones (the first), 1 to shard 2
    assert [balancer.place(b) for b in (GLOBAL_STEP_BYTES, 100, 4, 4, 50, 1)] == [0, 1, 2, 2, 0, 2]
    assert balancer.load == [GLOBAL_STEP_BYTES + 50, 100, 9]
    assert shard_bytes([100, 4, 4, 50, 1], 3) == [50, 100, 9]  # the global step's bytes are not the model's
    assert shard_bytes(90.0, 3) == [30.0, 30.0, 30.0]
