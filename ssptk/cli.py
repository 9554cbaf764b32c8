"""``ssptk`` on the command line: run, compare, sweep, report, sim and worker.

Front-end layer: the commands themselves, their grammar included, are :mod:`ssptk.commands`' (the ``%dtrain``
magic calls the same); this module parses argv, shows progress, and is the only one that turns results and
errors into text and exit codes.
Exit codes (:data:`ssptk.core.help_text.EXIT_CODES` says them in every command's help): 0 done,
3 (:data:`EXIT_DIVERGED`)
a run (``run``, ``sim --model``) finished but diverged: it did what was asked, but its model is not a trained one,
so a script that chains on success stops there (a comparison exits 0 however many of its runs diverged:
divergence is one of its findings), 1 a run failed (with the reason and the failing task's log tail), 2 bad usage,
128 + the signal's number when SIGINT (130), SIGTERM (143) or SIGHUP (129) stopped it.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
from typing import Any

from ssptk import commands
from ssptk.commands import build_parser
from ssptk.core.errors import DiskFull, RunFailed, RunInterrupted, UsageError, signal_arrived
from ssptk.core.option_args import from_namespace
from ssptk.core.printable import printable

__all__ = ["EXIT_DIVERGED", "StopSignals", "build_parser", "dispatch", "main"]

#: The exit code of a run that finished but diverged (``summary.json``: ``"diverged": true``).
EXIT_DIVERGED = 3


def dispatch(args: argparse.Namespace) -> int:
    """Carry out a parsed command and print its result; user mistakes raise :class:`UsageError`, failed runs
    :class:`RunFailed`."""
    return {"run": _run, "compare": _compare, "sweep": _compare, "report": _report, "sim": _sim}[args.command](args)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["worker"]:
        from ssptk.worker import task_main

        return task_main(argv[1:])
    args = build_parser().parse_args(argv)
    claimed: list[str] = []  # the directories the command claims: what a signal's message says it left
    try:
        with StopSignals(claimed), commands.recording(claimed):
            code = dispatch(args)
            sys.stdout.flush()  # here, not at exit: a closed pipe is then one exit code, not a traceback
            return code
    except UsageError as e:
        print(f"ssptk: error: {printable(str(e))}", file=sys.stderr)  # it may name what a run directory holds
        return 2
    except RunFailed as e:
        _print_failure(e)
        return 1
    except DiskFull as e:
        print(f"ssptk: error: {printable(str(e))}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `ssptk report ... | head`: the reader has what it wanted
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return 128 + int(signal.SIGPIPE)
    except KeyboardInterrupt as e:
        name = getattr(e, "signal", None) or "SIGINT"
        why = "interrupted" if name == "SIGINT" else f"stopped by {name}"
        print(printable(f"ssptk: {why}{_left(args.command, commands.left_behind(claimed))}"), file=sys.stderr)
        return 128 + int(signal.Signals[name])


def _left(command: str, left: commands.Left) -> str:
    """What a command a signal stopped had kept, in words that follow why it stopped."""
    if left.run_dir is None:
        return "" if command == "report" else " before any run started; nothing was written"
    if left.status == "interrupted":
        return f"; every task was stopped, the logs and summary kept in {left.run_dir}"
    if left.status is not None:  # the signal came after the summary was written
        return f" after the run in {left.run_dir} had ended: its summary.json says {left.status}"
    if left.started:
        return f"; every task was stopped, the logs kept in {left.run_dir} (no summary.json was written)"
    return f" before the run started: nothing was written in {left.run_dir} but its claim"


class StopSignals:
    """SIGINT, SIGTERM and SIGHUP end a command the same way: the first raises
    :class:`~ssptk.core.errors.RunInterrupted` naming the signal (the run stops its tasks and writes its
    summary, ``interrupted``); later ones only say that this is under way, so a second Ctrl-C cannot cut
    the summary short, nor the exit code after it (once a signal came, they stay ignored). Outside the
    main thread it does nothing (Python delivers signals there only)."""

    SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")

    def __init__(self, claimed: list[str] | None = None) -> None:
        self.first: str | None = None
        self.saved: dict[int, Any] = {}
        #: the directories the command has claimed so far (None: not known); none yet: no summary to write
        self.claimed = claimed

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for name in self.SIGNALS:
                num = signal.Signals[name]
                self.saved[num] = signal.signal(num, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        signal_arrived(None)
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
            signal_arrived(name)  # in case this raise is lost (see signal_arrived)
            _say(f"\nssptk: {name}: " + ("stopping every task and writing the summary\n" if self.claimed is None
                                         or self.claimed else "stopping; no run has started\n"))
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


def _show(text: object, file: Any = None) -> None:
    """Print ``text`` with what would act on a terminal escaped (:func:`printable`): a result names its
    ``--out``, and a failure quotes a task's log, both of which may hold control characters."""
    print(printable(str(text), keep="\n"), file=file or sys.stdout)


def _print_failure(e: RunFailed) -> None:
    f = e.failure
    _show(f"ssptk: run failed: {f}", sys.stderr)
    if f.log_tail:
        _show(f"last lines of {f.task}'s log:", sys.stderr)
        for line in f.log_tail[-10:]:
            _show(f"  {line}", sys.stderr)
    result = getattr(e, "result", None)
    if result is not None:
        _show(f"logs kept in {result.run_dir}", sys.stderr)


def _run(args: argparse.Namespace) -> int:
    from ssptk.render import ProgressBar

    bar = ProgressBar(f"{from_namespace(args).label} ")  # bad options fail here, before the bar
    try:
        result = commands.run_one(args, progress=bar)
    finally:
        bar.close()
    _show(result)
    return _exit_code(result)


def _exit_code(result: Any) -> int:
    """0 for a run that finished and did not diverge, :data:`EXIT_DIVERGED` for one that diverged."""
    return EXIT_DIVERGED if result.summary.diverged else 0


def _compare(args: argparse.Namespace) -> int:
    plan = commands.compare_plan(args)
    bars = _Bars(max(len(label) for label in plan.labels) + (4 if plan.repeat > 1 else 0))
    try:
        # one warm cluster serves every run (as %dtrain's do): its tasks start once, not once per label, and
        # each run's state is cleared from them before the next; it stops when this process exits
        # (ssptk.launch.warm stops warm clusters at exit)
        result = commands.run_comparison(plan, progress=bars, warm=True)
    finally:
        bars.close()
    _show(result)
    _show(f"\nreport: {result.report_path}")
    failed = {name: r for name, r in result.all_runs.items() if not r.ok}
    failed.update({f"{name} (predicted)": r for name, r in result.predicted.items() if not r.ok})
    for name, r in failed.items():
        _show(f"ssptk: {name} failed: {r.summary.reason}", sys.stderr)
    return 1 if failed else 0


class _Bars:
    """A progress line per run of a comparison (its cluster's start, then its minibatches), one under the
    other, their labels ``width`` wide."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.bars: dict[str, Any] = {}

    def bar(self, label: str) -> Any:
        from ssptk.render import ProgressBar

        if label not in self.bars:
            self.close()
            self.bars[label] = ProgressBar(f"{label:>{self.width}} ")
        return self.bars[label]

    def __call__(self, label: str, done: int, total: int) -> None:
        self.bar(label)(done, total)

    def starting(self, label: str, ready: list[str], pending: list[str]) -> None:
        self.bar(label).starting(ready, pending)

    def close(self) -> None:
        for b in self.bars.values():
            b.close()


def _report(args: argparse.Namespace) -> int:
    print(commands.report(args))
    return 0


def _sim(args: argparse.Namespace) -> int:
    if args.model is None:
        _show(commands.sim(args))
        return 0
    from ssptk.render import ProgressBar

    bar = ProgressBar(f"{commands.sim_options(args).label} (predicting) ")
    try:
        result = commands.sim_run(args, bar)
    finally:
        bar.close()
    _show(result)
    return _exit_code(result)


if __name__ == "__main__":
    sys.exit(main())
