"""One verdict per comparison (issue 37): each case the issue found, reproduced from run directories written per
docs/run-directory.md (or tables with the real columns), and what every view of it says now. Pure: no cluster."""
from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from matplotlib.text import Text

from ssptk import analysis as an
from ssptk.core.labels import label_dir, label_options
from ssptk.render.report import Report, load_comparison
from ssptk.render.tables import table_html
from ssptk.render.terminal_table import terminal_text

ROOT = Path(__file__).resolve().parent.parent


def write_run(root: Path, label: str, *, workers: int, per_worker: int, loss: Callable[[int], float],
              rate: float = 10.0, evals: Sequence[tuple[int, float, float]] = (),
              summary: dict[str, Any] | None = None, rep: int | None = None) -> Path:
    """A finished run of ``label`` in the comparison directory ``root`` (listed in its metrics.csv, in the order
    written): ``workers`` workers of ``per_worker`` steps each, global step g at ``100 + g / rate`` s with training
    loss ``loss(g)``; ``evals``: worker 0's ``(global step, held-out loss, accuracy)`` evaluations; summary.json as
    the run wrote it (``summary`` overrides); ``rep``: the run is repetition ``rep`` of its label."""
    kw = label_options(label)
    mode, staleness, local_steps = kw["mode"], kw.get("staleness"), kw.get("local_steps")
    path = root / label_dir(label) / (f"rep-{rep}" if rep else "")
    (path / "workers").mkdir(parents=True)
    listed = root / "metrics.csv"
    if not rep or rep == 1:
        listed.write_text((listed.read_text() if listed.exists() else "label\n") + label + "\n")
    options = {"model": "mlp:256", "mode": mode, "staleness": staleness, "local_steps": local_steps,
               "workers": workers, "steps": per_worker, "batch": 32, "eval_every": 10 if evals else 0}
    (path / "config.json").write_text(json.dumps({"options": options, "cluster": {}, "created": 0.0}))
    lines: dict[int, list[dict[str, Any]]] = {w: [{"event": "start", "t": 100.0, "worker": w}] for w in range(workers)}
    total = workers * per_worker
    for g in range(1, total + 1):
        w = (g - 1) % workers
        lines[w].append({"t": 100.0 + g / rate, "worker": w, "step": (g - 1) // workers + 1, "global_step": g,
                         "loss": loss(g), "wait_s": 0.0, "staleness": 1, "minibatch": g - 1, "delay_s": 0.0,
                         "applied": True})
    for at, value, accuracy in evals:
        lines[0].append({"event": "eval", "t": 100.0 + at / rate + 1e-3, "worker": 0, "global_step": at,
                         "eval_loss": value, "eval_accuracy": accuracy})
    for w in range(workers):
        lines[w].sort(key=lambda r: r["t"])
        lines[w].append({"event": "done", "t": 100.0 + total / rate, "worker": w, "steps": per_worker})
        (path / "workers" / f"worker-{w}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines[w]))
    final = {"eval_loss": evals[-1][1], "eval_accuracy": evals[-1][2]} if evals else {"eval_loss": loss(total)}
    (path / "model").mkdir()
    (path / "model" / "final.json").write_text(json.dumps(final))
    s = {"status": "ok", "mode": mode, "workers": workers, "staleness": staleness, "local_steps": local_steps,
         "final_loss": final["eval_loss"], "final_accuracy": final.get("eval_accuracy"), **(summary or {})}
    (path / "summary.json").write_text(json.dumps(s))
    return path


def falling(reach_at: int, start: float = 2.3, floor: float = 0.2) -> Callable[[int], float]:
    """A training loss that crosses 1.0 at global step ``reach_at`` and keeps falling."""
    rate = math.log((start - floor) / (1.0 - floor)) / reach_at
    return lambda g: floor + (start - floor) * math.exp(-rate * g)


def flat(value: float = 2.0) -> Callable[[int], float]:
    return lambda g: value


def blowing_up(g: int) -> float:
    return 2.3 * math.exp(-0.02 * g) if g < 60 else 0.7 * math.exp(0.08 * (g - 60))


def _report(root: Path, target: float | None = 1.0) -> Report:
    return load_comparison(root, target=target, per_run=False)


def _texts(report: Report) -> tuple[str, str, str]:
    """``(notes, terminal, tradeoff figure's texts)`` of a report, whitespace made single spaces."""
    fig = next(f for c, f in report.figures if c.startswith("What staleness costs and buys"))
    figure = " ".join(t.get_text() for ax in fig.axes for t in ax.findobj(Text))
    terminal = " ".join(terminal_text(report.table, width=10_000).split())
    return " ".join(" ".join(report.notes).split()), terminal, " ".join(figure.split())


def _star(report: Report) -> bool:
    fig = next(f for c, f in report.figures if c.startswith("What staleness costs and buys"))
    return any(line.get_marker() == "*" for ax in fig.axes for line in ax.get_lines())


def test_case_1_a_target_at_72_percent_of_a_run_is_not_called_start_up(tmp_path: Path) -> None:
    """network.ipynb: 3 workers of 12 steps; async reached the target after 26 of its 36 minibatches (8.67 per
    worker, 72% of its run). The report said the times 'measure start-up'; at 72% of a run they do not, and a run
    this short cannot tell start-up from pace either: it says so."""
    write_run(tmp_path, "sync", workers=3, per_worker=12, loss=falling(24), rate=6.0)
    write_run(tmp_path, "async", workers=3, per_worker=12, loss=falling(18), rate=9.0)
    report = _report(tmp_path)
    notes, terminal, _ = _texts(report)
    for text in (notes, terminal):
        assert "measure start-up" not in text, text
        assert "cannot tell start-up from the cost per update" in text and "72% of its run" in text
    verdict = report.verdict
    assert verdict is not None and verdict.fastest == "async" and verdict.outcome("async").share == pytest.approx(
        26 / 36, abs=0.01)
    assert verdict.kind == "short" and verdict.winner is None and not _star(report)


def test_case_2_runs_that_never_reached_the_target_are_a_cost_not_left_out(tmp_path: Path) -> None:
    """semi_sync's pauses: every setting that reached the target needed about as many minibatches, one was clearly
    fastest, but async and async+dc never reached it and local:8 diverged. The report said 'staleness cost no progress
    per update here ... the tradeoff is not in this run'."""
    write_run(tmp_path, "sync", workers=4, per_worker=60, loss=falling(150), rate=5.0)
    write_run(tmp_path, "ssp:8", workers=4, per_worker=60, loss=falling(140), rate=20.0)
    write_run(tmp_path, "async", workers=4, per_worker=60, loss=flat(), rate=40.0)
    write_run(tmp_path, "async+dc", workers=4, per_worker=60, loss=flat(), rate=40.0)
    write_run(tmp_path, "local:8", workers=4, per_worker=60, loss=blowing_up, rate=30.0)
    report = _report(tmp_path)
    notes, terminal, _ = _texts(report)
    for text in (notes, terminal):
        assert "cost no progress" not in text and "not in this run" not in text, text
        assert ("async never reached it in its 240 minibatches; async+dc never reached it in its 240 minibatches; "
                "local:8 diverged (training loss)") in text
    verdict = report.verdict
    assert verdict is not None and verdict.winner == "ssp:8"
    assert [verdict.outcome(x).reach for x in ("async", "async+dc", "local:8")] == ["never", "never", "diverged"]
    assert verdict.cost.kind == "differs" and verdict.cost.order[-3:] == ("async", "async+dc", "local:8")


def test_case_2_the_link_scenario_no_winner_yet_staleness_cost_the_target(tmp_path: Path) -> None:
    """The link scenario: the times said nothing (a lead within noise), and the report concluded 'the staleness
    tradeoff is not in this run' while local:4 and local:16 never reached the target."""
    write_run(tmp_path, "sync", workers=4, per_worker=60, loss=falling(150), rate=9.0)
    write_run(tmp_path, "ssp:4", workers=4, per_worker=60, loss=falling(150), rate=10.0)
    write_run(tmp_path, "local:4", workers=4, per_worker=60, loss=flat(), rate=20.0)
    write_run(tmp_path, "local:16", workers=4, per_worker=60, loss=flat(), rate=25.0)
    report = _report(tmp_path)
    notes, terminal, figure = _texts(report)
    for text in (notes, terminal):
        assert "not in this run" not in text and "No winner on time to the target: ssp:4's lead over sync" in text
        assert "local:4 never reached it" in text and "local:16 never reached it" in text
    assert "no winner: within noise" in figure and figure.count("× not reached") == 4  # two panels, two settings
    assert report.verdict is not None and report.verdict.kind == "noise"


def test_case_3_a_held_out_blow_up_is_diverged_in_the_summary_the_table_and_every_view(tmp_path: Path) -> None:
    """local:16's held-out loss climbed 0.75 -> 1.53 -> 1.88 -> 3.73 (worse than the untrained model's ~2.3) while its
    smoothed training loss stayed calm: it was 'ok' and 'diverged: false'."""
    from ssptk.analysis.summary import run_summary
    from ssptk.core.options import resolve

    evals = [(40, 0.9, 0.7), (80, 0.75, 0.78), (120, 1.53, 0.55), (160, 1.88, 0.45), (240, 3.73, 0.31)]
    local16 = write_run(tmp_path, "local:16", workers=4, per_worker=60,
                        loss=falling(100), rate=25.0, evals=evals, summary={"diverged": False})
    good = [(40, 1.2, 0.6), (80, 0.8, 0.75), (120, 0.6, 0.8), (160, 0.5, 0.85), (240, 0.45, 0.87)]
    write_run(tmp_path, "sync", workers=4, per_worker=60, loss=falling(100), rate=8.0, evals=good)
    summary, _ = run_summary(str(local16), resolve(model="mlp:256", mode="local", local_steps=16, workers=4,
                                                    steps=60, eval_every=10), None)
    assert summary["status"] == "ok" and summary["diverged"] is True and summary["diverged_on"] == "held-out"
    assert summary["diverged_at_step"] == 240
    from ssptk.rundir.contract import check_summary

    assert check_summary(json.loads(json.dumps(summary)))[1] == ""  # the contract holds the new key
    report = _report(tmp_path, target=None)
    row = report.table.set_index("label").loc["local:16"]
    assert bool(row["diverged"]) and row["diverged_on"] == "held-out"
    assert report.verdict is not None and report.verdict.outcome("local:16").reach == "diverged"
    assert "local:16 (DIVERGED)" in table_html(report.table) and ">diverged</td>" in table_html(report.table)
    notes, terminal, figure = _texts(report)
    for text in (notes, terminal):
        assert "Diverged: local:16 (the held-out loss rose above 2 x its best" in text
    assert "× diverged (held-out)" in figure and "× not reached" not in figure


def test_a_comparison_figure_drawn_without_a_verdict_marks_what_the_table_would(tmp_path: Path) -> None:
    """``comparison_figure(runs)`` called by hand (the custom_keras notebook) has no verdict to word: it used to decide
    divergence itself, by the training loss alone, and left a held-out blow-up unmarked beside a table that says
    DIVERGED. It now words the verdict of the table the report would show."""
    from ssptk.render import comparison_figure
    from ssptk.rundir.logs import read_run

    evals = [(40, 0.9, 0.7), (80, 0.75, 0.78), (120, 1.53, 0.55), (160, 1.88, 0.45), (240, 3.73, 0.31)]
    local16 = write_run(tmp_path, "local:16", workers=4, per_worker=60, loss=falling(100), rate=25.0, evals=evals)
    good = [(40, 1.2, 0.6), (80, 0.8, 0.75), (120, 0.6, 0.8), (160, 0.5, 0.85), (240, 0.45, 0.87)]
    sync = write_run(tmp_path, "sync", workers=4, per_worker=60, loss=falling(100), rate=8.0, evals=good)
    runs = {"local:16": read_run(local16), "sync": read_run(sync)}
    fig = comparison_figure(runs)
    legend = [t.get_text() for ax in fig.axes for lg in [ax.get_legend()] if lg for t in lg.get_texts()]
    assert any(t.startswith("local:16 (DIVERGED, held-out)") for t in legend), legend
    assert not any("sync (" in t and "DIVERGED" in t for t in legend), legend


def test_case_4_no_best_line_beside_no_winner(tmp_path: Path) -> None:
    """sync_ssp_async printed 'best: ssp:32' (the raw first to the target) beside the report's 'no winner: within
    noise'. The notebook now prints the verdict's line, and it says there is no winner."""
    write_run(tmp_path, "sync", workers=4, per_worker=60, loss=falling(150), rate=4.0)
    write_run(tmp_path, "ssp:8", workers=4, per_worker=60, loss=falling(150), rate=9.0)
    write_run(tmp_path, "ssp:32", workers=4, per_worker=60, loss=falling(150), rate=10.0)
    report = _report(tmp_path)
    _, _, figure = _texts(report)
    assert "no winner: within noise" in figure and not _star(report)
    notebooks = {p.name: json.loads(p.read_text()) for p in (ROOT / "notebooks").glob("*.ipynb")}
    code = {name: "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
            for name, nb in notebooks.items()}
    assert "best_line()" in code["sync_ssp_async.ipynb"]
    for name, text in code.items():  # no notebook names a winner from the raw first to the target
        assert "first_to_target" not in text, name
    from ssptk.render.verdict_words import best_line

    assert report.verdict is not None and report.verdict.fastest == "ssp:32" and report.verdict.winner is None
    line = best_line(report.verdict)
    assert line.startswith("best: none (no winner: ssp:32's lead over ssp:8 is within noise")


def test_case_5_one_run_each_never_claims_a_spread(tmp_path: Path) -> None:
    """A single 6-worker comparison said async was ahead 'by more than the spread of its time' with no repeats: one
    run has no spread; the lead is held to the stated per-run figure, and the words say so."""
    write_run(tmp_path, "sync", workers=6, per_worker=60, loss=falling(200), rate=4.0)
    write_run(tmp_path, "ssp:8", workers=6, per_worker=60, loss=falling(200), rate=7.0)
    write_run(tmp_path, "async", workers=6, per_worker=60, loss=falling(200), rate=10.0)
    report = _report(tmp_path)
    notes, terminal, _ = _texts(report)
    for text in (notes, terminal):
        assert "spread of its time" not in text and "more than the spread" not in text
        assert "ahead of every other setting by more than 25%, the noise ssptk assumes for one run" in text
    assert report.verdict is not None and report.verdict.winner == "async"


def test_case_5_a_tie_is_reported_as_a_tie(tmp_path: Path) -> None:
    """ssp:4 and async reached the target at the same time (to 4 digits): 'first to reach it: ssp:4' said more than
    the runs did."""
    tied = tmp_path / "tie"
    write_run(tied, "sync", workers=6, per_worker=60, loss=falling(200), rate=4.0)
    write_run(tied, "ssp:4", workers=6, per_worker=60, loss=falling(200), rate=10.0)
    write_run(tied, "async", workers=6, per_worker=60, loss=falling(200), rate=10.0)
    report = _report(tied)
    notes, terminal, figure = _texts(report)
    for text in (notes, terminal):
        assert "first to reach it: ssp:4 and async, tied (" in text and "first to reach it: ssp:4 (" not in text
    assert "no winner: a tie" in figure and not _star(report)
    assert report.verdict is not None and report.verdict.kind == "tie" and report.verdict.tied == ("async",)


def test_case_7_a_huge_skew_with_a_low_staleness_is_explained(tmp_path: Path) -> None:
    """A digits --predict comparison: async's max skew 373 but mean staleness 0.87, below ssp:4's 1.31. The output
    did not say why; a student reads 'async is less stale than SSP'."""
    write_run(tmp_path, "ssp:4", workers=3, per_worker=150, loss=falling(200),
              summary={"max_skew": 5, "mean_staleness": 1.31})
    write_run(tmp_path, "async", workers=3, per_worker=150, loss=falling(200), rate=12.0,
              summary={"max_skew": 373, "mean_staleness": 0.87})
    report = _report(tmp_path)
    notes, terminal, _ = _texts(report)
    for text in (notes, terminal):
        assert "async's max skew 373 is far above its mean staleness 0.87" in text
        assert "lower mean staleness (0.87) than ssp:4's 1.31" in text
        assert "skew counts how many steps one worker got ahead of another, staleness how many updates" in text


def test_verdict_outcomes_cover_every_run(tmp_path: Path) -> None:
    """The verdict decides over every run, the failed one too: an outcome per label, in the table's order."""
    write_run(tmp_path, "sync", workers=2, per_worker=80, loss=falling(80))
    write_run(tmp_path, "async", workers=2, per_worker=80, loss=flat(),
              summary={"status": "failed", "reason": "worker:1 exited"})
    table = an.compare_table({p.name: an_run(p) for p in sorted(tmp_path.iterdir()) if p.is_dir()}, target=1.0)
    verdict = table.attrs["verdict"]
    assert [(o.label, o.reach) for o in verdict.outcomes] == [("async", "failed"), ("sync", "reached")]
    assert verdict.cost.failed == ("async",) and verdict.kind == "winner"


def an_run(path: Path) -> Any:
    from ssptk.rundir import load_run

    return load_run(path)


def _network_repeats() -> Any:
    """Two repeats each of three settings under a shaped network: every column a table can show has values."""
    import pandas as pd

    rows = []
    for label, mode in (("sync", "sync"), ("ssp:4", "ssp"), ("local:16", "local")):
        for k in (1, 2):
            row = {c: None for c in an.COMPARE_COLUMNS}
            row.update(label=label, rep=k, mode=mode, staleness=4 if mode == "ssp" else None, workers=4,
                       steps_per_s=10.0 + k, wall_s=12.0, final_loss=0.3 + 0.01 * k, final_accuracy=0.9 + 0.01 * k,
                       time_to_target_s=5.0 + k, steps_to_target=500 + 10 * k, max_skew=3 + k, wait_fraction=0.1 * k,
                       mean_staleness=1.2, mb_per_minibatch=0.0192812 + 0.001 * k, link_busy=0.83,
                       transfer_share=0.41, status="ok", diverged=label == "local:16",
                       diverged_on="held-out" if label == "local:16" else None)
            rows.append(row)
    return an.aggregate_repeats(pd.DataFrame(rows, columns=["label", "rep", *an.COMPARE_COLUMNS[1:]]))


def test_item_8_repeat_tables_keep_accuracy_and_range_the_minibatches_to_target() -> None:
    """`--repeat` tables dropped the accuracy column, and `to target mb` had no min–max."""
    table = _network_repeats()
    text = terminal_text(table)
    head, _rule, sync, sync_range = text.splitlines()[:4]
    assert "accuracy" in head and "to target mb" in head
    assert "0.915" in sync and "510–520" in sync_range and "0.91–0.92" in sync_range
    html = table_html(table)
    assert ">accuracy<" in html and "510–520" in html


def test_item_8_the_report_names_real_columns_and_rounds_megabytes(tmp_path: Path) -> None:
    """The report printed the literal `<figure>_ci95 columns`; MB/step had 6 decimals."""
    for label in ("sync", "ssp:4"):
        for k in (1, 2):
            write_run(tmp_path, label, workers=3, per_worker=60, loss=falling(100), rate=8.0 + k, rep=k,
                      summary={"traffic": {"mb_per_minibatch": 0.0192812 + 0.001 * k}})
    report = _report(tmp_path)
    notes = " ".join(report.notes)
    assert "Each mode ran 2 times" in notes and "<figure>" not in notes
    assert "time_to_target_s_ci95" in notes and "time_to_target_s_ci95" in report.table.columns
    cells = table_html(report.table)
    assert ">0.021<" in cells and "0.02078" not in cells  # 0.0207812 MB (the mean): 3 decimals at most


def test_item_8_html_headers_take_two_lines_at_most_and_xfer_is_explained() -> None:
    """At 912 px the headers wrapped to three lines ('to / target / s'), and `xfer` was not explained."""
    import re

    html = table_html(_network_repeats())
    heads = re.findall(r"<th [^>]*>(.*?)</th>", html)
    assert "to&nbsp;target<br>s" in heads and "to&nbsp;target<br>mb" in heads
    assert all(h.count("<br>") <= 1 and h.count(" ") + h.count("<br>") <= 1 for h in heads), heads
    assert "xfer: share of a worker&#x27;s step its tensors were on the wire" in html
    assert "net busy: the busiest shaped link" in html and "MB/step: megabytes the workers sent" in html


def test_the_held_out_rule_tells_a_blow_up_from_overfitting() -> None:
    """Overfitting doubles a held-out loss yet stays far below the untrained model's: not diverged. The link
    scenario's local:16 ends above it, at 3.73: diverged at that evaluation. A NaN evaluation is diverged."""
    from ssptk.core.divergence import find_held_out_divergence

    steps = [40, 80, 120, 160, 240]
    assert find_held_out_divergence([0.5, 0.45, 0.6, 0.9, 1.1], steps, untrained=2.3) == (False, None)
    assert find_held_out_divergence([0.9, 0.75, 1.53, 1.88, 3.73], steps, untrained=2.3) == (True, 240)
    assert find_held_out_divergence([0.9, 0.75, 1.53, 1.88, 3.73], steps, untrained=None) == (False, None)
    assert find_held_out_divergence([0.9, float("nan")], steps, untrained=None) == (True, 80)
    assert find_held_out_divergence([2.5, 2.6, 2.7], steps, untrained=2.3) == (False, None)  # never got better
