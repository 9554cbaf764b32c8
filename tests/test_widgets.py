"""Tests of ssptk.notebook.staleness_widgets and ssptk.render.overlay: caching, keys, status lines, overlays, display, a real kernel,
and (slow) real TensorFlow runs. Fast tests use run directories written on disk per docs/run-directory.md."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
import psutil
import pytest
from matplotlib.figure import Figure

try:
    from conftest import assert_gone, skip_or_fail
except ImportError:  # tests/ imported as a package
    from tests.conftest import assert_gone, skip_or_fail

from ssptk import api
from ssptk.api import RunResult
from ssptk.core.errors import RunFailed, TaskFailure, UsageError
from ssptk.core.options import OPTIONS, resolve
from ssptk.notebook import explorer, staleness_widgets
from ssptk.notebook import slider_predictions as predictions
from ssptk.render import figure_png
from ssptk.render.overlay import BOUND_GID, LOSS_GID, SKEW_GID, overlay_figure, summary_line

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
OPTION_NAMES = {o.name for o in OPTIONS}


# --- run directories written by hand ------------------------------------------------------------

def make_run(run_dir: str | Path, **options: Any) -> RunResult:
    """Write config.json, workers/worker-<i>.jsonl and summary.json for ``options`` and wrap them in a
    RunResult. Worker N-1 is slower by its straggler seconds; losses fall with the global step."""
    run_dir = Path(run_dir)
    opts = resolve(**{**options, "out": str(run_dir)})
    (run_dir / "workers").mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps({"options": opts.to_dict(), "cluster": {}, "created": 0.0}))
    n, per = opts.workers, max(2, min(opts.steps, 12))
    period = {w: 0.01 + opts.stragglers.get(w, 0.0) for w in range(n)}
    times = sorted((10.0 + step * period[w], w, step) for w in range(n) for step in range(1, per + 1))
    lines: dict[int, list[dict]] = {w: [{"event": "start", "t": 10.0, "worker": w, "cpu_s": 1.0}] for w in range(n)}
    for g, (t, w, step) in enumerate(times, start=1):
        lines[w].append({"t": t, "worker": w, "step": step, "global_step": g, "loss": 10.0 * math.exp(-0.1 * g),
                         "wait_s": 0.001 * (opts.bound or 0), "staleness": g % 3, "minibatch": g - 1,
                         "delay_s": opts.stragglers.get(w, 0.0), "applied": True})
    for w in range(n):
        lines[w].append({"event": "done", "t": lines[w][-1]["t"], "worker": w, "steps": per, "cpu_s": 2.0})
        (run_dir / "workers" / f"worker-{w}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines[w]))
    summary = {"status": "ok", "mode": opts.mode, "workers": n, "staleness": opts.bound,
               "steps_per_s": 100.0 + (opts.bound or 0), "max_skew": min(per, (opts.bound or 0) + 1),
               "final_loss": 0.5, "wait_fraction": 0.25, "run_dir": str(run_dir)}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    return RunResult(str(run_dir), opts, summary)


class FakeRunner:
    """A runner that writes a run directory instead of training, and records how it was called."""

    def __init__(self, root: Path, fail: BaseException | None = None) -> None:
        self.root, self.fail, self.calls = root, fail, []

    def __call__(self, **kwargs: Any) -> RunResult:
        self.calls.append(kwargs)
        if kwargs.get("progress"):
            kwargs["progress"](3, 6)
        if self.fail is not None:
            raise self.fail
        options = {k: v for k, v in kwargs.items() if k in OPTION_NAMES and k != "out"}
        return make_run(self.root / f"run-{len(self.calls)}", **options)


@pytest.fixture(autouse=True)
def fresh_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test as in a new kernel: no runs left by an earlier test's explorer."""
    monkeypatch.setattr(explorer, "_RUNS", {})
    monkeypatch.setattr(predictions, "PREDICTED", {})
    monkeypatch.setattr(explorer, "PREDICTED", predictions.PREDICTED)


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeRunner:
    monkeypatch.chdir(tmp_path)  # a sweep without out= writes its comparison under ./runs
    return FakeRunner(tmp_path / "runs")


def loss_lines(fig: Figure) -> list:
    return [ln for ln in fig.axes[0].get_lines() if str(ln.get_gid()).startswith(LOSS_GID)]


def _rc_snapshot() -> dict:
    copy = matplotlib.rcParams.copy()
    return {k: copy._get(k) for k in copy}


# --- keys and caching -------------------------------------------------------------------------------

def test_cache_key_ignores_out_and_normalises_options() -> None:
    a = staleness_widgets.cache_key({"mode": "ssp", "staleness": 2, "straggler": ["1:0.05"], "workers": 2, "out": "x"})
    b = staleness_widgets.cache_key({"mode": "ssp:2", "straggler": [(1, 0.05)], "workers": 2, "out": "y"})
    assert a == b and hash(a) == hash(b)
    assert "out" not in dict(a)
    assert a != staleness_widgets.cache_key({"mode": "ssp", "staleness": 2, "straggler": ["1:0.05"], "workers": 3})
    with pytest.raises(UsageError, match="straggler index 2"):
        staleness_widgets.cache_key({"mode": "ssp", "straggler": ["2:0.1"], "workers": 2})


def test_selecting_a_cached_value_does_not_run_again(fake: FakeRunner) -> None:
    ex = staleness_widgets.staleness_explorer(workers=3, straggler=0.02, staleness=[0, 2, 4], runner=fake, steps=10)
    assert ex.staleness_slider.value == 2 and "not run yet: press Run" in ex.status
    assert ex.run(0) is not None and len(fake.calls) == 1
    assert fake.calls[0]["straggler"] == ["2:0.02"] and fake.calls[0]["out"] is None
    assert fake.calls[0]["mode"] == "ssp" and fake.calls[0]["staleness"] == 0 and fake.calls[0]["steps"] == 10
    ex.select(2)
    ex.run_button.click()  # the button does what run() does
    assert len(fake.calls) == 2 and len(ex.results) == 2
    ex.select(0)  # cached: shown at once, no training
    assert len(fake.calls) == 2
    assert ex.status == "S=0: 100.0 steps/s, max skew 1, final loss 0.5, wait 25%"
    ex.run_button.click()  # Run on a cached value shows it again
    assert ex.run(0) is ex.results[ex.key()] and len(fake.calls) == 2
    ex.select(4)
    assert ex.status == "S=4: not run yet: press Run"
    fig = ex.figure()
    assert [ln.get_label() for ln in loss_lines(fig)] == ["S=0", "S=2"]  # the cached overlay
    assert "not run yet: press Run" in fig._suptitle.get_text()
    assert bytes(ex.image.value).startswith(PNG_MAGIC)
    ex.select(2)
    lines = {ln.get_label(): ln for ln in loss_lines(ex.figure())}
    assert lines["S=2"].get_alpha() == 1.0 and lines["S=0"].get_alpha() < 0.5  # highlighted vs faded
    assert lines["S=2"].get_linewidth() > lines["S=0"].get_linewidth()
    ex.run(force=True)
    assert len(fake.calls) == 3 and len(ex.results) == 2
    table = ex.table()
    assert list(table["label"]) == ["S=0", "S=2"] and list(table["bound"]) == [0, 2]
    with pytest.raises(UsageError, match="not on the slider"):
        ex.select(3)


def test_workers_and_straggler_change_the_key(fake: FakeRunner) -> None:
    ex = staleness_widgets.staleness_explorer(workers=3, straggler=0.02, staleness=range(0, 4), runner=fake, steps=10)
    k0 = ex.key()
    ex.run()
    ex.workers_slider.value = 4
    k1 = ex.key()
    assert k1 != k0 and dict(k1)["straggler"] == ((3, 0.02),) and dict(k1)["workers"] == 4
    assert "not run yet" in ex.status
    ex.run()
    assert fake.calls[-1]["straggler"] == ["3:0.02"] and fake.calls[-1]["workers"] == 4
    ex.straggler_slider.value = 0.05
    assert ex.key() not in (k0, k1)
    ex.straggler_slider.value = 0.0  # no straggler at all
    assert dict(ex.key())["straggler"] == ()
    ex.workers_slider.value, ex.straggler_slider.value = 3, 0.02
    assert ex.key() == k0 and "not run yet" not in ex.status and len(fake.calls) == 2
    labels = [ln.get_label() for ln in loss_lines(ex.figure())]
    assert labels == ["S=2 N=3", "S=2 N=4"]  # what differs is in the labels
    styles = {ln.get_label(): ln.get_linestyle() for ln in loss_lines(ex.figure())}
    assert styles["S=2 N=3"] != styles["S=2 N=4"]


def test_the_explorer_draws_the_run_in_progress(fake: FakeRunner) -> None:
    """While a run goes, the overlay shows its curves as far as it has come, highlighted."""
    seen: dict[str, Any] = {}

    def runner(**kwargs: Any) -> RunResult:
        observer = kwargs["observer"]
        observer.started("somewhere", resolve(**{k: v for k, v in kwargs.items() if k in OPTION_NAMES}), 20)
        t0 = 1_700_000_000.0
        steps = [{"t": t0 + 0.01 * i, "worker": i % 2, "step": i // 2 + 1, "global_step": i + 1, "loss": 5.0 / (i + 1),
                  "wait_s": 0.0, "staleness": i % 2, "minibatch": i, "delay_s": 0.0, "applied": True} for i in range(12)]
        observer.records(steps, [{"event": "start", "t": t0, "worker": w} for w in (0, 1)], 12, 20)
        fig = ex.figure()
        seen["loss"] = {ln.get_label(): len(ln.get_xdata()) for ln in loss_lines(fig)}
        seen["title"] = fig.get_suptitle()
        return fake(**kwargs)

    ex = staleness_widgets.staleness_explorer(workers=2, staleness=[0, 2], runner=runner, steps=10)
    ex.run(2)
    assert seen["loss"]["S=2"] == 12  # its loss curve, one point per step so far
    assert ex._live is None and len(loss_lines(ex.figure())) == 1  # afterwards: the finished run, from the cache


def test_running_the_cell_again_keeps_the_runs_and_the_figure_says_what_runs(fake: FakeRunner) -> None:
    seen: list[tuple[str | None, bytes]] = []

    def runner(**kwargs: Any) -> RunResult:
        result = fake(**kwargs)  # reports progress 3/6 on the way
        seen.append((ex._running, ex.image.value))  # what the figure said then, and the image it showed
        return result

    ex = staleness_widgets.staleness_explorer(workers=2, staleness=[0, 2], runner=runner, steps=10)
    before = ex.image.value
    ex.run(0)
    (note, image), = seen
    assert note is not None and note.startswith("S=0: running, 3/6 minibatches") and image != before
    assert ex._running is None and "S=0" in ex.status and "running" not in ex.status
    again = staleness_widgets.staleness_explorer(workers=2, staleness=[0, 2], runner=fake, steps=10)  # the cell again
    assert list(again.results) == list(ex.results) and again.run(0) is ex.results[again.key()]
    assert len(fake.calls) == 1  # shown from the cache, not trained again
    other = staleness_widgets.staleness_explorer(workers=2, staleness=[0, 2], runner=fake, steps=20)  # other options
    assert not other.results


def test_no_straggler_slider_without_straggler_and_fixed_straggler_is_an_option(fake: FakeRunner) -> None:
    ex = staleness_widgets.staleness_explorer(workers=3, staleness=[1, 5], runner=fake)
    assert ex.straggler_slider is None and ex.staleness_slider.value == 1
    ex = staleness_widgets.staleness_explorer(workers=3, straggler="1:0.03", staleness=[1], runner=fake)
    assert ex.straggler_slider is None and dict(ex.key())["straggler"] == ((1, 0.03),)
    assert ex.workers_slider.min == 2  # worker 1 must exist
    with pytest.raises(UsageError, match="ssp only"):
        staleness_widgets.staleness_explorer(mode="async", runner=fake)
    with pytest.raises(UsageError, match="unknown option 'stpes'"):
        staleness_widgets.staleness_explorer(stpes=3, runner=fake)
    with pytest.raises(UsageError, match="integers >= 0"):
        staleness_widgets.staleness_explorer(staleness=[0, -1], runner=fake)


def test_runner_errors_become_one_status_line(tmp_path: Path) -> None:
    failure = TaskFailure("worker:1", "exited", exit_code=1, log_tail=["Traceback ...", "boom"])
    runner = FakeRunner(tmp_path, fail=RunFailed(failure))
    ex = staleness_widgets.staleness_explorer(workers=2, staleness=[1, 3], runner=runner)
    ex.run_button.click()
    assert ex.status == "S=1: run failed: worker:1 (exit code 1): exited"
    assert ex.results == {} and not ex.run_button.disabled and not ex.staleness_slider.disabled
    runner.fail = UsageError("output directory x exists and is not empty: choose another --out")
    assert ex.run() is None and ex.status == "S=1: output directory x exists and is not empty: choose another --out"
    runner.fail = ValueError("a bug\nsecond line")
    ex.run_button.click()  # the handler never raises
    assert ex.status == "S=1: error: ValueError: a bug" and isinstance(ex.last_exception, ValueError)
    with pytest.raises(ValueError, match="^a bug\nsecond line$"):
        ex.run()  # programmatic runs show it and raise it
    runner.fail = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt):
        ex.run()
    assert ex.status == "S=1: interrupted" and ex.results == {}
    runner.fail = None
    assert ex.run() is not None and len(ex.results) == 1


def test_default_runner_out_none_and_warm_only_when_supported(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[dict] = []

    def run_plain(*, progress=None, observer=None, raise_on_failure=True, **options):
        seen.append(options)

    def run_warm(*, progress=None, observer=None, raise_on_failure=True, warm=False, **options):
        seen.append({**options, "warm": warm})

    monkeypatch.setattr(api, "run", run_plain)
    staleness_widgets.default_runner(mode="ssp", staleness=1)
    assert seen[-1] == {"mode": "ssp", "staleness": 1, "out": None}
    monkeypatch.setattr(api, "run", run_warm)
    staleness_widgets.default_runner(mode="ssp", staleness=1)
    assert seen[-1] == {"mode": "ssp", "staleness": 1, "out": None, "warm": True}


# --- overlay rendering --------------------------------------------------------------------------

def test_overlay_figure_lines_highlight_and_bound(tmp_path: Path) -> None:
    before = _rc_snapshot()
    runs = {f"S={s}": make_run(tmp_path / f"s{s}", staleness=s, workers=3, straggler=["2:0.02"]) for s in (0, 3)}
    frames = {label: (r.df, r.events, r.config) for label, r in runs.items()}
    fig = overlay_figure(frames, "S=3", title="t", note="n")
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    assert [ln.get_gid() for ln in loss_lines(fig)] == [LOSS_GID + "S=0", LOSS_GID + "S=3"]
    skew = [ln for ln in fig.axes[1].get_lines() if str(ln.get_gid()).startswith(SKEW_GID)]
    assert len(skew) == 2 and max(skew[1].get_ydata()) > 0
    (bound,) = [ln for ln in fig.axes[1].get_lines() if ln.get_gid() == BOUND_GID + "S=3"]
    assert list(bound.get_ydata()) == [4, 4]  # S+1 of the highlighted run only
    plain = overlay_figure(frames)
    assert {ln.get_alpha() for ln in loss_lines(plain)} == {0.9}
    assert not [ln for ln in plain.axes[1].get_lines() if str(ln.get_gid()).startswith(BOUND_GID)]
    empty = overlay_figure({})
    assert "no runs yet" in [t.get_text() for t in empty.axes[0].texts]
    assert figure_png(fig).startswith(PNG_MAGIC)
    assert _rc_snapshot() == before  # no global style changes


def test_summary_line() -> None:
    assert summary_line("x", {"status": "ok", "steps_per_s": 143.24, "max_skew": 3, "final_loss": 0.1123,
                              "wait_fraction": 0.21}) == "x: 143.2 steps/s, max skew 3, final loss 0.1123, wait 21%"
    assert summary_line("x", {"status": "failed", "reason": "worker:1 exited"}) == "x: failed: worker:1 exited"
    assert summary_line("x", {}) == "x: - steps/s, max skew -, final loss -, wait -"


# --- sweep viewer -----------------------------------------------------------------------------------

def test_predictions_are_drawn_dashed_beside_the_runs(tmp_path: Path) -> None:
    """%dtrain sweep --predict: each label's prediction in its colour, dashed, on the same slider view."""
    runs = {f"ssp:{s}": make_run(tmp_path / f"r{s}", staleness=s, workers=2) for s in (0, 4)}
    view = staleness_widgets.from_runs(runs, predicted={"ssp:0": make_run(tmp_path / "p0", staleness=0, workers=2)})
    lines = {ln.get_label(): ln for ln in loss_lines(view.figure())}
    assert set(lines) == {"ssp:0", "ssp:4", "ssp:0 predicted"}
    assert lines["ssp:0 predicted"].get_linestyle() == "--" and lines["ssp:0"].get_linestyle() == "-"
    assert lines["ssp:0 predicted"].get_color() == lines["ssp:0"].get_color()


def test_the_explorer_predicts_every_staleness_and_marks_what_was_run(fake: FakeRunner, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[dict] = []

    def predict_staleness(options: dict, values: list, overhead: Any = None, out: Any = None,
                          progress: Any = None, gap: Any = None) -> dict:
        asked.append({"values": list(values), "overhead": overhead, "gap": gap})
        made = {}
        for s in values:
            key = staleness_widgets.cache_key({**options, "staleness": s})
            made[key] = predictions.PREDICTED[key] = make_run(tmp_path / f"pred-{len(asked)}-{s}",
                                                              **{**options, "staleness": s})
        return made

    monkeypatch.setattr(predictions, "predict_staleness", predict_staleness)
    ex = staleness_widgets.staleness_explorer(workers=3, staleness=[0, 2, 4], runner=fake, steps=10)
    assert ex.predicted_image.layout.display == "none"
    ex.run(2)
    made = ex.predict()
    assert asked == [{"values": [0, 2, 4], "overhead": None, "gap": None}]  # fake runs have no calibrated overhead
    assert len(made) == 3 and ex.predicted_image.layout.display == ""
    assert bytes(ex.predicted_image.value).startswith(PNG_MAGIC)
    lines = {ln.get_label(): ln for ln in loss_lines(ex.figure())}
    assert set(lines) == {"S=2", "S=0 predicted", "S=2 predicted (run too)", "S=4 predicted"}
    assert all(lines[name].get_linestyle() == "--" for name in lines if "predicted" in name)
    ex.workers_slider.value = 4  # another cluster size: its predictions are not drawn for this one
    assert not [ln for ln in loss_lines(ex.figure()) if "predicted" in ln.get_label()]
    again = staleness_widgets.staleness_explorer(workers=3, staleness=[0, 2, 4], runner=fake, steps=10)
    assert len(again.predicted) == 3  # the cell run again keeps the kernel's predictions


def test_sweep_scrubs_without_training(fake: FakeRunner) -> None:
    observers: list[str] = []
    progress: list[tuple] = []
    sw = staleness_widgets.sweep(staleness="4,0,2", runner=fake, workers=2, steps=5,
                       observer_factory=lambda label: observers.append(label) or f"obs-{label}",
                       progress=lambda *a: progress.append(a))
    assert list(sw.results) == ["ssp:0", "ssp:2", "ssp:4"] and observers == list(sw.results)
    assert [c["observer"] for c in fake.calls] == ["obs-ssp:0", "obs-ssp:2", "obs-ssp:4"]
    assert progress[0] == ("ssp:0", 3, 6) and all(c["mode"] == "ssp" for c in fake.calls)
    widget = sw.widget
    assert sw.slider.options == ("ssp:0", "ssp:2", "ssp:4")
    sw.slider.value = "ssp:4"
    assert sw.selected == "ssp:4" and sw.line.value.startswith("ssp:4: 104.0 steps/s")
    assert bytes(sw.image.value) == sw.png() and len(fake.calls) == 3  # no new training
    assert [ln.get_alpha() for ln in loss_lines(sw.figure())] == [0.3, 0.3, 1.0]
    sw.select("ssp:0")
    assert sw.slider.value == "ssp:0"
    assert list(sw.table()["label"]) == ["ssp:0", "ssp:2", "ssp:4"]
    bundle = sw._repr_mimebundle_()
    assert bundle[WIDGET_MIME]["model_id"] == widget.model_id
    assert '<img alt="ssp:0: 100.0 steps/s' in bundle["text/html"] and "<table" in bundle["text/html"]
    assert "<img" in sw._repr_html_()


def test_sweep_checks_everything_first_and_keeps_failed_runs(fake: FakeRunner, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="ssp only"):
        staleness_widgets.sweep([0, 1], runner=fake, mode="sync")
    with pytest.raises(UsageError, match="integers >= 0"):
        staleness_widgets.sweep("0,x", runner=fake)
    with pytest.raises(UsageError, match="straggler index 5"):
        staleness_widgets.sweep([0, 1], runner=fake, workers=2, straggler=["5:0.1"])
    assert fake.calls == []
    failed = make_run(tmp_path / "failed", staleness=1, workers=2)
    failed.summary.update(status="failed", reason="worker:0 exited")

    def runner(**kw):
        if kw["staleness"] == 1:
            raise RunFailed(TaskFailure("worker:0", "exited"), failed)
        return fake(**kw)

    sw = staleness_widgets.sweep([0, 1, 2], runner=runner, workers=2, out=str(tmp_path / "sweep"))
    assert list(sw.results) == ["ssp:0", "ssp:1", "ssp:2"]
    assert list(sw.table()["status"]) == ["ok", "failed", "ok"]
    assert sw.summary("ssp:1") == "ssp:1: failed: worker:0 exited"
    assert fake.calls[0]["out"] == str(tmp_path / "sweep" / "ssp-0")


def test_without_ipywidgets(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fake: FakeRunner) -> None:
    view = staleness_widgets.from_runs({"a": make_run(tmp_path / "a", staleness=0, workers=2)})
    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # import fails
    with pytest.raises(UsageError, match=r"pip install 'ssptk\[notebook\]'"):
        staleness_widgets.staleness_explorer(runner=fake)
    with pytest.raises(UsageError, match="ipywidgets"):
        view.widget
    bundle = view._repr_mimebundle_()
    assert WIDGET_MIME not in bundle and "<img" in bundle["text/html"]


# --- a real kernel ----------------------------------------------------------------------------------

def test_notebook_displays_widget_and_static_image(tmp_path: Path) -> None:
    try:
        import nbclient
        import nbformat
    except ImportError:
        skip_or_fail("needs nbformat and nbclient: pip install '.[test]'")
    tests_dir = str(Path(__file__).resolve().parent)
    cells = [
        f"import sys; sys.path.insert(0, {tests_dir!r})\n"
        "from test_widgets import FakeRunner, make_run\n"
        "from pathlib import Path\n"
        "from ssptk.notebook.staleness_widgets import from_runs, staleness_explorer, sweep",
        "view = from_runs({f'ssp:{s}': make_run(Path('runs') / f'ssp-{s}', staleness=s, workers=2) for s in (0, 4)})\n"
        "view.select('ssp:4')\nview",
        "sw = sweep([1, 2], runner=FakeRunner(Path('sweep')), workers=2)\nsw",
        "ex = staleness_explorer(workers=2, staleness=[0, 3], runner=FakeRunner(Path('explorer')))\nex",
        "ex.run(0); ex.run(3); ex.select(0); print(len(ex.runner.calls)); ex.show_static()",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    outputs = [c.outputs for c in nb.cells]
    assert not [o for cell in outputs for o in cell if o.output_type == "error"]
    for cell in outputs[1:4]:  # from_runs, sweep, the explorer
        (out,) = [o for o in cell if o.output_type in ("display_data", "execute_result")]
        assert WIDGET_MIME in out.data
        assert "<img" in out.data["text/html"] and "data:image/png;base64," in out.data["text/html"]
    assert "ssp:4: 104.0 steps/s" in outputs[1][0].data["text/html"]
    # after the runs, the explorer's displayed output was updated: the saved notebook shows both runs
    html = outputs[3][0].data["text/html"]
    assert "S=3: 103.0 steps/s" in html and ">S=0</td>" in html and ">S=3</td>" in html
    assert [o.text.strip() for o in outputs[4] if o.output_type == "stream"] == ["2"]
    images = [o for o in outputs[4] if o.output_type == "display_data"]
    assert images and all("image/png" in image.data for image in images)  # the figures, as static images
    assert nb.metadata.get("widgets")  # widget state saved with the notebook


# --- real runs ----------------------------------------------------------------------------------------

@pytest.mark.slow
def test_explorer_with_real_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the default runner writes runs/<timestamp>-ssp here
    ex = staleness_widgets.staleness_explorer(model="linear", workers=2, staleness=[0, 3], steps=40, gpus="none")
    try:
        assert ex.run(0) is not None, ex.status
        assert ex.run(3) is not None, ex.status
        ex.select(0)
        assert ex.status.startswith("S=0: ") and "steps/s" in ex.status
        assert ex.run(0) is ex.results[ex.key()]  # Run on a cached value: no third run
        assert len(ex.results) == 2 and len(list((tmp_path / "runs").iterdir())) == 2
        fig = ex.figure()
        assert sorted(ln.get_label() for ln in loss_lines(fig)) == ["S=0", "S=3"]
        assert all(len(ln.get_xdata()) > 0 for ln in loss_lines(fig))
        assert set(ex.table()["status"]) == {"ok"}
        assert all(r.config["tasks"]["warm"] for r in ex.results.values())  # the default runner asks for warm
        # Predict every S: both slider values predicted in one process, drawn dashed beside the real runs, with
        # the clock of the real runs' calibrated overhead, and what staleness costs and buys across them
        made = ex.predict()
        assert len(made) == 2 and all(r.summary["predicted"] and r.ok for r in made.values())
        measured = np.median([r.summary["overhead_ms"] for r in ex.results.values()]) / 1000
        assert all(r.summary["predicted"]["overhead_s"] == pytest.approx(measured) for r in made.values())
        lines = {ln.get_label(): ln for ln in loss_lines(ex.figure())}
        assert set(lines) == {"S=0", "S=3", "S=0 predicted (run too)", "S=3 predicted (run too)"}
        assert lines["S=3 predicted (run too)"].get_linestyle() == "--"
        assert ex.predicted_image.layout.display == "" and bytes(ex.predicted_image.value).startswith(b"\x89PNG")
        assert ex.predict() == made  # cached: nothing predicted again
        assert ex.static_pngs() == [ex.png(), ex.tradeoff_png(), ex.predicted_png()]  # show_static: all three
    finally:
        getattr(api, "shutdown", lambda: 0)()  # the default runner keeps warm clusters where run(warm=) exists
        for result in ex.results.values():
            assert_gone(result.run_dir)
        left = [p for p in psutil.process_iter(["cmdline", "cwd"])
                if "ssptk.worker" in " ".join(p.info["cmdline"] or []) and str(tmp_path) in (p.info["cwd"] or "")]
        assert not left, f"cluster processes left behind: {[p.pid for p in left]}"


def test_the_explorer_shows_what_staleness_costs_and_buys(fake: FakeRunner) -> None:
    """Part of the error-runtime view: after two runs the explorer adds the cost-and-gain figure under the
    overlay, and redraws it as more slider values are run."""
    ex = staleness_widgets.staleness_explorer(workers=3, staleness=[0, 2, 4], runner=fake, steps=10)
    assert ex.tradeoff_image.layout.display == "none" and ex.tradeoff_png() == b""
    ex.run(0)
    assert ex.tradeoff_image.layout.display == "none"
    ex.run(2)
    two = bytes(ex.tradeoff_image.value)
    assert ex.tradeoff_image.layout.display == "" and two.startswith(b"\x89PNG") and two == ex.tradeoff_png()
    ex.run(4)
    assert bytes(ex.tradeoff_image.value) != two  # three settings now
    assert ex.tradeoff_image in ex.widget.children


def test_the_explorer_says_how_far_and_why_a_predicted_pace_is_from_the_real_run(fake: FakeRunner, tmp_path: Path,
                                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 37, case 7: the explorer's predicted pace was 20% above the real runs with no word of why. Here a
    prediction made before the run (the default overhead, each worker a machine of its own) beside the real run on
    2 cores: the explorer says by how much and why, under its figures, and says nothing where they agree."""
    def predict_staleness(options: dict, values: list, overhead: Any = None, out: Any = None,
                          progress: Any = None, gap: Any = None) -> dict:
        made = {}
        for s in values:
            key = staleness_widgets.cache_key({**options, "staleness": s})
            run = make_run(tmp_path / f"pred-{s}", **{**options, "staleness": s})
            run.summary.update(steps_per_s=120.0 if s == 2 else 100.0, overhead_ms=4.0,
                               predicted={"overhead_s": 0.004, "cores": None})
            made[key] = predictions.PREDICTED[key] = run
        return made

    monkeypatch.setattr(predictions, "predict_staleness", predict_staleness)
    ex = staleness_widgets.staleness_explorer(workers=3, staleness=[0, 2], runner=fake, steps=10)
    ex.run(2)
    ex.run(0)
    for s in (0, 2):
        key = ex.key(s)
        ex.results[key].summary.update(steps_per_s=100.0, overhead_ms=5.0, ideal_cores=2.0, measured_over_ideal=0.95)
    ex.predict()
    (line,) = ex.pace_lines()  # S=0 agrees: nothing said
    assert line.startswith("S=2: the predicted pace (120 steps/s) is 20% above the real run's (100): its clock came "
                           "from a per-step overhead of 4 ms, this run calibrated 5 ms")
    assert "its workers had a machine each, this run's 2 cores between them" in line
    assert line in ex.notes() and line in ex.notes_html.value.replace("&#x27;", "'")
