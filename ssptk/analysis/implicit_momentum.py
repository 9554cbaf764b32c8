"""The momentum a run's updates behave as if they had: "asynchrony begets momentum" (Mitliagkas, Zhang, Hadjis and Ré
2016, arXiv 1605.09774), measured.

Their argument: where each update comes from a worker picked at random (exponential compute times, M workers), an
update's staleness is geometric, ``P(tau = l) = (1 - mu) mu^l`` with ``mu = 1 - 1/M``, and *in expectation* the
iterates of asynchronous SGD follow momentum SGD: ``E[w_{t+1} - w_t] = mu E[w_t - w_{t-1}] - (1 - mu) lr
E[grad f(w_t)]``. So asynchrony would add an implicit momentum of about ``1 - 1/M`` to the optimizer's own.

Two measurements of it, each on the parameters after every update (:func:`linear_trajectory`):

**The displacement fit** (:func:`fit_momentum`): least squares over the run, pooled over every parameter (and over
runs), of ``w_{t+1} - w_t = mu (w_t - w_{t-1}) - eta g_t + e_t``, ``g_t`` the full (expected) gradient at ``w_t``.
Why it is a sound estimator: for momentum SGD with ``beta`` (``a_t = beta a_{t-1} + g'_t``, ``w_{t+1} = w_t - lr
a_t``) the relation holds on every path with ``mu = beta``, ``eta = lr`` and ``e_t = -lr (g'_t - g_t)``, the
minibatch's noise, independent of ``w_t - w_{t-1}`` and ``g_t`` (both fixed before the minibatch is drawn), so least
squares recovers ``beta`` without bias (tests: 0.5 and 0.9 within 0.03 from 2000 updates). It measures how much of
each displacement carries into the next. For an asynchronous run it says how much of that the staleness makes.

**The equivalent momentum** (:func:`equivalent_momentum`): the explicit momentum with which one worker's momentum SGD
at the same learning rate reaches the loss target in as many updates as the run does (on the expected loss, averaged
over seeds): what asynchrony is worth in convergence, in momentum's units. Where both are near ``1 - 1/M``, the
run behaves as the paper says; where not, it does not, and ``docs/findings/index.md`` says which.

**The trajectory.** Real runs do not log their parameters; their step records hold what each update applied (the
worker, its minibatch, its staleness, its global step). For the linear model (two scalars, its gradient in closed
form, its expected loss ``(w - 2)^2 + (b - 10)^2`` above the noise) :func:`linear_trajectory` replays a run's
records as the PS applied them (:func:`ssptk.sim.replay.replay`, each gradient at the version it was read at, with
the run's optimizer) and gives the parameters after every update; the same for a predicted run's schedule.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ssptk.core.errors import UsageError
from ssptk.core.models import data_source, linear
from ssptk.core.optimizers import learning_rate, parse_optimizer
from ssptk.sim.replay import Params, replay

__all__ = ["LinearOracle", "MomentumFit", "Trajectory", "equivalent_momentum", "excess_loss", "fit_momentum",
           "implicit_table", "linear_trajectory", "momentum_scan", "paper_momentum", "predicted_trajectory",
           "settle_updates"]

#: the linear model's optimum (y = 2x + 10 + noise)
OPTIMUM = (2.0, 10.0)


@dataclass(frozen=True)
class MomentumFit:
    """A least-squares fit of ``w_{t+1} - w_t = mu (w_t - w_{t-1}) - eta g_t``: ``mu``, ``eta``, ``r2`` (the fraction
    of the displacements' variance it explains) and ``updates`` (displacements fitted)."""

    mu: float
    eta: float
    r2: float
    updates: int


@dataclass(frozen=True)
class Trajectory:
    """A run's parameters after every update (``versions``, ``updates + 1`` rows, ``w_0`` first) and the expected
    gradient at each (``gradients``), with the learning rate its updates applied (``lr``)."""

    versions: np.ndarray
    gradients: np.ndarray
    lr: float


def paper_momentum(workers: int) -> float:
    """The queueing model's implicit momentum for ``workers`` asynchronous workers: ``1 - 1/M``."""
    return 1.0 - 1.0 / workers


def fit_momentum(runs: Iterable[Trajectory] | Trajectory, skip: int = 0) -> MomentumFit:
    """The displacement fit (see the module docstring) of one run, or pooled over several (each run's own
    displacements, never one run's last beside another's first). ``skip``: leave each run's first displacements out
    (a start-up transient)."""
    ys, xs = [], []
    for run in [runs] if isinstance(runs, Trajectory) else list(runs):
        w = np.asarray(run.versions, np.float64).reshape(len(run.versions), -1)
        g = np.asarray(run.gradients, np.float64).reshape(len(run.gradients), -1)
        d = np.diff(w, axis=0)  # d[t] = w_{t+1} - w_t
        if len(d) < skip + 3:
            continue
        ys.append(d[1 + skip:].ravel())  # w_{t+1} - w_t for t = 1 + skip ...
        xs.append(np.stack([d[skip:-1].ravel(), -g[1 + skip:len(d)].ravel()], axis=1))  # w_t - w_{t-1}, -g_t
    if not ys:
        raise UsageError(f"fitting a momentum needs runs of at least {skip + 3} updates")
    y, a = np.concatenate(ys), np.concatenate(xs)
    coef, *_ = np.linalg.lstsq(a, y, rcond=None)
    total = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum((y - a @ coef) ** 2)) / total if total > 0 else float("nan")
    return MomentumFit(mu=float(coef[0]), eta=float(coef[1]), r2=r2, updates=sum(len(x) for x in xs) // w.shape[1])


def excess_loss(versions: np.ndarray) -> np.ndarray:
    """The linear model's expected loss above its noise floor at each version: ``(w - 2)^2 + (b - 10)^2``."""
    v = np.asarray(versions, np.float64)
    return (v[:, 0] - OPTIMUM[0]) ** 2 + (v[:, 1] - OPTIMUM[1]) ** 2


def settle_updates(losses: Sequence[np.ndarray], target: float) -> float:
    """The updates after which the mean of ``losses`` (runs of one setting, padded with ``inf`` where a run ended or
    diverged) stays below ``target``: ``inf`` if it never does."""
    longest = max(len(x) for x in losses)
    padded = np.full((len(losses), longest), np.inf)
    for k, x in enumerate(losses):
        padded[k, :len(x)] = np.where(np.isfinite(x), x, np.inf)
    mean = padded.mean(axis=0)
    above = np.flatnonzero(~(mean < target))
    if not len(above):
        return 0.0
    return float("inf") if above[-1] == longest - 1 else float(above[-1] + 1)


def equivalent_momentum(updates: float, betas: Sequence[float], curve: Sequence[float]) -> float | None:
    """The explicit momentum at which one worker's momentum SGD settles in ``updates``: ``curve[i]`` is its settling
    updates at ``betas[i]`` (increasing betas, settling faster as beta grows up to its best), interpolated linearly;
    ``None`` where ``updates`` is slower than ``betas[0]`` or faster than the fastest."""
    b, c = np.asarray(betas, float), np.asarray(curve, float)
    best = int(np.argmin(c))
    b, c = b[:best + 1], c[:best + 1]
    if not np.isfinite(updates) or updates > c[0] or updates < c[-1]:
        return None
    for k in range(len(c) - 1):
        if c[k] >= updates >= c[k + 1]:
            span = c[k] - c[k + 1]
            return float(b[k] + (b[k + 1] - b[k]) * ((c[k] - updates) / span if span else 0.0))
    return float(b[0])


class LinearOracle:
    """The linear model's losses and gradients in closed form (the :class:`~ssptk.sim.replay.GradientOracle` of
    ``linear``: ``mean((w x + b - y)^2)`` in float32, as TensorFlow computes it), and its expected gradient."""

    names = ["w", "b"]

    def initial(self) -> Params:
        return [np.asarray(np.float32(0.0)), np.asarray(np.float32(0.0))]

    @staticmethod
    def _loss_grad(params: Params, batch: tuple[np.ndarray, np.ndarray]) -> tuple[float, Params]:
        w, b = (np.float32(p) for p in params)
        x, y = batch
        r = w * x + b - y
        two = np.float32(2.0)
        return float(np.mean(r * r)), [np.asarray(np.mean(two * r * x)), np.asarray(np.mean(two * r))]

    def gradients(self, params: Sequence[Params], batches: Sequence[tuple[np.ndarray, np.ndarray]]
                  ) -> tuple[np.ndarray, list[Params]]:
        out = [self._loss_grad(p, b) for p, b in zip(params, batches)]
        return np.asarray([o[0] for o in out], float), [o[1] for o in out]

    def evaluate(self, params: Params) -> tuple[float, float | None]:
        w, b = (float(p) for p in params)
        return (w - OPTIMUM[0]) ** 2 + (b - OPTIMUM[1]) ** 2 + 0.33 ** 2, None

    @staticmethod
    def expected_gradients(versions: np.ndarray) -> np.ndarray:
        """The expected gradient at each version (x ~ N(0, 1)): ``(2 (w - 2), 2 (b - 10))``."""
        v = np.asarray(versions, np.float64)
        return 2.0 * (v - np.asarray(OPTIMUM))


def linear_trajectory(steps: pd.DataFrame, options: Any) -> Trajectory:
    """The linear model's parameters after every update of a run whose step records are ``steps`` (a real run's or
    the simulator's) and whose options are ``options`` (a :class:`~ssptk.core.options.RunOptions`), replayed as the PS
    applied them, with the expected gradient at each."""
    if options.model != "linear":
        raise UsageError(f"the implicit momentum is measured on the linear model (its gradient in closed form), not "
                         f"{options.model!r}: run it with --model linear")
    if options.mode not in ("async", "ssp", "sync"):
        raise UsageError(f"the implicit momentum is measured in async, ssp and sync, not {options.mode}")
    if parse_optimizer(options.optimizer).name == "adam":
        raise UsageError("the implicit momentum is measured with sgd, momentum and nesterov, whose steps are linear "
                         "in the gradient, not adam")
    oracle = LinearOracle()
    spec = linear()
    sources = [data_source(spec, options.seed, options.batch, "iid", w, options.workers)
               for w in range(options.workers)]
    lr = options.update_lr(learning_rate(options.lr, spec, options.optimizer))
    done = replay(steps, oracle, lambda worker, index: sources[worker](index), lr,
                  inverse_staleness=options.lr_staleness == "inverse", optimizer=options.optimizer,
                  keep_versions=True, allow_nan=True)
    versions = np.asarray([[float(p[0]), float(p[1])] for p in done.versions or []])
    return Trajectory(versions, oracle.expected_gradients(versions), lr)


def predicted_trajectory(workers: int, updates: int, lr: float, seed: int, optimizer: str = "sgd",
                         jitter: str | None = None, overhead: float = 0.005, batch: int = 16) -> Trajectory:
    """A predicted async run of the linear model (the simulator's schedule for ``workers`` workers and about
    ``updates`` updates, replayed), as :func:`linear_trajectory` gives a real one's."""
    from ssptk.core.options import resolve
    from ssptk.sim import simulate

    steps = max(1, updates // workers)
    options = resolve(mode="async", model="linear", workers=workers, steps=steps, lr=lr, seed=seed, batch=batch,
                      optimizer=optimizer, jitter=jitter, stall_timeout=0)
    sim = simulate("async", workers, steps, jitter=jitter, seed=seed, overhead=overhead)
    return linear_trajectory(sim.steps, options)


def momentum_scan(workers: Sequence[int], betas: Sequence[float], lr: float, updates: int, seeds: int,
                  jitter: str | None = None, target: float = 0.1) -> pd.DataFrame:
    """Predicted async runs of the linear model for every worker count and explicit momentum ``beta`` (``seeds``
    runs each): one row per pair with ``settle`` (updates until the seed-averaged excess loss stays below
    ``target``; ``inf``: never, or diverged) and the pooled displacement fit's ``mu`` after it (``None``: fewer than 64
    updates left)."""
    rows = []
    for n in workers:
        for beta in betas:
            runs = [predicted_trajectory(n, updates, lr, seed, f"momentum:{beta!r}" if beta else "sgd", jitter)
                    for seed in range(seeds)]
            settle = settle_updates([excess_loss(r.versions) for r in runs], target)
            # fitted once settled: near the optimum the displacements are the noise's, and how much of each
            # carries into the next is what momentum is (from far away every step points the same way: a steady
            # descent fits any momentum with a matching learning rate)
            fit = fit_momentum(runs, skip=int(settle)) if settle < len(runs[0].versions) - 64 else None
            rows.append({"workers": n, "beta": float(beta), "settle": settle,
                         "mu": None if fit is None else fit.mu})
    return pd.DataFrame(rows)


def implicit_table(scan: pd.DataFrame, real: dict[int, MomentumFit] | None = None) -> pd.DataFrame:
    """Per worker count: the paper's ``1 - 1/N``, the displacement fit's ``mu`` (explicit momentum 0; ``real``: the
    real runs' fit, where measured), the ``equivalent`` momentum (:func:`equivalent_momentum` against one worker's
    curve: ``scan`` must hold ``workers == 1``), and the ``best_beta`` (the explicit momentum that settles first)."""
    one = scan[scan["workers"] == 1].sort_values("beta")
    rows = []
    for workers, group in scan.groupby("workers"):
        n = int(str(workers))
        plain = group[group["beta"] == 0.0]
        settle = float(plain["settle"].iloc[0]) if len(plain) else float("inf")
        finite = group[np.isfinite(group["settle"])]
        best = None if finite.empty else float(finite.sort_values(["settle", "beta"]).iloc[0]["beta"])
        rows.append({"workers": n, "paper": paper_momentum(n),
                     "mu": None if plain.empty else plain["mu"].iloc[0],
                     "mu_real": None if not real or n not in real else real[n].mu,
                     "equivalent": equivalent_momentum(settle, list(one["beta"]), list(one["settle"])),
                     "settle": settle, "best_beta": best})
    return pd.DataFrame(rows)
