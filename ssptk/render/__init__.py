"""Rendering: matplotlib figures, HTML reports, text tables and summaries, TensorBoard event files.

Draws what :mod:`ssptk.analysis` computes; may import :mod:`ssptk.core`, :mod:`ssptk.rundir` and
:mod:`ssptk.analysis`, never the launcher, the task runtime or a front end. Figures are built without pyplot and
never change the user's matplotlib style; the shared look is :mod:`ssptk.render.style`'s.
"""
from __future__ import annotations

from ssptk.render.figures import Repeats, comparison_figure, run_figure
from ssptk.render.overlay import overlay_figure, summary_line
from ssptk.render.report import Report, build_report, comparison_title, load_comparison, write_metrics_csv
from ssptk.render.style import figure_png, figure_to_png_base64
from ssptk.render.tables import KEY_FIGURES, format_table, terminal_table
from ssptk.render.text import ProgressBar, format_summary
from ssptk.render.tradeoff import tradeoff_figure

__all__ = ["KEY_FIGURES", "ProgressBar", "Repeats", "Report", "build_report", "comparison_figure", "comparison_title",
           "figure_png", "figure_to_png_base64", "format_summary", "format_table", "load_comparison",
           "overlay_figure", "run_figure", "summary_line", "terminal_table", "tradeoff_figure", "write_metrics_csv"]
