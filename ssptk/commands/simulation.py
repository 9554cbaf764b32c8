"""The ``sim`` command: without ``--model`` the simulator's timing (:func:`sim`, a :class:`Timing`), with one a
predicted run (:func:`sim_run`)."""
from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ssptk.core.errors import UsageError
from ssptk.core.option_args import from_namespace
from ssptk.core.options import OPTIONS, RunOptions

if TYPE_CHECKING:
    from ssptk.experiment.result import RunResult
    from ssptk.sim import SimResult

__all__ = ["Timing", "sim", "sim_options", "sim_run"]


def _kwargs(opts: RunOptions) -> dict[str, Any]:
    return {o.name: getattr(opts, o.field) for o in OPTIONS}


#: ``sim`` options that only a prediction with a model uses
_TRAINING_ONLY = ("batch", "lr", "lr_convention", "data_split", "eval_every", "lr_staleness", "optimizer",
                  "allow_nan", "stop_on_divergence", "out", "target")


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


def sim(args: argparse.Namespace) -> Timing:
    """``sim`` without ``--model``: the simulator's :class:`Timing` (milliseconds, nothing written)."""
    from ssptk.experiment.predicted_runs import timing

    if given := [o for o in _TRAINING_ONLY if getattr(args, o, None) not in (None, False)]:
        raise UsageError(f"--{given[0].replace('_', '-')} needs --model: without one, ssptk sim predicts only "
                         "the timing (add --model linear, keras, digits or your own to predict the loss too)")
    opts = sim_options(args)  # the overhead's default is ssptk.simulate's
    return Timing(opts.label, timing(opts, overhead=args.overhead, gap=args.gap))


def sim_run(args: argparse.Namespace, progress: Callable[[int, int], None] | None = None) -> RunResult:
    """``sim --model``: the predicted run (:func:`ssptk.experiment.predicted_runs.predict_run`), whose
    ``progress(done, total)`` hears it go."""
    from ssptk.experiment.predicted_runs import predict_run

    return predict_run(progress=None if progress is None else (lambda job, done, total: progress(done, total)),
                       overhead=args.overhead, target=args.target, gap=args.gap, **_kwargs(sim_options(args)))
