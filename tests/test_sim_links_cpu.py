"""The simulator's shared CPU (``simulate(cores=...)``, :mod:`ssptk.sim.links`): workers on a few cores compute
slower together than alone, so a PS-bound link, which keeps them apart, lets each compute faster."""
from __future__ import annotations

import pytest

from ssptk.core.errors import UsageError
from ssptk.sim import simulate
from ssptk.sim.links import cpu_seconds

MODEL_BYTES = 4.0 * 85_000  # mlp:256's parameters, float32
FREE = "ps=10gbit"  # shaped (the links are simulated) but far from the bound
BOUND = "ps=100mbit"


def test_cpu_seconds_of_a_free_runs_step() -> None:
    assert cpu_seconds(0.08, 4, 2) == pytest.approx(0.04)
    assert cpu_seconds(0.08, 2, 2) == pytest.approx(0.08)
    assert cpu_seconds(0.08, 1, 4) == pytest.approx(0.08)


def test_workers_share_the_cores_and_as_many_cores_as_workers_change_nothing() -> None:
    own = simulate("async", 4, 40, overhead=0.02, network=FREE, model_bytes=MODEL_BYTES)
    shared = simulate("async", 4, 40, overhead=0.02, network=FREE, model_bytes=MODEL_BYTES, cores=2)
    enough = simulate("async", 4, 40, overhead=0.02, network=FREE, model_bytes=MODEL_BYTES, cores=4)
    assert shared.steps_per_s == pytest.approx(2 / 0.02, rel=0.05)  # 2 cores, 20 ms of CPU a step
    assert own.steps_per_s == pytest.approx(4 / 0.02, rel=0.05)
    assert enough.steps_per_s == pytest.approx(own.steps_per_s, rel=1e-6)


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_under_a_bound_link_the_cores_make_each_step_compute_faster_than_a_free_runs_step(mode: str) -> None:
    """A free run's 70 ms step on 2 cores with 4 workers is 35 ms of CPU: where the PS link keeps the workers
    apart, a step computes in about that, not in 70 ms; the link's cap still holds."""
    step = 0.07
    serial = simulate(mode, 4, 150, overhead=step, network=BOUND, model_bytes=MODEL_BYTES)
    cores = simulate(mode, 4, 150, overhead=cpu_seconds(step, 4, 2), network=BOUND, model_bytes=MODEL_BYTES, cores=2)
    free = simulate(mode, 4, 60, overhead=cpu_seconds(step, 4, 2), network=FREE, model_bytes=MODEL_BYTES, cores=2)
    cap = 100e6 / (8 * MODEL_BYTES * 1.05)  # pulls per second through the PS link
    assert free.steps_per_s == pytest.approx(4 / step, rel=0.08)  # the calibration holds where nothing binds
    assert cores.steps_per_s > 1.05 * serial.steps_per_s
    assert cores.steps_per_s < cap


def test_an_injected_delay_sleeps_and_leaves_the_cores_to_the_others() -> None:
    """Worker 1 sleeps 200 ms a step: on one shared core worker 0 then computes alone, at its full pace."""
    run = simulate("async", 2, 40, overhead=0.01, network=FREE, model_bytes=MODEL_BYTES, cores=1,
                   straggler={1: 0.2})
    counts = run.steps["worker"].value_counts()
    assert counts[0] > 10 * counts[1]
    assert run.steps_per_s > 0.85 / 0.01


def test_bad_cores_are_refused() -> None:
    with pytest.raises(UsageError, match="cores must be a number > 0"):
        simulate("async", 2, 5, overhead=0.01, network=FREE, model_bytes=MODEL_BYTES, cores=0)
