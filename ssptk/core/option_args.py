"""The run options' command-line form: their arguments on a parser (:func:`add_run_arguments`, help and defaults
from :data:`ssptk.core.options.OPTIONS`), the options parsed arguments give (:func:`given_options`,
:func:`from_namespace`), and the arguments that give a :class:`~ssptk.core.options.RunOptions` back (:func:`to_argv`:
how workers are started with the same options). Imports core only."""
from __future__ import annotations

import argparse
from typing import Any

from ssptk.core.options import OPTIONS, RunOptions, resolve

__all__ = ["add_run_arguments", "from_namespace", "given_options", "to_argv"]


def add_run_arguments(parser: argparse.ArgumentParser, skip: tuple[str, ...] = ()) -> None:
    """Add every run option to ``parser``; help text comes from :data:`OPTIONS`."""
    for o in OPTIONS:
        if o.name in skip:
            continue
        flag = "--" + o.name.replace("_", "-")
        if o.flag:
            parser.add_argument(flag, dest=o.name, action="store_true", help=o.help)
        elif o.repeat:
            parser.add_argument(flag, dest=o.name, action="append", metavar=o.metavar, help=o.help, default=None)
        else:
            default = f" (default: {o.default})" if o.default is not None else ""
            parser.add_argument(flag, dest=o.name, type=o.type, metavar=o.metavar, default=None,
                                help=o.help + default)


def given_options(ns: argparse.Namespace) -> dict[str, Any]:
    """The run options set in parsed arguments, as keyword arguments (those left unset are absent)."""
    return {o.name: getattr(ns, o.name) for o in OPTIONS if getattr(ns, o.name, None) is not None}


def from_namespace(ns: argparse.Namespace, **override: Any) -> RunOptions:
    """Resolve :class:`RunOptions` from parsed arguments (unset ones take their defaults)."""
    kw = given_options(ns)
    kw.update({k: v for k, v in override.items() if v is not None})
    return resolve(**kw)


def to_argv(o: RunOptions) -> list[str]:
    """The command-line form of ``o`` (used to start workers with the same options)."""
    argv: list[str] = []
    for opt in OPTIONS:
        value = getattr(o, opt.field)
        flag = "--" + opt.name.replace("_", "-")
        if opt.flag:
            if value:
                argv.append(flag)
        elif opt.repeat:
            for i, s in value:
                argv += [flag, f"{i}:{s!r}"]
        elif value is not None:
            argv += [flag, str(value)]
    return argv
