"""Tests of what a run's figure shows (ssptk.analysis.run_view): the report's view of a run's frames and the
live dashboard's view of the records it took (ssptk.notebook.live_state.LiveRun) are the same numbers, and the
live skew, fed a recorded run's logs as a watcher reads them, never shows more than the finished run has.
The computed data are tested here, not the drawn artists."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ssptk import analysis as an
from ssptk.analysis.run_view import Line, RunView, view_of_run
from ssptk.notebook.live_state import LiveRun
from ssptk.rundir.logs import RunLogReader, load_run

#: A real run: ssptk run --model linear --mode ssp --staleness 2 --workers 3 --steps 120 --straggler 2:0.01
RECORDED = Path(__file__).resolve().parent / "fixtures" / "recorded" / "ssp2-straggler"
WORKERS = 3


@pytest.fixture(scope="module")
def recorded() -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    steps, events, config, _ = load_run(RECORDED)
    return steps, events, config


def _replay(tmp: Path, seed: int, run: LiveRun, check=None) -> None:
    """Feed the recorded logs to ``run`` as a watcher reads them while the run goes on: each worker's file
    grows by its own uneven pieces (at times ending inside a line), and a :class:`RunLogReader` reads what
    was added since the last read."""
    rng = np.random.default_rng(seed)
    (tmp / "workers").mkdir(parents=True)
    data = {w: (RECORDED / "workers" / f"worker-{w}.jsonl").read_bytes() for w in range(WORKERS)}
    written = dict.fromkeys(data, 0)
    reader = RunLogReader(tmp)
    # one log far ahead of the others, one far behind, in turns
    rates = [rng.permutation([6000, 1500, 300]) for _ in range(8)]
    rounds = 0
    while any(written[w] < len(data[w]) for w in data):
        for w in data:
            grow = int(rng.integers(0, rates[(rounds // 10) % len(rates)][w]))
            written[w] = min(len(data[w]), written[w] + grow)
            (tmp / "workers" / f"worker-{w}.jsonl").write_bytes(data[w][: written[w]])
        steps, events = reader.read_new()
        run.add(steps, events)
        if check is not None:
            check(run)
        rounds += 1
    assert reader.n_steps == sum(1 for w in data for line in data[w].splitlines() if b'"event"' not in line)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_live_skew_never_exceeds_the_finished_runs(recorded, tmp_path: Path, seed: int) -> None:
    """issue 27: the live reader compared workers at times it had not seen every log reach; the skew showed
    spikes above the bound S+1 that the finished run's logs do not have."""
    steps, events, _config = recorded
    final = an.max_skew(steps, an.finish_times(steps, events))
    assert final == 3  # the bound S+1: this straggler run keeps hitting it

    def check(run: LiveRun) -> None:
        if len(run.skew):
            assert run.skew.values.max() <= final

    run = LiveRun(WORKERS)
    _replay(tmp_path / "run", seed, run, check)
    # every log has ended (done events): every record was taken, in time order, before the run is finalized
    assert len(run.t) == len(steps) and run.skew.values.max() == final
    expected = an.skew_timeline(steps, an.finish_times(steps, events), workers=range(WORKERS))["skew"]
    assert run.skew.values.tolist() == expected.tolist()
    run.finalize()
    assert run.skew.values.max() == final


def _assert_lines_equal(a: Line, b: Line) -> None:
    np.testing.assert_allclose(a.x, b.x, rtol=0, atol=1e-9)
    np.testing.assert_allclose(a.y, b.y, rtol=1e-12, atol=1e-12, equal_nan=True)


def _assert_views_equal(live: RunView, report: RunView) -> None:
    for name in ("bound", "workers", "ids", "many", "smooth", "n_records", "loss_range"):
        assert getattr(live, name) == getattr(report, name), name
    assert live.t_end == pytest.approx(report.t_end) and live.steps_max == report.steps_max
    for panel in ("loss_time", "loss_samples"):
        a, b = getattr(live, panel), getattr(report, panel)
        _assert_lines_equal(a.overall, b.overall)
        assert a.per_worker.keys() == b.per_worker.keys()
        for w in a.per_worker:
            _assert_lines_equal(a.per_worker[w], b.per_worker[w])
        assert (a.band is None) == (b.band is None)
        if a.band is not None and b.band is not None:
            np.testing.assert_allclose(np.c_[a.band.x, a.band.lo, a.band.hi], np.c_[b.band.x, b.band.lo, b.band.hi])
    for w in report.progress.per_worker:
        _assert_lines_equal(live.progress.per_worker[w], report.progress.per_worker[w])
    for end in ("slowest", "fastest"):
        a_end, b_end = getattr(live.progress, end), getattr(report.progress, end)
        assert (a_end is None) == (b_end is None)
        if a_end is not None and b_end is not None:
            assert a_end[0] == b_end[0]
            _assert_lines_equal(a_end[1], b_end[1])
    _assert_lines_equal(live.skew, report.skew)
    np.testing.assert_array_equal(live.waits.worker, report.waits.worker)
    np.testing.assert_allclose(np.c_[live.waits.wait_s, live.waits.delay_s],
                               np.c_[report.waits.wait_s, report.waits.delay_s])
    _assert_lines_equal(live.staleness_counts, report.staleness_counts)


def test_the_live_view_is_the_reports(recorded, tmp_path: Path) -> None:
    steps, events, config = recorded
    report = view_of_run(steps, events, config)
    run = LiveRun(WORKERS, config["options"])
    _replay(tmp_path / "run", 5, run)
    run.finalize()
    _assert_views_equal(run.view(), report)


def test_the_view_of_a_recorded_run(recorded) -> None:
    steps, events, config = recorded
    view = view_of_run(steps, events, config)
    assert view.bound == 2 and not view.many and view.ids == (0, 1, 2) and view.smooth == 15
    assert view.options["mode"] == "ssp" and view.n_records == len(steps) == 360
    assert view.skew.y.max() == 3 and (view.skew.y >= 0).all()
    finals = {w: line.y[-1] for w, line in view.progress.per_worker.items()}
    assert finals == steps.groupby("worker")["step"].max().to_dict() and sum(finals.values()) == 360
    assert sum(len(line) for line in view.loss_time.per_worker.values()) == 360
    assert len(view.loss_samples.overall) == 360 and view.loss_samples.overall.x[-1] == 360
    np.testing.assert_allclose(view.loss_time.overall.y,
                               steps["loss"].rolling(15, min_periods=1).mean().to_numpy())
    start = an.start_time(events)
    assert view.loss_time.overall.x[0] == pytest.approx(steps["t"].min() - start)
    assert view.t_end == pytest.approx(steps["t"].max() - start)
    np.testing.assert_allclose(view.waits.wait_s, steps.groupby("worker")["wait_s"].sum().to_numpy())
    assert view.waits.most_wait is not None and view.waits.most_wait[0] in (0, 1)  # not the straggler
    counts = steps["staleness"].value_counts().sort_index()
    assert view.staleness_counts.x.tolist() == counts.index.tolist()
    assert view.staleness_counts.y.tolist() == counts.tolist()
    lo, hi, nonpositive = view.loss_range
    assert lo == steps["loss"].min() and hi == steps["loss"].max() and not nonpositive


def test_a_run_read_part_way(recorded) -> None:
    """``ended=False``: a worker without a done event is still training (its skew counts on)."""
    steps, events, config = recorded
    part = steps[steps["t"] <= steps["t"].quantile(0.5)]
    ends = events[events["event"] != "done"]
    view = view_of_run(part, ends, config, ended=False)
    ended = view_of_run(part, ends, config)
    assert view.n_records == len(part) and len(view.skew) == len(part)
    assert len(ended.skew) < len(part)  # read as ended: the skew stops once fewer than two workers train
    assert view_of_run(None, None, None).n_records == 0


def _many(workers: int, steps: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    done, t, out = [0] * workers, 1_700_000_000.0, []
    while min(done) < steps:
        w = int(rng.choice([i for i in range(workers) if done[i] < steps]))
        t += 0.001
        done[w] += 1
        out.append({"t": t, "worker": w, "step": done[w], "global_step": len(out) + 1, "loss": 1.0 / done[w],
                    "wait_s": 0.001 * (w % 3), "staleness": int(rng.integers(0, 4)), "minibatch": len(out),
                    "delay_s": 0.0, "applied": True})
    return out


def test_many_workers_live_and_report_alike() -> None:
    n = an.MANY_WORKERS + 2
    records = _many(n, 15, seed=4)
    events = [{"event": "start", "t": records[0]["t"] - 0.01, "worker": w} for w in range(n)]
    last = {r["worker"]: r["t"] for r in records}
    events += [{"event": "done", "t": t + 1e-4, "worker": w} for w, t in last.items()]
    config = {"options": {"mode": "async", "workers": n, "model": "linear"}}
    report = view_of_run(pd.DataFrame(records), pd.DataFrame(events), config)
    assert report.many and not report.ids and report.progress.band is not None
    band = report.progress.band
    assert band.q25 is not None and band.median is not None and band.q75 is not None
    assert (band.lo <= band.q25).all() and (band.q25 <= band.median).all() and (band.q75 <= band.hi).all()
    run = LiveRun(n, config["options"])
    for i in range(0, len(records), 37):
        run.add(records[i:i + 37], events if i == 0 else [])
    run.finalize()
    _assert_views_equal(run.view(), report)

