"""Figures and tables readable at the width a notebook shows them (~900 px): legends at least 9 px, ticks that do
not run together, a skew that flips at every step drawn as a band rather than a solid block, one legend below
the explorer's panels when it lists many runs, and tables under short headers without NaN or six decimals.
Pure: synthetic step records, no cluster."""
from __future__ import annotations

from itertools import combinations
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ssptk.analysis import aggregate_repeats
from ssptk.analysis.comparison_table import COMPARE_COLUMNS
from ssptk.render.figures import comparison_figure, run_figure
from ssptk.render.overlay import overlay_figure
from ssptk.render.skew import SKEW_BUCKETS, SKEW_RANGE_LABEL, skew_envelope
from ssptk.render.tables import ShownTable, table_html, table_text

SHOWN_PX = 900  # how wide a notebook cell or the report shows a figure


def _steps(workers: int = 3, steps: int = 400, staleness: Any = 0, lockstep: bool = True) -> pd.DataFrame:
    """Step records: in lock step, workers finish each step together (the skew flips 0/1 at every step, as
    sync's does); else worker w runs 1 + w/4 times slower. ``staleness``: a value or a function of the step."""
    rows = []
    for w in range(workers):
        for n in range(1, steps + 1):
            t = 0.01 * n + (1e-4 * w if lockstep else 0.0025 * w * n)
            s = staleness(n) if callable(staleness) else staleness
            rows.append({"t": 1000.0 + t, "worker": w, "step": n, "global_step": n, "loss": 1.0 / n, "wait_s": 0.001,
                         "staleness": s, "minibatch": n, "delay_s": 0.0, "applied": True})
    return pd.DataFrame(rows).sort_values("t", kind="mergesort").reset_index(drop=True)


def _config(mode: str = "sync", workers: int = 3) -> dict[str, Any]:
    return {"options": {"mode": mode, "workers": workers, "model": "linear",
                        "staleness": 2 if mode == "ssp" else None}}


def _px(fig: Figure, points: float) -> float:
    """A font size in points as pixels, the figure shown :data:`SHOWN_PX` wide."""
    return points / 72.0 * SHOWN_PX / fig.get_figwidth()


def _legend_texts(fig: Figure) -> list[Any]:
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None] + list(fig.legends)
    return [t for lg in legends for t in lg.get_texts()]


def test_legends_and_ticks_are_at_least_9_px_at_notebook_width() -> None:
    runs = {"sync": (_steps(), None, _config()), "async": (_steps(lockstep=False), None, _config("async"))}
    for fig in (run_figure(*runs["sync"]), comparison_figure(runs)):
        texts = _legend_texts(fig)
        assert texts and min(_px(fig, t.get_fontsize()) for t in texts) >= 9.0
        ticks = [t for ax in fig.axes for t in ax.get_xticklabels()]
        assert min(_px(fig, t.get_fontsize()) for t in ticks) >= 10.0


def _overlapping(labels: list[Any]) -> list[tuple[str, str]]:
    boxes = [(t.get_text(), t.get_window_extent()) for t in labels if t.get_text()]
    return [(a, b) for (a, ba), (b, bb) in combinations(boxes, 2) if ba.overlaps(bb)]


def test_staleness_ticks_far_apart_never_run_together() -> None:
    """Staleness 0-2 and 13-17 (8 values): a tick per value put 13..17 side by side as "13141516 17"."""
    values = [0, 1, 2, 13, 14, 15, 16, 17]
    fig = run_figure(_steps(staleness=lambda n: values[n % len(values)]), None, _config())
    FigureCanvasAgg(fig).draw()
    stale = fig.axes[4]
    assert not _overlapping(stale.get_xticklabels())
    # few and close: one tick per value, and one bar is not a wall across the panel
    fig = run_figure(_steps(staleness=0), None, _config())
    FigureCanvasAgg(fig).draw()
    assert [t.get_text() for t in fig.axes[4].get_xticklabels()] == ["0"]
    lo, hi = fig.axes[4].get_xlim()
    assert hi - lo >= 6


def test_a_skew_flipping_at_every_step_is_a_band_not_a_block() -> None:
    """Sync's skew is 1 while the first worker of a step has finished and the others not, 0 after: drawn as
    steps, a block of vertical lines. The figure draws its range as a band and its mean per slice of time."""
    steps = _steps(steps=600)
    fig = run_figure(steps, None, _config())
    skew_ax = fig.axes[2]
    (line,) = [ln for ln in skew_ax.get_lines() if ln.get_label().startswith("skew")]
    assert len(line.get_xdata()) <= SKEW_BUCKETS + 1 < len(steps) // 2
    assert SKEW_RANGE_LABEL in [t.get_text() for t in fig.legends[0].get_texts()]  # one legend, under the panels
    band = [c for c in skew_ax.collections if c.get_label() == SKEW_RANGE_LABEL]
    assert band and band[0].get_paths()
    # the envelope keeps the largest skew (what the SSP bound is about) and the least, whatever the slicing
    x = np.arange(1000, dtype="float64")
    y = np.where(np.arange(1000) % 2 == 0, 1.0, 0.0)
    y[537] = 7.0
    xs, lo, hi, mean, dense = skew_envelope(x, y, 100)
    assert dense and len(xs) == 101 and hi.max() == 7.0 and lo.min() == 0.0
    assert np.all((mean > 0.3) & (mean < 0.7) | (hi == 7.0))
    # a sparse skew stays exact steps
    xs, lo, hi, mean, dense = skew_envelope(x[:150], y[:150], 100)
    assert not dense and hi.tolist() == y[:150].tolist()


def test_the_explorers_many_runs_share_one_legend_below_the_panels() -> None:
    """A sweep of 8 settings with 3 predictions: a legend of 11 in a panel covered half of it."""
    runs = {f"S={s}": (_steps(lockstep=s % 2 == 0), None, _config("ssp")) for s in range(8)}
    runs.update({f"S={s} predicted": (_steps(), None, _config("ssp")) for s in (0, 2, 4)})
    fig = overlay_figure(runs, "S=2")
    FigureCanvasAgg(fig).draw()
    assert all(ax.get_legend() is None for ax in fig.axes)
    (legend,) = fig.legends
    assert len(legend.get_texts()) == 12  # 11 runs and the highlighted run's bound
    box = legend.get_window_extent()
    assert not any(box.overlaps(ax.get_window_extent()) for ax in fig.axes)
    few = overlay_figure({k: runs[k] for k in ("S=0", "S=1")}, "S=1")
    assert few.axes[0].get_legend() is not None and few.axes[1].get_legend() is None and not few.legends


def test_cost_points_are_named_in_a_legend_not_by_labels_that_collide() -> None:
    runs = {name: (_steps(), None, _config()) for name in ("sync", "ssp:1", "ssp:2")}  # three points in one place
    fig = comparison_figure(runs)
    cost = fig.axes[5]
    assert not cost.texts
    assert [t.get_text() for t in cost.get_legend().get_texts()] == ["sync", "ssp:1", "ssp:2"]


def _repeats() -> pd.DataFrame:
    rows = []
    for label, mode, rate in (("sync", "sync", 213.877), ("ssp:4", "ssp", 216.5002579)):
        for k in (1, 2):
            row = {c: None for c in COMPARE_COLUMNS}
            row.update(label=label, rep=k, mode=mode, staleness=4 if mode == "ssp" else None, workers=3,
                       steps_per_s=rate + k, wall_s=4.2, final_loss=0.105709888, time_to_target_s=0.35 * k,
                       steps_to_target=46, max_skew=1, wait_fraction=0.3276, mean_staleness=0.884444,
                       max_staleness=13, diverged=False, status="ok")
            rows.append(row)
    return aggregate_repeats(pd.DataFrame(rows, columns=["label", "rep", *COMPARE_COLUMNS[1:]]))


def test_tables_show_short_headers_and_rounded_figures_without_nan() -> None:
    table = _repeats()
    html = table_html(table)
    for header in ("<th", ">steps/s<", ">to&nbsp;target<br>s<", ">max skew<", ">wait<", ">staleness<"):
        assert header in html
    for raw in (">steps_per_s<", ">measured_over_ideal<", "NaN", "<NA>", "0.105709888", "216.5002579"):
        assert raw not in html
    assert "white-space:nowrap" in html and "<br>" in html  # a mean, its range on the line under it
    assert "Also in the DataFrame and metrics.csv: workers, wall_s, max_staleness" in html
    shown = ShownTable(table)
    assert shown._repr_html_() == html
    text = table_text(table)
    assert text.splitlines()[0].split() == ["run", "repeats", "steps/s", "to", "target", "s", "to", "target", "mb",
                                            "final", "loss", "max", "skew", "wait", "staleness", "status"]
    assert "215.4" in text and "215\u2013216" in text and "33%" in text and "nan" not in text.lower()
    assert len(shown["steps_per_s_min"]) == 2  # a plain DataFrame underneath, every column in it
