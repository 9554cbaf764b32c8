"""Rendering: matplotlib figures, HTML reports, text tables and summaries, TensorBoard event files.

Draws what :mod:`ssptk.analysis` computes; may import :mod:`ssptk.core`, :mod:`ssptk.rundir` and
:mod:`ssptk.analysis`, never the launcher, the task runtime or a front end. Figures are built without pyplot and
never change the user's matplotlib style; the shared look is :mod:`ssptk.render.style`'s.

Each name below is imported from its module when first asked for: a command that only prints text (``ssptk run``'s
summary and progress bar) does not import matplotlib (1.5 CPU-seconds of a CLI command's 4, measured).
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ssptk.render.cells import KEY_FIGURES
    from ssptk.render.figures import Repeats, comparison_figure, run_figure
    from ssptk.render.overlay import overlay_figure, summary_line
    from ssptk.render.report import Report, build_report, comparison_title, load_comparison, write_metrics_csv
    from ssptk.render.style import figure_png, figure_to_png_base64
    from ssptk.render.tables import format_table
    from ssptk.render.terminal_table import terminal_table
    from ssptk.render.text import ProgressBar, format_summary
    from ssptk.render.tradeoff_plot import tradeoff_figure

#: Where each public name lives.
_HOMES = {"Repeats": "figures", "comparison_figure": "figures", "run_figure": "figures",
          "overlay_figure": "overlay", "summary_line": "overlay",
          "Report": "report", "build_report": "report", "comparison_title": "report", "load_comparison": "report",
          "write_metrics_csv": "report", "figure_png": "style", "figure_to_png_base64": "style",
          "KEY_FIGURES": "cells", "format_table": "tables", "terminal_table": "terminal_table",
          "ProgressBar": "text", "format_summary": "text", "tradeoff_figure": "tradeoff_plot"}

__all__ = ["KEY_FIGURES", "ProgressBar", "Repeats", "Report", "build_report", "comparison_figure", "comparison_title",
           "figure_png", "figure_to_png_base64", "format_summary", "format_table", "load_comparison",
           "overlay_figure", "run_figure", "summary_line", "terminal_table", "tradeoff_figure", "write_metrics_csv"]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)  # (every name of __all__: tests/test_layers.py checks the two agree)
    if home is None:
        raise AttributeError(f"module 'ssptk.render' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"ssptk.render.{home}"), name)
    globals()[name] = value
    return value
