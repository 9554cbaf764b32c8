"""Issue 27 (points 5 and 6), the fast parts: live axes that grow with the data, the background widget (no
broken image, a Stop button, the stopped run handed back), the explorer's status and figure saying the same
count (``show_static()``'s three figures: test_widgets.py's real-run test), and what predictions with a steady straggler say. No TensorFlow."""
from __future__ import annotations

import re
import threading
import time
import types
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from test_dashboard import FakeClock, Sink, batches, event, feed, opts, synthetic
from test_widgets import FakeRunner

from ssptk.notebook import explorer, staleness_widgets
from ssptk.notebook import slider_predictions as predictions
from ssptk.notebook.background import BackgroundRun
from ssptk.notebook.dashboard import LiveDashboard
from ssptk.sim import simulate

pytest.importorskip("ipywidgets")


@pytest.fixture(autouse=True)
def fresh_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(explorer, "_RUNS", {})
    monkeypatch.setattr(predictions, "PREDICTED", {})
    monkeypatch.setattr(explorer, "PREDICTED", predictions.PREDICTED)


def test_live_axes_grow_with_the_data_not_the_budget() -> None:
    """At 1% of a long run the data fill a good part of the axes (they were sized for the whole budget: a sliver)."""
    clock = FakeClock()
    dash = LiveDashboard(interval=0.0, sink=Sink(clock), clock=clock)
    total = 30_000
    dash.started("r", opts(workers=3), total)
    records = synthetic(workers=3, steps=100, dt=0.01)  # 300 of 30000 minibatches: 1%
    feed(dash, clock, batches(records, 3, per=100), total)
    fig = dash.figure
    assert fig is not None
    t_end = max(r["t"] for r in records) - min(r["t"] for r in records)
    for ax in (fig.ax_loss, fig.ax_prog):
        lo, hi = ax.get_xlim()
        assert lo == 0.0 and t_end <= hi <= 3.0 * t_end, (ax.get_title(), hi, t_end)
    assert fig.ax_prog.get_ylim()[1] <= 3.0 * 100  # steps per worker so far: 100 (the budget: 10000)
    assert 300 <= fig.ax_samples.get_xlim()[1] <= 3.0 * 300  # minibatches so far: 300 (the budget: 30000)


def test_the_background_widget_hides_its_image_until_the_first_figure_and_has_a_stop_button() -> None:
    ipywidgets = pytest.importorskip("ipywidgets")
    button = ipywidgets.Button(description="Stop")
    dash = LiveDashboard(interval=0.0, widget=True, controls=[button])
    image, row = dash.widget.children
    assert image.layout.display == "none"  # an Image without a value shows as a broken image
    assert button in row.children
    dash.started("r", opts(workers=2), 40)
    feed(dash, FakeClock(), batches(synthetic(workers=2, steps=10), 2), 40)
    assert image.layout.display == "" and bytes(image.value).startswith(b"\x89PNG")


def test_stop_button_and_wait_after_stop_return_the_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The Stop button asks the run to end without blocking the kernel; wait() then returns the stopped run."""
    import ssptk.experiment.single as single
    from ssptk.core.errors import RunInterrupted

    def execute(prepared: Any, *, observer: Any, cancel: threading.Event, **_kw: Any) -> Any:
        observer.started(prepared.run_dir, prepared.opts, 10)
        assert cancel.wait(30)
        (Path(prepared.run_dir) / "summary.json").write_text('{"status": "interrupted", "total_steps": 3}')
        observer.finished(None)
        raise RunInterrupted("interrupted")

    monkeypatch.setattr(single, "execute", execute)
    bg = BackgroundRun.start(mode="async", workers=2, steps=5, out=str(tmp_path / "bg"))
    assert bg.stop_button is not None and bg.stop_button in bg.widget.children[1].children
    t0 = time.monotonic()
    bg.stop_button.click()
    assert time.monotonic() - t0 < 1.0 and bg.stop_button.disabled  # the click does not wait for the run
    result = bg.wait(30)
    assert bg.interrupted and result is not None and result.run_dir == str(tmp_path / "bg")
    assert result.summary["status"] == "interrupted" and not result.ok
    assert bg.stop() is result and bg.wait() is result and "stopped" in repr(bg)


def test_while_a_run_goes_the_status_and_the_figure_say_the_same_count(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(explorer, "FIGURE_EVERY_S", 3600.0)  # one redraw with minibatches done, then none
    seen: list[tuple[str, str | None]] = []
    fake = FakeRunner(tmp_path / "runs")

    def runner(**kwargs: Any) -> Any:
        for done in (0, 5, 9):
            kwargs["progress"](done, 12)
            seen.append((ex.status, ex._running))
        return fake(**{k: v for k, v in kwargs.items() if k != "progress"})

    ex = staleness_widgets.staleness_explorer(workers=2, staleness=[0, 2], runner=runner, steps=6)
    ex.run(0)
    (s0, f0), (s5, f5), (s9, f9) = seen
    assert s0 == "S=0: starting" and f0 is not None and "starting" in f0  # no count drawn before one is done
    assert s5 == "S=0: running, 5/12 minibatches" and f5 == f"{s5}: drawn as it goes"
    assert (s9, f9) == (s5, f5)  # the figure was not redrawn at 9/12: the status line keeps what it shows


def test_steady_straggler_the_bound_buys_a_head_start_not_a_pace() -> None:
    """SSP with a steady straggler: the same steps/s at every S; the fast workers get (S+1) steps ahead once, at
    the start, so an early target comes sooner by about that head start (what the Predict figure now says)."""
    runs = {s: simulate("ssp", 3, 120, staleness=s, straggler={2: 0.02}, overhead=0.005) for s in (0, 4, 8)}
    rates = [r.steps_per_s for r in runs.values()]
    assert max(rates) / min(rates) < 1.05  # the straggler's pace at every S: 120 to 125 steps/s
    assert [r.max_skew for r in runs.values()] == [1, 5, 9]  # the fast workers run S+1 steps ahead, no further
    at_45 = {s: float(r.steps.sort_values("t")["t"].iloc[44]) for s, r in runs.items()}
    for s in (4, 8):  # an early target comes sooner by the head start: (N-1)*S minibatches more than S=0's, done
        head_start = 2 * s / 3 * 0.025  # while the straggler's pace (0.025 s a step) gives 3 minibatches a step
        assert abs(at_45[0] - at_45[s] - head_start) < 0.02, (s, at_45)
    table = pd.DataFrame({"label": ["S=0", "S=4", "S=8"], "steps_per_s": rates})
    note = predictions.steady_straggler_note(table, 3, ["2:0.02"])
    assert note is not None and "every S runs at its pace" in note and "head start (2x(S+1)" in note
    assert predictions.steady_straggler_note(table, 3, []) is None
    assert predictions.steady_straggler_note(table.assign(steps_per_s=[100.0, 150.0, 200.0]), 3, ["2:0.02"]) is None


def test_the_foreground_interrupt_names_the_run_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    from ssptk import commands
    from ssptk.core.errors import RunInterrupted
    from ssptk.notebook import magics

    def run(args: Any, observer: Any, **_kw: Any) -> Any:
        observer.started("runs/x-ssp", types.SimpleNamespace(workers=2), 300)
        observer.records([], [], 187, 300)
        raise KeyboardInterrupt

    monkeypatch.setattr(commands, "run_one", run)
    with pytest.raises(RunInterrupted, match=r"interrupted after 187/300 minibatches.* kept in runs/x-ssp: "
                                             r"%dtrain report runs/x-ssp"):
        magics.dtrain("--mode ssp --staleness 1 --workers 2 --no-dashboard")


def _wait_for(condition: Any, what: str, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, f"not within {within} s: {what}"
        time.sleep(0.01)


def _clock_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "ssptk-dashboard-clock" and t.is_alive()]


def test_while_the_cluster_starts_the_widget_counts_the_tasks_and_its_clock_moves() -> None:
    """Issue 37: the widget said "elapsed 0.0 s" for the ~40 s of a cold start (nothing calls a dashboard then),
    and its first figure was six empty panels. Its own clock now moves the line; the start says how many tasks
    are ready; the image waits for step records."""
    clock = FakeClock()
    dash = LiveDashboard(interval=0.0, widget=True, clock=clock, tick=0.02)
    image, line = dash.widget.children
    dash.started("r", opts(workers=2), 40)
    assert "starting the cluster" in line.value and "elapsed 0.0 s" in line.value
    clock.now = 7.5  # no record, no call: the line moves by itself
    _wait_for(lambda: "elapsed 7.5 s" in line.value, "the start-up clock moves")
    dash.starting(["ps:0"], ["worker:0", "worker:1"])
    assert "starting: 1 of 3 tasks ready · elapsed 7.5 s" in line.value
    clock.now = 12.0
    _wait_for(lambda: "1 of 3 tasks ready · elapsed 12.0 s" in line.value, "the clock moves on")
    dash.records([], [event("start", 0.0, 0), event("start", 0.0, 1)], 0, 40)  # events, not a step yet
    dash.starting(["ps:0", "worker:0", "worker:1"], [])
    assert "3 of 3 tasks ready: waiting for the first step records" in line.value
    assert image.layout.display == "none" and not image.value and dash.redraws == 0  # no figure of empty panels
    feed(dash, clock, batches(synthetic(workers=2, steps=10), 2)[1:], 40)
    assert image.layout.display == "" and bytes(image.value).startswith(b"\x89PNG")
    assert "minibatches" in line.value and "tasks ready" not in line.value
    _wait_for(lambda: not _clock_threads(), "the start-up clock stops with the first steps")


def test_a_background_run_shows_its_start_up(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The background widget as ``%dtrain --background`` makes it, on a run whose tasks take seconds to start:
    the line counts the tasks and its elapsed time moves before any record; the image waits for the steps."""
    import ssptk.experiment.single as single
    from ssptk.experiment.result import RunResult
    from ssptk.launch.observers import notify_starting

    seen: list[str] = []
    go = threading.Event()

    def execute(prepared: Any, *, observer: Any, cancel: threading.Event, **_kw: Any) -> Any:
        observer.started(prepared.run_dir, prepared.opts, 20)
        notify_starting([observer], [], ["ps:0", "worker:0", "worker:1"])
        notify_starting([observer], ["ps:0"], ["worker:0", "worker:1"])
        assert go.wait(60)  # the tasks take their time: nothing reaches the dashboard meanwhile
        notify_starting([observer], ["ps:0", "worker:0", "worker:1"], [])
        for steps, events in batches(synthetic(workers=2, steps=10), 2):
            observer.records(steps, events, 0, 20)
        result = RunResult(prepared.run_dir, prepared.opts, {"status": "ok", "total_steps": 20})
        observer.finished(result)
        return result

    monkeypatch.setattr(single, "execute", execute)
    bg = BackgroundRun.start(mode="async", workers=2, steps=10, out=str(tmp_path / "bg"))
    image, line = bg.widget.children[0], bg.dashboard._html
    line.observe(lambda change: seen.append(change["new"]), names="value")
    def moved() -> bool:
        m = re.search(r"starting: 1 of 3 tasks ready · elapsed (\d+\.\d) s", line.value)
        return m is not None and float(m.group(1)) >= 1.0

    _wait_for(moved, "a second of start-up, shown")
    assert image.layout.display == "none"
    go.set()
    assert bg.wait(60).summary["status"] == "ok"
    assert image.layout.display == "" and bytes(image.value).startswith(b"\x89PNG")
    assert any("3 of 3 tasks ready" in v for v in seen)
    _wait_for(lambda: not _clock_threads(), "the start-up clock stops with the run")
