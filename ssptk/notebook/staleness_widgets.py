"""Interactive staleness sliders for Jupyter: :func:`staleness_explorer` (a slider over SSP's staleness S, or with
``mode="local"`` over local SGD's local steps H; with ``momentum=[...]`` a second one over the explicit momentum: an
:class:`~ssptk.notebook.explorer.Explorer`), :func:`sweep`, :func:`from_runs`. ipywidgets is imported lazily; without it
the widgets raise :class:`UsageError`.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ssptk.core.errors import UsageError
from ssptk.experiment.sweep import KNOBS, local_steps_values, momentum_values, staleness_values, sweep_mode
from ssptk.notebook.explorer import Explorer
from ssptk.notebook.runner import (
    RUNNER_OPTIONS,
    ObserverFactory,
    Runner,
    cache_key,
    default_runner,
    split_runner_options,
)
from ssptk.notebook.sweep_view import SweepResult, from_runs, sweep

__all__ = ["Explorer", "SweepResult", "cache_key", "default_runner", "from_runs", "staleness_explorer", "sweep"]


def staleness_explorer(model: str = "linear", workers: int = 3, straggler: float | str | list[Any] | None = None,
                       staleness: Iterable[int] | None = None, runner: Runner | None = None, *,
                       mode: str | None = None, local_steps: Iterable[int] | None = None,
                       momentum: Iterable[float] | None = None,
                       observer_factory: ObserverFactory | None = None, **run_options: Any) -> Explorer:
    """A staleness slider, a Run button, a status line and an overlay of every run so far (mode ssp, staleness
    0..8); with ``mode="local"`` (or ``local_steps=...``) a slider over local SGD's local steps H between averages
    instead (default 1, 2, 4, 8), its other options (``outer_lr``, ``outer_momentum``) fixed. ``momentum=[0, 0.5,
    0.9]`` adds a slider over the explicit momentum (``--optimizer momentum:BETA``; 0: sgd) beside it: how much
    momentum pays at each staleness.

    ``straggler`` as a number of seconds adds a slider for worker N-1's extra delay per step (0 = none);
    an ``"I:S"`` string or a list of them is a fixed option. ``workers`` has a slider too. Each run is
    cached by its full options (:func:`cache_key`), so coming back to a value shows it with no training.
    ``runner(**options, progress=..., observer=...)`` does a run (default :func:`default_runner`);
    ``observer_factory(label)`` gives each run an observer (a live dashboard). ``run_options`` are
    other ``ssptk.run`` options (``steps``, ``jitter``, ...); ``out`` is a parent folder for the runs.
    Bad options raise :class:`UsageError` here.
    """
    if mode not in (None, *KNOBS):
        raise UsageError(f"the staleness explorer runs mode ssp only (or local SGD: mode='local'), not {mode!r}")
    knob = KNOBS[mode if mode is not None else "local" if local_steps is not None else "ssp"]
    what = "the staleness explorer" if knob.mode == "ssp" else "the local SGD explorer"
    if knob.mode == "ssp":
        if local_steps is not None:
            raise UsageError("local_steps is the local SGD explorer's slider: add mode='local' (and drop staleness)")
        values = staleness_values(range(0, 9) if staleness is None else staleness)
    else:
        if staleness is not None:
            raise UsageError("local SGD has no staleness bound: give local_steps=[1, 2, 4, 8] for its slider")
        values = local_steps_values((1, 2, 4, 8) if local_steps is None else local_steps)
    sweep_mode(run_options, knob, what)
    momenta = None if momentum is None else momentum_values(momentum)
    if momenta is not None and run_options.get("optimizer") not in (None, "sgd"):
        raise UsageError("momentum=[...] is the explorer's slider over --optimizer momentum:BETA: drop optimizer")
    extra = split_runner_options(run_options, what, (*RUNNER_OPTIONS, "out"))
    base: dict[str, Any] = {"model": model, **run_options}
    if isinstance(straggler, (int, float)) and not isinstance(straggler, bool):
        if straggler < 0:
            raise UsageError(f"straggler seconds must be >= 0, got {straggler!r}")
    elif straggler is not None:
        base["straggler"], straggler = straggler, None
    cache_key({**base, "mode": knob.mode, knob.option: values[0], "workers": workers})  # bad options fail here
    return Explorer(values, base, int(workers), None if straggler is None else float(straggler), runner,
                    observer_factory, extra, knob, momenta)
