"""The commands of ``ssptk`` and of the ``%dtrain`` magic, once for both front ends.

:func:`build_parser` (:mod:`~ssptk.commands.parser`) is the one grammar of every command (its run options from
:data:`ssptk.core.options.OPTIONS`); :func:`run_one`, :func:`run_comparison` (:mod:`~ssptk.commands.training`),
:func:`report` (:mod:`~ssptk.commands.reports`), :func:`sim` and :func:`sim_run` (:mod:`~ssptk.commands.simulation`)
carry out a parsed command and return a typed result: a ``RunResult``, a ``CompareResult``, a :class:`ReportResult`, a
:class:`Timing`, a ``RunResult``; :mod:`~ssptk.commands.stopped` says what a command stopped half-way had
written. Mistakes raise :class:`~ssptk.core.errors.UsageError`, failed runs :class:`~ssptk.core.errors.RunFailed`.
Front-end layer, under the two that call it: :mod:`ssptk.cli` parses argv and turns results and errors into text
and exit codes; :mod:`ssptk.notebook.magics` parses its line with the same parser. Each result's ``str`` is what both
print.
"""
from __future__ import annotations

from ssptk.commands.parser import build_parser, local_steps_list, momentum_list, staleness_list
from ssptk.commands.reports import ReportResult, report, warning
from ssptk.commands.simulation import Timing, sim, sim_options, sim_run
from ssptk.commands.stopped import Left, left_behind, recording
from ssptk.commands.training import ComparePlan, compare_plan, run_comparison, run_one

__all__ = ["ComparePlan", "Left", "ReportResult", "Timing", "build_parser", "compare_plan", "left_behind",
           "local_steps_list", "momentum_list", "recording", "report", "run_comparison", "run_one", "sim",
           "sim_options", "sim_run", "staleness_list", "warning"]
