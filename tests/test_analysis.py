"""Tests of ssptk.rundir.logs and ssptk.analysis on hand-made run directories (no TensorFlow)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from ssptk import analysis as an
from ssptk.rundir.logs import JsonlTail, RunLogReader, load_run, read_run

# --- synthetic run directories (also used by test_report.py) --------------------------------

# Run "a": SSP, S=1, 3 workers, start barrier at t=0.5. Records in time order:
# (t, worker, step, loss, wait_s, staleness)
RUN_A = [
    (1.0, 0, 1, 8.0, 0.0, 0),
    (1.5, 1, 1, 7.0, 0.0, 1),
    (2.0, 0, 2, 6.0, 0.1, 1),
    (2.5, 0, 3, 5.0, 0.2, 0),
    (3.0, 2, 1, 4.0, 0.0, 3),
    (3.5, 0, 4, 3.0, 0.3, 1),
    (4.0, 1, 2, 2.0, 0.0, 2),
    (4.5, 2, 2, 1.5, 0.1, 1),
    (5.0, 1, 3, 1.0, 0.0, 1),
    (5.5, 2, 3, 0.5, 0.2, 0),
]
DONE_A = {0: 3.6, 1: 5.1, 2: 5.6}
START_A = 0.5
# Skew after each record, finished workers left out (worked by hand):
SKEW_A = [1, 1, 2, 3, 2, 3, 1, 0, 1, 0]
# The same when no worker ever finishes:
SKEW_A_NO_FINISH = [1, 1, 2, 3, 2, 3, 3, 2, 2, 1]


def step_record(t, worker, step, loss, wait_s=0.0, staleness=0, minibatch=0):
    return {"t": t, "worker": worker, "step": step, "global_step": minibatch + 1, "loss": loss,
            "wait_s": wait_s, "staleness": staleness, "minibatch": minibatch, "delay_s": 0.01,
            "applied": True}


def write_run(run_dir: Path, records, *, workers: int, mode: str, staleness: int,
              start: float | None, done: dict[int, float] | None, summary: dict | None,
              partial: bool = True) -> Path:
    """Write config.json, workers/worker-<i>.jsonl (with a partial last line), summary.json."""
    (run_dir / "workers").mkdir(parents=True)
    config = {"options": {"model": "linear", "mode": mode, "staleness": staleness,
                          "workers": workers, "steps": 10, "batch": 4},
              "cluster": {"ps": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"] * workers},
              "created": 0.0}
    (run_dir / "config.json").write_text(json.dumps(config))
    lines: dict[int, list[str]] = {w: [] for w in range(workers)}
    if start is not None:
        for w in range(workers):
            lines[w].append(json.dumps({"event": "start", "t": start, "worker": w}))
    for i, (t, w, s, loss, wait, stale) in enumerate(records):
        lines[w].append(json.dumps(step_record(t, w, s, loss, wait, stale, minibatch=i)))
    for w, t in (done or {}).items():
        lines[w].append(json.dumps({"event": "done", "t": t, "worker": w,
                                    "steps": sum(1 for r in records if r[1] == w)}))
    for w, ls in lines.items():
        text = "".join(line + "\n" for line in ls)
        if partial:
            text += '{"t": 99.0, "worker": ' + str(w) + ', "step": 9'  # still being written
        (run_dir / "workers" / f"worker-{w}.jsonl").write_text(text)
    if summary is not None:
        (run_dir / "summary.json").write_text(json.dumps(summary))
    return run_dir


@pytest.fixture
def comparison_dir(tmp_path: Path) -> Path:
    """DIR/a (ssp ok), DIR/b (async ok), DIR/c (sync failed, high loss) and DIR/metrics.csv."""
    root = tmp_path / "cmp"
    write_run(root / "a", RUN_A, workers=3, mode="ssp", staleness=1, start=START_A, done=DONE_A,
              summary={"status": "ok", "mode": "ssp", "staleness": 1, "workers": 3,
                       "final_loss": 0.12, "max_skew": 3})
    run_b = [(10.0 + i, i % 2, i // 2 + 1, 1.0, 0.0, 1) for i in range(6)]
    write_run(root / "b", run_b, workers=2, mode="async", staleness=2, start=9.0,
              done={0: 14.5, 1: 15.5},
              summary={"status": "ok", "mode": "async", "workers": 2, "final_loss": 0.5})
    run_c = [(20.0, 0, 1, 100.0, 0.0, 0), (21.0, 0, 2, 100.0, 0.0, 0)]
    write_run(root / "c", run_c, workers=2, mode="sync", staleness=0, start=19.0, done=None,
              summary={"status": "failed", "reason": "worker:1 exited", "mode": "sync",
                       "workers": 2, "final_loss": None})
    (root / "metrics.csv").write_text("label,mode\nc,sync\na,ssp\n")
    return root


# --- logs -----------------------------------------------------------------------------------

def test_jsonl_tail_missing_file_then_pieces(tmp_path: Path) -> None:
    path = tmp_path / "w.jsonl"
    tail = JsonlTail(path)
    assert tail.read_new() == []
    with open(path, "w") as f:
        f.write('{"t": 1.0, "a": 1}\n{"t": 2.0, ')
    assert tail.read_new() == [{"t": 1.0, "a": 1}]
    assert tail.offset == len('{"t": 1.0, "a": 1}\n')
    assert tail.read_new() == []  # partial line stays pending
    with open(path, "a") as f:
        f.write('"a": 2}')
    assert tail.read_new() == []  # complete JSON but no newline yet
    with open(path, "a") as f:
        f.write('\nnot json\n[1, 2]\n\n{"t": 3.0}\n')
    assert tail.read_new() == [{"t": 2.0, "a": 2}, {"t": 3.0}]
    assert tail.bad_lines == 2  # "not json" and the non-object [1, 2]
    assert tail.read_new() == []
    assert tail.offset == path.stat().st_size


def test_jsonl_tail_does_not_reparse_old_lines(tmp_path: Path) -> None:
    path = tmp_path / "w.jsonl"
    path.write_text("garbage\n")
    tail = JsonlTail(path)
    assert tail.read_new() == [] and tail.bad_lines == 1
    with open(path, "a") as f:
        f.write('{"x": 1}\n')
    assert tail.read_new() == [{"x": 1}]
    assert tail.bad_lines == 1  # the old bad line was not read again


def test_run_log_reader_discovers_new_worker_file(tmp_path: Path) -> None:
    workers = tmp_path / "run" / "workers"
    reader = RunLogReader(tmp_path / "run")
    assert reader.read_new() == ([], [])  # no workers/ folder yet
    assert reader.steps_frame().empty
    workers.mkdir(parents=True)
    (workers / "worker-0.jsonl").write_text(
        json.dumps({"event": "start", "t": 0.5, "worker": 0}) + "\n"
        + json.dumps(step_record(2.0, 0, 1, 3.0)) + "\n")
    (workers / "notes.txt").write_text("ignored\n")
    steps, events = reader.read_new()
    assert [r["t"] for r in steps] == [2.0] and [e["event"] for e in events] == ["start"]
    (workers / "worker-1.jsonl").write_text(json.dumps(step_record(1.0, 1, 1, 4.0)) + "\n{\"t\"")
    steps, events = reader.read_new()
    assert [(r["worker"], r["t"]) for r in steps] == [(1, 1.0)] and events == []
    assert reader.workers == [0, 1]
    frame = reader.steps_frame()
    assert frame["t"].tolist() == [1.0, 2.0]  # all so far, sorted by t
    assert frame["worker"].tolist() == [1, 0]
    assert list(frame.columns[:4]) == ["t", "worker", "step", "global_step"]
    with open(workers / "worker-1.jsonl", "a") as f:
        f.write(': 3.0, "worker": 1, "step": 2, "loss": 1.0}\nbad\n')
    steps, _ = reader.read_new()
    assert [r["t"] for r in steps] == [3.0]
    assert reader.steps_frame()["t"].tolist() == [1.0, 2.0, 3.0]
    assert reader.steps_frame()["applied"].tolist() == [True, True, True]  # missing -> True
    assert reader.bad_lines == 1
    assert reader.events_frame()["event"].tolist() == ["start"]


def test_read_run_skips_partial_lines_and_sorts(tmp_path: Path) -> None:
    run = write_run(tmp_path / "a", RUN_A, workers=3, mode="ssp", staleness=1, start=START_A,
                    done=DONE_A, summary=None)
    steps, events = read_run(run)
    assert len(steps) == 10  # the partial t=99 lines are not there
    assert steps["t"].tolist() == [r[0] for r in RUN_A]
    assert steps["step"].dtype == "int64"
    assert events["event"].tolist() == ["start"] * 3 + ["done"] * 3
    s, e, config, summary = load_run(run)
    assert config["options"]["staleness"] == 1 and summary == {}


def test_read_run_of_empty_dir(tmp_path: Path) -> None:
    steps, events = read_run(tmp_path)
    assert steps.empty and events.empty and "loss" in steps.columns


# --- analysis -------------------------------------------------------------------------------

@pytest.fixture
def run_a(tmp_path: Path) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    run = write_run(tmp_path / "a", RUN_A, workers=3, mode="ssp", staleness=1, start=START_A,
                    done=DONE_A, summary=None)
    steps, events, config, _ = load_run(run)
    return steps, events, config


def test_prepare_steps(run_a) -> None:
    steps, events, _ = run_a
    shuffled = steps.sample(frac=1.0, random_state=1)
    df = an.prepare_steps(shuffled, t0=an.start_time(events), batch=4)
    assert an.start_time(events) == 0.5
    assert df["elapsed"].tolist() == [t - 0.5 for t, *_ in RUN_A]
    assert df["samples"].tolist() == [4 * i for i in range(1, 11)]
    assert df["completed"].tolist() == [r[2] for r in RUN_A]
    assert an.prepare_steps(steps)["elapsed"].iloc[0] == 0.0  # default t0 = first record


def test_skew_timeline_hand_computed(run_a) -> None:
    steps, events, _ = run_a
    finished = an.finish_times(steps, events)
    assert finished == DONE_A
    skew = an.skew_timeline(steps, finished)
    assert list(skew.columns) == ["t", "skew"]
    assert skew["t"].tolist() == [r[0] for r in RUN_A]
    assert skew["skew"].tolist() == SKEW_A
    # default: finished at the last record (3.5, 5.0, 5.5) gives the same here
    assert an.skew_timeline(steps)["skew"].tolist() == SKEW_A
    # for figures: only while two or more train (worker 1 finished at 5.1, so worker 2's last record goes)
    ended = an.skew_timeline(steps, finished, end_when_one_left=True)
    assert ended["skew"].tolist() == SKEW_A[:-1] and ended["t"].tolist() == [r[0] for r in RUN_A][:-1]
    assert an.max_skew(steps, finished) == 3
    # nobody finishes: worker 0 (4 steps) stays in and keeps the skew up
    assert an.skew_timeline(steps, finished={})["skew"].tolist() == SKEW_A_NO_FINISH
    # a fourth worker that never logged counts as 0 completed while running
    four = an.skew_timeline(steps, finished={}, workers=4)["skew"].tolist()
    assert four == [1, 1, 2, 3, 3, 4, 4, 4, 4, 4]
    assert an.max_skew(steps, finished) == 3
    assert an.max_skew(steps.iloc[0:0]) == 0
    prepared = an.prepare_steps(steps, 0.5)
    assert list(an.skew_timeline(prepared, finished).columns) == ["elapsed", "skew"]


def test_skew_finished_worker_drops_out() -> None:
    # worker 0 races to 5 steps and is done at t=5; worker 1 then goes alone
    recs = [step_record(float(t), 0, t, 1.0) for t in range(1, 6)]
    recs += [step_record(5.5 + t, 1, t, 1.0) for t in range(1, 4)]
    steps = pd.DataFrame(recs)
    skew = an.skew_timeline(steps, {0: 5.0, 1: 9.0})["skew"].tolist()
    assert skew == [1, 2, 3, 4, 5, 0, 0, 0]
    assert an.skew_timeline(steps, {1: 9.0})["skew"].tolist() == [1, 2, 3, 4, 5, 4, 3, 2]


def test_summarize_hand_computed(run_a) -> None:
    steps, events, config = run_a
    s = an.summarize(steps, events, config)
    assert s["workers"] == 3
    assert s["total_steps"] == 10
    assert s["wall_s"] == pytest.approx(5.0)  # start barrier 0.5 -> last record 5.5
    assert s["steps_per_s"] == pytest.approx(2.0)
    assert s["train_loss_last"] == pytest.approx(1.0)  # mean(1.5, 1.0, 0.5)
    assert s["loss_smoothed_last"] == pytest.approx(3.8)  # window 15 > 10 records: all
    assert s["max_skew"] == 3
    assert s["wait_fraction"] == pytest.approx(0.9 / 15.0)
    assert s["mean_staleness"] == pytest.approx(1.0)
    assert s["max_staleness"] == 3 and type(s["max_staleness"]) is int
    assert s["per_worker_steps"] == {0: 4, 1: 3, 2: 3}
    json.dumps(s)  # plain JSON types only
    # without a start event wall time runs from the first record
    no_start = an.summarize(steps, events[events["event"] != "start"], config)
    assert no_start["wall_s"] == pytest.approx(4.5)


def test_summarize_empty_run() -> None:
    empty = pd.DataFrame()
    s = an.summarize(empty, pd.DataFrame(), {"options": {"workers": 2}})
    assert s["total_steps"] == 0 and s["max_skew"] == 0 and s["workers"] == 2
    assert s["wall_s"] is None and s["steps_per_s"] is None and s["wait_fraction"] is None
    assert s["per_worker_steps"] == {}
    read_steps, read_events = read_run("/nonexistent/run")
    assert an.summarize(read_steps, read_events, {})["total_steps"] == 0


def test_time_to_target(run_a) -> None:
    steps, events, _ = run_a
    df = an.prepare_steps(steps, an.start_time(events))
    # rolling means over 3 records: -, -, 7, 6, 5, 4, 3, 2.1667, 1.5, 1.0
    assert an.time_to_target(df, 4.05, window=3) == (pytest.approx(3.0), 6)
    assert an.time_to_target(df, 1.6, window=3) == (pytest.approx(4.5), 9)
    assert an.time_to_target(df, 0.9, window=3) == (None, None)
    assert an.time_to_target(df, 7.5, window=1) == (pytest.approx(1.0), 2)
    assert an.time_to_target(df, 7.6, window=3) == (pytest.approx(1.5), 3)  # no partial windows
    # default window 5 * 3 workers > 10 records: only the mean of all (3.8) at the last record
    assert an.time_to_target(steps, 3.81) == (pytest.approx(4.5), 10)  # elapsed from 1st record
    assert an.time_to_target(steps, 3.79) == (None, None)
    assert an.time_to_target(steps.iloc[0:0], 1.0) == (None, None)


def test_loss_curves(run_a) -> None:
    steps, _, _ = run_a
    curves = an.loss_curves(steps, by="samples", smooth=2)
    assert list(curves.columns) == ["samples", "worker", "loss", "smoothed"]
    overall = curves[curves["worker"] == an.ALL_WORKERS]
    assert overall["samples"].tolist() == list(range(1, 11))
    assert overall["smoothed"].tolist()[:3] == [8.0, 7.5, 6.5]
    w0 = curves[curves["worker"] == 0]
    assert w0["loss"].tolist() == [8.0, 6.0, 5.0, 3.0]
    assert w0["smoothed"].tolist() == [8.0, 7.0, 5.5, 4.0]
    assert w0["samples"].tolist() == [1, 3, 4, 6]
    with pytest.raises(ValueError):
        an.loss_curves(steps, by="steps", smooth=2)


def test_wait_and_staleness_helpers(run_a) -> None:
    steps, _, _ = run_a
    waits = an.wait_by_worker(steps)
    assert waits["worker"].tolist() == [0, 1, 2]
    assert waits["steps"].tolist() == [4, 3, 3]
    assert waits["wait_s"].tolist() == pytest.approx([0.6, 0.0, 0.3])
    assert an.staleness_counts(steps).to_dict() == {0: 3, 1: 5, 2: 1, 3: 1}


def test_compare_table(comparison_dir: Path) -> None:
    runs = {label: load_run(comparison_dir / label) for label in ("a", "b", "c")}
    table = an.compare_table(runs)
    assert list(table.columns) == list(an.COMPARE_COLUMNS)
    assert table["label"].tolist() == ["a", "b", "c"]
    # auto target: 1.25 * the best final smoothed loss of the converged runs (a: 3.8, b: 1.0); c is failed
    assert table.attrs["target"] == pytest.approx(1.25) and table.attrs["target_auto"]
    assert table.attrs["first_to_target"] == "b"
    a, b, c = (table.iloc[i] for i in range(3))
    assert (a["mode"], a["bound"], a["workers"]) == ("ssp", 1, 3)
    assert a["steps_per_s"] == pytest.approx(2.0) and a["wall_s"] == pytest.approx(5.0)
    assert a["final_loss"] == pytest.approx(0.12)
    assert pd.isna(a["time_to_target_s"]) and pd.isna(a["steps_to_target"])  # 3.8: not reached
    assert not a["diverged"] and not b["diverged"]
    assert a["max_skew"] == 3 and a["wait_fraction"] == pytest.approx(0.06)
    assert a["mean_staleness"] == pytest.approx(1.0) and a["max_staleness"] == 3
    assert a["status"] == "ok"
    assert b["mode"] == "async" and pd.isna(b["bound"])  # meaningless outside ssp
    assert b["wall_s"] == pytest.approx(6.0) and b["time_to_target_s"] == pytest.approx(6.0)
    assert b["steps_to_target"] == 6 and b["max_skew"] == 1
    assert c["status"] == "failed" and pd.isna(c["time_to_target_s"])
    assert pd.isna(c["final_loss"]) and pd.isna(c["steps_to_target"])
    # an explicit target
    given = an.compare_table(runs, target=1.0)
    assert given.attrs["target"] == 1.0 and not given.attrs["target_auto"]
    # a: only the mean of all 10 (3.8) is defined; b: mean 1.0 of its 6 records reaches it
    assert pd.isna(given["steps_to_target"].iloc[0]) and given["steps_to_target"].iloc[1] == 6
    # a run without any records or files
    empty = an.compare_table({"x": (pd.DataFrame(), pd.DataFrame(), {}, {})})
    assert empty["status"].tolist() == ["unknown"] and empty.attrs["target"] is None
    assert math.isnan(empty["wall_s"].iloc[0])


def test_compare_table_takes_measured_over_ideal_from_the_summary(comparison_dir: Path) -> None:
    steps, events, config, summary = load_run(comparison_dir / "a")
    table = an.compare_table({"with": (steps, events, config, {**summary, "measured_over_ideal": 0.87}),
                              "without": (steps, events, config, summary)})
    assert table["measured_over_ideal"].iloc[0] == pytest.approx(0.87)
    assert pd.isna(table["measured_over_ideal"].iloc[1])


def test_a_comparison_table_shows_missing_figures_as_a_dash() -> None:
    """`cmp.table` in a notebook: '-' where a figure is missing, as the CLI prints; still a DataFrame."""
    from ssptk.render.tables import ShownTable

    frame = pd.DataFrame({"steps_to_target": pd.array([120, None], dtype="Int64"), "final_loss": [0.5, None]},
                         index=["sync", "async"])
    table = ShownTable(frame)
    assert type(pd.DataFrame(table)) is pd.DataFrame
    assert "<NA>" not in repr(table) and "NaN" not in repr(table)
    assert repr(table).splitlines()[3].split() == ["async", "-", "-"]  # under the header and its rule
    html = table._repr_html_()
    assert "NA" not in html and ">-</td>" in html
    assert isinstance(table, pd.DataFrame) and type(table.copy()) is pd.DataFrame
    pd.testing.assert_frame_equal(pd.DataFrame(table), frame)
