"""The notebook magics: ``%load_ext ssptk`` registers ``%dtrain`` and ``%%dtrain``.

A thin adapter: the line goes to the one parser of the commands (:func:`ssptk.commands.build_parser` with
``notebook=True``; the CLI's too), the work to the same command functions in :mod:`ssptk.commands`, the
live plots to :mod:`ssptk.notebook.dashboard`.
A front end: it imports the layers CONTRIBUTING.md lists for ``notebook/``, and nothing imports it but
``ssptk`` itself.
Runs use the kernel's warm cluster unless ``--cold`` (``ssptk.shutdown()`` ends it).
"""
from __future__ import annotations

import argparse
import ast
import shlex
from typing import Any

from ssptk import commands
from ssptk.core.errors import RunFailed, RunInterrupted, UsageError
from ssptk.notebook.forwarding import Forwarding
from ssptk.rundir import trace  # noqa: F401  (installs --jitter trace:PATH's reader: options are checked here first)


def parse_line(line: str) -> argparse.Namespace | None:
    """Parse a ``%dtrain`` line (``run`` is the default command); ``None`` when it only asked for help."""
    try:
        tokens = shlex.split(line)
    except ValueError as e:
        raise UsageError(f"cannot split the line ({e}): check its quotes") from None
    parser = commands.build_parser(notebook=True)
    if not tokens or (tokens[0] not in parser.commands and tokens[0] not in ("-h", "--help")):
        tokens = ["run", *tokens]
    try:
        return parser.parse_args(tokens)
    except SystemExit:  # --help printed the help
        return None


def help_text() -> str:
    """``%dtrain?``: the magic's usage and the options of each command, from the one parser."""
    parser = commands.build_parser(notebook=True)
    parts = [parser.format_help(), "%%dtrain (cell magic): the cell defines the function named by --model, "
             "which returns an ssptk.ModelSpec; the code is saved as user_model.py in the run directory.\n"]
    for name in ("run", "compare", "sweep"):
        parts.append(f"--- %dtrain {name} ---\n" + parser.commands[name].format_help())
    return "\n".join(parts)


def cell_model_name(cell: str, given: str | None) -> str:
    """The function of a ``%%dtrain`` cell that builds the model: ``--model NAME``, else its only function."""
    try:
        tree = ast.parse(cell)
    except SyntaxError as e:
        raise UsageError(f"the cell has a syntax error on line {e.lineno}: {e.msg}") from None
    names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    if given is not None:
        if given not in names:
            raise UsageError(f"--model {given}: the cell defines no function {given!r} "
                             f"(it defines {', '.join(names) or 'none'})")
        return given
    if len(names) == 1:
        return names[0]
    raise UsageError("the cell must define the model function: name it with --model NAME "
                     f"(functions in the cell: {', '.join(names) or 'none'})")


def dtrain(line: str, cell: str | None = None) -> Any:
    """Run ssptk from a notebook: ``%dtrain [run|compare|sweep] [options]`` (see ``%dtrain --help``).

    Returns the :class:`~ssptk.api.RunResult` (``res = %dtrain ...``), a ``CompareResult``, a sweep
    viewer, or a background run handle (``--background``).
    """
    try:
        return _dtrain(line, cell)
    except UsageError as e:  # shown as one line (UsageError._render_traceback_); the cell fails
        raise UsageError(f"%dtrain: {e}") from None
    except RunFailed as e:
        raise RunFailed(e.failure, e.result) from None
    except _Interrupted as e:  # a run stopped: one line naming where what ran is kept; the cell fails (Run All stops)
        raise RunInterrupted(f"%dtrain: interrupted after {e.followed.done}/{e.followed.total} minibatches; every "
                             f"task was stopped and what ran is kept in {e.followed.run_dir}: "
                             f"%dtrain report {e.followed.run_dir} sums it up") from None
    except KeyboardInterrupt:  # Ctrl-C, the stop button (RunInterrupted) before a run began: one line, the cell fails
        raise RunInterrupted("%dtrain: interrupted; every task was stopped and the logs kept") from None


class _Followed(Forwarding):
    """An observer that notes where a foreground run writes and how far it came, and hands everything on to
    ``inner`` (the dashboard, if any): an interrupted run's message names its directory."""

    def __init__(self, inner: Any = None) -> None:
        super().__init__(inner)
        self.run_dir, self.done, self.total = "", 0, 0

    def started(self, run_dir: str, opts: Any, total: int) -> None:
        self.run_dir, self.total = run_dir, int(total)
        super().started(run_dir, opts, total)

    def records(self, steps: list[dict[str, Any]], events: list[dict[str, Any]], done: int, total: int) -> None:
        self.done, self.total = int(done), int(total)
        super().records(steps, events, done, total)


class _Interrupted(KeyboardInterrupt):
    """A foreground run was stopped after it had claimed its directory (``followed`` says which)."""

    def __init__(self, followed: _Followed) -> None:
        super().__init__()
        self.followed = followed


def _dtrain(line: str, cell: str | None) -> Any:
    args = parse_line(line)
    if args is None:
        return None
    if args.command == "sim":  # res = %dtrain sim --model M ...: the predicted run; without a model, its timing
        if args.model is not None:
            return commands.sim_run(args)
        print(commands.sim(args))
        return None
    if args.command == "report":  # print what the CLI prints; mistakes fail the cell
        print(commands.report(args))
        return None
    if cell is not None and args.command != "run":
        raise UsageError(f"%%dtrain takes a model cell for a single run, not {args.command}: "
                         f"use %dtrain {args.command}")
    dashboards = not args.no_dashboard
    if args.command == "run":
        return _run(args, cell, dashboards)
    result = commands.run_comparison(commands.compare_plan(args), warm=not args.cold,
                              observer=(lambda _label: _dashboard()) if dashboards else None)
    if args.command == "sweep":  # the same runs as `ssptk sweep`, then a slider over them
        from ssptk.notebook.staleness_widgets import from_runs

        return from_runs(result.all_runs, predicted=result.predicted)
    return result


def _run(args: argparse.Namespace, cell: str | None, dashboards: bool) -> Any:
    """``%dtrain run`` (``%%dtrain``: the cell's model): its result, or with ``--background`` its handle."""
    from ssptk.core.option_args import from_namespace, given_options

    model_source = None
    if cell is not None:
        args.model = cell_model_name(cell, args.model)  # None unless --model NAME or --model=NAME
        model_source = cell
    else:
        from_namespace(args)  # bad options fail here, before anything starts
    if args.background:  # options, model, GPUs and --out are checked here, so mistakes fail the cell
        from ssptk.notebook.background import BackgroundRun

        bg = BackgroundRun.start(warm=not args.cold, model_source=model_source, **given_options(args))
        bg.show_now()  # `bg = %dtrain ... --background` shows nothing by itself: an assignment has no result
        return bg
    followed = _Followed(_dashboard() if dashboards else None)
    try:
        return commands.run_one(args, observer=followed, warm=not args.cold, model_source=model_source)
    except KeyboardInterrupt:
        if followed.run_dir:
            raise _Interrupted(followed) from None
        raise


def _dashboard() -> Any:
    from ssptk.notebook.dashboard import LiveDashboard

    return LiveDashboard()


def load_ipython_extension(ipython: Any) -> None:
    """Register ``%dtrain`` / ``%%dtrain`` (``%load_ext ssptk``)."""
    def magic(line: str, cell: str | None = None) -> Any:
        return dtrain(line, cell)

    magic.__doc__ = help_text()
    ipython.register_magic_function(magic, magic_kind="line_cell", magic_name="dtrain")


def unload_ipython_extension(ipython: Any) -> None:
    """``%unload_ext ssptk``: stop the warm clusters."""
    from ssptk.api import shutdown

    shutdown()
