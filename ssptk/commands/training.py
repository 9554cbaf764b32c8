"""The commands that train: ``run`` (one run) and ``compare`` / ``sweep`` (several, planned by :func:`compare_plan`),
each returning the API's typed result."""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ssptk.core.errors import UsageError
from ssptk.core.option_args import given_options
from ssptk.core.options import RunOptions

if TYPE_CHECKING:
    from ssptk.experiment.compare import CompareResult
    from ssptk.experiment.result import RunResult

__all__ = ["ComparePlan", "compare_plan", "run_comparison", "run_one"]


def run_one(args: argparse.Namespace, **front: Any) -> RunResult:
    """``run``: one run with the parsed options (:func:`ssptk.api.run`). ``front``: what the front end adds
    (``progress``, ``observer``, ``warm``, ``model_source``)."""
    from ssptk import api

    return api.run(**given_options(args), **front)


@dataclass(frozen=True)
class ComparePlan:
    """A parsed ``compare`` or ``sweep``: its labels, each label's run options (resolved once), and the comparison's
    own options."""

    labels: list[str]
    options: dict[str, RunOptions]
    out: str | None
    repeat: int
    target: float | None
    predict: bool


def compare_plan(args: argparse.Namespace) -> ComparePlan:
    """The plan of a parsed ``compare`` or ``sweep`` command (a sweep's labels are ``ssp:S`` or ``local:H``); bad
    options raise :class:`UsageError`."""
    from ssptk.experiment.compare import resolve_labels
    from ssptk.experiment.sweep import sweep_labels

    if args.command == "sweep" and args.mode is not None and args.momentum is None:
        raise UsageError("--mode goes with --momentum: a --staleness sweep runs ssp, a --local-steps sweep local SGD")
    labels = (args.labels if args.command == "compare"
              else sweep_labels(args.staleness, args.local_steps, exactly_one="sweep", momentum=args.momentum,
                                options={"mode": args.mode}))
    swept = ("staleness", "local_steps", "momentum", "mode") if args.command == "sweep" else ("staleness",)
    ns = argparse.Namespace(**{k: v for k, v in vars(args).items() if k not in swept})
    return ComparePlan(labels, resolve_labels(labels, given_options(ns)), args.out, args.repeat, args.target,
                       args.predict)


def run_comparison(plan: ComparePlan, **front: Any) -> CompareResult:
    """``compare`` and ``sweep``: the planned runs, their table and report (:func:`ssptk.api.compare`, of the
    plan's options as resolved). ``front``: what the front end adds (``progress``, ``observer``, ``warm``)."""
    from ssptk.experiment.compare import compare_resolved

    return compare_resolved(plan.options, out=plan.out, repeat=plan.repeat, target=plan.target, predict=plan.predict,
                            **front)
