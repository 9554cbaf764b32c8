""""Asynchrony begets momentum", measured (:func:`implicit_momentum`): real async runs of the linear model with a few
workers, predicted ones up to 64, each's implicit momentum beside the paper's ``1 - 1/N``, and the explicit momentum
that trains best at each size. The estimators are :mod:`ssptk.analysis.implicit_momentum`'s."""
from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ssptk.analysis.implicit_momentum import (
    MomentumFit,
    Trajectory,
    equivalent_momentum,
    excess_loss,
    fit_momentum,
    implicit_table,
    linear_trajectory,
    momentum_scan,
    settle_updates,
)
from ssptk.core.errors import UsageError
from ssptk.experiment import single
from ssptk.experiment.result import RunResult
from ssptk.rundir import RunDir

__all__ = ["BETAS", "ImplicitMomentum", "implicit_momentum"]

#: the explicit momenta scanned for the best one at each size
BETAS = (0.0, 0.25, 0.5, 0.7, 0.8, 0.9, 0.95)


@dataclass
class ImplicitMomentum:
    """What :func:`implicit_momentum` measured. ``table``: one row per worker count (``paper`` = 1 - 1/N, ``mu``: the
    predicted runs' displacement fit, ``mu_real``: the real runs', ``equivalent`` and ``equivalent_real``: the
    equivalent momentum, ``settle`` and ``settle_real``: updates to the target, ``best_beta``: the explicit momentum
    that settles first; see
    :func:`ssptk.analysis.implicit_momentum.implicit_table`). ``scan``: every predicted (workers, beta) pair's
    ``settle`` and ``mu``. ``runs``: the real runs by worker count; ``replay_error``: by worker count, the largest
    distance between a real run's final parameters and its replayed ones (how faithfully its records give its
    trajectory)."""

    table: pd.DataFrame
    scan: pd.DataFrame
    out: str
    runs: dict[int, list[RunResult]] = field(default_factory=dict)
    replay_error: dict[int, float] = field(default_factory=dict)

    def __str__(self) -> str:
        shown = self.table.copy()
        return shown.to_string(index=False, float_format=lambda v: f"{v:.3g}", na_rep="-")


def _real(workers: Sequence[int], seeds: int, lr: float, updates: int, target: float, out: str,
          progress: Callable[[str], None] | None) -> tuple[dict[int, MomentumFit], dict[int, list[RunResult]],
                                                           dict[int, float], dict[int, float]]:
    """Real async runs of the linear model: their fits (in the stationary phase), runs, replay errors, settles."""
    fits: dict[int, MomentumFit] = {}
    runs: dict[int, list[RunResult]] = {}
    errors: dict[int, float] = {}
    settles: dict[int, float] = {}
    for n in workers:
        trajectories: list[Trajectory] = []
        runs[n] = []
        for seed in range(seeds):
            if progress is not None:
                progress(f"real async, {n} workers, seed {seed}")
            r = single.run(mode="async", model="linear", workers=n, steps=max(1, updates // n), lr=lr, seed=seed,
                           gpus="none", out=os.path.join(out, f"real-{n}-seed-{seed}"))
            runs[n].append(r)
            t = linear_trajectory(r.df, r.options)
            trajectories.append(t)
            final = RunDir(r.run_dir).final().params
            if final:
                errors[n] = max(errors.get(n, 0.0), float(np.max(np.abs(t.versions[-1] - [final["w"], final["b"]]))))
        settles[n] = settle_updates([excess_loss(t.versions) for t in trajectories], target)
        skip = int(settles[n]) if np.isfinite(settles[n]) else 0
        fits[n] = fit_momentum(trajectories, skip=skip)
    return fits, runs, errors, settles


def implicit_momentum(real: Sequence[int] = (2, 4, 8), predicted: Sequence[int] = (1, 2, 4, 8, 16, 32, 64),
                      lr: float = 0.01, updates: int = 4096, seeds: int = 3, real_seeds: int = 2,
                      betas: Sequence[float] = BETAS, jitter: str | None = None, target: float = 0.1,
                      out: str | None = None, progress: Callable[[str], None] | None = None) -> ImplicitMomentum:
    """Measure the implicit momentum of asynchronous SGD on the linear model (see
    :mod:`ssptk.analysis.implicit_momentum`): ``real`` worker counts run for real (``real_seeds`` runs each, about
    ``updates`` updates, ``lr`` per update, into ``out``), ``predicted`` ones predicted (``seeds`` runs of every
    explicit momentum in ``betas``; ``jitter``: the workers' random delays, ``exp:MEAN`` for the paper's queueing
    model). ``target``: the excess loss (initially 104) a run must stay below to have settled."""
    predicted = sorted({1, *predicted})  # one worker: the curve the equivalent momentum is read from
    if not 0 < lr < 1 or updates < 64 or seeds < 1:
        raise UsageError(f"implicit_momentum needs 0 < lr < 1, updates >= 64 and seeds >= 1, got {lr}, {updates}, "
                         f"{seeds}")
    base = RunDir.create(out, "implicit-momentum").path
    if progress is not None:
        progress(f"predicted async, {len(predicted)} sizes x {len(betas)} momenta x {seeds} seeds")
    scan = momentum_scan(predicted, betas, lr, updates, seeds, jitter=jitter, target=target)
    fits, runs, errors, settles = _real(real, real_seeds, lr, updates, target, base, progress) if real else ({}, {},
                                                                                                              {}, {})
    table = implicit_table(scan, fits)
    for n in sorted(set(real) - set(table["workers"])):
        table = pd.concat([table, pd.DataFrame([{"workers": n, "paper": 1.0 - 1.0 / n, "mu_real": fits[n].mu}])])
    one = scan[scan["workers"] == 1].sort_values("beta")
    table["settle_real"] = [settles.get(int(n)) for n in table["workers"]]
    table["equivalent_real"] = [None if int(n) not in settles else
                                equivalent_momentum(settles[int(n)], list(one["beta"]), list(one["settle"]))
                                for n in table["workers"]]
    table = table.sort_values("workers").reset_index(drop=True)
    return ImplicitMomentum(table=table, scan=scan, out=base, runs=runs, replay_error=errors)
