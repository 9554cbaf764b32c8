"""Tests of ssptk.render.report: figures, self-contained HTML, text tables, loading a comparison dir."""
from __future__ import annotations

import base64
import importlib
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import matplotlib
import pandas as pd
import pytest
from matplotlib.figure import Figure

try:  # shared synthetic run directories
    from test_analysis import DONE_A, RUN_A, START_A, comparison_dir, write_run
except ImportError:  # tests/ imported as a package
    from tests.test_analysis import DONE_A, RUN_A, START_A, comparison_dir, write_run  # noqa: F401

from ssptk import analysis as an
from ssptk import render as rp
from ssptk.core.errors import UsageError
from ssptk.rundir.logs import load_run

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _rc_snapshot() -> dict:
    copy = matplotlib.rcParams.copy()  # reads raw values: does not resolve the backend
    return {k: copy._get(k) for k in copy}


@pytest.fixture
def runs(comparison_dir: Path) -> dict:
    return {label: load_run(comparison_dir / label) for label in ("a", "b", "c")}


def _line_labels(ax) -> list[str]:
    return [line.get_label() for line in ax.get_lines()]


def test_run_figure_panels_and_bound(runs) -> None:
    steps, events, config, _ = runs["a"]
    fig = rp.run_figure(steps, events, config)
    assert isinstance(fig, Figure)
    assert len(fig.axes) == 6
    skew_ax = fig.axes[2]
    bound = [ln for ln in skew_ax.get_lines() if ln.get_label().startswith("bound")]
    assert len(bound) == 1 and list(bound[0].get_ydata()) == [2, 2]  # S=1 -> S+1
    (skew_line,) = [ln for ln in skew_ax.get_lines() if ln.get_label() == "skew"]
    # the curve ends when worker 1 finishes (5.1): worker 2's last record alone would read as a skew of 0
    assert list(skew_line.get_ydata()) == [1, 1, 2, 3, 2, 3, 1, 0, 1]
    assert list(skew_line.get_xdata()) == pytest.approx([t - START_A for t, *_ in RUN_A][:-1])
    loss_ax = fig.axes[0]
    assert _line_labels(loss_ax)[:3] == ["worker 0", "worker 1", "worker 2"]
    assert len(loss_ax.get_lines()) == 4  # 3 workers + overall smoothed
    progress_ax = fig.axes[1]
    assert list(progress_ax.get_lines()[0].get_ydata()) == [1, 2, 3, 4]
    wait_ax = fig.axes[3]
    assert len(wait_ax.patches) == 6  # wait and delay bars for 3 workers
    stale_ax = fig.axes[4]
    assert [p.get_height() for p in stale_ax.patches] == [3, 5, 1, 1]
    # an explicit bound overrides the config; async config draws none
    fig = rp.run_figure(steps, events, config, staleness_bound=4)
    (bound,) = [ln for ln in fig.axes[2].get_lines() if ln.get_label().startswith("bound")]
    assert list(bound.get_ydata()) == [5, 5]
    b_steps, b_events, b_config, _ = runs["b"]
    fig = rp.run_figure(b_steps, b_events, b_config)
    assert not [ln for ln in fig.axes[2].get_lines() if ln.get_label().startswith("bound")]


def test_run_figure_without_records() -> None:
    fig = rp.run_figure(pd.DataFrame(), None, None)
    assert len(fig.axes) == 6
    assert base64.b64decode(rp.figure_to_png_base64(fig)).startswith(PNG_MAGIC)


def test_comparison_figure(runs) -> None:
    fig = rp.comparison_figure(runs)
    assert len(fig.axes) == 6  # and loss vs updates, and what each run paid
    assert _line_labels(fig.axes[0]) == ["a", "b", "c"]
    skew_labels = _line_labels(fig.axes[2])
    assert [lab for lab in skew_labels if " bound" not in lab] == ["a", "b", "c"]
    # the SSP run's bound, in its colour, named by run (run a: staleness 1)
    assert [lab for lab in skew_labels if " bound" in lab] == ["a bound: skew \u2264 S+1 = 2"]
    # what each run paid: one point per run that has records
    assert len(fig.axes[5].collections) == 3
    # a step DataFrame alone works too; one line per worker in the progress panel
    fig = rp.comparison_figure({"a": runs["a"][0], "empty": pd.DataFrame()})
    assert len(fig.axes) == 6
    assert len(fig.axes[3].get_lines()) == 3
    assert _line_labels(fig.axes[0]) == ["a", "empty (no records)"]


def test_figure_to_png_base64() -> None:
    fig = Figure(figsize=(2, 1))
    fig.subplots().plot([0, 1], [1, 0])
    data = rp.figure_to_png_base64(fig)
    assert re.fullmatch(r"[A-Za-z0-9+/=]+", data)
    assert base64.b64decode(data).startswith(PNG_MAGIC)


def test_report_html_is_self_contained(runs, tmp_path: Path) -> None:
    report = rp.build_report(runs, title="Modes <compared>")
    assert list(report.table["label"]) == ["a", "b", "c"]
    assert [c.split(":")[0] for c, _ in report.figures] == ["All runs", "What staleness costs and buys", "Run a",
                                                              "Run b", "Run c"]
    fragment = report._repr_html_()
    assert fragment.count("data:image/png;base64,") == 5
    assert "Modes &lt;compared&gt;" in fragment and "<compared>" not in fragment
    assert "<table" in fragment and "<style>" in fragment
    assert "Target training loss 1.25" in fragment and "first to reach it: b" in fragment
    doc = report.to_html()
    assert doc.startswith("<!DOCTYPE html>") and doc.rstrip().endswith("</html>")
    assert "http://" not in doc and "https://" not in doc
    srcs = re.findall(r'(?:src|href)="([^"]*)"', doc)
    assert srcs and all(s.startswith("data:image/png;base64,") for s in srcs)
    assert "<link" not in doc and "<script" not in doc
    for payload in re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", doc):
        assert base64.b64decode(payload).startswith(PNG_MAGIC)
    out = report.save(tmp_path / "sub" / "report.html")
    assert out == tmp_path / "sub" / "report.html"
    assert out.read_text(encoding="utf-8") == doc


def test_report_str_is_plain_text(runs) -> None:
    report = rp.build_report(runs, title="T", per_run=False)
    text = str(report)
    lines = text.splitlines()
    assert lines[0] == "T" and lines[1] == "="
    assert lines[2].split() == list(an.COMPARE_COLUMNS)
    assert lines[4].split()[:3] == ["a", "ssp", "1"]
    assert lines[6].split()[0] == "c" and lines[6].split()[-1] == "failed"
    assert "<" not in text
    assert len(report.figures) == 2  # all runs, and the cost and gain of staleness


def test_format_table() -> None:
    df = pd.DataFrame({"label": ["a", "long"], "x": [1.23456, None], "n": [3, 12]})
    df["n"] = df["n"].astype("Int64")
    assert rp.format_table(df) == (
        "label      x   n\n"
        "-----  -----  --\n"
        "a      1.235   3\n"
        "long       -  12")
    assert rp.format_table(df.iloc[0:0]).endswith("(no rows)")


def test_metrics_csv_and_load_comparison(comparison_dir: Path, runs, tmp_path: Path) -> None:
    report = rp.load_comparison(comparison_dir, per_run=False)
    # metrics.csv lists c then a; b is not in it and follows
    assert list(report.table["label"]) == ["c", "a", "b"]
    assert report.title == "ssptk comparison: c, a, b"  # the labels, as compare() titles it (not the folder)
    path = rp.write_metrics_csv(report.table, tmp_path / "m" / "metrics.csv")
    back = pd.read_csv(path)
    assert list(back.columns) == list(an.COMPARE_COLUMNS)
    assert back["label"].tolist() == ["c", "a", "b"]
    assert back["steps_per_s"].iloc[1] == pytest.approx(2.0)
    assert pd.isna(back["time_to_target_s"].iloc[0])
    (comparison_dir / "metrics.csv").unlink()
    assert list(rp.load_comparison(comparison_dir, per_run=False).table["label"]) == ["a", "b", "c"]
    with pytest.raises(UsageError, match=r"nothing-here is not a directory; pass a comparison output directory$"):
        rp.load_comparison(tmp_path / "nothing-here")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match=r"^no run directories \(with config.json, summary.json or workers/\) under "):
        rp.load_comparison(tmp_path / "empty")


def test_report_leaves_rcparams_alone(runs) -> None:
    before = _rc_snapshot()
    module = importlib.reload(rp)
    steps, events, config, _ = runs["a"]
    module.figure_to_png_base64(module.run_figure(steps, events, config))
    module.build_report(runs, "x", per_run=False).to_html()
    after = _rc_snapshot()
    assert after == before


def test_import_does_not_load_pyplot_or_touch_rcparams(tmp_path: Path) -> None:
    code = textwrap.dedent("""
        import sys, matplotlib
        snap = lambda: {k: matplotlib.rcParams._get(k) for k in matplotlib.rcParams}
        before = snap()
        import pandas as pd
        from ssptk import render as report
        fig = report.run_figure(pd.DataFrame({"t": [1.0, 2.0], "worker": [0, 1],
                                              "step": [1, 1], "loss": [2.0, 1.0]}))
        report.figure_to_png_base64(fig)
        assert snap() == before, "rcParams changed"
        assert "matplotlib.pyplot" not in sys.modules, "pyplot was imported"
        print("ok")
    """)
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_figures_show_in_a_notebook_without_matplotlib_inline(runs) -> None:
    """IPython's own formatter (no %matplotlib inline, so no formatter registered for figures) finds a PNG."""
    from IPython.core.formatters import DisplayFormatter

    data, _ = DisplayFormatter().format(rp.run_figure(*runs["a"][:3]))
    png = data["image/png"]
    assert (base64.b64decode(png) if isinstance(png, str) else png).startswith(PNG_MAGIC)


# --- what a newcomer reads never contradicts itself (issue 27.8) --------------------------------------

def test_wait_is_one_percentage_in_the_table_and_the_sentence_under_it(runs) -> None:
    from ssptk.render.cells import percent, shown_cells
    from ssptk.render.terminal_table import terminal_text

    report = rp.build_report(runs, per_run=False)
    a = report.table.set_index("label").loc["a", "wait_fraction"]
    assert 0 < a < 1  # a share in the table's data (and metrics.csv) ...
    shown = percent(a)
    assert shown.endswith("%") and percent(0.0) == "0%" and percent(0.004) == "0.4%" and percent(0.1434) == "14%"
    text = terminal_text(report.table)
    (row,) = [line for line in text.splitlines() if line.startswith("a ")]
    assert f" {shown} " in row  # ... a percentage where it is shown: the table and the sentence say the same
    assert f"time spent waiting a {shown}" in text.replace("\n", " ")
    assert f" {shown} " in [line for line in rp.format_table(report.table).splitlines() if line.startswith("a ")][0]
    assert shown in shown_cells(report.table)[0]["wait_fraction"].tolist()  # what the HTML table shows


def test_held_out_notes_and_figure_say_how_often_runs_evaluated(tmp_path: Path) -> None:
    """The target line and the held-out figure's title name the runs' --eval-every (they printed the flag)."""
    import json

    from ssptk.render.text import evaluated_every

    runs = {}
    for label, held_out in (("good", [2.0, 1.0, 0.3, 0.2]), ("fast", [2.0, 1.5, 1.2, 1.1])):
        d = write_run(tmp_path / label, [(10.0 + 0.1 * (k + 1), k % 2, k // 2 + 1, 0.01, 0.0, 1) for k in range(50)],
                      workers=2, mode="async", staleness=0, start=10.0, done={0: 15.0, 1: 15.0}, partial=False,
                      summary={"status": "ok", "mode": "async", "workers": 2, "final_loss": held_out[-1]})
        config = json.loads((d / "config.json").read_text())
        config["options"]["eval_every"] = 10
        (d / "config.json").write_text(json.dumps(config))
        with open(d / "workers" / "worker-0.jsonl", "a") as f:
            for k, loss in enumerate(held_out):
                f.write(json.dumps({"event": "eval", "t": 11.0 + k, "worker": 0, "global_step": 10 * (k + 1),
                                    "eval_loss": loss}) + "\n")
        runs[label] = load_run(d)
    report = rp.build_report(runs, title="t")
    (line,) = [n for n in report.notes if n.startswith("Target held-out loss")]
    assert "worker 0's held-out evaluations every 10 updates" in line and "--eval-every" not in line
    (fig,) = [f for c, f in report.figures if c.startswith("Held-out loss")]
    assert fig._suptitle.get_text() == "held-out loss (worker 0's evaluations every 10 updates, and the final one)"
    assert evaluated_every([50, 100, 50, None]) == "every 50 or 100 updates" and evaluated_every([1]) == "every 1 update"


def test_a_model_from_a_file_is_titled_by_its_function(runs) -> None:
    """A %%dtrain cell's model is saved as runs/<stamp>-sync/user_model.py:mlp2: its figures say mlp2."""
    steps, events, config, _ = runs["a"]
    config = {**config, "options": {**config["options"], "model": "runs/20260101-000000-sync/user_model.py:mlp2"}}
    title = rp.run_figure(steps, events, config)._suptitle.get_text()
    assert "model mlp2" in title and "user_model.py" not in title
    from ssptk.render.style import model_name

    assert [model_name(m) for m in ("mlp:64", "mypkg.models:make", "linear", "/x/m.py:f")] == \
        ["mlp:64", "mypkg.models:make", "linear", "f"]


def test_a_diverged_run_says_diverged_not_ok(tmp_path: Path) -> None:
    """The summary's status line, the API's repr (what a notebook shows) and format_summary all say diverged for
    a run that finished with a diverged loss; summary.json keeps status ok (the run did finish) and diverged."""
    from ssptk.core.options import resolve
    from ssptk.experiment.result import RunResult

    s = {"status": "ok", "diverged": True, "diverged_at_step": 698, "run_dir": "r", "mode": "async", "total_steps": 9}
    assert rp.format_summary(s).splitlines()[0] == "run       r  [diverged]"
    assert "[diverged, PREDICTED]" in rp.format_summary({**s, "predicted": {"overhead_s": 0.005}})
    assert "failed " not in rp.format_summary(s)
    assert "[ok]" in rp.format_summary({**s, "diverged": False})
    assert "[failed]" in rp.format_summary({**s, "status": "failed", "reason": "x"})
    result = RunResult(str(tmp_path), resolve(mode="async"), s)
    assert result.ok and repr(result).startswith("<RunResult async, diverged, 9 steps")


def test_a_failed_or_interrupted_run_says_which_task_ended_it_and_why(runs) -> None:
    """Not only its status in the table: a line naming the task that ended it and why (summary.json's reason)."""
    steps, events, config, summary = runs["b"]
    stopped = {**summary, "status": "interrupted", "failed_task": "ssptk", "reason": "ssptk: stopped by SIGTERM",
               "signal": "SIGTERM"}
    report = rp.build_report({**runs, "b": (steps, events, config, stopped)}, per_run=False)
    ended = [n for n in report.notes if n.startswith("Run ")]
    assert ended[0] == "Run b interrupted: ssptk: stopped by SIGTERM"
    assert ended[1] == f"Run c failed: {runs['c'][3]['reason']}" and runs["c"][3]["reason"]
    assert "Run b interrupted: ssptk: stopped by SIGTERM" in report.to_html()
    assert not [n for n in rp.build_report({"a": runs["a"]}, per_run=False).notes if n.startswith("Run ")]
