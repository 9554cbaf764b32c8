"""Local SGD in the front ends (issue 24.1, 24.3): sweeps over H (``ssptk sweep --local-steps``, ``%dtrain sweep
--local-steps``, ``ssptk.sweep(local_steps=...)``), the explorer's slider over H, and what the tables, the summary,
the run panels and TensorBoard say a local run's staleness counts. Fast tests use run directories written on disk
(tests/test_widgets.py's ``make_run``); the slow ones run real clusters, a real CLI and a real kernel."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

try:
    from conftest import assert_gone
    from test_widgets import FakeRunner, fake, fresh_kernel, loss_lines, make_run
except ImportError:  # tests/ imported as a package
    from tests.conftest import assert_gone
    from tests.test_widgets import FakeRunner, fake, fresh_kernel, loss_lines, make_run  # noqa: F401 - fixtures

from ssptk import analysis as an
from ssptk import api
from ssptk.commands import build_parser, compare_plan
from ssptk.core.errors import UsageError
from ssptk.experiment.sweep import label_knob, local_steps_values, sweep_labels
from ssptk.notebook import slider_predictions as predictions
from ssptk.notebook import staleness_widgets
from ssptk.render.figures import comparison_figure, run_figure
from ssptk.render.overlay import BOUND_GID
from ssptk.render.table_notes import takeaway_line
from ssptk.render.tables import table_html
from ssptk.render.terminal_table import terminal_table
from ssptk.render.text import format_summary
from ssptk.rundir import load_run

# --- the sweep's grammar ----------------------------------------------------------------------------

def test_sweep_labels_over_h_and_one_knob_only() -> None:
    assert sweep_labels(local_steps="8,1, 2,4,2") == ["local:1", "local:2", "local:4", "local:8"]
    assert sweep_labels([4, 0]) == ["ssp:0", "ssp:4"] and sweep_labels() == [f"ssp:{s}" for s in (0, 1, 2, 4, 8)]
    with pytest.raises(UsageError, match=r"local steps H must be integers >= 1, like 1,2,4,8; got '0,2'"):
        local_steps_values("0,2")
    with pytest.raises(UsageError, match="not both"):
        sweep_labels([0], [1])
    assert label_knob(["local:1", "local:4"]).letter == "H" and label_knob(["ssp:0"]).option == "staleness"
    assert label_knob(["local:1", "ssp:2"]) is None and label_knob(["sync", "async"]) is None


@pytest.mark.parametrize("notebook", [False, True])
def test_sweep_command_takes_exactly_one_of_staleness_and_local_steps(notebook: bool) -> None:
    parser = build_parser(notebook=notebook)
    plan = compare_plan(parser.parse_args("sweep --local-steps 4,1 --workers 2 --outer-lr 0.7 "
                                          "--outer-momentum 0.9".split()))
    assert plan.labels == ["local:1", "local:4"]
    assert [(o.mode, o.local_steps, o.outer_lr, o.outer_momentum) for o in plan.options.values()] == \
        [("local", 1, 0.7, 0.9), ("local", 4, 0.7, 0.9)]
    for line in ("sweep --workers 2", "sweep --staleness 0,1 --local-steps 1,2"):
        with pytest.raises(UsageError, match=r"^sweep takes exactly one of --staleness S,S,\.\.\. \(ssp\), "
                                             r"--local-steps H,H,\.\.\. \(local SGD\) and --momentum B,B,\.\.\. "
                                             r"\(any --mode\)$"):
            compare_plan(parser.parse_args(line.split()))
    with pytest.raises(UsageError, match="--outer-lr applies to local only"):
        compare_plan(parser.parse_args("sweep --staleness 0,1 --outer-lr 0.5".split()))
    with pytest.raises(UsageError, match="--lr-staleness applies to async and ssp, not local"):
        compare_plan(parser.parse_args("sweep --local-steps 1,2 --lr-staleness inverse".split()))
    if notebook:
        with pytest.raises(UsageError, match=r"invalid local steps list '0,1': use integers >= 1"):
            parser.parse_args("sweep --local-steps 0,1".split())


def test_a_local_sweep_scrubs_over_h(fake: FakeRunner, tmp_path: Path) -> None:
    sw = staleness_widgets.sweep(local_steps="2,1", runner=fake, workers=2, steps=8, outer_lr=0.7, out=str(tmp_path / "sw"))
    assert list(sw.results) == ["local:1", "local:2"]
    assert [(c["mode"], c["local_steps"], c["outer_lr"]) for c in fake.calls] == [("local", 1, 0.7), ("local", 2, 0.7)]
    assert fake.calls[1]["out"] == str(tmp_path / "sw" / "local-2")
    sw.widget
    assert sw.slider.description == "local steps H" and sw.slider.options == ("local:1", "local:2")
    assert sw.title.startswith("ssptk local SGD sweep")
    assert not [ln for ln in sw.figure().axes[1].get_lines() if str(ln.get_gid()).startswith(BOUND_GID)]
    with pytest.raises(UsageError, match="a local-steps sweep runs mode local only, not 'ssp'"):
        staleness_widgets.sweep(local_steps=[1], runner=fake, mode="ssp")
    with pytest.raises(UsageError, match="not both"):
        staleness_widgets.sweep([0], runner=fake, local_steps=[1])
    ssp = staleness_widgets.from_runs({f"ssp:{s}": make_run(tmp_path / f"s{s}", staleness=s, workers=2) for s in (0, 2)})
    ssp.widget
    assert ssp.slider.description == "staleness S"
    mixed = staleness_widgets.from_runs({"sync": make_run(tmp_path / "y", mode="sync", workers=2), "local:2": sw.results["local:2"]})
    mixed.widget
    assert mixed.slider.description == "run" and mixed.title == "ssptk runs"


# --- the explorer's slider over H --------------------------------------------------------------------

def test_the_explorer_slides_over_h(fake: FakeRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[dict] = []

    def predict_staleness(options: dict, values: list, overhead=None, out=None, progress=None, gap=None) -> dict:
        asked.append({"mode": options["mode"], "values": list(values)})
        made = {}
        for h in values:
            key = staleness_widgets.cache_key({**options, "local_steps": h})
            made[key] = predictions.PREDICTED[key] = make_run(tmp_path / f"pred-{h}", **{**options, "local_steps": h})
        return made

    monkeypatch.setattr(predictions, "predict_staleness", predict_staleness)
    ex = staleness_widgets.staleness_explorer(mode="local", local_steps=[4, 1, 2], workers=2, runner=fake, steps=8,
                                    outer_momentum=0.9)
    assert ex.staleness_slider.description == "local steps H" and ex.staleness_slider.options == (1, 2, 4)
    assert ex.predict_button.description == "Predict every H" and ex.title == "ssptk local SGD explorer"
    assert ex.run(4) is not None and ex.run(1) is not None
    assert [(c["mode"], c["local_steps"], c["outer_momentum"]) for c in fake.calls] == [("local", 4, 0.9),
                                                                                         ("local", 1, 0.9)]
    assert ex.status.startswith("H=1: ")
    fig = ex.figure()
    assert sorted(ln.get_label() for ln in loss_lines(fig)) == ["H=1", "H=4"]
    assert fig._suptitle.get_text().startswith("local SGD, averaging every H local steps, model linear: N=2")
    assert not [ln for ln in fig.axes[1].get_lines() if str(ln.get_gid()).startswith(BOUND_GID)]
    ex.predict()
    assert asked == [{"mode": "local", "values": [1, 2, 4]}]
    assert {ln.get_label() for ln in loss_lines(ex.figure())} >= {"H=2 predicted", "H=4 predicted (run too)"}
    assert bytes(ex.predicted_image.value).startswith(b"\x89PNG")
    with pytest.raises(UsageError, match=r"local steps H = 3 is not on the slider"):
        ex.select(3)
    assert staleness_widgets.staleness_explorer(local_steps=[2], runner=fake).knob.mode == "local"  # local_steps alone: local
    with pytest.raises(UsageError, match="local SGD has no staleness bound"):
        staleness_widgets.staleness_explorer(mode="local", staleness=[0, 1], runner=fake)
    with pytest.raises(UsageError, match="add mode='local'"):
        staleness_widgets.staleness_explorer(mode="ssp", local_steps=[1], runner=fake)
    with pytest.raises(UsageError, match=r"local steps H must be integers >= 1"):
        staleness_widgets.staleness_explorer(mode="local", local_steps=[0], runner=fake)
    with pytest.raises(UsageError, match="--lr-staleness applies to async and ssp"):
        staleness_widgets.staleness_explorer(mode="local", runner=fake, lr_staleness="inverse")


# --- what the displays say ---------------------------------------------------------------------------

def _local_table(tmp_path: Path):
    runs = {"sync": make_run(tmp_path / "sync", mode="sync", workers=2),
            "local:4": make_run(tmp_path / "local-4", mode="local", local_steps=4, workers=2)}
    return an.compare_table({label: load_run(r.run_dir) for label, r in runs.items()}), runs


def test_local_staleness_is_the_measured_one_everywhere(tmp_path: Path) -> None:
    """A local run's staleness is what it is in every mode (the rounds a delta missed), so no display gives it a
    meaning of its own any more: the tables, the summary, the overview's cost panel, a run's panels and its
    TensorBoard chart say staleness in updates for sync and local alike."""
    tb = pytest.importorskip("tensorboard")
    from tensorboard import data_compat
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    from ssptk.render.tensorboard import write_events

    table, runs = _local_table(tmp_path)
    shown = table_html(table) + terminal_table(table, width=200) + (takeaway_line(table) or "")
    assert "local steps since" not in shown and "local:H: local" not in shown
    summary = {**runs["local:4"].summary, "local_steps": 4, "mean_staleness": 0.0, "max_staleness": 0}
    text = format_summary(summary)
    assert "mode local:4 (local SGD)" in text and "staleness mean 0.00   max 0" in text
    loaded = {label: load_run(r.run_dir) for label, r in runs.items()}
    assert comparison_figure(loaded).axes[5].get_ylabel() == "mean staleness (updates)"
    for label, result in runs.items():
        steps, events, config, _ = load_run(result.run_dir)
        fig = run_figure(steps, events, config)
        assert fig.axes[4].get_xlabel() == "staleness (updates)"
        assert fig._suptitle.get_text().startswith("local:4 (local SGD" if label.startswith("local") else "sync")
        write_events(result.run_dir)
        (path,) = (Path(result.run_dir) / "tensorboard" / "worker_0").glob("events.out.tfevents.*")
        described = {}
        for event in EventFileLoader(str(path)).Load():
            for value in event.summary.value:
                described.setdefault(value.tag, data_compat.migrate_value(value).metadata.summary_description)
        assert described["staleness/worker"] == ""
    assert tb is not None


# --- real runs ---------------------------------------------------------------------------------------

@pytest.mark.slow
def test_dtrain_sweep_over_h_in_a_kernel(tmp_path: Path) -> None:
    """``%dtrain sweep --local-steps`` in a real kernel: the sweep widget, and the runs and report it wrote."""
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name="python3", cwd=str(tmp_path))
    try:
        code = ("%load_ext ssptk\n"
                "sw = %dtrain sweep --local-steps 1,2 --workers 2 --steps 20 --gpus none --out ksw --no-dashboard\n"
                "sw.widget\n"
                "print(list(sw.results), sw.slider.description, sw.slider.options, sw.png()[:4] == b'\\x89PNG')")
        msg_id = kc.execute(code)
        texts, errors, deadline = [], [], time.monotonic() + 600
        while time.monotonic() < deadline:
            msg = kc.get_iopub_msg(timeout=max(1.0, deadline - time.monotonic()))
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "stream":
                texts.append(msg["content"]["text"])
            if msg["msg_type"] == "error":
                errors.append(msg["content"])
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                break
        assert not errors, errors
        assert "['local:1', 'local:2'] local steps H ('local:1', 'local:2') True" in "".join(texts)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=False)
    # what the runs wrote (the magic's line is the CLI's sweep, parsed by the same parser)
    out = tmp_path / "ksw"
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["local-1", "local-2"]
    for h in (1, 2):
        config = json.loads((out / f"local-{h}" / "config.json").read_text())
        assert config["options"]["mode"] == "local" and config["options"]["local_steps"] == h
        assert json.loads((out / f"local-{h}" / "summary.json").read_text())["local_steps"] == h
        records = [json.loads(line) for line in (out / f"local-{h}" / "workers" / "worker-0.jsonl").open()
                   if '"step"' in line]
        assert {r["local_step"] for r in records} == set(range(h))  # local steps since the last average: 0..H-1
        assert {r["staleness"] for r in records} == {0}  # every delta joined its round: none missed one
    report = (out / "report.html").read_text()
    assert "local steps since" not in report and "Run local:2" in report
    assert_gone(str(out), within=10)


@pytest.mark.slow
def test_the_local_explorer_with_real_runs_and_predictions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    ex = staleness_widgets.staleness_explorer(mode="local", local_steps=[1, 4], workers=2, steps=24, gpus="none")
    try:
        assert ex.run(4) is not None, ex.status
        result = ex.results[ex.key()]
        assert result.config["options"]["local_steps"] == 4 and set(result.df["local_step"]) == {0, 1, 2, 3}
        made = ex.predict()
        assert len(made) == 2 and all(r.summary["predicted"] for r in made.values())
        assert {ln.get_label() for ln in loss_lines(ex.figure())} == {"H=4", "H=1 predicted",
                                                                      "H=4 predicted (run too)"}
        (tmp_path / "explorer_local.png").write_bytes(ex.png())
    finally:
        api.shutdown()
        for r in ex.results.values():
            assert_gone(r.run_dir)
