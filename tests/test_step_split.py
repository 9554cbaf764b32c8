"""A worker's step split into transfer, wait, compute and other is a partition of the step: each second counted
once, in that order, whatever overlaps in what was measured (ssptk.analysis.step_split). Pure functions on
hand-made figures: no cluster (tests/test_step_split_runs.py runs every mode through a shaped link)."""
from __future__ import annotations

import html
import re

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ssptk.analysis.step_split import PARTS, partition, step_split, unblocked_transfer
from ssptk.analysis.traffic import traffic_summary
from ssptk.render.traffic_words import network_section, split_text, split_words

share = st.one_of(st.none(), st.floats(0.0, 2.0))


def ring(wait: float, cpu: float) -> dict:
    """Allreduce, 2 workers, 10 minibatches in 1 s (a 200 ms step): each worker's link at 20 Mbit/s carries 1.2 MB
    in its fuller direction over its 5 steps, a floor of 96 ms (48% of the step)."""
    counters = {"rates": {"worker:0": 20e6, "worker:1": 20e6},
                "tasks": {"worker:0": {"sent": 1_000_000, "received": 1_200_000},
                          "worker:1": {"sent": 1_000_000, "received": 1_200_000}}}
    return traffic_summary(counters, 10, 1.0, workers=2, wait_fraction=wait, cpu_s=cpu * 0.2 * 10)["traffic"]


def percents(line: str) -> list[int]:
    return [int(p) for p in re.findall(r"(?:transfer|transfer \u2265|wait|compute|other) (\d+)%", line)]


@given(share, share, share, st.booleans())
def test_the_parts_always_partition_the_step(transfer: float | None, wait: float | None, cpu: float | None,
                                            is_ring: bool) -> None:
    t, w, c, o = partition(transfer, wait, cpu, is_ring)
    known = [v for v in (t, w, c, o) if v is not None]
    assert all(0.0 <= v <= 1.0 for v in known) and sum(known) == pytest.approx(1.0)
    # the transfer comes first: an estimate (a floor) is kept as it is, up to the whole step
    assert t == (None if transfer is None else min(1.0, transfer))
    if wait is not None and transfer is not None and not is_ring and transfer + wait <= 1.0:
        assert w == pytest.approx(wait)  # nothing else overlaps the wait outside allreduce


def test_allreduces_wait_holds_its_transfer_and_compute_gets_what_is_left() -> None:
    t = ring(wait=0.6, cpu=0.5)
    assert t["transfer_ms"] == pytest.approx(96.0) and t["wait_ms"] == pytest.approx(120.0)
    split = step_split(t)
    assert split is not None and split.ring and split.estimated
    # the all-reduce call (60%) less the floor of its transfer (48%); the CPU (50%) cut to the 40% left
    assert split.transfer == pytest.approx(0.48) and split.wait == pytest.approx(0.12)
    assert split.compute == pytest.approx(0.4) and split.other == pytest.approx(0.0)
    assert split.cpu_overlap == pytest.approx(0.1)
    line = split_text(t)
    assert line == ("a worker's step 200 ms = transfer \u2265 48% (estimated: its bytes at the link's rate; the rest "
                    "of the all-reduce call is wait) + wait 12% + compute 40% (of 50% CPU: the rest overlapped) + "
                    "other 0%, each second counted once, in this order")
    assert sum(percents(line)) == 100
    # what the old split said of such a step: 48% + 60% + 50%, other clamped to 0
    assert t["split"] == {"transfer": pytest.approx(0.48), "wait": pytest.approx(0.12), "compute": pytest.approx(0.4),
                          "other": pytest.approx(0.0)}


def test_a_floor_above_the_all_reduce_call_leaves_no_wait_and_never_goes_past_the_step() -> None:
    split = step_split({**ring(wait=0.3, cpu=0.9), "transfer_ms": 260.0, "split": None})
    assert split is not None and split.transfer == 1.0 and split.wait == 0.0 and split.compute == 0.0
    assert split.other == 0.0


def test_a_timed_transfer_is_its_share_of_the_time_the_mode_did_not_block() -> None:
    """Sync: a worker that waits less at the barrier spends more of its step on the wire, so a traced step is
    weighed against its own time less its own wait; the run's wait, measured on every step, keeps its share."""
    steps = pd.DataFrame({"worker": [0, 0, 0, 1, 1, 1], "step": [9, 10, 11, 9, 10, 11],
                          "t": [1.0, 1.7, 2.4, 1.0, 1.7, 2.4], "wait_s": [0.0, 0.0, 0.3, 0.0, 0.05, 0.0],
                          "transfer_s": [None, 0.69, None, None, 0.64, None]})
    assert unblocked_transfer(steps) == pytest.approx((0.69 + 0.64) / (0.7 + 0.65))
    assert unblocked_transfer(steps.drop(columns="transfer_s")) is None
    assert unblocked_transfer(steps[steps["step"] == 10]) is None  # no earlier step to time it from
    counters = {"rates": {"ps:0": 20e6}, "tasks": {"ps:0": {"sent": 7_000_000, "received": 7_000_000},
                                                   "worker:0": {"sent": 3_500_000, "received": 3_500_000},
                                                   "worker:1": {"sent": 3_500_000, "received": 3_500_000}}}
    t = traffic_summary(counters, 20, 7.0, workers=2, wait_fraction=0.2, cpu_s=0.14, steps=steps)["traffic"]
    # the old split: the traced steps' mean transfer (665 ms) + the run's wait (20%) + CPU (1%) > the 700 ms step
    assert t["transfer_ms"] / t["step_ms"] + 0.2 + 0.01 > 1.0
    split = step_split(t)
    assert split is not None and split.transfer == pytest.approx(0.8 * (1.33 / 1.35))
    assert split.wait == pytest.approx(0.2) and sum(v for v in split.shares().values() if v is not None) == pytest.approx(1.0)


def test_a_summary_written_before_the_split_is_split_by_the_same_rule() -> None:
    new = ring(wait=0.6, cpu=0.5)
    old = {k: v for k, v in new.items() if k != "split"}
    assert step_split(old) == step_split(new)
    # a timed one, without its step records: the traced mean over the step, at most the time the mode did not block
    # (6 traced steps that waited less than the run's 80 ms), then the same order
    timed = {"step_ms": 600.0, "transfer_ms": 590.0, "transfer_timed_steps": 6, "wait_ms": 80.0, "compute_ms": 12.0,
             "tasks": {"ps:0": {"sent": 1, "received": 1}}}
    split = step_split(timed)
    assert split is not None and split.shares() == pytest.approx({"transfer": 520 / 600, "wait": 80 / 600,
                                                                  "compute": 0.0, "other": 0.0})
    shorter = step_split({**timed, "transfer_ms": 300.0})  # below it: as measured
    assert shorter is not None and shorter.transfer == pytest.approx(0.5) and shorter.compute == pytest.approx(0.02)


@given(st.floats(0, 1), st.floats(0, 1), st.floats(0, 1), st.booleans())
def test_the_words_add_up_to_100_percent(transfer: float, wait: float, cpu: float, is_ring: bool) -> None:
    traffic = {**ring(wait=0.5, cpu=0.1), "tasks": {"worker:0": {}} if is_ring else {"ps:0": {}}}
    traffic["split"] = dict(zip(PARTS, partition(transfer, wait, cpu, is_ring), strict=True))
    split = step_split(traffic)
    assert split is not None
    assert sum(percents(split_words(split))) == 100 and sum(percents(split_text(traffic))) == 100


def test_the_report_words_the_same_split_as_the_terminal() -> None:
    t = ring(wait=0.6, cpu=0.5)
    s = {"status": "ok", "total_steps": 10, "steps_per_s": 10.0, "traffic": t}
    page = html.unescape(re.sub(r"<[^>]+>", "", network_section({"allreduce": s})).replace("\u25a0\u00a0", ""))
    split = step_split(t)
    assert split is not None and split_words(split) in page and split_words(split) in split_text(t)
    assert "each second counted once, in this order: transfer" in page
