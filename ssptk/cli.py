"""``ssptk`` on the command line: run, compare, sweep, report, sim and worker. A thin layer over :mod:`ssptk.api`.

Front-end layer: :func:`build_parser` is the one grammar of every command, which the ``%dtrain`` magic
reuses; only this module turns results and errors into text and exit codes.
Exit codes: 0 ok, 1 the run failed (with the reason and the failing task's log tail), 2 bad usage, 128 + the
signal's number when SIGINT (130), SIGTERM (143) or SIGHUP (129) stopped it.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ssptk.core.errors import DiskFull, RunFailed, RunInterrupted, UsageError
from ssptk.core.options import OPTIONS, add_run_arguments, from_namespace

NOTEBOOK_EXAMPLES = """examples:
  %dtrain --model keras --mode ssp --staleness 4 --workers 3 --steps 500 --straggler 2:0.02
  res = %dtrain --mode async --workers 3 --steps 300     (res.df: the step records)
  %dtrain compare sync ssp:2 ssp:8 async --workers 3 --steps 300 --jitter exp:0.02
  %dtrain sweep --staleness 0,1,2,4,8 --workers 3 --steps 300 --straggler 2:0.02
  %%dtrain --model my_model ...     (the cell defines def my_model() -> ssptk.ModelSpec)
"""

EXAMPLES = """examples:
  ssptk run --model linear --mode ssp --staleness 2 --workers 3 --steps 300 --straggler 2:0.02
  ssptk compare sync ssp:2 ssp:8 async --workers 3 --steps 300 --jitter exp:0.02 --out runs/cmp
  ssptk compare sync ssp:2 async --repeat 3 --workers 3 --steps 300 --straggler 2:0.02
  ssptk sweep --staleness 0,1,2,4,8 --workers 3 --steps 300 --straggler 2:0.02
  ssptk report runs/cmp
  ssptk sim --mode ssp --staleness 2 --workers 3 --steps 2000 --jitter exp:0.02
"""


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
    """``"0,1,2,4,8"`` -> ``[0, 1, 2, 4, 8]``: a sweep's staleness values
    (:func:`ssptk.experiment.sweep.staleness_values`)."""
    from ssptk.experiment.sweep import staleness_values

    try:
        return staleness_values(text)
    except UsageError:
        raise argparse.ArgumentTypeError(f"invalid staleness list {text!r}: use integers >= 0 like 0,1,2,4,8") from None


def build_parser(notebook: bool = False) -> _Parser:
    """The one grammar of ssptk's commands. ``notebook``: the ``%dtrain`` magic's flavour, whose
    ``run``, ``compare`` and ``sweep`` also take the notebook's own flags, and whose errors raise."""
    prog = "%dtrain" if notebook else "ssptk"
    p = _Parser(prog=prog, description="Sync, SSP and async distributed training, side by side.",
                epilog=EXAMPLES if not notebook else NOTEBOOK_EXAMPLES,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    r = sub.add_parser("run", help="train one model in one mode on a local cluster" +
                       (" (the default command)" if notebook else ""))
    add_run_arguments(r)
    c = sub.add_parser("compare", help="run several modes with the same options and write a report",
                       description="Run each mode in turn into OUT/<label>/, then write OUT/metrics.csv and "
                                   "OUT/report.html. With --repeat R: R rounds, alternating the order, into "
                                   "OUT/<label>/rep-<k>/; the table shows mean [min-max].")
    c.add_argument("labels", nargs="+", metavar="MODE",
                   help="sync, ssp:S, async, allreduce; ssp:S+inverse or async+inverse: with --lr-staleness inverse")
    add_run_arguments(c, skip=("mode", "staleness"))
    sw = sub.add_parser("sweep", help="run SSP once per staleness value and compare them",
                        description="Run --mode ssp once per --staleness value into OUT/ssp-<S>/, then write "
                                    "OUT/metrics.csv and OUT/report.html (in a notebook: a slider over the runs).")
    sw.add_argument("--staleness", type=staleness_list, required=True, metavar="S,S,...",
                    help="the staleness values to run, e.g. 0,1,2,4,8")
    add_run_arguments(sw, skip=("mode", "staleness"))
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
                     help="with several run directories: keep the merged run directory here (default: a temporary "
                          "one, removed after the report)")
    for sp in (c, sw, rep):
        sp.add_argument("--target", type=float, default=None, metavar="LOSS",
                        help="the loss that time and minibatches to target are measured to: held-out when every "
                             "run logged it (--eval-every), else smoothed training loss (default: 1.25 x the best "
                             "final one among the runs that converged)")
    if notebook:
        for sp in (r, c, sw):
            sp.add_argument("--cold", action="store_true",
                            help="start new tasks for this run instead of reusing the kernel's warm cluster")
            sp.add_argument("--no-dashboard", action="store_true", help="no live plots while it runs")
        r.add_argument("--background", action="store_true",
                       help="return at once with a live widget; the kernel stays usable (.wait(), .stop())")
    s = sub.add_parser("sim", help="predict a run with the discrete-event simulator, no cluster: its timing; with "
                                   "--model also its loss (the schedule replayed with the model's real gradients)",
                       description="Without --model: the timing only (steps/s, waiting, skew, staleness), in "
                                   "milliseconds, nothing written. With --model: a predicted run, loss included: "
                                   "the schedule replayed with the model's real gradients in one TensorFlow process "
                                   "(seconds), left in --out like a real run (summary.json says predicted).")
    add_run_arguments(s, skip=("gpus", "no_log", "layout", "restart_failed", "stall_timeout"))
    s.add_argument("--target", type=float, default=None, metavar="LOSS",
                   help="with --model: also predict the time and minibatches to this loss (held-out with "
                        "--eval-every, else the smoothed training loss)")
    s.add_argument("--overhead", type=float, default=None, metavar="SECONDS",
                   help="fixed per-step cost, e.g. a real run's overhead_ms / 1000 from its summary (default: 0; "
                        "with --model 0.005)")
    if not notebook:
        sub.add_parser("worker", help="run one task of a cluster (see `ssptk worker --help`)", add_help=False)
    for parser in (p, *sub.choices.values()):
        parser.raise_errors = notebook
    p.commands = dict(sub.choices)
    return p


def dispatch(args: argparse.Namespace) -> int:
    """Carry out a parsed command; user mistakes raise :class:`UsageError`, failed runs :class:`RunFailed`."""
    return {"run": _run, "compare": _compare, "sweep": _compare, "report": _report, "sim": _sim}[args.command](args)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["worker"]:
        from ssptk.worker import main as worker_main

        return worker_main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        with StopSignals():
            return dispatch(args)
    except UsageError as e:
        print(f"ssptk: error: {e}", file=sys.stderr)
        return 2
    except RunFailed as e:
        _print_failure(e)
        return 1
    except DiskFull as e:
        print(f"ssptk: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:
        name = getattr(e, "signal", None) or "SIGINT"
        why = "interrupted" if name == "SIGINT" else f"stopped by {name}"
        print(f"ssptk: {why}; every task was stopped, the logs and summary kept", file=sys.stderr)
        return 128 + int(signal.Signals[name])


class StopSignals:
    """SIGINT, SIGTERM and SIGHUP end a command the same way: the first raises
    :class:`~ssptk.core.errors.RunInterrupted` naming the signal (the run stops its tasks and writes its
    summary, ``interrupted``); later ones only say that this is under way, so a second Ctrl-C cannot cut
    the summary short, nor the exit code after it (once a signal came, they stay ignored). Outside the
    main thread it does nothing (Python delivers signals there only)."""

    SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")

    def __init__(self) -> None:
        self.first: str | None = None
        self.saved: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for name in self.SIGNALS:
                num = signal.Signals[name]
                self.saved[num] = signal.signal(num, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.first is not None:
            # Ending because of a signal, with the summary written: later ones are ignored, at the C level,
            # because Python's finalisation resets Python-level handlers and a late SIGINT would kill us.
            for num in self.saved:
                signal.signal(num, signal.SIG_IGN)
            return
        for num, old in self.saved.items():
            signal.signal(num, old)

    def _handle(self, signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        if self.first is None:
            self.first = name
            _say(f"\nssptk: {name}: stopping every task and writing the summary\n")
            raise RunInterrupted(f"stopped by {name}", signal=name)
        _say(f"\nssptk: {name}: already stopping (after {self.first}); the summary is being written\n")


def _say(text: str) -> None:
    """Write to stderr from a signal handler: straight to the file descriptor, because the handler may run
    while the progress bar is inside a write to ``sys.stderr`` (a buffered stream refuses re-entry)."""
    try:
        sys.stderr.flush()
    except (OSError, RuntimeError, ValueError):
        pass
    try:
        os.write(sys.stderr.fileno(), text.encode())
    except (OSError, ValueError, AttributeError):
        pass


def _print_failure(e: RunFailed) -> None:
    f = e.failure
    print(f"ssptk: run failed: {f}", file=sys.stderr)
    if f.log_tail:
        print(f"last lines of {f.task}'s log:", file=sys.stderr)
        for line in f.log_tail[-10:]:
            print(f"  {line}", file=sys.stderr)
    result = getattr(e, "result", None)
    if result is not None:
        print(f"logs kept in {result.run_dir}", file=sys.stderr)


def _run(args: argparse.Namespace) -> int:
    from ssptk.api import run
    from ssptk.render import ProgressBar

    opts = from_namespace(args)
    bar = ProgressBar(f"{opts.label} ")
    try:
        result = run(progress=bar, **_kwargs(opts))
    finally:
        bar.close()
    print(result)
    return 0


def _kwargs(opts: Any) -> dict[str, Any]:
    return {o.name: getattr(opts, o.name) for o in OPTIONS}


def compare_plan(args: argparse.Namespace) -> tuple[list[str], dict[str, Any]]:
    """The labels and common options of a parsed ``compare`` or ``sweep`` command."""
    from ssptk.experiment.sweep import sweep_labels

    labels = args.labels if args.command == "compare" else sweep_labels(args.staleness)
    ns = argparse.Namespace(**{k: v for k, v in vars(args).items() if k != "staleness"})
    # parsed with the first label's mode, so a message names a mode the user gave; compare() checks
    # every label before it starts
    opts = from_namespace(ns, mode=labels[0])
    common = {k: v for k, v in _kwargs(opts).items() if k not in ("mode", "staleness", "out")}
    return labels, common


def _compare(args: argparse.Namespace) -> int:
    from ssptk.api import compare
    from ssptk.render import ProgressBar

    labels, common = compare_plan(args)
    width = max(len(label) for label in labels) + (4 if args.repeat > 1 else 0)

    class Bars:
        """A progress line per run (its cluster's start, then its minibatches), one under the other."""

        def __init__(self) -> None:
            self.bars: dict[str, ProgressBar] = {}

        def bar(self, label: str) -> ProgressBar:
            if label not in self.bars:
                self.close()
                self.bars[label] = ProgressBar(f"{label:>{width}} ")
            return self.bars[label]

        def __call__(self, label: str, done: int, total: int) -> None:
            self.bar(label)(done, total)

        def starting(self, label: str, ready: list[str], pending: list[str]) -> None:
            self.bar(label).starting(ready, pending)

        def close(self) -> None:
            for b in self.bars.values():
                b.close()

    bars = Bars()
    try:
        result = compare(labels, out=args.out, progress=bars, repeat=args.repeat, target=args.target,
                         predict=args.predict, **common)
    finally:
        bars.close()
    print(result)
    print(f"\nreport: {result.report_path}")
    failed = {name: r for name, r in result.all_runs.items() if not r.ok}
    for name, r in failed.items():
        print(f"ssptk: {name} failed: {r.summary.get('reason')}", file=sys.stderr)
    return 1 if failed else 0


def _report(args: argparse.Namespace) -> int:
    import os

    from ssptk.render import load_comparison
    from ssptk.render.tables import terminal_text
    from ssptk.rundir import RunDir

    if len(args.dir) > 1 or args.gather:
        return _report_gathered(args.dir, args.gather)
    args.dir = args.dir[0]
    rd = RunDir(args.dir)
    if os.path.exists(rd.config_path):  # one run: its summary, read; nothing is written
        text = _one_run_summary(rd)  # a run that cannot be summarised at all is one error line, no warnings
        _warn_unreadable([rd.path])
        print(text)
        return 0
    if not os.path.isdir(args.dir):
        raise UsageError(f"{args.dir} is not a directory: give a comparison or run directory")
    _warn_unreadable(sorted({str(p.parent) for p in Path(args.dir).rglob("*") if p.name in ("config.json", "workers")}))
    report = load_comparison(args.dir, target=args.target)
    path = report.save(os.path.join(args.dir, "report.html"))
    print(terminal_text(report.table, predicted=report.predicted))
    print(f"\nreport: {path}")
    return 0


def _report_gathered(dirs: list[str], keep: str | None) -> int:
    """One run written on several hosts: merge the directories (:func:`ssptk.rundir.gather.gather`), then
    summarise the merged run; the sources are only read."""
    import shutil
    import tempfile

    from ssptk.rundir.gather import gather

    dest = keep or tempfile.mkdtemp(prefix="ssptk-gathered-")
    try:
        rd = gather(dirs, dest)
        _warn_unreadable([rd.path])
        print(_one_run_summary(rd))
        print(f"(merged from {len(dirs)} directories" + (f" into {keep})" if keep else ")"))
    finally:
        if keep is None:
            shutil.rmtree(dest, ignore_errors=True)
    return 0


def _warn_unreadable(run_dirs: list[str]) -> None:
    """One line on stderr per file of these runs that the report has to do without."""
    from ssptk.rundir.check import unreadable

    for run_dir in run_dirs:
        for line in unreadable(run_dir):
            print(f"ssptk: warning: {line}", file=sys.stderr)


def _one_run_summary(rd: Any) -> str:
    """The text of one run's summary: ``summary.json`` as the run wrote it, or, for a run without one (its
    tasks started by hand, its launcher killed), computed from the logs in memory."""
    from ssptk.experiment.finish import summary_from_logs
    from ssptk.render import format_summary

    stored = rd.summary()
    if stored:
        return format_summary(stored)
    return format_summary(summary_from_logs(rd.path)) + \
        "\n(computed from the logs: the run has no summary.json; nothing was written)"


#: ``ssptk sim`` options that only a prediction with a model uses
_TRAINING_ONLY = ("batch", "lr", "lr_convention", "data_split", "eval_every", "lr_staleness", "allow_nan",
                  "stop_on_divergence", "out")


def _sim(args: argparse.Namespace) -> int:
    from ssptk.sim import simulate

    if args.model is not None:
        return _predict(args)
    given = [o for o in (*_TRAINING_ONLY, "target") if getattr(args, o, None) not in (None, False)]
    if given:
        raise UsageError(f"--{given[0].replace('_', '-')} needs --model: without one, ssptk sim predicts only the "
                         "timing (add --model linear, keras, digits or your own to predict the loss too)")
    opts = from_namespace(args, stall_timeout=0)  # nothing runs: no watchdog whose timeout the delays must fit
    r = simulate(opts.mode if opts.mode != "allreduce" else "sync", opts.workers, opts.steps, staleness=opts.staleness,
                 backup=opts.backup, straggler=opts.stragglers, jitter=opts.jitter, seed=opts.seed,
                 overhead=args.overhead or 0.0)
    print(f"simulated {opts.label}: {r.total_steps} minibatches in {r.wall_s:.3f} s = {r.steps_per_s:.1f} steps/s, "
          f"{r.updates_per_s:.1f} updates/s\nmax skew {r.max_skew}, waiting {100 * r.wait_fraction:.1f}% of worker "
          f"time, staleness mean {r.steps['staleness'].mean():.2f} max {int(r.steps['staleness'].max())}")
    return 0


def predicted_run(args: argparse.Namespace, progress: Callable[[int, int], None] | None = None) -> Any:
    """The predicted run of a parsed ``sim --model M ...`` (``ssptk sim``, ``%dtrain sim``): a RunResult."""
    from ssptk.api import simulate

    opts = from_namespace(args, stall_timeout=0)
    return simulate(progress=None if progress is None else (lambda job, done, total: progress(done, total)),
                    overhead=args.overhead, target=args.target, **_kwargs(opts))


def _predict(args: argparse.Namespace) -> int:
    """``ssptk sim --model M ...``: a predicted run (its directory, its summary)."""
    from ssptk.render import ProgressBar

    bar = ProgressBar(f"{from_namespace(args, stall_timeout=0).label} (predicting) ")
    try:
        result = predicted_run(args, bar)
    finally:
        bar.close()
    print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
