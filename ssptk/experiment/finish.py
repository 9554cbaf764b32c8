"""What a run leaves when it ends: ``summary.json`` and TensorBoard event files, from its logs."""
from __future__ import annotations

import os
from dataclasses import replace

from ssptk.analysis.comparison_table import RunTuple
from ssptk.analysis.summary import run_summary
from ssptk.core.errors import DiskFull, RunInterrupted, TaskFailure, UsageError
from ssptk.core.options import RunOptions
from ssptk.rundir import RunDir, Summary

__all__ = ["finish_gathered", "finish_run", "interruption", "summary_from_logs", "write_tensorboard"]


def finish_run(run_dir: str, opts: RunOptions, failure: TaskFailure | None,
               ps_cpu_s: float | None = None) -> tuple[Summary, TaskFailure | None]:
    """Summarise the run from its logs, write ``summary.json`` and the TensorBoard files. Returns the
    summary and the run's failure: a full disk that kept ``summary.json`` from being written fails a run
    that had none (the summary is then only in memory)."""
    summary, loaded = run_summary(run_dir, opts, failure, ps_cpu_s)
    rd = RunDir(run_dir)
    try:
        rd.write_summary(summary)
        write_tensorboard(run_dir, loaded)  # all its event files or none
    except DiskFull as e:
        if failure is None:
            failure = TaskFailure.of("ssptk", str(e))
            summary, _ = run_summary(run_dir, opts, failure, ps_cpu_s)
            if os.path.exists(rd.summary_path):  # the TensorBoard files did not fit: the summary must say so
                try:
                    rd.write_summary(summary)
                except DiskFull:  # a summary saying ok of a run that failed would lie: none, then
                    os.unlink(rd.summary_path)
    return summary, failure


def interruption(e: KeyboardInterrupt) -> TaskFailure:
    """What an interrupted run's summary records: who stopped it (``SIGINT`` for Ctrl-C, ``SIGTERM``, ``SIGHUP``,
    or ``None`` for the notebook's stop button), with the status ``interrupted``."""
    sig = e.signal if isinstance(e, RunInterrupted) else "SIGINT"
    why = "interrupted by the user" if sig in (None, "SIGINT") else f"stopped by {sig}"
    return replace(TaskFailure.of("ssptk", why), status="interrupted", signal=sig)


def write_tensorboard(run_dir: str, loaded: RunTuple | None = None) -> None:
    """TensorBoard event files in ``run_dir/tensorboard/`` (:mod:`ssptk.render.tensorboard`); fails the run only
    on a full disk (:class:`DiskFull`: then none are left)."""
    from ssptk.render import tensorboard

    try:
        tensorboard.write_events(run_dir, loaded)
    except DiskFull:
        raise
    except Exception:  # noqa: BLE001 - a broken event file must not fail a run (nothing recorded)
        pass


def finish_gathered(run_dir: str) -> Summary:
    """End a run whose tasks were started without ssptk's launcher (Slurm, ``TF_CONFIG``, by hand) and whose hosts'
    directories were merged into ``run_dir`` (:func:`ssptk.rundir.gather.gather`) as a local run ends: the
    failure read from the logs (:func:`ssptk.analysis.blame.first_failure`), ``summary.json``, TensorBoard files,
    and ``report.html`` with ``metrics.csv``. Returns the summary."""
    from ssptk.analysis.blame import first_failure
    from ssptk.render.report import build_report
    from ssptk.rundir.comparison import write_metrics_csv
    from ssptk.rundir.logs import load_run
    from ssptk.rundir.task_status import read_statuses

    rd = RunDir(run_dir)
    opts = _options(rd)
    steps, events, _, _ = load_run(rd.path)
    summary, _ = finish_run(rd.path, opts, first_failure(steps, events, opts.workers, read_statuses(rd.tasks_dir)))
    label = opts.label  # local:H, not local
    report = build_report({label: load_run(rd.path)}, title=f"ssptk run {label} (gathered from its hosts)")
    report.save(rd.report_path)
    write_metrics_csv(report.table, rd.metrics_path)
    return summary


def _options(rd: RunDir) -> RunOptions:
    options = rd.config().options
    if options is None:
        raise UsageError(f"{rd.config_path} has no run options (truncated or not ssptk's): cannot summarise the run")
    try:
        return options.resolved()
    except (TypeError, ValueError) as e:
        raise UsageError(f"{rd.config_path}: its options cannot be read ({e})") from None


def summary_from_logs(run_dir: str) -> Summary:
    """What ``summary.json`` would hold for a run that has none (its tasks started by hand, its launcher
    killed), computed from the logs in memory; writes nothing. :class:`UsageError` if the config is unreadable."""
    from ssptk.analysis.blame import first_failure
    from ssptk.rundir.logs import read_run
    from ssptk.rundir.task_status import read_statuses

    rd = RunDir(run_dir)
    opts = _options(rd)
    steps, events = read_run(rd.path)
    summary, _ = run_summary(rd.path, opts, first_failure(steps, events, opts.workers, read_statuses(rd.tasks_dir)))
    return summary
