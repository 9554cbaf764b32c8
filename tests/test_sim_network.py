"""The simulator's network (:mod:`ssptk.sim.links`): transfers take their bits over the rate, queue at a shared
link, K shards carry 1/K each, and a PS-bound run's predicted steps/s follow the link, not the compute."""
from __future__ import annotations

import pytest

from ssptk.core.errors import UsageError
from ssptk.core.models import builtin_parameters, mlp_parameters
from ssptk.core.network import parse_network
from ssptk.sim import simulate
from ssptk.sim.links import PROTOCOL_OVERHEAD, LinkDirection, Links

MB = 1e6


def test_a_link_direction_books_the_earliest_gap() -> None:
    link = LinkDirection(8e6)  # 1 MB/s
    assert link.book(0.0, 8e6) == pytest.approx(1.0)
    assert link.book(5.0, 8e6) == pytest.approx(6.0)  # booked ahead
    assert link.book(0.5, 8e6) == pytest.approx(2.0)  # waits for the first, fits before the one at 5 s
    assert link.book(1.5, 32e6) == pytest.approx(10.0)  # 4 s fit nowhere before the one at 5-6 s
    link.forget_before(7.0)
    assert link.starts == [6.0]


def test_pulls_queue_at_the_ps_and_shards_split_them() -> None:
    one = Links(parse_network("ps=8mbit"), workers=2, shards=1, model_bytes=MB)
    t = PROTOCOL_OVERHEAD  # seconds for one model through 8 Mbit/s
    assert one.ps_step(0, 0.0, 0.0) == pytest.approx(2 * t)  # pull, then push
    assert one.ps_step(1, 0.0, 0.0) == pytest.approx(3 * t)  # its pull waited for worker 0's
    two = Links(parse_network("ps=8mbit"), workers=2, shards=2, model_bytes=MB)
    assert two.ps_step(0, 0.0, 0.0) == pytest.approx(t)
    assert two.ps_step(1, 0.0, 0.0) == pytest.approx(1.5 * t)


def test_a_ps_bound_run_is_predicted_at_the_links_pace() -> None:
    size = 4 * mlp_parameters(1024)
    free = simulate("async", 4, 20, overhead=0.01, model_bytes=size)
    bound = [simulate("async", 4, 20, overhead=0.01, network="ps=100mbit", ps=k, model_bytes=size) for k in (1, 2, 4)]
    limit = 100e6 / (8 * size * PROTOCOL_OVERHEAD)  # minibatches per second the PS's link can pull
    assert free.steps_per_s > 50
    assert bound[0].steps_per_s == pytest.approx(limit, rel=0.05)
    assert bound[1].steps_per_s > 1.8 * bound[0].steps_per_s and bound[2].steps_per_s > 3.5 * bound[0].steps_per_s


def test_no_time_without_a_shaped_network_and_no_guess_without_a_size() -> None:
    plain = simulate("sync", 3, 10, overhead=0.01)
    assert simulate("sync", 3, 10, overhead=0.01, network=None, model_bytes=MB).wall_s == pytest.approx(plain.wall_s)
    with pytest.raises(UsageError, match="needs the model's size"):
        simulate("sync", 3, 10, overhead=0.01, network="100mbit")


def test_built_in_sizes() -> None:
    assert builtin_parameters("mlp") == mlp_parameters(1024) == 1024 * 1024 + 76 * 1024 + 10
    assert builtin_parameters("digits") == 2410 and builtin_parameters("pkg.mod:fn") is None
