"""The one grammar of ssptk's commands (:func:`build_parser`), for the CLI and the ``%dtrain`` magic alike: every
run option from :data:`ssptk.core.options.OPTIONS`, and each command's own."""
from __future__ import annotations

import argparse
from typing import Any

from ssptk.core.errors import UsageError
from ssptk.core.help_text import EXAMPLES, EXIT_CODES, NOTEBOOK_EXAMPLES, PLATFORMS
from ssptk.core.option_args import add_run_arguments

__all__ = ["build_parser", "local_steps_list", "momentum_list", "staleness_list"]


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


def momentum_list(text: str) -> list[float]:
    """``"0,0.5,0.9"`` -> ``[0.0, 0.5, 0.9]``: a sweep's momenta (:func:`ssptk.experiment.sweep.momentum_values`)."""
    from ssptk.experiment.sweep import momentum_values

    try:
        return momentum_values(text)
    except UsageError:
        raise argparse.ArgumentTypeError(f"invalid momentum list {text!r}: use numbers in [0, 1) like 0,0.5,0.9"
                                         ) from None


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
    sw = sub.add_parser("sweep", help="run SSP once per staleness value (or local SGD once per H, or a mode once per "
                                      "momentum) and compare them",
                        description="Run --mode ssp once per --staleness value into OUT/ssp-<S>/, --mode local "
                                    "once per --local-steps value into OUT/local-<H>/, or --mode MODE once per "
                                    "--momentum value into OUT/MODE.momentum-<B>/ (give one of the three), then "
                                    "write OUT/metrics.csv and OUT/report.html (in a notebook: a slider over the "
                                    "runs).",
                        epilog=codes)
    sw.add_argument("--staleness", type=staleness_list, default=None, metavar="S,S,...",
                    help="the staleness values to run (mode ssp), e.g. 0,1,2,4,8")
    sw.add_argument("--local-steps", type=local_steps_list, default=None, metavar="H,H,...",
                    help="local SGD: the local steps between averages to run (mode local), e.g. 1,2,4,8; "
                         "--outer-lr and --outer-momentum apply to every run")
    sw.add_argument("--momentum", type=momentum_list, default=None, metavar="B,B,...",
                    help="the explicit momenta to run (--optimizer momentum:B; 0: sgd), each in --mode, e.g. "
                         "0,0.5,0.9: labels async, async\u00b7momentum:0.5, ...")
    sw.add_argument("--mode", default=None, metavar="MODE",
                    help="with --momentum: the mode of every run (sync, ssp:S, async, allreduce, local:H; default "
                         "async)")
    add_run_arguments(sw, skip=("mode", "staleness", "local_steps", "optimizer"))
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
