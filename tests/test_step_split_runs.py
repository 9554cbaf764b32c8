"""Every mode through 20 Mbit/s links: a worker's step splits into transfer, wait, compute and other that add up to
the step (each second once), the terminal, the report, the dashboard and summary.json say the same split, and
each part agrees with what was measured apart from it: the timed transfer with the step records' traces, the wait
with the mode's own wait records, the estimated transfer with the bytes the links counted, compute with the
workers' CPU clocks."""
from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
from conftest import assert_gone

import ssptk
from ssptk import analysis as an
from ssptk.analysis.step_split import step_split
from ssptk.notebook.dashboard import LiveDashboard
from ssptk.render.overlay import summary_line
from ssptk.render.text import format_summary
from ssptk.render.traffic_words import network_section, split_text, split_words
from ssptk.rundir.logs import read_run

pytestmark = [pytest.mark.slow, pytest.mark.needs_tc]
MODES = [("sync", 3), ("ssp:2", 3), ("async", 3), ("local:4", 2), ("allreduce", 2)]
TIMED = ("sync", "ssp:2", "async")


def records(run_dir: Path) -> tuple[list[dict], list[dict]]:
    """The workers' step records and event records, as their JSONL lines hold them."""
    lines = [json.loads(line) for f in sorted((run_dir / "workers").glob("worker-*.jsonl"))
             for line in f.read_text().splitlines()]
    return [r for r in lines if "event" not in r], [r for r in lines if "event" in r]


def with_step_time(steps: list[dict]) -> list[tuple[dict, float]]:
    """Each record that follows another of its worker's, with its time since that one."""
    out, last = [], {}
    for r in sorted(steps, key=lambda r: (r["worker"], r["step"])):
        if r["worker"] in last:
            out.append((r, r["t"] - last[r["worker"]]))
        last[r["worker"]] = r["t"]
    return out


def floor_ms(traffic: dict, minibatches: int, workers: int, ring: bool) -> float:
    """The estimated transfer from the counted bytes: per shaped link, a step's bytes (a PS: its share of every
    minibatch, pull + push; a worker: its own steps'; allreduce: the fuller direction) at the rate; the largest."""
    worst = 0.0
    for task, c in traffic["tasks"].items():
        if not traffic["rates"].get(task):
            continue
        steps = minibatches if task.startswith("ps:") else minibatches / workers
        size = max(c["sent"], c["received"]) if ring else c["sent"] + c["received"]
        worst = max(worst, size * 8 / traffic["rates"][task] / steps)
    return 1000.0 * worst


def text_of(page: str) -> str:
    """An HTML fragment's words: tags and the colour squares before each part left out."""
    return html.unescape(re.sub(r"<[^>]+>", "", page).replace("\u25a0\u00a0", ""))


def percents(line: str) -> list[int]:
    return [int(p) for p in re.findall(r"(?:transfer|transfer \u2265|wait|compute|other) (\d+)%", line)]


@pytest.mark.parametrize("mode, workers", MODES)
def test_every_mode_splits_a_step_into_parts_that_add_up_and_agree_with_its_records(
        tmp_path: Path, mode: str, workers: int) -> None:
    dash = LiveDashboard(interval=0)
    out = tmp_path / "r"
    r = ssptk.run(mode=mode, workers=workers, steps=20, network="20mbit", model="mlp:256", gpus="none",
                  out=str(out), observer=dash)
    assert r.summary["status"] == "ok"
    assert_gone(str(out))
    t = r.summary["traffic"]
    split = step_split(t)
    assert split is not None and not split.unmeasured
    shares = split.shares()
    # a partition: each second of the step once
    assert all(0.0 <= v <= 1.0 for v in shares.values()) and sum(shares.values()) == pytest.approx(1.0, abs=1e-9)
    assert json.loads((out / "summary.json").read_text())["traffic"]["split"] == pytest.approx(shares)
    # one rule, worded alike by the terminal, the report and the dashboard; whole percents that add up to 100
    line = split_text(t)
    assert sum(percents(line)) == 100 and line in format_summary(r.summary)
    assert split_words(split) in text_of(network_section({mode: r.summary}))
    assert line in text_of(dash._progress_html())
    # the wait every view shows is the split's (allreduce's raw wait_fraction holds the collective's transfer)
    waiting = re.search(r"waiting ([\d.]+)% of worker time", format_summary(r.summary))
    assert waiting and float(waiting.group(1)) == pytest.approx(100 * shares["wait"], abs=0.051)
    assert f"wait {shares['wait']:.0%}" in summary_line(mode, r.summary)
    table = an.compare_table({mode: (*read_run(out), json.loads((out / "config.json").read_text()), r.summary)})
    assert table["wait_fraction"].iloc[0] == pytest.approx(shares["wait"])

    steps, events = records(out)
    n, step_s = len(steps), t["step_ms"] / 1000.0
    start = min(e["t"] for e in events if e["event"] == "start")
    wall = max(s["t"] for s in steps) - start
    assert step_s == pytest.approx(workers * wall / n)
    blocked = sum(s["wait_s"] for s in steps) / (workers * wall)  # the mode's own wait records
    ring = mode == "allreduce"
    assert split.ring == ring
    if mode == "sync":
        assert blocked > 0.01  # three workers' pushes through one PS link: the earlier ones wait at the barrier
    if ring:  # the all-reduce call holds the collective's transfer
        # (the estimate, bytes at the link's rate, can pass the call's time: 0.895 of the step against a call of 0.879
        # in one run on a busy machine; then no wait is left)
        assert split.wait == pytest.approx(max(0.0, blocked - split.transfer), abs=1e-6)
    else:  # the worker's own tensors are not on the wire while the mode blocks it
        assert split.wait == pytest.approx(min(blocked, 1.0 - split.transfer), abs=1e-6)

    if mode in TIMED:  # against the step records' traces: every 10th step of each worker
        traced = [(s, dt) for s, dt in with_step_time(steps) if s.get("transfer_s") is not None]
        assert split.timed_steps == len(traced) >= workers and all(s["step"] % 10 == 0 for s, _ in traced)
        on_wire = sum(s["transfer_s"] for s, _ in traced)
        # the trace's time on the wire and the mode's wait on the same steps do not overlap (a step's run ends when
        # its results are back, a little after its record's t: one step's wire time may reach past its own t)
        assert on_wire + sum(s["wait_s"] for s, _ in traced) <= 1.1 * sum(dt for _, dt in traced)
        unblocked = sum(max(dt - s["wait_s"], s["transfer_s"]) for s, dt in traced)
        assert split.transfer == pytest.approx(on_wire / unblocked * (1.0 - blocked), abs=1e-6)
    else:  # estimated: a floor from the bytes the links counted
        floor = floor_ms(json.loads((out / "traffic.json").read_text()), n, workers, ring)
        assert split.estimated and split.transfer == pytest.approx(min(1.0, floor / t["step_ms"]), rel=1e-6)
        assert ("the rest of the all-reduce call is wait" if ring else "queueing behind the others is in other") in line

    cpu = {(e["worker"], e["event"]): e["cpu_s"] for e in events if e["event"] in ("start", "done")}
    cpu_share = sum(cpu[(w, "done")] - cpu[(w, "start")] for w in range(workers)) / n / step_s
    assert split.cpu == pytest.approx(cpu_share, rel=1e-6) and split.compute <= cpu_share + 1e-9
