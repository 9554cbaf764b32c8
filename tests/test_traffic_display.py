"""What a run's measured traffic becomes: a worker's step split into compute, transfer, wait and other, how close a
run came to a shaped link's capacity, and where they show (terminal summary, dashboard status line, the report's
network section). Pure functions on hand-made counters: no cluster."""
from __future__ import annotations

import html
import re
import types
from pathlib import Path

import pandas as pd
import pytest

from ssptk.analysis.step_split import step_split
from ssptk.analysis.traffic import link_capacity, traffic_summary, worker_cpu_s
from ssptk.notebook.dashboard import LiveDashboard
from ssptk.render.report import Report, build_report
from ssptk.render.terminal_table import terminal_table
from ssptk.render.text import format_summary
from ssptk.render.traffic_words import CAPACITY_SENTENCE, network_section, split_text, status_text
from ssptk.rundir import load_run

RECORDED = Path(__file__).resolve().parent / "fixtures" / "recorded" / "ssp2-straggler"


def counters(ps_rate: float | None = 50e6, worker_rate: float | None = None) -> dict:
    """Two workers, one PS, 10 minibatches: the PS sends 370 kB per minibatch (a pull) and takes 360 kB (a push)."""
    return {"network": "ps=50mbit", "rates": {"ps:0": ps_rate, "worker:0": worker_rate, "worker:1": worker_rate},
            "tasks": {"ps:0": {"sent": 3_700_000, "received": 3_600_000},
                      "worker:0": {"sent": 1_800_000, "received": 1_850_000},
                      "worker:1": {"sent": 1_800_000, "received": 1_850_000}}}


def summary(traffic: dict, cpu_s: float | None = 0.05) -> dict:
    """A summary of 10 minibatches in 1 s by 2 workers, 10% of their time waiting."""
    section = traffic_summary(traffic, 10, 1.0, workers=2, wait_fraction=0.1, cpu_s=cpu_s)
    return {"status": "ok", "total_steps": 10, "wall_s": 1.0, "steps_per_s": 10.0, "per_worker_steps": {"0": 5, "1": 5},
            **section}


def test_a_step_splits_into_measured_compute_and_wait_and_the_transfer_its_bytes_need() -> None:
    t = summary(counters())["traffic"]
    assert t["step_ms"] == pytest.approx(200.0)  # 2 workers x 1 s / 10 minibatches
    assert t["transfer_ms"] == pytest.approx(7.3e6 * 8 / 50e6 / 10 * 1000)  # pull + push through the PS link
    assert t["compute_ms"] == pytest.approx(5.0) and t["wait_ms"] == pytest.approx(20.0)
    split = step_split(t)
    assert split is not None and split.transfer == pytest.approx(116.8 / 200) and split.compute == pytest.approx(0.025)
    assert split.wait == pytest.approx(0.1) and split.other == pytest.approx(1 - 0.025 - 0.584 - 0.1)
    assert t["split"] == split.shares() and t["rates"] == {"ps:0": 50e6}


def traced(transfer: list[float | None], wait: list[float]) -> pd.DataFrame:
    """Step records of one worker, a step every 0.2 s, with ``transfer_s`` where given."""
    return pd.DataFrame({"worker": 0, "step": range(1, len(wait) + 1), "t": [0.2 * (i + 1) for i in range(len(wait))],
                         "wait_s": wait, "transfer_s": [float("nan") if x is None else x for x in transfer]})


def test_a_timed_transfer_replaces_the_estimate_and_says_so() -> None:
    # two of four steps traced: the first follows no step of its own and is left out of the share; the 4th was on
    # the wire 0.07 s of its 0.2 - 0.06 s not blocked by the mode
    steps = traced([0.05, None, None, 0.07], [0.0, 0.0, 0.0, 0.06])
    section = traffic_summary(counters(), 10, 1.0, workers=2, wait_fraction=0.1, cpu_s=0.05, steps=steps)
    t = section["traffic"]
    assert t["transfer_ms"] == pytest.approx(60.0) and t["transfer_timed_steps"] == 2
    split = step_split(t)
    assert split is not None and split.timed_steps == 2 and not split.estimated
    assert split.transfer == pytest.approx(0.07 / 0.14 * 0.9) and split.wait == pytest.approx(0.1)
    assert split_text(t) == ("a worker's step 200 ms = transfer 45% (timed on 2 steps) + wait 10% + compute 3% + "
                             "other 42%, each second counted once, in this order")
    s = {**summary(counters()), **section}
    assert status_text(s).endswith(" \u00b7 a step: transfer 45%, wait 10%, compute 3%, other 42%")
    # no shaped link: no transfer share, timed or not; nothing traced: the estimate
    assert traffic_summary(counters(ps_rate=None), 10, 1.0, 2, steps=steps)["traffic"]["transfer_ms"] is None
    none = traffic_summary(counters(), 10, 1.0, 2, steps=traced([None], [0.0]))["traffic"]
    assert "transfer_timed_steps" not in none and none["transfer_ms"] == pytest.approx(116.8)


def test_a_shaped_worker_link_carries_its_own_steps_and_an_unshaped_run_has_no_transfer_estimate() -> None:
    t = summary(counters(ps_rate=None, worker_rate=10e6))["traffic"]
    assert t["transfer_ms"] == pytest.approx(3.65e6 / 5 * 8 / 10e6 * 1000)  # each worker took 5 of the 10 steps
    ring = {"rates": {"worker:0": 10e6, "worker:1": 10e6},  # allreduce: a worker's ring sends while it receives
            "tasks": {"worker:0": {"sent": 1_000_000, "received": 1_200_000},
                      "worker:1": {"sent": 1_000_000, "received": 1_200_000}}}
    assert summary(ring)["traffic"]["transfer_ms"] == pytest.approx(1.2e6 / 5 * 8 / 10e6 * 1000)
    free = summary(counters(ps_rate=None), cpu_s=None)["traffic"]
    assert free["transfer_ms"] is None and free["compute_ms"] is None and free["link_busy"] == {}
    split = step_split(free)
    assert split is not None and split.transfer is None and split.compute is None and split.wait == pytest.approx(0.1)
    assert split.other == pytest.approx(0.9) and split.unmeasured == ("transfer", "compute")
    assert split_text(free).endswith("+ other 90% (with the transfer and compute: not measured), each second counted "
                                     "once, in this order")
    assert step_split({}) is None and traffic_summary({}, 10, 1.0, 2) == {}


def test_capacity_is_steps_per_second_against_what_the_fuller_direction_allows() -> None:
    s = summary(counters())
    (ps,) = link_capacity(s)
    assert ps["task"] == "ps:0" and ps["mb_per_minibatch"] == pytest.approx(0.37)
    assert ps["limit_steps_per_s"] == pytest.approx(50e6 / 8 / 370_000)
    # the same figure as the link's busy share: both are its fuller direction's bits over rate x time
    assert ps["share"] == pytest.approx(s["traffic"]["link_busy"]["ps:0"])
    assert link_capacity(summary(counters(ps_rate=None))) == [] and link_capacity({}) == []


def test_worker_cpu_is_measured_only_where_each_worker_has_its_own_clock() -> None:
    def events(rows: list[tuple[str, int, float]], key: str = "cpu_s") -> pd.DataFrame:
        return pd.DataFrame([{"event": e, "worker": w, key: c, "t": 0.0} for e, w, c in rows])

    ok = [("start", 0, 3.0), ("done", 0, 3.5), ("start", 1, 2.0), ("done", 1, 2.25)]
    assert worker_cpu_s(events(ok)) == pytest.approx(0.75)
    assert worker_cpu_s(events([*ok, ("restart", 1, 0.1)])) is None  # its clock started again
    assert worker_cpu_s(events(ok[:3])) is None  # worker 1 has no done event
    assert worker_cpu_s(events(ok, key="process_cpu_s")) is None  # the shared layout: one process for all
    assert worker_cpu_s(pd.DataFrame()) is None


def test_the_terminal_summary_and_the_status_line_say_it_in_words() -> None:
    s = summary(counters())
    line = split_text(s["traffic"])
    assert line == ("a worker's step 200 ms = transfer \u2265 58% (estimated: its bytes at the link's rate; queueing "
                    "behind the others is in other) + wait 10% + compute 3% + other 29%, each second counted once, "
                    "in this order")
    text = format_summary({**s, "run_dir": "r", "mode": "async", "workers": 2})
    assert "busiest link ps:0 at 59% of its rate" in text and line in text
    assert status_text(s) == ("0.73 MB/step \u00b7 ps:0 link 59% of capacity \u00b7 a step: transfer \u2265 58%, wait 10%, "
                              "compute 3%, other 29%")
    assert status_text({"traffic": {}}) == "" and status_text({}) == ""


def test_the_dashboard_names_the_network_while_running_and_the_traffic_at_the_end() -> None:
    dash = LiveDashboard(interval=0)  # plain Python: nothing drawn
    dash.started("r", types.SimpleNamespace(mode="async", staleness=None, workers=2, model="mlp:256",
                                            network="ps=50mbit", ps=1, jitter=None), 10)
    dash.records([{"t": 1.0 + i, "worker": i % 2, "step": 1 + i // 2, "global_step": i, "loss": 1.0, "wait_s": 0.0,
                   "staleness": 0, "minibatch": i, "delay_s": 0.0, "applied": True} for i in range(4)], [], 4, 10)
    assert "network ps=50mbit" in dash.progress_text()
    dash.finished(types.SimpleNamespace(summary=summary(counters())))
    assert dash.progress_text().endswith("0.73 MB/step \u00b7 ps:0 link 59% of capacity \u00b7 a step: transfer "
                                         "\u2265 58%, wait 10%, compute 3%, other 29%")
    # as HTML: the line without the parts, and under it the step as a bar with the whole line in words
    page = dash._progress_html()
    assert "a step: transfer" not in page and 'class="ssptk-step-split"' in page
    assert split_text(summary(counters())["traffic"]) in html.unescape(re.sub(r"<[^>]+>", "", page).replace("\u25a0\u00a0", ""))


def test_the_reports_network_section() -> None:
    html = network_section({"async <b>": summary(counters()), "free": summary(counters(ps_rate=None))})
    assert html.startswith("<h2>Network</h2>") and "async &lt;b&gt;" in html and "<b>" not in html
    assert "ps:0, 50\u00a0Mbit/s" in html and ">16.9<" in html and ">59%<" in html  # the limit and how close
    assert "370 / 360" in html and "360 / 370" in html  # kB per minibatch (a worker: its own), sent / received
    # a summary made in this process has int worker keys (read back from JSON: str): the same kB either way
    live = {**summary(counters()), "per_worker_steps": {0: 5, 1: 5}}
    assert "360 / 370" in network_section({"live": live})
    assert CAPACITY_SENTENCE.split("(")[0] in html.replace("&#x27;", "'")
    assert network_section({"a": {"status": "ok"}}) == ""
    steps, events, config, recorded = load_run(str(RECORDED))
    report = build_report({"ssp:2": (steps, events, config, {**recorded, **summary(counters())})}, per_run=False)
    assert len(report.sections) == 1 and report.sections[0].startswith("<h2>Network</h2>")
    shown = Report("t", report.table)  # the figures left out: rendering them is not what is tested here
    shown.sections = report.sections
    assert shown.to_html().count("<h2>Network</h2>") == 1
    assert report.table["transfer_share"].iloc[0] == pytest.approx(0.584)  # metrics.csv's and the table's column
    terminal = terminal_table(report.table, width=200)
    assert "xfer" in terminal.splitlines()[0] and " 58%" in terminal.splitlines()[2]
