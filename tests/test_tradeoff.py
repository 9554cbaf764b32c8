"""The tradeoff's verdict and figure: a star only for a lead larger than its spread, never for a target reached
in the first few percent of a run or by a setting that diverged or missed it; when the times say nothing, the
words say the tradeoff is not in this run and where it is. Pure: tables built by hand, no cluster."""
from __future__ import annotations

from typing import Any

import pandas as pd
import pytest
from matplotlib.text import Text

from ssptk.analysis import aggregate_repeats
from ssptk.analysis.comparison_table import COMPARE_COLUMNS
from ssptk.analysis.outcomes import EARLY_SHARE
from ssptk.analysis.tradeoff import tradeoff_table
from ssptk.analysis.verdict import comparison_verdict as tradeoff_verdict
from ssptk.render.terminal_table import terminal_text
from ssptk.render.tradeoff_plot import tradeoff_figure, tradeoff_lines
from ssptk.render.verdict_words import why_no_winner

_MODES = {"sync": ("sync", None), "ssp:4": ("ssp", 4), "ssp:8": ("ssp", 8), "async": ("async", None)}


def _row(label: str, time: float | None, share: float = 0.5, **kw: Any) -> dict[str, Any]:
    """One run of 1000 minibatches at 100 steps/s that reached the target after ``share`` of them, in ``time``."""
    mode, staleness = _MODES[label]
    row = {c: None for c in COMPARE_COLUMNS}
    row.update(label=label, mode=mode, staleness=staleness, workers=4, steps_per_s=100.0, wall_s=10.0,
               time_to_target_s=time, steps_to_target=None if time is None else int(1000 * share),
               diverged=False, status="ok")
    return {**row, **kw}


def _table(*rows: dict[str, Any]) -> pd.DataFrame:
    table = pd.DataFrame(list(rows), columns=list(COMPARE_COLUMNS))
    table.attrs["target"] = 0.1
    return table


def _star(fig: Any) -> bool:
    return any(line.get_marker() == "*" for ax in fig.axes for line in ax.get_lines())


def _texts(fig: Any) -> str:
    return " ".join(t.get_text() for ax in fig.axes for t in ax.findobj(Text))


def test_a_clear_lead_reached_mid_run_is_starred() -> None:
    table = _table(_row("sync", 8.0, 0.3), _row("ssp:4", 4.0, 0.5), _row("async", None))
    verdict = tradeoff_verdict(table)
    assert (verdict.fastest, verdict.winner, verdict.kind) == ("ssp:4", "ssp:4", "winner")
    assert tradeoff_table(table)["best"].tolist() == [False, True, False]
    fig = tradeoff_figure(table, 0.1)
    assert _star(fig) and "best: ssp:4" in _texts(fig) and "no winner" not in _texts(fig)
    assert "× not reached" in _texts(fig)
    first, cost = tradeoff_lines(table)
    # one run each: the lead is held to the stated per-run figure, never to a spread one run cannot have
    assert first.startswith("Fastest to the target: ssp:4, ahead of every other setting by more than 25%, the noise "
                            "ssptk assumes for one run of a setting") and "spread of its time" not in first
    assert "--repeat 3" in first
    assert cost == ("What each setting cost per update (minibatches to the target), least first, the largest cost "
                    "last: sync 300; ssp:4 500; async never reached it in its 1000 minibatches.")


def test_a_target_reached_in_the_first_percent_of_the_runs_is_never_starred() -> None:
    """The README's main job: the linear model reaches its target after ~5% of the minibatches, so the
    fastest is whoever started quickest; however large its lead, no star, and the words say so."""
    share = EARLY_SHARE / 2
    table = _table(_row("sync", 0.35, share), _row("ssp:4", 0.62, share), _row("async", 0.72, share))
    verdict = tradeoff_verdict(table)
    assert (verdict.fastest, verdict.winner, verdict.kind) == ("sync", None, "early")
    fig = tradeoff_figure(table, 0.1)
    assert not _star(fig) and "no winner: reached early" in _texts(fig)
    (line,) = tradeoff_lines(table)
    assert line.startswith("The staleness tradeoff is not in this run: sync reached the target after 12.5 "
                           "minibatches per worker (5% of its run), so the times to it measure start-up")
    assert "sync_ssp_async.ipynb" in line and "non-IID" in line
    assert "The staleness tradeoff is not in this run" in terminal_text(table).replace("\n", " ")


def test_a_target_reached_in_each_workers_first_steps_is_never_starred() -> None:
    """150 steps of 3 workers: the linear model's ~48 minibatches are 11% of the run but 16 per worker, while
    each worker's first steps still run at a fraction of their pace: ssptk cannot tell start-up from pace."""
    short = {"steps_per_s": 45.0, "workers": 3}
    table = _table(_row("sync", 1.39, steps_to_target=45, **short), _row("async", 0.71, steps_to_target=48, **short))
    verdict = tradeoff_verdict(table)
    assert (verdict.winner, verdict.kind) == (None, "short")
    why = why_no_winner(verdict)
    assert "16 minibatches per worker (11% of its run), a run of 150 per worker" in why
    assert "cannot tell start-up from the cost per update" in why and "measure start-up" not in why
    table = _table(_row("sync", 1.39, steps_to_target=90, **short), _row("async", 0.71, steps_to_target=96, **short))
    assert tradeoff_verdict(table).winner == "async"


def test_a_real_lead_at_the_same_cost_per_update_says_the_tradeoff_is_not_in_this_run() -> None:
    """Every setting needed about as many minibatches: the fastest per step wins, which is not the tradeoff."""
    table = _table(_row("sync", 9.0, 0.5), _row("ssp:4", 6.0, 0.52), _row("async", 4.0, 0.55))
    verdict = tradeoff_verdict(table)
    assert verdict.winner == "async" and (verdict.cost.kind, verdict.cost.least, verdict.cost.most) == ("same", 500, 550)
    (line,) = tradeoff_lines(table)
    assert "cost no progress per update here (every setting needed 500-550 minibatches)" in line
    assert "the tradeoff is not in this run" in line and "sync_ssp_async.ipynb" in line
    costly = _table(_row("sync", 9.0, 0.3), _row("ssp:4", 6.0, 0.4), _row("async", 4.0, 0.55))
    assert tradeoff_verdict(costly).cost.kind == "differs" and "not in this run" not in tradeoff_lines(costly)[0]


@pytest.mark.parametrize(("runner_up", "starred"), [(5.5, False), (6.5, True)])
def test_one_run_each_a_lead_within_a_quarter_is_noise(runner_up: float, starred: bool) -> None:
    table = _table(_row("sync", 9.0), _row("ssp:4", 5.0), _row("async", runner_up))
    verdict = tradeoff_verdict(table)
    assert verdict.fastest == "ssp:4" and (verdict.winner == "ssp:4") is starred
    assert _star(tradeoff_figure(table)) is starred
    if not starred:
        assert verdict.kind == "noise" and verdict.close == ("async",)
        assert "within noise" in tradeoff_lines(table)[0] and "not in this run" in tradeoff_lines(table)[0]


def _aggregate(times: dict[str, list[float | None]], diverged: dict[str, list[bool]] | None = None) -> pd.DataFrame:
    """:func:`aggregate_repeats` of repeats with the given times to target (``None``: not reached)."""
    rows = []
    for label, ts in times.items():
        for k, t in enumerate(ts, 1):
            gone = (diverged or {}).get(label, [False] * len(ts))[k - 1]
            rows.append({**_row(label, t, diverged=gone), "rep": k})
    runs = pd.DataFrame(rows, columns=["label", "rep", *COMPARE_COLUMNS[1:]])
    runs.attrs["target"] = 0.1
    return aggregate_repeats(runs)


def test_repeats_a_lead_smaller_than_its_spread_is_not_starred() -> None:
    overlap = _aggregate({"sync": [9.0, 10.0, 11.0], "ssp:4": [3.0, 4.0, 7.5], "async": [7.0, 8.0, 8.5]})
    verdict = tradeoff_verdict(overlap)
    assert (verdict.fastest, verdict.winner, verdict.kind, verdict.close) == ("ssp:4", None, "noise", ("async",))
    assert "min–max times over the repeats overlap" in why_no_winner(verdict)
    rows = tradeoff_table(overlap)
    assert rows.loc[rows["label"] == "ssp:4", ["time_lo", "time_hi"]].values.tolist() == [[3.0, 7.5]]
    fig = tradeoff_figure(overlap)
    assert not _star(fig) and "min–max over the repeats" in _texts(fig)
    apart = _aggregate({"sync": [9.0, 10.0, 11.0], "ssp:4": [3.0, 4.0, 5.0], "async": [7.0, 8.0, 8.5]})
    assert tradeoff_verdict(apart).winner == "ssp:4" and _star(tradeoff_figure(apart))
    assert "the spread of the repeats" in tradeoff_lines(apart)[0]


def test_a_fastest_that_diverged_or_missed_in_a_repeat_is_not_starred() -> None:
    """Its mean time comes from the repeats that converged; the one that diverged (or never got there) does
    not show in it, so it must not win."""
    diverged = _aggregate({"sync": [9.0, 10.0, 11.0], "ssp:8": [2.0, 2.5, None]},
                          {"ssp:8": [False, False, True]})
    verdict = tradeoff_verdict(diverged)
    assert (verdict.fastest, verdict.winner, verdict.kind) == ("ssp:8", None, "unreliable")
    assert why_no_winner(verdict) == "ssp:8, the fastest to the target, reached it in only 2 of its 3 runs"
    assert not _star(tradeoff_figure(diverged))
    assert tradeoff_lines(diverged)[0] == f"No winner on time to the target: {why_no_winner(verdict)}."
    assert "ssp:8 diverged (training loss)" in tradeoff_lines(diverged)[1]
    missed = _aggregate({"sync": [9.0, 10.0, 11.0], "ssp:8": [2.0, None, 2.5]})
    assert missed.attrs["reached"] == {"sync": 3, "ssp:8": 2}
    assert tradeoff_verdict(missed).kind == "unreliable" and not tradeoff_table(missed)["best"].any()
    # without the counts (a table saved before they existed), "diverged in any repeat" still rules it out
    diverged.attrs.pop("reached")
    diverged.attrs.pop("counts")
    assert why_no_winner(tradeoff_verdict(diverged)) == "ssp:8, the fastest to the target, diverged in some of its runs"


def test_no_setting_reached_the_target_no_star_and_no_verdict_line() -> None:
    table = _table(_row("sync", None), _row("async", None, diverged=True))
    assert tradeoff_verdict(table).kind == "none"
    assert not any(line.startswith(("Fastest", "No winner", "The staleness")) for line in tradeoff_lines(table))
    fig = tradeoff_figure(table)
    assert not _star(fig) and "× diverged" in _texts(fig) and "× not reached" in _texts(fig)
