"""Where a step reads the parameters: the simulator's ``gap`` and its calibration from real records' ``read_s``."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ssptk.core.errors import UsageError
from ssptk.core.network import parse_network
from ssptk.sim import calibrate_gap, simulate
from ssptk.sim.link_model import LinkFit, LinkModel
from ssptk.sim.spec import SimSpec


@pytest.mark.parametrize("n", [4, 8])
def test_a_gap_of_half_the_step_halves_async_staleness(n: int) -> None:
    # equal workers in async see every other update once per step: N-1 stale with the read as the step starts;
    # with the read half-way through, the updates of the first half are seen: (N-1)/2
    kw = dict(overhead=0.04, jitter="exp:0.004", seed=3)
    at_start = simulate("async", n, 200, **kw)
    half = simulate("async", n, 200, gap=0.02, **kw)
    assert at_start.steps["staleness"].mean() == pytest.approx(n - 1, abs=0.15)
    assert half.steps["staleness"].mean() == pytest.approx((n - 1) / 2, abs=0.35)
    assert half.steps_per_s == pytest.approx(at_start.steps_per_s)  # the step costs what it did


def test_a_gap_moves_the_read_not_the_bound_and_sync_ignores_it() -> None:
    ssp = simulate("ssp:1", 4, 100, overhead=0.04, jitter="exp:0.004", seed=1, gap=0.03)
    assert ssp.max_skew <= 2 and ssp.steps["staleness"].mean() < 1.5
    plain = simulate("sync", 3, 20, overhead=0.01, seed=1)
    assert simulate("sync", 3, 20, overhead=0.01, seed=1, gap=0.01).steps.equals(plain.steps)


def test_under_a_network_the_read_is_the_pull_s_start() -> None:
    net = parse_network("ps=20mbit")
    links = LinkModel(SimSpec(network=net, workers=2, model_bytes=100_000.0, gap=0.01, overhead=0.01), LinkFit(share_sigma=0))
    links.start(0, 0.0, 0.05)
    t, w = links.next()
    assert w == 0 and links.read_at(0) == pytest.approx(0.01)
    pull = 8 * 1.05 * 100_000 / 20e6
    assert t == pytest.approx(0.01 + pull + 0.04 + pull)  # gap, pull, the rest of the step, push
    shaped = dict(overhead=0.06, network="ps=20mbit", model_bytes=340_000.0, cores=2, seed=0)
    assert simulate("async", 4, 30, gap=0.05, **shaped).steps["staleness"].mean() < \
        simulate("async", 4, 30, **shaped).steps["staleness"].mean()


def test_a_gap_longer_than_the_step_is_refused() -> None:
    with pytest.raises(UsageError, match="gap must be at most the step's fixed seconds"):
        simulate("async", 2, 10, overhead=0.01, gap=0.02)
    with pytest.raises(UsageError, match="gap must be a number of seconds >= 0"):
        simulate("async", 2, 10, overhead=0.01, gap=-1)


def test_calibrate_gap_from_read_times() -> None:
    # worker 0 lands at 1.0, 2.0, 3.0 and reads 0.25 s after each landing; worker 1 reads 0.5 s after, waiting
    # 0.25 s of it for SSP's bound (not a cost of the step)
    rows = [dict(t=float(t), worker=0, step=k + 1, read_s=0.75, wait_s=0.0) for k, t in enumerate((1.0, 2.0, 3.0))]
    rows += [dict(t=float(t), worker=1, step=k + 1, read_s=0.5, wait_s=0.25) for k, t in enumerate((1.0, 2.0, 3.0))]
    df = pd.DataFrame(rows)
    assert calibrate_gap(df, 2) == pytest.approx(0.25)
    assert calibrate_gap(df.drop(columns="read_s"), 2) is None
    assert calibrate_gap(df.assign(read_s=np.nan), 2) is None
    assert calibrate_gap(df[df["step"] == 1], 2) is None  # no worker with two records


def test_the_explorer_predicts_with_the_real_runs_gap() -> None:
    from types import SimpleNamespace as Run

    from ssptk.notebook.slider_predictions import calibrated_gap, calibrated_overhead
    from ssptk.rundir import Summary

    runs = [Run(summary=Summary(overhead_ms=40.0, gap_ms=10.0)), Run(summary=Summary(overhead_ms=60.0, gap_ms=20.0)),
            Run(summary=Summary(overhead_ms=50.0, gap_ms=None)),  # a sync run: no gap
            Run(summary=Summary(overhead_ms=5.0, gap_ms=1.0, predicted={"overhead_s": 0.005}))]  # not measured
    assert calibrated_gap(runs) == pytest.approx(0.015)
    assert calibrated_overhead(runs) == pytest.approx(0.05)
    assert calibrated_gap([Run(summary=Summary(overhead_ms=40.0))]) is None
