"""Tests of the live dashboard (ssptk.notebook.dashboard, ssptk.notebook.live_state): synthetic records with a fake clock, the
display in a real Jupyter kernel (nbclient), and one real run."""
from __future__ import annotations

import base64
import io
import sys
import textwrap
import types
import warnings
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import pytest
from matplotlib.image import imread

from ssptk import analysis as an
from ssptk.core.options import RunOptions, resolve
from ssptk.notebook.dashboard import LiveDashboard
from ssptk.notebook.live_state import LiveRun, nice_ceil, sticky_range
from ssptk.render.run_panels import thin, thin_envelope

T0 = 1_700_000_000.0


def opts(mode: str = "ssp", staleness: int | None = 1, workers: int = 2) -> RunOptions:
    return resolve(mode=mode, staleness=staleness if mode == "ssp" else None, workers=workers, model="linear")


def step(t: float, worker: int, n: int, loss: float = 1.0, staleness: int = 0, wait: float = 0.0,
         delay: float = 0.0) -> dict:
    return {"t": T0 + t, "worker": worker, "step": n, "global_step": 0, "loss": loss, "wait_s": wait,
            "staleness": staleness, "minibatch": 0, "delay_s": delay, "applied": True}


def event(kind: str, t: float, worker: int) -> dict:
    return {"event": kind, "t": T0 + t, "worker": worker}


def synthetic(workers: int = 2, steps: int = 30, dt: float = 0.01, seed: int = 0) -> list[dict]:
    """Round-robin-ish step records (random order among workers) with falling losses."""
    rng = np.random.default_rng(seed)
    done = [0] * workers
    out, t = [], 0.0
    while min(done) < steps:
        w = int(rng.choice([i for i in range(workers) if done[i] < steps]))
        t += dt
        done[w] += 1
        out.append(step(t, w, done[w], loss=10.0 * np.exp(-t) + 0.1, staleness=int(rng.integers(0, 3)),
                        wait=0.001, delay=0.002 * w))
    return out


def batches(records: list[dict], workers: int, per: int = 7) -> list[tuple[list[dict], list[dict]]]:
    """Records in batches of ``per`` (a start event first, done events after each worker's last step)."""
    last = {r["worker"]: r["t"] for r in records}
    out = [([], [event("start", 0.0, w) for w in range(workers)])]
    for i in range(0, len(records), per):
        chunk = records[i:i + per]
        done = [{"event": "done", "t": last[w] + 1e-4, "worker": w} for w in sorted(last)
                if any(r["worker"] == w and r["t"] == last[w] for r in chunk)]
        out.append((chunk, done))
    return out


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Sink:
    """Collects what the dashboard pushes, with the fake time of each push."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.pushes: list[tuple[float, bytes | None, str, bool]] = []

    def __call__(self, png: bytes | None, text: str, final: bool) -> None:
        self.pushes.append((self.clock.now, png, text, final))

    @property
    def images(self) -> list[tuple[float, bytes | None, str, bool]]:
        return [p for p in self.pushes if p[1] is not None]


def feed(dash: LiveDashboard, clock: FakeClock, parts: list, total: int, dt: float = 0.1) -> int:
    done = 0
    for steps, events in parts:
        clock.now += dt
        done += len(steps)
        dash.records(steps, events, done, total)
    return done


def ok_result(n: int) -> types.SimpleNamespace:
    return types.SimpleNamespace(summary={"status": "ok", "total_steps": n, "wall_s": 0.6, "steps_per_s": 100.0,
                                          "final_loss": 0.123, "max_skew": 2})


# --- unit level ---------------------------------------------------------------------------------

def test_redraws_at_most_once_per_interval_and_at_the_end():
    clock = FakeClock()
    sink = Sink(clock)
    dash = LiveDashboard(interval=1.0, sink=sink, clock=clock)
    dash.started("r", opts(), 60)
    records = synthetic(steps=30)
    parts = [([r], []) for r in records]  # one record per 0.1 s: 6 s of fake time
    n = feed(dash, clock, parts, 60)
    images = [t for t, _png, _text, final in sink.images if not final]
    assert all(b - a >= 1.0 for a, b in zip(images, images[1:]))
    assert 5 <= len(images) <= 6  # about once a second of 6 (none at started(): no records yet)
    assert sink.pushes[0][:2] == (0.0, None) and sink.pushes[0][2].startswith("starting the cluster")
    assert dash.redraws == len(images)
    # calls in between may refresh the progress line only (no image), and not more often either
    assert all(b - a >= 1.0 for a, b in zip([p[0] for p in sink.pushes], [p[0] for p in sink.pushes][1:]))
    dash.finished(ok_result(n))
    last = sink.pushes[-1]
    assert last[3] and last[1] is not None and last[0] == clock.now  # drawn at the end, at once
    assert dash.redraws == len(images) + 1
    assert last[2].startswith("done: 60 minibatches") and "final loss 0.123" in last[2]
    assert dash.png == last[1]
    assert dash.error is None


def test_interval_zero_redraws_at_every_call_with_new_records():
    clock = FakeClock()
    sink = Sink(clock)
    dash = LiveDashboard(interval=0, sink=sink, clock=clock)
    dash.started("r", opts(), 60)
    parts = batches(synthetic(steps=30), 2, per=20)
    feed(dash, clock, parts, 60)
    feed(dash, clock, [([], [])], 60)  # nothing new: the progress line only
    assert len(sink.images) == len(parts) - 1  # the first part is the start events only: no figure of empty panels
    assert sink.pushes[-1][1] is None


def test_accumulates_exactly_what_was_fed():
    clock = FakeClock()
    dash = LiveDashboard(interval=0.5, sink=Sink(clock), clock=clock)
    dash.started("r", opts(workers=3), 120)
    records = synthetic(workers=3, steps=40)
    n = feed(dash, clock, batches(records, 3, per=11), 120)
    s = dash.state
    df = pd.DataFrame(records)
    assert s.n_steps == n == len(records) == 120
    assert dash.done == 120
    assert {w: t.steps for w, t in s.per_worker.items()} == df.groupby("worker").size().to_dict()
    for w, t in s.per_worker.items():
        assert t.wait_s == pytest.approx(df[df.worker == w].wait_s.sum())
        assert t.delay_s == pytest.approx(df[df.worker == w].delay_s.sum())
    assert s.staleness_counts == df.staleness.value_counts().to_dict()
    assert s.start_t == T0 and sorted(s.finished) == [0, 1, 2]
    np.testing.assert_allclose(s.loss.values, df.loss.to_numpy())
    assert s.loss_min == pytest.approx(df.loss.min()) and s.loss_max == pytest.approx(df.loss.max())


def test_skew_of_a_hand_made_case():
    run = LiveRun(workers=2)
    recs = [step(1, 0, 1), step(2, 0, 2), step(3, 1, 1), step(4, 0, 3)]
    run.add(recs[:2], [event("start", 0, 0), event("start", 0, 1)])
    run.add(recs[2:], [])
    # worker 1's log has reached 3 s only: worker 0's step at 4 s waits, it might yet be followed by
    # worker 1's step at 3.5 s
    assert run.skew.values.tolist() == [1, 2, 1] and run.n_pending == 1 and run.horizon == T0 + 3
    # worker 0 finishes; from then on only worker 1 counts (a step at the done time still counts 0)
    run.add([step(5, 1, 2), step(7, 1, 3)], [event("done", 6, 0)])
    assert run.skew.values.tolist() == [1, 2, 1, 2, 1, 0]
    frame = pd.DataFrame({"t": run.t.values, "worker": run.worker.values.astype(int), "step": run.step.values})
    expected = an.skew_timeline(frame, {0: T0 + 6}, workers=[0, 1])["skew"].tolist()
    assert run.skew.values.tolist() == expected
    run.finalize()  # as run_figure: worker 1 leaves at its last record, which still counts
    assert run.skew.values.tolist() == [1, 2, 1, 2, 1, 0]


def test_a_log_read_ahead_of_the_others_waits_for_them():
    run = LiveRun(workers=2)
    run.add([step(1, 0, 1), step(3, 0, 2)], [])
    assert run.n_steps == 0 and run.n_pending == 2  # worker 1 has logged nothing yet
    run.add([step(2, 1, 1), step(4, 1, 2)], [])  # worker 1's first step landed before worker 0's second
    assert run.in_order and run.t.values.tolist() == [T0 + 1, T0 + 2, T0 + 3]
    assert run.skew.values.tolist() == [1, 0, 1]
    run.finalize()  # the run has ended: the rest is taken
    assert run.t.values.tolist() == [T0 + 1, T0 + 2, T0 + 3, T0 + 4]
    frame = pd.DataFrame({"t": run.t.values, "worker": run.worker.values.astype(int), "step": run.step.values})
    expected = an.skew_timeline(frame, an.finish_times(frame), workers=[0, 1])["skew"].tolist()
    assert run.skew.values.tolist() == expected == [1, 0, 1, 0]


def test_bound_line_for_ssp_only_and_as_run_figure():
    for mode, staleness, bound in (("ssp", 2, 3), ("ssp", 0, 1), ("async", None, None)):
        clock = FakeClock()
        dash = LiveDashboard(interval=0, sink=Sink(clock), clock=clock)
        dash.started("r", opts(mode, staleness), 60)
        feed(dash, clock, batches(synthetic(), 2, per=60), 60)
        dash.finished(ok_result(60))
        lines = [ln for ln in dash.figure.ax_skew.lines if ln.get_label().startswith("bound")]
        if bound is None:
            assert not lines and dash.figure.bound_line is None
        else:
            assert len(lines) == 1 and lines[0].get_linestyle() == "--"
            assert list(lines[0].get_ydata()) == [bound, bound]
            assert lines[0].get_label() == f"bound: skew \u2264 S+1 = {bound}"  # the label run_figure draws


def test_png_decodes_with_the_figure_size():
    clock = FakeClock()
    dash = LiveDashboard(interval=0, sink=Sink(clock), clock=clock)
    dash.started("r", opts(workers=3), 90)
    feed(dash, clock, batches(synthetic(workers=3), 3, per=45), 90)
    for png in (dash.png, (dash.finished(ok_result(90)), dash.png)[1]):
        image = imread(io.BytesIO(png))
        assert image.shape[:2] == (528, 960)  # 10 x 5.5 in at 96 dpi
        assert image.std() > 0.05  # not blank
    assert len(dash.figure.fig.axes) == 6


def test_long_series_are_thinned_and_ranges_settle():
    clock = FakeClock()
    dash = LiveDashboard(interval=1.0, sink=Sink(clock), clock=clock)
    dash.started("r", opts(workers=3), 9000)
    records = synthetic(workers=3, steps=3000, dt=0.004)
    feed(dash, clock, batches(records, 3, per=60), 9000)
    fig = dash.figure
    assert all(len(ln.get_xdata()) <= fig.points + 1 for ax in fig.axes for ln in ax.lines)
    assert fig.points <= 2000
    assert fig.backgrounds <= 6 < dash.redraws  # most refreshes reuse the background


def test_progress_line():
    clock = FakeClock()
    dash = LiveDashboard(interval=0, sink=Sink(clock), clock=clock)
    dash.started("r", opts(), 200)
    assert dash.progress_text().startswith("starting the cluster")
    clock.now = 3.0
    dash.records([step(1.0 + 0.01 * i, i % 2, i // 2 + 1) for i in range(50)], [event("start", 0.5, 0)], 50, 200)
    text = dash.progress_text()
    assert text.startswith("50/200 minibatches (25%)")
    assert "elapsed 3.0 s" in text and "steps/s" in text and "ETA" in text
    assert '<progress value="50" max="200"' in dash._progress_html()
    dash.finished(None)
    assert dash.progress_text().startswith("interrupted after 50/200 minibatches")
    dash2 = LiveDashboard(interval=0, sink=Sink(clock), clock=clock)
    dash2.started("r", opts(), 200)
    dash2.finished(types.SimpleNamespace(summary={"status": "failed", "reason": "worker:1 exited with code 1"}))
    assert dash2.progress_text() == "failed after 0/200 minibatches (0%): worker:1 exited with code 1"


def test_outside_ipython_draws_nothing_and_never_raises():
    before = dict(matplotlib.rcParams.copy())
    dash = LiveDashboard(interval=0)  # plain Python: no kernel
    dash.started("r", opts(), 60)
    feed(dash, FakeClock(), batches(synthetic(), 2), 60)
    assert dash.redraws == 0 and dash.state.n_steps == 60
    dash.finished(ok_result(60))
    assert dash.redraws == 0
    assert imread(io.BytesIO(dash.png)).shape[:2] == (528, 960)  # on demand
    assert dict(matplotlib.rcParams.copy()) == before
    assert "matplotlib.pyplot" not in sys.modules or not sys.modules["matplotlib.pyplot"].get_fignums()
    # malformed records and a failing sink: a warning, never an exception into the run
    dash = LiveDashboard(interval=0, sink=lambda *a: 1 / 0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dash.started("r", None, 0)
        dash.records([{"t": "x"}, {}], [{"event": "start"}], 2, 0)
        dash.finished(None)
    assert isinstance(dash.error, ZeroDivisionError)
    assert any("dashboard stopped" in str(w.message) for w in caught)
    dash = LiveDashboard(interval=0, sink=lambda *a: None)
    nan = float("nan")
    dash.records([{"t": "x"}, {"worker": 1}, {"worker": nan, "step": nan, "staleness": nan},
                  step(1, 0, 1, loss=nan)], [{"event": "start"}, {"event": "done", "worker": nan, "t": 1.0}], 4, 0)
    dash.finished(None)
    assert dash.error is None and dash.state.n_steps == 4


def test_widget_needs_ipywidgets(monkeypatch):
    monkeypatch.setitem(sys.modules, "ipywidgets", None)
    with pytest.raises(ImportError, match=r"pip install 'ssptk\[notebook\]'"):
        LiveDashboard(widget=True)


def test_pure_helpers():
    a = np.arange(10_000, dtype=float)
    tx, ty = thin(a, a, 500)
    assert len(tx) == 500 and tx[0] == 0 and tx[-1] == 9999
    y = np.ones(10_000)
    y[1234], y[4321] = 7, -3
    mx, my = thin_envelope(a, y, 100)
    assert len(mx) == 101 and my.max() == 7 and my.min() == -3 and np.all(np.diff(mx) >= 0)
    assert nice_ceil(0.7) == 0.8 and nice_ceil(55) == 60 and nice_ceil(2000) == 2000
    assert sticky_range((0.0, 50.0), 0.0, 30.0, floor=0.0) == (0.0, 50.0)
    assert sticky_range((0.0, 50.0), 0.0, 51.0, floor=0.0, ahead=70.0) == (0.0, 80.0)
    assert sticky_range(None, 0.1, 50.0, log=True) == (0.025, 80.0)


# --- in a real Jupyter kernel -------------------------------------------------------------------

NOTEBOOK_SETUP = textwrap.dedent("""
    import types
    import numpy as np
    from ssptk.notebook.dashboard import LiveDashboard
    opts = types.SimpleNamespace(mode="ssp", staleness=1, workers=2, model="linear")
    T0 = 1.7e9
    def feed(dash, total=40):
        dash.started("nb-run", opts, total)
        n = 0
        for b in range(5):
            steps = [{"t": T0 + 0.01 * (8 * b + i), "worker": i % 2, "step": (8 * b + i) // 2 + 1,
                      "global_step": 8 * b + i + 1, "loss": float(np.exp(-(8 * b + i) / 10)), "wait_s": 0.0,
                      "staleness": i % 3, "minibatch": 8 * b + i, "delay_s": 0.0, "applied": True}
                     for i in range(8)]
            n += len(steps)
            dash.records(steps, [{"event": "start", "t": T0, "worker": 0}] if b == 0 else [], n, total)
        dash.finished(types.SimpleNamespace(summary={"status": "ok", "total_steps": n, "wall_s": 0.4,
                                                     "steps_per_s": 100.0, "final_loss": 0.02, "max_skew": 1}))
        return dash
""")


@pytest.fixture(scope="module")
def executed_notebook():
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(NOTEBOOK_SETUP),
                nbformat.v4.new_code_cell("dash = feed(LiveDashboard(interval=0))\nprint('redraws', dash.redraws)"),
                nbformat.v4.new_code_cell("w = LiveDashboard(interval=0, widget=True)\ndisplay(w.widget)\n"
                                          "feed(w)\nprint('widget png bytes', len(w.png), w.redraws)")]
    root = str(Path(__file__).resolve().parent.parent)  # the kernel imports this checkout's ssptk
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": root}}).execute()
    return nb


def test_in_a_kernel_the_cell_keeps_the_final_figure_and_progress(executed_notebook):
    outputs = executed_notebook.cells[1].outputs
    assert not [o for o in outputs if o.output_type == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) == 1  # one output, updated in place
    png = base64.b64decode(images[0].data["image/png"])
    assert imread(io.BytesIO(png)).shape[:2] == (528, 960)
    # the figure (also as HTML: an <img> the width of the notebook) and the progress line
    assert 'style="width:100%' in images[0].data["text/html"]
    progress = [o for o in outputs if "text/html" in o.get("data", {}) and "image/png" not in o.get("data", {})]
    assert len(progress) == 1
    assert "done: 40 minibatches" in progress[0].data["text/html"]
    assert progress[0].data["text/plain"].startswith("done: 40 minibatches")
    printed = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    redraws = int(printed.split("redraws")[1].split()[0])
    assert 2 <= redraws <= 7  # started and the end at least (a slow refresh stretches the interval)


def test_the_saved_notebook_shows_the_figure_without_a_kernel(executed_notebook):
    nbconvert = pytest.importorskip("nbconvert")
    body, _ = nbconvert.HTMLExporter().from_notebook_node(executed_notebook)
    assert body.count("data:image/png;base64,") >= 1
    assert "done: 40 minibatches" in body and "<progress" in body


def test_in_a_kernel_the_widget_is_shown(executed_notebook):
    outputs = executed_notebook.cells[2].outputs
    assert not [o for o in outputs if o.output_type == "error"]
    assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outputs)
    assert not any("image/png" in o.get("data", {}) for o in outputs)  # drawn into the widget only
    printed = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "widget png bytes" in printed


# --- one real run -------------------------------------------------------------------------------

@pytest.mark.slow
def test_real_run_feeds_the_dashboard(run_dir):
    import ssptk

    pushes: list[tuple[bytes | None, str, bool]] = []
    dash = LiveDashboard(interval=0.2, sink=lambda png, text, final: pushes.append((png, text, final)))
    result = ssptk.run(model="linear", mode="ssp", staleness=1, workers=2, steps=60, out=str(run_dir),
                       observer=dash)
    assert dash.error is None
    assert dash.state.n_steps == len(result.df) == dash.done
    assert dash.redraws > 1 and pushes[-1][2] and pushes[-1][0] is not None
    assert pushes[-1][1].startswith("done: ")
    assert dash.state.final and dash.state.skew.values.max() <= 2  # bound S+1
    assert dash.figure.bound_line is not None
    assert imread(io.BytesIO(dash.png)).shape[:2] == (528, 960)


# --- dozens of workers -------------------------------------------------------------------------------

def test_many_workers_draw_bands_and_name_the_slowest_and_fastest() -> None:
    """From MANY_WORKERS on: no line per worker; a band of the workers' progress, the extremes named."""
    from ssptk.render.figures import run_figure

    n = an.MANY_WORKERS + 4
    records = synthetic(workers=n, steps=12, seed=3)
    records = [r for r in records if not (r["worker"] == 5 and r["step"] > 9)]  # worker 5 falls behind
    steps = pd.DataFrame(records)
    band = an.progress_band(an.prepare_steps(steps))
    assert (band["lo"] <= band["q25"]).all() and (band["q25"] <= band["median"]).all()
    assert (band["median"] <= band["q75"]).all() and (band["q75"] <= band["hi"]).all()
    assert band["hi"].iloc[-1] == 12 and band["lo"].iloc[-1] == 9
    slowest, fastest = an.extreme_workers(steps)  # type: ignore[misc]
    assert slowest == 5 and fastest != 5
    fig = run_figure(steps)
    ax_loss, ax_prog = fig.axes[0], fig.axes[1]
    labels = ax_prog.get_legend_handles_labels()[1]
    assert f"slowest: worker {slowest}" in labels and f"fastest: worker {fastest}" in labels
    assert len(ax_prog.lines) == 3  # median, slowest, fastest: not one line per worker
    assert len(ax_loss.lines) == 1  # the overall mean; the workers' spread is a band
    wait_ticks = [t for t in fig.axes[3].get_xticks() if 0 <= t < n]
    assert len(wait_ticks) <= 9


def test_live_figure_with_many_workers_draws_the_extremes() -> None:
    from ssptk.notebook.live_figure import LiveFigure

    n = an.MANY_WORKERS
    run = LiveRun(n, {"mode": "async", "workers": n, "model": "linear"})
    records = synthetic(workers=n, steps=10, seed=1)
    run.add(records, [event("start", 0.0, w) for w in range(n)] + [event("done", 1e3, w) for w in range(n)])
    view = run.view()
    assert view.many and not view.ids and not view.loss_time.per_worker and view.loss_time.band is not None
    (slow, slow_line), (fast, fast_line) = view.progress.slowest, view.progress.fastest  # type: ignore[misc]
    assert slow_line.y[-1] <= fast_line.y[-1] == 10 and slow != fast
    fig = LiveFigure(view)
    fig.update(view, total=len(records))
    labels = [t.get_text() for t in fig.fig.legends[0].get_texts()]
    assert "slowest worker" in labels and "fastest worker" in labels  # named once the run has ended
    assert imread(io.BytesIO(fig.png())).shape[1] > 0
    fig.update(view, final=True)
    labels = [t.get_text() for t in fig.fig.legends[0].get_texts()]
    assert f"slowest: worker {slow}" in labels and f"fastest: worker {fast}" in labels


def test_a_band_moves_to_new_data_with_any_matplotlib() -> None:
    """Bands are moved by FillBetweenPolyCollection.set_data (matplotlib >= 3.10) or, before, by their polygon."""
    from matplotlib.collections import PolyCollection
    from matplotlib.figure import Figure

    from ssptk.render.run_panels import set_band

    ax = Figure().subplots()
    x, lo, hi = np.array([0.0, 1.0, 2.0]), np.array([1.0, 2.0, 3.0]), np.array([2.0, 4.0, 5.0])
    for step in (False, True):
        new = ax.fill_between([], [], [], step="post" if step else None)
        old = ax.add_collection(PolyCollection([]))  # what fill_between returns before matplotlib 3.10: no set_data
        set_band(new, x, lo, hi, step=step)
        set_band(old, x, lo, hi, step=step)
        boxes = [c.get_datalim(ax.transData).get_points() for c in (new, old)]
        np.testing.assert_allclose(boxes[0], boxes[1])
        assert boxes[1].tolist() == [[0.0, 1.0], [2.0, 5.0]]
        polygons = [c.get_paths()[0].vertices for c in (new, old)]
        area = [abs(np.sum(v[:-1, 0] * v[1:, 1] - v[1:, 0] * v[:-1, 1])) / 2 for v in polygons]
        assert area[0] == pytest.approx(area[1]) == (3.0 if step else 3.5)
