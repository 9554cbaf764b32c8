"""The commands of ``ssptk`` and of the ``%dtrain`` magic, once for both front ends.

:func:`build_parser` is the one grammar of every command (its run options from
:data:`ssptk.core.options.OPTIONS`); :func:`run`, :func:`compare`, :func:`report` and :func:`sim` carry out
a parsed command and return a typed result: a ``RunResult``, a ``CompareResult``, a :class:`Report`, a
:class:`Timing`. Mistakes raise :class:`~ssptk.core.errors.UsageError`, failed runs
:class:`~ssptk.core.errors.RunFailed`. Front-end layer, under the two that call it: :mod:`ssptk.cli` parses
argv and turns results and errors into text and exit codes; :mod:`ssptk.notebook.magics` parses its line
with the same parser. Each result's ``str`` is what both print.
"""
from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ssptk.core.errors import UsageError
from ssptk.core.help_text import EXAMPLES, EXIT_CODES, NOTEBOOK_EXAMPLES, PLATFORMS
from ssptk.core.options import OPTIONS, RunOptions, add_run_arguments, from_namespace, given_options

if TYPE_CHECKING:
    from ssptk.experiment.compare import CompareResult
    from ssptk.experiment.result import RunResult
    from ssptk.rundir import RunDir
    from ssptk.sim import SimResult

__all__ = ["ComparePlan", "Left", "Report", "Timing", "build_parser", "compare", "compare_plan", "left_behind",
           "local_steps_list", "recording", "report", "run", "sim", "sim_options", "staleness_list", "warning"]

class _Parser(argparse.ArgumentParser):
    """Raises :class:`UsageError` instead of exiting, where asked (the notebook magics). ``commands``: the
    parser of each sub-command, by name (on the top-level parser)."""

    raise_errors = False
    commands: dict[str, argparse.ArgumentParser] = {}

    def error(self, message: str) -> Any:
        if self.raise_errors:
            raise UsageError(message)
        return super().error(message)


def staleness_list(text: str) -> list[int]:
    """``"0,1,2,4,8"`` -> ``[0, 1, 2, 4, 8]``: a sweep's staleness (:func:`ssptk.experiment.sweep.staleness_values`)."""
    from ssptk.experiment.sweep import staleness_values

    try:
        return staleness_values(text)
    except UsageError:
        raise argparse.ArgumentTypeError(f"invalid staleness list {text!r}: use integers >= 0 like 0,1,2,4,8") from None


def local_steps_list(text: str) -> list[int]:
    """``"1,2,4,8"`` -> ``[1, 2, 4, 8]``: a sweep's local steps (:func:`ssptk.experiment.sweep.local_steps_values`)."""
    from ssptk.experiment.sweep import local_steps_values

    try:
        return local_steps_values(text)
    except UsageError:
        raise argparse.ArgumentTypeError(f"invalid local steps list {text!r}: use integers >= 1 like 1,2,4,8") from None


def build_parser(notebook: bool = False) -> _Parser:
    """The one grammar of ssptk's commands. ``notebook``: the ``%dtrain`` magic's flavour, whose
    ``run``, ``compare`` and ``sweep`` also take the notebook's own flags, and whose errors raise."""
    prog = "%dtrain" if notebook else "ssptk"
    p = _Parser(prog=prog, description="Sync, SSP and async distributed training, side by side.",
                epilog=EXAMPLES + "\n" + PLATFORMS if not notebook else NOTEBOOK_EXAMPLES,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    codes = None if notebook else EXIT_CODES  # the magics have no exit codes
    r = sub.add_parser("run", help="train one model in one mode on a local cluster" +
                       (" (the default command)" if notebook else ""), epilog=codes)
    add_run_arguments(r)
    c = sub.add_parser("compare", help="run several modes with the same options and write a report",
                       description="Run each mode in turn into OUT/<label>/, then write OUT/metrics.csv and "
                                   "OUT/report.html. With --repeat R: R rounds, alternating the order, into "
                                   "OUT/<label>/rep-<k>/; the table shows mean [min-max].", epilog=codes)
    c.add_argument("labels", nargs="+", metavar="MODE",
                   help="sync, ssp:S, async, allreduce, local:H; ssp:S+inverse or async+inverse: with --lr-staleness "
                        "inverse; async+dc, ssp:S+dc[:LAMBDA]: with --lr-staleness dc[:LAMBDA] (delay-compensated); "
                        "local:H+outer: local SGD with DiLoCo's outer step (--outer-lr 0.7, --outer-momentum 0.9)")
    add_run_arguments(c, skip=("mode", "staleness"))
    sw = sub.add_parser("sweep", help="run SSP once per staleness value (or local SGD once per H) and compare them",
                        description="Run --mode ssp once per --staleness value into OUT/ssp-<S>/, or --mode local "
                                    "once per --local-steps value into OUT/local-<H>/ (give one of the two), then "
                                    "write OUT/metrics.csv and OUT/report.html (in a notebook: a slider over the "
                                    "runs).",
                        epilog=codes)
    sw.add_argument("--staleness", type=staleness_list, default=None, metavar="S,S,...",
                    help="the staleness values to run (mode ssp), e.g. 0,1,2,4,8")
    sw.add_argument("--local-steps", type=local_steps_list, default=None, metavar="H,H,...",
                    help="local SGD: the local steps between averages to run (mode local), e.g. 1,2,4,8; "
                         "--outer-lr and --outer-momentum apply to every run")
    add_run_arguments(sw, skip=("mode", "staleness", "local_steps"))
    for sp in (c, sw):  # not run options: they are the comparison's
        sp.add_argument("--repeat", type=int, default=1, metavar="R", help="run each mode R times and show the spread")
        sp.add_argument("--predict", action="store_true",
                        help="also predict each mode (the simulator's schedule replayed with the model's real "
                             "gradients, no cluster) into OUT/predicted/<label>/, and draw the predictions over "
                             "the runs in the report, held to the same target")
    rep = sub.add_parser("report", help="rebuild a comparison's report (or a run's summary) from its logs")
    rep.add_argument("dir", nargs="+",
                     help="a comparison directory, one run directory, or the run directories of one run whose "
                          "workers wrote their logs on several hosts (merged: see --gather)")
    rep.add_argument("--gather", default=None, metavar="DIR",
                     help="the run directory to merge the hosts' directories into, ending as a local run ends "
                          "(summary.json, report.html, metrics.csv, TensorBoard files; default: 'gathered' beside "
                          "them, rebuilt on each report)")
    for sp in (c, sw, rep):
        sp.add_argument("--target", type=float, default=None, metavar="LOSS",
                        help="the loss that time and minibatches to target are measured to: held-out when every "
                             "run logged it (--eval-every), else smoothed training loss (default: 1.25 x the best "
                             "final one among the runs that converged)")
    if notebook:
        _add_notebook_flags(r, c, sw)
    _add_sim(sub, codes)
    if not notebook:
        sub.add_parser("worker", help="run one task of a cluster (see `ssptk worker --help`)", add_help=False)
    for parser in (p, *sub.choices.values()):
        parser.raise_errors = notebook
    p.commands = dict(sub.choices)
    return p


def _add_notebook_flags(run: argparse.ArgumentParser, *comparisons: argparse.ArgumentParser) -> None:
    """The flags only ``%dtrain`` takes: how a run goes in the kernel."""
    for sp in (run, *comparisons):
        sp.add_argument("--cold", action="store_true",
                        help="start new tasks for this run instead of reusing the kernel's warm cluster")
        sp.add_argument("--no-dashboard", action="store_true", help="no live plots while it runs")
    run.add_argument("--background", action="store_true",
                     help="return at once with a live widget; the kernel stays usable (.wait(), .stop())")


def _add_sim(sub: Any, codes: str | None) -> None:
    s = sub.add_parser("sim", help="predict a run with the discrete-event simulator, no cluster: its timing; with "
                                   "--model also its loss (the schedule replayed with the model's real gradients)",
                       description="Without --model: the timing only (steps/s, waiting, skew, staleness), in ms, "
                                   "nothing written. With --model: a predicted run, loss included: the schedule "
                                   "replayed with the model's real gradients in one TensorFlow process (seconds), "
                                   "left in --out like a real run (summary.json says predicted).",
                       epilog=codes)
    add_run_arguments(s, skip=("gpus", "no_log", "layout", "restart_failed", "stall_timeout"))
    s.add_argument("--target", type=float, default=None, metavar="LOSS",
                   help="with --model: also predict the time and minibatches to this loss (held-out with "
                        "--eval-every, else the smoothed training loss)")
    s.add_argument("--overhead", type=float, default=None, metavar="SECONDS", help="fixed per-step cost in seconds: "
                   "a real run's overhead_ms / 1000 from its summary times your machine (default: 0.005, what a step "
                   "of the built-in models costs on a 2-core machine, 2-8 ms; 0 makes undelayed steps take no time)")
    s.add_argument("--gap", type=float, default=None, metavar="SECONDS", help="async, ssp: seconds of --overhead "
                   "between an update landing and the next read (a real run's gap_ms / 1000; default 0)")


def _kwargs(opts: RunOptions) -> dict[str, Any]:
    return {o.name: getattr(opts, o.name) for o in OPTIONS}


# --- run, compare, sweep --------------------------------------------------------------------------------

def run(args: argparse.Namespace, **front: Any) -> RunResult:
    """``run``: one run with the parsed options (:func:`ssptk.api.run`). ``front``: what the front end adds
    (``progress``, ``observer``, ``warm``, ``model_source``)."""
    from ssptk import api

    return api.run(**given_options(args), **front)


@dataclass(frozen=True)
class ComparePlan:
    """A parsed ``compare`` or ``sweep``: its labels, the options common to every run (resolved), and the
    comparison's own options."""

    labels: list[str]
    common: dict[str, Any]
    out: str | None
    repeat: int
    target: float | None
    predict: bool


def compare_plan(args: argparse.Namespace) -> ComparePlan:
    """The plan of a parsed ``compare`` or ``sweep`` command (a sweep's labels are ``ssp:S`` or ``local:H``); bad
    options raise :class:`UsageError`."""
    from ssptk.experiment.compare import common_options
    from ssptk.experiment.sweep import sweep_labels

    labels = (args.labels if args.command == "compare"
              else sweep_labels(args.staleness, args.local_steps, exactly_one="sweep"))
    swept = ("staleness", "local_steps") if args.command == "sweep" else ("staleness",)
    ns = argparse.Namespace(**{k: v for k, v in vars(args).items() if k not in swept})
    common = common_options(labels[0], given_options(ns))  # what the first label sets is its own (async+dc alone)
    return ComparePlan(labels, common, args.out, args.repeat, args.target, args.predict)


def compare(plan: ComparePlan, **front: Any) -> CompareResult:
    """``compare`` and ``sweep``: the planned runs, their table and report (:func:`ssptk.api.compare`).
    ``front``: what the front end adds (``progress``, ``observer``, ``warm``)."""
    from ssptk import api

    return api.compare(plan.labels, out=plan.out, repeat=plan.repeat, target=plan.target, predict=plan.predict,
                       **plan.common, **front)


# --- report ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Report:
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


def report(args: argparse.Namespace, warn: Callable[[str], None] = warning) -> Report:
    """``report``: a comparison's table and report rebuilt from its logs, or one run's summary (read, nothing
    written). ``warn`` hears a line per file of the runs that the report has to do without."""
    import os

    from ssptk.render import load_comparison
    from ssptk.render.tables import terminal_text
    from ssptk.rundir import ComparisonDir, RunDir

    path = args.dir[0]
    rd = RunDir(path)
    if len(args.dir) > 1 or args.gather or rd.from_hosts():
        # several hosts' directories, or the one directory of tasks no launcher of ours started (Slurm on one node)
        return _report_gathered(args.dir, args.gather, warn)
    if os.path.exists(rd.config_path):  # one run: its summary, read; nothing is written
        text = _one_run_summary(rd)  # a run that cannot be summarised at all is one error line, no warnings
        _warn_unreadable([rd.path], warn)
        return Report(text)
    if not os.path.isdir(path):
        raise UsageError(f"{path} is not a directory: give a comparison or run directory")
    cd = ComparisonDir(path)
    _warn_unreadable(cd.run_dirs(), warn, cd.path)
    comparison = load_comparison(cd.path, target=args.target)
    saved = comparison.save(cd.report_path)
    return Report(terminal_text(comparison.table, predicted=comparison.predicted), path=str(saved))


def _report_gathered(dirs: list[str], keep: str | None, warn: Callable[[str], None]) -> Report:
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
    return Report(text, path=rd.report_path, note=f"(merged from {len(sources)} directories into {rd.path})")


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


# --- what a stopped command left -------------------------------------------------------------------------

def recording(into: list[str]) -> contextlib.AbstractContextManager[list[str]]:
    """A ``with`` during which every directory this process claims is appended to ``into``
    (:func:`ssptk.rundir.claim.recording_claims`): what a command had written when a signal stopped it."""
    from ssptk.rundir.claim import recording_claims

    return recording_claims(into)


@dataclass(frozen=True)
class Left:
    """What a command stopped half-way had written: ``run_dir``, the last run directory it claimed (``None``:
    none), whether that run had started (``config.json``), and its ``summary.json``'s status (``None``: none)."""

    run_dir: str | None = None
    started: bool = False
    status: str | None = None


def left_behind(claimed: list[str]) -> Left:
    """:class:`Left` by the directories a command claimed, in order (:func:`recording`): the last one that no
    other lies under (a comparison's last run, not the comparison)."""
    import os

    from ssptk.rundir import RunDir

    runs = [p for p in claimed if not any(q.startswith(os.path.join(p, "")) for q in claimed)]
    if not runs:
        return Left()
    rd = RunDir(runs[-1])
    status = rd.summary().status
    return Left(rd.path, os.path.exists(rd.config_path), status if isinstance(status, str) else None)


# --- sim ------------------------------------------------------------------------------------------------

#: ``sim`` options that only a prediction with a model uses
_TRAINING_ONLY = ("batch", "lr", "lr_convention", "data_split", "eval_every", "lr_staleness", "allow_nan",
                  "stop_on_divergence", "out", "target")


@dataclass(frozen=True)
class Timing:
    """What ``sim`` without a model predicts: the simulator's timing of the run labelled ``label``."""

    label: str
    result: SimResult

    def __str__(self) -> str:
        r, read = self.result, f", its read {1000 * self.result.gap:.2f} ms in (--gap)" if self.result.gap else ""
        return (f"simulated {self.label}: {r.total_steps} minibatches in {r.wall_s:.3f} s = {r.steps_per_s:.1f} "
                f"steps/s, {r.updates_per_s:.1f} updates/s\nmax skew {r.max_skew}, waiting "
                f"{100 * r.wait_fraction:.1f}% of worker time, staleness mean {r.steps['staleness'].mean():.2f} max "
                f"{int(r.steps['staleness'].max())}\nclock: each step {1000 * r.overhead:.2f} ms plus its delays{read} "
                "(--overhead SECONDS: a real run's overhead_ms / 1000 times your machine)")


def sim_options(args: argparse.Namespace) -> RunOptions:
    """The run options of a parsed ``sim``: nothing runs, so no watchdog whose time-out the delays must fit."""
    return from_namespace(args, stall_timeout=0)


def sim(args: argparse.Namespace, progress: Callable[[int, int], None] | None = None) -> Timing | RunResult:
    """``sim``: without ``--model`` the simulator's :class:`Timing` (milliseconds, nothing written); with one,
    the predicted run (:func:`ssptk.api.simulate`, a ``RunResult``), whose ``progress(done, total)`` hears it go."""
    from ssptk import api

    if args.model is None:
        if given := [o for o in _TRAINING_ONLY if getattr(args, o, None) not in (None, False)]:
            raise UsageError(f"--{given[0].replace('_', '-')} needs --model: without one, ssptk sim predicts only "
                             "the timing (add --model linear, keras, digits or your own to predict the loss too)")
        opts = sim_options(args)  # the overhead's default is ssptk.simulate's
        r = api.simulate(opts.mode if opts.mode != "allreduce" else "sync", opts.workers, opts.steps,
                         staleness=opts.staleness, local_steps=opts.local_steps if opts.mode == "local" else None,
                         backup=opts.backup, straggler=opts.stragglers, jitter=opts.jitter,
                         seed=opts.seed, overhead=args.overhead, network=opts.network, ps=opts.ps,
                         cores=opts.cores, gap=args.gap)
        return Timing(opts.label, r)
    return api.simulate(progress=None if progress is None else (lambda job, done, total: progress(done, total)),
                        overhead=args.overhead, target=args.target, gap=args.gap, **_kwargs(sim_options(args)))
