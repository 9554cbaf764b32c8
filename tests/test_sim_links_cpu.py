"""The simulator's shared CPU (``simulate(cores=...)``, :mod:`ssptk.sim.link_model`): workers on a few cores compute
slower together than alone, so a PS-bound link, which keeps them apart, lets each compute faster."""
from __future__ import annotations

import pytest

from ssptk.core.errors import UsageError
from ssptk.sim import simulate
from ssptk.sim.link_model import cpu_seconds

MODEL_BYTES = 4.0 * 85_000  # mlp:256's parameters, float32
FREE = "ps=10gbit"  # shaped (the links are simulated) but far from the bound
BOUND = "ps=100mbit"


def test_cpu_seconds_of_a_free_runs_step() -> None:
    assert cpu_seconds(0.08, 4, 2) == pytest.approx(0.04)
    assert cpu_seconds(0.08, 2, 2) == pytest.approx(0.08)
    assert cpu_seconds(0.08, 1, 4) == pytest.approx(0.08)


def test_a_free_run_keeps_its_measured_pace_whatever_the_cores() -> None:
    """The overhead is a free run's step as measured on those cores: its CPU work is taken here (cpu_seconds), so
    a free run is simulated at the pace it was measured at; giving cores changes nothing there."""
    own = simulate("async", 4, 40, overhead=0.02, network=FREE, model_bytes=MODEL_BYTES)
    shared = simulate("async", 4, 40, overhead=0.02, network=FREE, model_bytes=MODEL_BYTES, cores=2)
    enough = simulate("async", 4, 40, overhead=0.02, network=FREE, model_bytes=MODEL_BYTES, cores=4)
    assert own.steps_per_s == pytest.approx(4 / 0.02, rel=0.05)
    assert shared.steps_per_s == pytest.approx(own.steps_per_s, rel=0.05)
    assert enough.steps_per_s == pytest.approx(own.steps_per_s, rel=1e-6)
    assert (own.cores, shared.cores, enough.cores) == (None, 2.0, 4.0)


def test_one_worker_computing_alone_on_shared_cores_takes_its_cpu_work() -> None:
    """A 20 ms step measured with 4 workers on 2 cores is 10 ms of CPU: worker 0 alone (the others asleep behind
    a 1 s straggler delay each) computes a step in 10 ms, not 20."""
    run = simulate("async", 4, 60, overhead=0.02, network=FREE, model_bytes=MODEL_BYTES, cores=2,
                   straggler={1: 1.0, 2: 1.0, 3: 1.0})
    alone = run.steps[run.steps["worker"] == 0]["t"].diff().median()
    assert alone == pytest.approx(0.01, rel=0.1)


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_under_a_bound_link_the_cores_make_each_step_compute_faster_than_a_free_runs_step(mode: str) -> None:
    """A free run's 70 ms step on 2 cores with 4 workers is 35 ms of CPU: where the PS link keeps the workers
    apart, a step computes in about that, not in 70 ms; the link's cap still holds."""
    step = 0.07
    serial = simulate(mode, 4, 150, overhead=step, network=BOUND, model_bytes=MODEL_BYTES)
    cores = simulate(mode, 4, 150, overhead=step, network=BOUND, model_bytes=MODEL_BYTES, cores=2)
    free = simulate(mode, 4, 60, overhead=step, network=FREE, model_bytes=MODEL_BYTES, cores=2)
    cap = 100e6 / (8 * MODEL_BYTES * 1.05)  # pulls per second through the PS link
    assert free.steps_per_s == pytest.approx(4 / step, rel=0.08)  # the calibration holds where nothing binds
    assert cores.steps_per_s > 1.05 * serial.steps_per_s
    assert cores.steps_per_s < cap


def test_an_injected_delay_sleeps_and_leaves_the_cores_to_the_others() -> None:
    """Worker 1 sleeps 200 ms a step: on one shared core worker 0 then computes alone, its 10 ms step (measured
    with both computing) in the 5 ms of CPU work it is."""
    run = simulate("async", 2, 40, overhead=0.01, network=FREE, model_bytes=MODEL_BYTES, cores=1,
                   straggler={1: 0.2})
    counts = run.steps["worker"].value_counts()
    assert counts[0] > 10 * counts[1]
    assert run.steps[run.steps["worker"] == 0]["t"].diff().median() == pytest.approx(0.005, rel=0.15)


def test_cores_are_the_option_s_own() -> None:
    """``cores`` means what ``--cores`` means (0: each worker its own machine); a bad value is refused in its words."""
    own = simulate("async", 2, 5, overhead=0.01, network=FREE, model_bytes=MODEL_BYTES, cores=0)
    assert own.cores is None
    assert own.steps.equals(simulate("async", 2, 5, overhead=0.01, network=FREE, model_bytes=MODEL_BYTES).steps)
    with pytest.raises(UsageError, match=r"^--cores must be a number of cores >= 0"):
        simulate("async", 2, 5, overhead=0.01, network=FREE, model_bytes=MODEL_BYTES, cores=-1)


def test_without_a_shaped_network_the_cores_change_nothing() -> None:
    plain = simulate("async", 4, 30, overhead=0.02, straggler={1: 0.05})
    given = simulate("async", 4, 30, overhead=0.02, straggler={1: 0.05}, network="delay=0ms", model_bytes=MODEL_BYTES,
                     cores=1)
    assert given.steps_per_s == pytest.approx(plain.steps_per_s) and given.cores is None
