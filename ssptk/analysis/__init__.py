"""Analysis: pure functions from a run's logs to pandas (metrics, the comparison table, repeats, summaries).

A layer (CONTRIBUTING.md has their order) that may import :mod:`ssptk.core`, :mod:`ssptk.rundir` and
:mod:`ssptk.sim`; no plotting, no processes, no TensorFlow. Rendering and the front ends import it. ``from ssptk
import analysis as an`` gives every public name of its modules.
"""
from __future__ import annotations

from ssptk.analysis.comparison_table import (
    COMPARE_COLUMNS,
    FIGURE_COLUMNS,
    SPREAD_SUFFIXES,
    TARGET_FACTOR,
    RunTuple,
    auto_target,
    compare_table,
    converged,
    first_to_target,
)
from ssptk.analysis.held_out import held_out_curve, held_out_divergence, held_out_to_target
from ssptk.analysis.metrics import (
    ALL_WORKERS,
    divergence,
    finish_times,
    loss_curves,
    max_skew,
    n_workers,
    prepare_steps,
    run_options,
    skew_timeline,
    smoothing_window,
    staleness_bound,
    staleness_counts,
    start_time,
    summarize,
    time_to_target,
    wait_by_worker,
)
from ssptk.analysis.predicted_vs_measured import PREDICTED_COLUMNS, best_label, predicted_table
from ssptk.analysis.progress import MANY_WORKERS, extreme_workers, loss_band, progress_band
from ssptk.analysis.repeats import aggregate_repeats, ci95_halfwidth, repeat_table
from ssptk.analysis.run_view import (
    Band,
    Line,
    LossPanel,
    ProgressPanel,
    RunView,
    WaitPanel,
    view_of_records,
    view_of_run,
)
from ssptk.analysis.tradeoff import tradeoff_table
from ssptk.analysis.values import clean
from ssptk.analysis.verdict import Verdict, comparison_verdict, verdict_of
from ssptk.analysis.verdict_facts import pace_gaps

__all__ = [
    "ALL_WORKERS", "COMPARE_COLUMNS", "MANY_WORKERS", "PREDICTED_COLUMNS", "best_label", "extreme_workers",
    "loss_band", "predicted_table", "progress_band",
    "FIGURE_COLUMNS", "SPREAD_SUFFIXES", "TARGET_FACTOR", "RunTuple",
    "aggregate_repeats", "auto_target", "ci95_halfwidth", "clean", "compare_table", "converged", "divergence",
    "finish_times", "first_to_target", "held_out_curve", "held_out_divergence", "held_out_to_target", "loss_curves",
    "max_skew",
    "n_workers", "prepare_steps", "repeat_table", "run_options", "skew_timeline", "smoothing_window",
    "staleness_bound", "staleness_counts", "start_time", "summarize", "time_to_target", "tradeoff_table",
    "wait_by_worker", "Verdict", "comparison_verdict", "pace_gaps", "verdict_of",
    "Band", "Line", "LossPanel", "ProgressPanel", "RunView", "WaitPanel", "view_of_records", "view_of_run",
]
