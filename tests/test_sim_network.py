"""The simulator's network (:mod:`ssptk.sim.link_model`): transfers share a link as TCP does (the earlier keeps more), go at the
pace of the slowest link they cross, K shards carry the bytes placed on them, and a PS-bound run's predicted
steps/s follow the link, not the compute."""
from __future__ import annotations

import pytest
from helpers import ideal

from ssptk.core.errors import UsageError
from ssptk.core.models import builtin_parameters, mlp_parameters
from ssptk.core.network import parse_network
from ssptk.core.shards import shard_bytes
from ssptk.sim import simulate
from ssptk.sim.fluid import Fluid
from ssptk.sim.link_model import HEAD_SHARE, PROTOCOL_OVERHEAD, LinkFit, LinkModel
from ssptk.sim.spec import SimSpec

MB = 1e6



def _links(rate: str, workers: int, ps: int, model_bytes: float | list[float], mode: str = "async",
           **fit: float) -> LinkModel:
    """The simulated links of ``workers`` workers and ``ps`` shards under ``--network rate``."""
    return LinkModel(SimSpec(network=parse_network(rate), workers=workers, ps=ps, model_bytes=model_bytes, mode=mode),
                 LinkFit(**fit))

def test_transfers_on_one_link_share_it_equally_and_the_slowest_link_holds_a_transfer() -> None:
    fair = Fluid([8e6])  # 1 MB/s
    a, b = fair.add(8e6, [0]), fair.add(8e6, [0])
    assert fair.rate(a) == fair.rate(b) == pytest.approx(4e6)
    assert fair.next_end()[0] == pytest.approx(2.0)  # two equal transfers at once: each takes twice as long
    fair.advance(2.0)
    assert sorted(fair.pop_done(fair.next_end()[1])) == [a, b] and not fair.flows
    # one transfer also crosses a 2 Mbit/s link: it goes at that pace, the other takes the rest of the first link
    two = Fluid([8e6, 2e6])
    slow, other = two.add(2e6, [0, 1]), two.add(6e6, [0])
    assert two.rate(slow) == pytest.approx(2e6) and two.rate(other) == pytest.approx(6e6)
    assert two.next_end()[0] == pytest.approx(1.0)


def test_a_heavier_transfer_takes_more_of_a_link_and_a_late_one_its_share_at_once() -> None:
    link = Fluid([8e6])
    first = link.add(8e6, [0])
    link.advance(0.5)  # alone: 4 Mbit sent
    late = link.add(9e6, [0], weight=3.0)  # TCP gives a newcomer its share at once (measured), here weighted 3:1
    assert link.rate(first) == pytest.approx(2e6) and link.rate(late) == pytest.approx(6e6)
    assert link.next_end() == (pytest.approx(2.0), late)
    link.advance(2.0)
    assert link.pop_done(late) == [late] and link.rate(first) == pytest.approx(8e6)  # the link is its own again
    assert link.next_end() == (pytest.approx(2.125), first)


def test_the_earlier_of_two_transfers_keeps_more_of_a_link_however_many_came_before() -> None:
    link = Fluid([1.0], factor=1.5)
    for rank in range(1, 2001):  # 2,000 transfers one after another: ranks far beyond what 1.5 ** -rank can hold
        link.add(1e-3, [0], order=(0, rank))
        link.advance(link.next_end()[0])
        link.pop_done(link.next_end()[1])
    old = link.add(1.0, [0], order=(0, 2001))
    new, other_key = link.add(1.0, [0], order=(0, 2002)), link.add(2.0, [0], order=(7, 5))
    # ranks count within a key, from its oldest transfer in flight: 1 : 1/1.5 here, and 1 for the other key's
    assert [link.rate(f) for f in (old, new, other_key)] == pytest.approx([1 / (2 + 1 / 1.5) * w for w in (1, 1 / 1.5, 1)])
    link.advance(link.next_end()[0])
    link.pop_done(link.next_end()[1])  # the old one ends first; the next in line is now the oldest: weight 1
    assert link.rate(new) == pytest.approx(0.5)


def test_the_oldest_transfer_on_a_link_takes_head_shares_and_the_rest_share_evenly() -> None:
    link = Fluid([1.0], head=2.0)
    first, second, third = (link.add(1.0, [0], order=(0, rank)) for rank in (1, 2, 3))
    unordered = link.add(1.0, [0])  # no order (the CPU's work): weighs 1
    assert [link.rate(f) for f in (first, second, third, unordered)] == pytest.approx([0.4, 0.2, 0.2, 0.2])
    link.advance(link.next_end()[0])
    assert link.pop_done(link.next_end()[1]) == [first]
    assert [link.rate(f) for f in (second, third)] == pytest.approx([0.5, 0.25])  # the next oldest takes its place


def test_shards_hold_the_bytes_placed_on_them() -> None:
    assert shard_bytes(100.0, 4) == [25.0] * 4
    # each variable to the shard with the fewest bytes so far; the global step (8 bytes) is on shard 0 first
    assert shard_bytes([40, 40, 10, 10], 2) == [40 + 10, 40 + 10]
    assert shard_bytes([100, 8, 4], 2) == [8 + 4, 100]
    assert shard_bytes([5, 5], 1) == [10.0]


def test_pulls_at_once_end_together_and_shards_split_them() -> None:
    t = 8 * MB * PROTOCOL_OVERHEAD / 8e6  # seconds for one model through 8 Mbit/s
    one = _links("ps=8mbit", 2, 1, MB, share_sigma=0.0, head=1.0)
    one.start(0, 0.0, 0.0)
    one.start(1, 0.0, 0.0)
    ends = [one.next(), one.next()]  # both pulls share the PS's link out (2t), then both pushes its link in
    assert [w for _, w in ends] == [0, 1] and [e for e, _ in ends] == pytest.approx([4 * t, 4 * t])
    assert not one
    # the oldest on a link takes HEAD_SHARE (raw TCP's 2, the default) to each other one's 1 (2/3 and 1/3 here): the
    # pull taken first ends at t / (2/3), and its push, alone on the link in until the other's enters, keeps 2/3 of
    # it after (so does arrival order with the same factor: two transfers cannot tell the rules apart)
    for ordered in (_links("ps=8mbit", 2, 1, MB, share_sigma=0.0),
                    _links("ps=8mbit", 2, 1, MB, share_sigma=0.0, head=1.0, arrival_factor=HEAD_SHARE)):
        assert HEAD_SHARE == 2.0
        a, b = 2 / 3, 1 / 3
        ordered.start(0, 0.0, 0.0)
        ordered.start(1, 0.0, 0.0)
        first_pull, second_pull = t / a, t / a + (t - b * t / a)
        first_push = second_pull + (t - (second_pull - first_pull)) / a
        second_push = first_push + t - b * (first_push - second_pull)
        assert [ordered.next(), ordered.next()] == [(pytest.approx(first_push), 0), (pytest.approx(second_push), 1)]
    two = _links("ps=8mbit", 1, 2, [MB / 2, MB / 2])
    two.start(0, 0.0, 0.0)
    assert two.next() == (pytest.approx(t), 0)  # half the model from each shard, at once
    delayed = _links("ps=8mbit,delay=10ms", 1, 1, MB)
    delayed.start(0, 0.0, 0.5)
    assert delayed.next()[0] == pytest.approx(2 * t + 0.5 + 4 * 0.01)  # each transfer: a request and a reply


def test_sync_through_one_ps_link_keeps_it_half_idle_and_four_shards_lift_it() -> None:
    size = 4 * mlp_parameters(1024)
    rate = {(m, k): simulate(m, 4, 10, overhead=0.05, network="ps=100mbit", ps=k, model_bytes=size).steps_per_s
            for m, k in (("sync", 1), ("async", 1), ("sync", 4))}
    limit = 100e6 / (8 * size * PROTOCOL_OVERHEAD)
    # sync: all pull at once, then all push: each direction of the link is busy little more than half the time
    # (0.61 here, as real sync runs keep theirs: the pull served first computes and pushes while the last pulls; a
    # first-come queue would overlap more: ~0.8); async's pulls and pushes interleave and keep the link out mostly
    # busy (exactly even sharing would keep them in step: 0.5)
    assert rate["sync", 1] < 0.7 * limit and 0.7 * limit < rate["async", 1] <= limit * 1.001
    assert rate["sync", 4] > 3 * rate["sync", 1]


def test_a_ps_bound_run_is_predicted_at_the_links_pace() -> None:
    size = 4 * mlp_parameters(1024)
    free = simulate("async", 4, 20, overhead=0.01, model_bytes=size)
    bound = [simulate("async", 4, 20, overhead=0.01, network="ps=100mbit", ps=k, model_bytes=size) for k in (1, 2, 4)]
    limit = 100e6 / (8 * size * PROTOCOL_OVERHEAD)  # minibatches per second the PS's link can pull
    assert free.steps_per_s > 50
    # the link out nearly full: workers drift apart as TCP shares unevenly, so pulls and pushes interleave
    assert 0.75 * limit < bound[0].steps_per_s <= 1.001 * limit
    assert bound[1].steps_per_s > 1.4 * bound[0].steps_per_s and bound[2].steps_per_s > 2.4 * bound[0].steps_per_s


def test_no_time_without_a_shaped_network_and_no_guess_without_a_size() -> None:
    plain = simulate("sync", 3, 10, overhead=0.01)
    assert simulate("sync", 3, 10, overhead=0.01, network=None, model_bytes=MB).wall_s == pytest.approx(plain.wall_s)
    with pytest.raises(UsageError, match="needs the model's size"):
        simulate("sync", 3, 10, overhead=0.01, network="100mbit")


def test_built_in_sizes() -> None:
    assert builtin_parameters("mlp") == mlp_parameters(1024) == 1024 * 1024 + 76 * 1024 + 10
    assert builtin_parameters("digits") == 2410 and builtin_parameters("pkg.mod:fn") is None


def test_the_overhead_of_a_shaped_run_leaves_its_transfers_out() -> None:
    size = 4 * mlp_parameters(256)
    for net, overhead in (("ps=100mbit", 0.2), ("ps=20mbit", 0.05)):  # compute-bound, then link-bound
        shaped = simulate("async", 4, 20, overhead=overhead, network=net, model_bytes=size, seed=1)
        plain = ideal(shaped.steps, "async", 4, 20, seed=1)
        known = ideal(shaped.steps, "async", 4, 20, seed=1, network=net, model_bytes=size)
        assert known["ideal_steps_per_s"] == pytest.approx(shaped.steps_per_s, rel=0.1)
        assert plain["overhead_ms"] > known["overhead_ms"]  # without the network: the transfers counted as compute
    # where the link is not the bound, the step's own cost is found again; where it is, steps/s hardly depend on it
    compute_bound = simulate("async", 4, 20, overhead=0.2, network="ps=100mbit", model_bytes=size, seed=1)
    found = ideal(compute_bound.steps, "async", 4, 20, seed=1, network="ps=100mbit", model_bytes=size)
    assert found["overhead_ms"] == pytest.approx(200, rel=0.1)


def test_an_async_update_counts_once_ps0s_part_is_in_and_an_ssp_one_once_every_shard_told_ps0() -> None:
    """As the engine does: async counts an update (its `global_step`, its landing) once its part on ps:0 is in, while
    the worker's step ends when every shard has its part; ssp's count (and tick) waits for every shard."""
    t = 8 * MB * PROTOCOL_OVERHEAD / 8e6  # one MB through 8 Mbit/s
    landed = {}
    for mode in ("async", "ssp"):
        # the first variable goes to ps:1 (ps:0 holds the global step), the second, small one to ps:0
        links = _links("ps=8mbit", 1, 2, [MB, 1e3], mode=mode, share_sigma=0.0)
        links.start(0, 0.0, 0.0)
        first, _ = links.next()
        links.start(0, first, 0.0)  # at once: the next step starts when the last one's result is back
        landed[mode] = [first / t, links.next()[0] / t]
    assert landed["async"] == [pytest.approx(1.0, abs=0.01), pytest.approx(3.0, abs=0.01)]
    assert landed["ssp"] == [pytest.approx(2.0), pytest.approx(4.0)]


def test_a_steps_result_comes_back_behind_what_the_ps_link_out_holds() -> None:
    """The result of a step (a few bytes from the PS) waits in the PS's link out behind the pulls queued there: the
    worker reads again only then, so the updates that land meanwhile are not stale (a link-bound async run's
    staleness: below N-1, as the real runs measure it)."""
    t = 8 * MB * PROTOCOL_OVERHEAD / 8e6
    links = _links("ps=8mbit", 2, 1, MB, share_sigma=0.0, head=1.0)
    links.start(0, 0.0, 0.0)
    links.start(1, 1.5 * t, 0.0)
    assert links.next() == (pytest.approx(2 * t), 0)  # worker 0's push lands as worker 1's pull is half done
    links.start(0, 2 * t, 0.0)  # its result is back at 2.5 t, behind the rest of that pull: its pull starts then
    assert links.next() == (pytest.approx(3.5 * t), 1)
    links.start(1, 3.5 * t, 0.0)
    assert links.next() == (pytest.approx(4.5 * t), 0)
    size = 4.0 * builtin_parameters("mlp:256")
    for k in (1, 4):  # 8 workers at ps=20mbit: real runs measured 5.7 (--ps 1) and 4.4 (--ps 4)
        run = simulate("async", 8, 30, overhead=0.04, network="ps=20mbit", ps=k, model_bytes=size)
        assert 5.0 < run.steps["staleness"].mean() < 6.4
