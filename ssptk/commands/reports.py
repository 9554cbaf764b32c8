"""The ``report`` command: a comparison's table and report rebuilt from its logs, one run's summary, or one run
gathered from its hosts' directories; its result, :class:`ReportResult`."""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ssptk.core.errors import UsageError

if TYPE_CHECKING:
    from ssptk.rundir import RunDir

__all__ = ["ReportResult", "report", "warning"]


@dataclass(frozen=True)
class ReportResult:
    """What ``report`` made: ``text`` (a comparison's table, or a run's summary), ``path`` (the comparison's
    ``report.html``, written again) and ``note`` (a line after them), printed as ``str(report)``."""

    text: str
    path: str | None = None
    note: str | None = None

    def __str__(self) -> str:
        from ssptk.core.printable import printable

        text = self.text + (f"\n\nreport: {self.path}" if self.path else "") + (f"\n{self.note}" if self.note else "")
        return printable(text, keep="\n")  # what a run directory holds must not drive the terminal


def warning(line: str) -> None:
    """How both front ends show a warning of ``report``: one line on stderr."""
    print(f"ssptk: warning: {line}", file=sys.stderr)


def report(args: argparse.Namespace, warn: Callable[[str], None] = warning) -> ReportResult:
    """``report``: a comparison's table and report rebuilt from its logs, or one run's summary (read, nothing
    written). ``warn`` hears a line per file of the runs that the report has to do without."""
    import os

    from ssptk.render import load_comparison
    from ssptk.render.terminal_table import terminal_text
    from ssptk.rundir import ComparisonDir, RunDir

    path = args.dir[0]
    rd = RunDir(path)
    if len(args.dir) > 1 or args.gather or rd.from_hosts():
        # several hosts' directories, or the one directory of tasks no launcher of ours started (Slurm on one node)
        return _report_gathered(args.dir, args.gather, warn)
    if os.path.exists(rd.config_path):  # one run: its summary, read; nothing is written
        text = _one_run_summary(rd)  # a run that cannot be summarised at all is one error line, no warnings
        _warn_unreadable([rd.path], warn)
        return ReportResult(text)
    if not os.path.isdir(path):
        raise UsageError(f"{path} is not a directory: give a comparison or run directory")
    cd = ComparisonDir(path)
    _warn_unreadable(cd.run_dirs(), warn, cd.path)
    comparison = load_comparison(cd.path, target=args.target)
    saved = comparison.save(cd.report_path)
    return ReportResult(terminal_text(comparison.table, predicted=comparison.predicted), path=str(saved))


def _report_gathered(dirs: list[str], keep: str | None, warn: Callable[[str], None]) -> ReportResult:
    """One run written on several hosts: merge the directories (:func:`ssptk.rundir.gather.gather`) into one run
    directory and end it as a local run ends (:func:`ssptk.experiment.finish.finish_gathered`); the sources are
    only read. Without ``keep`` the run goes to ``gathered`` beside them (a former one is rebuilt)."""
    import os
    import shutil

    from ssptk.core.printable import printable
    from ssptk.experiment.finish import finish_gathered
    from ssptk.render import format_summary
    from ssptk.rundir import RunDir
    from ssptk.rundir.gather import gather

    absdirs = [os.path.abspath(d) for d in dirs]
    parent = os.path.commonpath(absdirs) if len(absdirs) > 1 else os.path.dirname(absdirs[0])
    dest = os.path.abspath(keep) if keep else os.path.join(parent, "gathered")
    sources = [d for d in dirs if os.path.abspath(d) != dest]  # `report OUT/*` lists a former gathered one too
    if not sources:
        raise UsageError(f"{dest} is where the run is gathered to: give the hosts' directories")
    former = RunDir(dest)
    if os.path.isdir(dest) and os.listdir(dest) and former.gathered_from():
        shutil.rmtree(dest)  # a report gathered before: gathered again from the hosts' directories
    rd = gather(sources, dest, lambda line: warn(printable(line)))
    rd.write_gathered([os.path.abspath(d) for d in sources])
    _warn_unreadable([rd.path], warn)
    text = format_summary(finish_gathered(rd.path))
    return ReportResult(text, path=rd.report_path, note=f"(merged from {len(sources)} directories into {rd.path})")


def _warn_unreadable(run_dirs: list[str], warn: Callable[[str], None], comparison: str | None = None) -> None:
    """A warning per file of these runs (and of the ``comparison`` directory) that the report has to do without."""
    from ssptk.core.printable import printable
    from ssptk.rundir.check import unreadable, unreadable_comparison

    for line in [*(unreadable_comparison(comparison) if comparison else []), *(x for d in run_dirs
                                                                               for x in unreadable(d))]:
        warn(printable(line))  # a file's name may hold control characters


def _one_run_summary(rd: RunDir) -> str:
    """The text of one run's summary: ``summary.json`` as the run wrote it, or, for a run without one (its
    tasks started by hand, its launcher killed), computed from the logs in memory."""
    from ssptk.experiment.finish import summary_from_logs
    from ssptk.render import format_summary

    stored = rd.summary()
    if stored:
        return format_summary(stored)
    return format_summary(summary_from_logs(rd.path)) + \
        "\n(computed from the logs: the run has no summary.json; nothing was written)"
