"""Repeated comparisons (``--repeat R``): layout, run order, the aggregated table, the report, and the CLI."""
from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pandas as pd
import pytest

try:  # shared synthetic run directories
    from test_analysis import DONE_A, RUN_A, START_A, write_run
except ImportError:  # tests/ imported as a package
    from tests.test_analysis import DONE_A, RUN_A, START_A, write_run

from conftest import assert_gone, ssptk_cmd

from ssptk import analysis as an
from ssptk import api
from ssptk import render as rp
from ssptk.analysis.repeats import t975
from ssptk.cli import build_parser
from ssptk.core.errors import UsageError
from ssptk.core.options import OPTIONS
from ssptk.experiment import compare as comparison
from ssptk.experiment import single
from ssptk.notebook.magics import help_text
from ssptk.rundir.logs import load_run

T975_2 = 4.302652729911275  # scipy.stats.t.ppf(0.975, 2)
SPREAD = [f"{c}{s}" for c in an.FIGURE_COLUMNS for s in ("_min", "_max", "_ci95")]


def _write(path: Path, mode: str, summary: dict) -> Path:
    return write_run(path, RUN_A, workers=3, mode=mode, staleness=1, start=START_A, done=DONE_A,
                     summary={"mode": mode, "staleness": 1, "workers": 3, **summary}, partial=False)


@pytest.fixture
def repeated_dir(tmp_path: Path) -> Path:
    """DIR/a/rep-1..3 (ssp, ok, steps/s 10, 12, 17), DIR/b/rep-1..3 (async; rep-2 failed), metrics.csv."""
    root = tmp_path / "cmp"
    for k, (rate, loss, skew) in enumerate([(10.0, 0.1, 2), (12.0, 0.2, 3), (17.0, 0.3, 3)], 1):
        _write(root / "a" / f"rep-{k}", "ssp", {"status": "ok", "steps_per_s": rate, "final_loss": loss,
                                                 "max_skew": skew, "wall_s": 5.0})
    for k, (status, rate) in enumerate([("ok", 20.0), ("failed", 1.0), ("ok", 30.0)], 1):
        _write(root / "b" / f"rep-{k}", "async", {"status": status, "steps_per_s": rate, "final_loss": 0.5})
    (root / "metrics.csv").write_text("label,rep\nb,1\na,1\nb,2\n")  # its order wins
    return root


def test_ci95_halfwidth() -> None:
    assert an.ci95_halfwidth([10.0, 12.0, 17.0]) == pytest.approx(T975_2 * math.sqrt(13) / math.sqrt(3))
    assert an.ci95_halfwidth([1.0, None, float("nan"), 3.0]) == pytest.approx(12.706205 * math.sqrt(2) / math.sqrt(2))
    assert an.ci95_halfwidth([5.0]) is None and an.ci95_halfwidth([]) is None
    assert an.ci95_halfwidth([2.0, 2.0, 2.0]) == 0.0
    try:
        from scipy.stats import t
    except ImportError:
        return
    for df in (1, 2, 5, 29, 30, 31, 45, 200):  # the table and the expansion beyond it
        assert t975(df) == pytest.approx(float(t.ppf(0.975, df)), abs=1e-4)


def test_aggregated_table_by_hand(repeated_dir: Path) -> None:
    report = rp.load_comparison(repeated_dir, per_run=False)
    runs = report.runs_table
    assert runs["label"].tolist() == ["b", "b", "b", "a", "a", "a"] and runs["rep"].tolist() == [1, 2, 3] * 2
    assert list(runs.columns) == ["label", "rep", *an.COMPARE_COLUMNS[1:]]
    table = report.table
    assert list(table.columns) == [*an.COMPARE_COLUMNS, "repeats", *SPREAD]
    b, a = table.iloc[0], table.iloc[1]
    assert (a["label"], a["mode"], a["bound"], a["workers"], a["repeats"], a["status"]) == ("a", "ssp", 1, 3, 3, "ok")
    assert a["steps_per_s"] == pytest.approx(13.0)
    assert (a["steps_per_s_min"], a["steps_per_s_max"]) == (10.0, 17.0)
    assert a["steps_per_s_ci95"] == pytest.approx(T975_2 * math.sqrt(13) / math.sqrt(3))
    assert a["final_loss"] == pytest.approx(0.2) and a["final_loss_ci95"] == pytest.approx(T975_2 * 0.1 / math.sqrt(3))
    assert a["max_skew"] == pytest.approx(8 / 3) and (a["max_skew_min"], a["max_skew_max"]) == (2, 3)
    assert a["wall_s"] == 5.0 and a["wall_s_ci95"] == 0.0
    # b: the failed repetition is left out of the figures, and the status says so
    assert b["status"] == "2/3 ok" and b["repeats"] == 3
    assert b["steps_per_s"] == pytest.approx(25.0) and (b["steps_per_s_min"], b["steps_per_s_max"]) == (20.0, 30.0)
    assert b["steps_per_s_ci95"] == pytest.approx(12.706205 * math.sqrt(50) / math.sqrt(2), rel=1e-4)
    assert pd.isna(b["bound"])
    assert table.attrs["target"] == report.runs_table.attrs["target"] == pytest.approx(4.75)  # 1.25 x best (3.8)
    # text and HTML: the key figures as mean [min–max], no spread columns
    text = rp.format_table(table)
    header = text.splitlines()[0].split()
    assert "steps_per_s_min" not in header and header[-2:] == ["status", "repeats"]
    assert "13 [10\u201317]" in text and "2.667 [2\u20133]" in text and "0.2 [0.1\u20130.3]" in text
    assert "25 [20\u201330]" in text and "2/3 ok" in text
    html = report.to_html()
    assert "13<br>" in html and "10\u201317</span>" in html and "steps_per_s_ci95" not in html  # range under mean
    assert "Each mode ran 3 times" in html


def test_single_run_table_and_csv_unchanged(tmp_path: Path) -> None:
    root = tmp_path / "cmp"
    _write(root / "a", "ssp", {"status": "ok", "steps_per_s": 10.0})
    _write(root / "b", "async", {"status": "ok", "steps_per_s": 20.0})
    runs = {label: load_run(root / label) for label in ("a", "b")}
    report = rp.build_report(runs, per_run=False)
    assert report.runs_table is None
    pd.testing.assert_frame_equal(report.table, an.compare_table(runs))
    assert list(report.table.columns) == list(an.COMPARE_COLUMNS)
    assert "[" not in rp.format_table(report.table)
    assert [c.split(":")[0] for c, _ in report.figures] == ["All runs", "What staleness costs and buys"]
    # what differs, the target, what the time to it says about the tradeoff, the learning-rate convention
    assert len(report.notes) == 4 and report.notes[2].startswith(("The staleness tradeoff", "Fastest", "No winner"))
    assert report.notes[0].startswith("What differs: steps/s a 10, b 20 (2x a)")


def test_comparison_figure_overlays_repetitions(repeated_dir: Path) -> None:
    runs = {label: rp.Repeats(load_run(repeated_dir / label / f"rep-{k}") for k in (1, 2, 3)) for label in ("a", "b")}
    fig = rp.comparison_figure(runs)
    lines = fig.axes[0].get_lines()
    assert len(lines) == 6
    assert [ln.get_label() for ln in lines if not ln.get_label().startswith("_")] == ["a", "b"]
    assert len({ln.get_color() for ln in lines[:3]}) == 1 and lines[0].get_color() != lines[3].get_color()
    assert all(ln.get_linewidth() < 1.5 for ln in lines)
    assert len(fig.axes[3].get_lines()) == 2 * 3 * 3  # labels x repetitions x workers
    report = rp.build_report(runs)
    assert [c for c, _ in report.figures][2:] == ["Run a, repetition 1 of 3", "Run b, repetition 1 of 3"]


def _fake_run(calls: list):
    """A stand-in for a comparison's runs (ssptk.experiment.single.run_resolved) that writes a hand-made run directory
    and returns its RunResult."""

    def run(opts, *, progress=None, observer=None, raise_on_failure=True, warm=False):
        calls.append((opts.mode, opts.out))
        if progress:
            progress(0, 30)
            progress(30, 30)
        summary = {"status": "ok", "steps_per_s": 10.0 + len(calls), "final_loss": 0.1 * len(calls)}
        _write(Path(opts.out), opts.mode, summary)
        return api.RunResult(opts.out, opts, json.loads((Path(opts.out) / "summary.json").read_text()))

    return run


def test_compare_repeats_in_alternating_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list = []
    seen: list = []
    monkeypatch.setattr(single, "run_resolved", _fake_run(calls))
    out = tmp_path / "cmp"
    res = comparison.compare(["ssp:1", "async"], out=str(out), repeat=3, workers=3,
                             progress=lambda label, done, total: seen.append(label))
    order = [(mode, os.path.relpath(o, out)) for mode, o in calls]
    assert order == [("ssp", "ssp-1/rep-1"), ("async", "async/rep-1"), ("async", "async/rep-2"),
                     ("ssp", "ssp-1/rep-2"), ("ssp", "ssp-1/rep-3"), ("async", "async/rep-3")]
    assert list(dict.fromkeys(seen)) == ["ssp:1 #1", "async #1", "async #2", "ssp:1 #2", "ssp:1 #3", "async #3"]
    assert sorted(os.listdir(out)) == [".ssptk-run", "async", "metrics.csv", "report.html", "ssp-1"]
    assert [len(v) for v in res.repeats.values()] == [3, 3] and res.runs["async"] is res.repeats["async"][0]
    assert list(res.all_runs) == ["ssp:1 #1", "ssp:1 #2", "ssp:1 #3", "async #1", "async #2", "async #3"]
    csv = pd.read_csv(out / "metrics.csv")
    assert list(csv.columns) == ["label", "rep", *an.COMPARE_COLUMNS[1:]] and len(csv) == 6
    assert csv["steps_per_s"].tolist() == [11.0, 14.0, 15.0, 12.0, 13.0, 16.0]  # ssp runs were calls 1, 4, 5
    assert res.table["label"].tolist() == ["ssp:1", "async"]
    assert res.table["steps_per_s"].tolist() == pytest.approx([(11 + 14 + 15) / 3, (12 + 13 + 16) / 3])
    assert res.table["steps_per_s_min"].tolist() == [11.0, 12.0] and res.table["repeats"].tolist() == [3, 3]
    shown = str(res).splitlines()  # on a terminal: the mean, and its range on the line under it
    assert shown[2].split()[:2] == ["ssp:1", "13.33"] and shown[3].split()[0] == "11\u201315"
    assert "13.33 [11\u201315]" in rp.format_table(res.table)  # elsewhere: mean [min–max]
    # `ssptk report DIR` rebuilds the same tables
    again = rp.load_comparison(out, per_run=False)
    pd.testing.assert_frame_equal(again.table, pd.DataFrame(res.table))  # res.table shows NA as "-"
    pd.testing.assert_frame_equal(again.runs_table, res.runs_table)


def test_compare_once_keeps_todays_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list = []
    monkeypatch.setattr(single, "run_resolved", _fake_run(calls))
    out = tmp_path / "cmp"
    res = api.compare(["ssp:1", "async"], out=str(out), workers=3)  # still importable from ssptk.api
    assert [os.path.relpath(o, out) for _, o in calls] == ["ssp-1", "async"]
    assert sorted(os.listdir(out)) == [".ssptk-run", "async", "metrics.csv", "report.html", "ssp-1"]
    assert list(res.table.columns) == list(an.COMPARE_COLUMNS)
    assert pd.read_csv(out / "metrics.csv").columns.tolist() == list(an.COMPARE_COLUMNS)
    assert res.runs_table["rep"].tolist() == [1, 1] and list(res.all_runs) == ["ssp:1", "async"]
    assert "[" not in str(res)
    pd.testing.assert_frame_equal(rp.load_comparison(out, per_run=False).table, pd.DataFrame(res.table))


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_bad_repeat_is_refused_before_anything_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad) -> None:
    monkeypatch.setattr(single, "run_resolved", _fake_run([]))
    with pytest.raises(UsageError, match=r"^--repeat must be an integer >= 1, not "):
        comparison.compare(["sync", "async"], out=str(tmp_path / "x"), repeat=bad)
    assert not (tmp_path / "x").exists()


def test_repeat_option_is_the_comparisons_not_a_run_option() -> None:
    for notebook in (False, True):
        parser = build_parser(notebook=notebook)
        assert parser.parse_args(["compare", "sync", "async", "--repeat", "3"]).repeat == 3
        assert parser.parse_args(["sweep", "--staleness", "0,2", "--repeat", "2"]).repeat == 2
        assert parser.parse_args(["compare", "sync"]).repeat == 1
        assert not hasattr(parser.parse_args(["run"]), "repeat")
    assert "repeat" not in {o.name for o in OPTIONS}
    assert help_text().count("run each mode R times and show the spread") == 2  # compare and sweep


def test_cli_bad_repeat_exits_2_with_one_line(tmp_path: Path) -> None:
    p = subprocess.run([*ssptk_cmd(), "compare", "async", "--repeat", "0", "--out", str(tmp_path / "x")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == ["ssptk: error: --repeat must be an integer >= 1, not 0"]
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_cli_compare_repeat_real_runs(run_dir: Path) -> None:
    out = run_dir
    p = subprocess.run([*ssptk_cmd(), "compare", "async", "ssp:1", "--repeat", "2", "--workers", "2", "--steps", "30",
                        "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert sorted(os.listdir(out)) == [".ssptk-run", "async", "metrics.csv", "report.html", "ssp-1"]
    for label in ("async", "ssp-1"):
        assert sorted(os.listdir(out / label)) == ["rep-1", "rep-2"]
        for k in (1, 2):
            assert json.loads((out / label / f"rep-{k}" / "summary.json").read_text())["status"] == "ok"
    created = {(label, k): json.loads((out / label / f"rep-{k}" / "config.json").read_text())["created"]
               for label in ("async", "ssp-1") for k in (1, 2)}
    assert sorted(created, key=created.get) == [("async", 1), ("ssp-1", 1), ("ssp-1", 2), ("async", 2)]
    csv = pd.read_csv(out / "metrics.csv")
    assert csv["label"].tolist() == ["async", "async", "ssp:1", "ssp:1"] and csv["rep"].tolist() == [1, 2, 1, 2]
    assert (csv["steps_per_s"] > 0).all() and (csv["status"] == "ok").all()
    lines = p.stdout.splitlines()
    assert lines[0].split()[0] == "run" and "steps/s" in lines[0].split()  # short headers, the rest in metrics.csv
    assert "_min" not in lines[0] and max(len(line) for line in lines[:6]) <= 100
    assert "wait" in lines[0] and "staleness" in lines[0] and "to target mb" in lines[0]  # a single run's columns
    assert lines[2].startswith("async") and lines[4].startswith("ssp:1") and "\u2013" in lines[3]  # ranges below
    assert f"report: {out / 'report.html'}" in p.stdout
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "Each mode ran 2 times" in html and "repetition 1 of 2" in html
    # the report rebuilt from the directory prints the same table
    rebuilt = subprocess.run([*ssptk_cmd(), "report", str(out)], capture_output=True, text=True, timeout=120)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert rebuilt.stdout.splitlines()[:6] == lines[:6]
    assert_gone(str(out))


def test_the_terminal_table_of_repeats_has_the_columns_of_a_single_run(tmp_path: Path) -> None:
    """Regression: `mean [min–max]` cells made the --repeat table too wide for 100 columns, so it dropped wait,
    staleness and to target mb. Each range now sits on a line under its mean."""
    from ssptk.render.terminal_table import terminal_table

    root = tmp_path / "cmp"
    for k in (1, 2, 3):
        _write(root / "ssp:2" / f"rep-{k}", "ssp", {"status": "ok", "steps_per_s": 100.3 + 35 * k, "wall_s": 5.123,
                                                    "final_loss": 0.01234 * k, "max_skew": 11 * k,
                                                    "wait_fraction": 0.1234 + k / 100, "mean_staleness": 1.234 + k})
        _write(root / "async" / f"rep-{k}", "async", {"status": "ok", "steps_per_s": 150.3 * k, "final_loss": 0.5123,
                                                      "max_skew": 100 + k, "wait_fraction": 0.0,
                                                      "mean_staleness": 2.1 + k})
    repeated = rp.load_comparison(root, per_run=False).table
    text = terminal_table(repeated)
    lines = text.splitlines()
    assert lines[0].split("  ")[0] == "run" and max(len(line) for line in lines) <= 100
    headers = [h.strip() for h in lines[0].split("  ") if h.strip()]
    assert headers == ["run", "steps/s", "to target s", "to target mb", "final loss", "max skew", "wait", "staleness",
                       "status"]
    assert lines[2].split()[:2] == ["async", "300.6"] and lines[3].split()[:1] == ["150\u2013451"]
    assert lines[4].split()[:2] == ["ssp:2", "170.3"] and "14%" in lines[4] and "13\u201315%" in lines[5]
    assert "min\u2013max: under a mean, its range over the 3 repeats" in text


def test_a_label_without_its_colon_gets_a_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    from ssptk.cli import main

    assert main(["compare", "sync", "ssp4", "async"]) == 2
    assert capsys.readouterr().err.strip() == ("ssptk: error: unknown mode 'ssp4': did you mean ssp:4? (choose one of "
                                               "sync, ssp, async, allreduce, local; ssp:S for SSP with staleness S)")


def test_a_comparison_with_a_diverged_run_exits_0_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Divergence is one of a comparison's findings, not its failure: exit 0, the table and the line under it name
    the diverged run (``ssptk run`` exits 3 for the same run: tests/test_runs_cli.py)."""
    from ssptk.cli import main

    calls: list = []
    fake = _fake_run(calls)

    def run(opts, **kw):
        result = fake(opts, **kw)
        if opts.mode == "async":
            result.summary.update(diverged=True, diverged_at_step=12)
            (Path(opts.out) / "summary.json").write_text(json.dumps(result.summary))
        return result

    monkeypatch.setattr(single, "run_resolved", run)
    assert main(["compare", "sync", "async", "--workers", "3", "--out", str(tmp_path / "cmp")]) == 0
    out = capsys.readouterr().out
    assert "async (DIVERGED)" in out and "Diverged: async (" in out.replace("\n", " ")
