"""The implicit momentum's estimators (ssptk.analysis.implicit_momentum): the displacement fit recovers a known
momentum, a replayed run's trajectory is the run's own, and the scan finds the best explicit momentum."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import assert_gone

import ssptk
from ssptk.analysis.implicit_momentum import (
    Trajectory,
    equivalent_momentum,
    excess_loss,
    fit_momentum,
    implicit_table,
    momentum_scan,
    predicted_trajectory,
    settle_updates,
)


def _momentum_sgd(beta: float, seed: int, steps: int = 2000, lr: float = 0.01, nesterov: bool = False) -> Trajectory:
    """Momentum SGD on a two-parameter quadratic (curvatures 1 and 3) with unit gradient noise: the known truth."""
    rng = np.random.default_rng(seed)
    h = np.array([1.0, 3.0])
    w, a = np.array([5.0, -3.0]), np.zeros(2)
    versions = [w.copy()]
    for _ in range(steps):
        g = h * w + rng.normal(0.0, 1.0, 2)
        a = beta * a + g
        w = w - lr * (g + beta * a if nesterov else a)
        versions.append(w.copy())
    v = np.asarray(versions)
    return Trajectory(v, h * v, lr)


@pytest.mark.parametrize("beta", [0.0, 0.5, 0.9])
def test_the_displacement_fit_recovers_a_known_momentum(beta: float) -> None:
    """Stated tolerance: within 0.03 of beta from one run of 2000 updates (every seed of five), and the learning rate
    within 10%."""
    for seed in range(5):
        fit = fit_momentum(_momentum_sgd(beta, seed))
        assert abs(fit.mu - beta) < 0.03, (seed, fit)
        assert fit.eta == pytest.approx(0.01, rel=0.1)
    pooled = fit_momentum([_momentum_sgd(beta, seed) for seed in range(5)])
    assert abs(pooled.mu - beta) < 0.015 and pooled.updates == 5 * 1999


def test_the_fit_on_the_engine_s_own_momentum_recovers_it() -> None:
    """A predicted one-worker run of the linear model with --optimizer momentum:BETA, replayed through the PS's rule
    (ssptk.core.optimizers), fitted once it has settled: BETA within 0.03 (plain SGD: 0)."""
    for beta in (0.0, 0.5, 0.9):
        runs = [predicted_trajectory(1, 3000, 0.01, seed, f"momentum:{beta}" if beta else "sgd") for seed in range(3)]
        settle = settle_updates([excess_loss(r.versions) for r in runs], 0.1)
        assert settle < 500
        assert abs(fit_momentum(runs, skip=int(settle)).mu - beta) < 0.03


def test_settling_and_the_equivalent_momentum() -> None:
    assert settle_updates([np.array([5.0, 1.0, 0.05, 0.2, 0.01, 0.0])], 0.1) == 4
    # a run that ended early (diverged, stopped) counts as never settling: its missing updates are inf
    assert settle_updates([np.array([5.0, 1.0]), np.array([5.0, 0.01, 0.0])], 0.1) == float("inf")
    assert settle_updates([np.array([5.0, 1.0, 0.5])], 0.1) == float("inf")
    betas, curve = [0.0, 0.5, 0.8, 0.9], [170.0, 80.0, 33.0, 56.0]  # settles fastest at 0.8, slower past it
    assert equivalent_momentum(170.0, betas, curve) == 0.0
    assert equivalent_momentum(125.0, betas, curve) == pytest.approx(0.25)
    assert equivalent_momentum(200.0, betas, curve) is None and equivalent_momentum(20.0, betas, curve) is None


def test_the_scan_finds_the_best_explicit_momentum_falling_with_the_workers() -> None:
    scan = momentum_scan((1, 8, 32), (0.0, 0.5, 0.8), lr=0.01, updates=2048, seeds=2)
    table = implicit_table(scan).set_index("workers")
    assert table.loc[1, "best_beta"] == 0.8 and table.loc[32, "best_beta"] == 0.0
    assert table.loc[32, "paper"] == pytest.approx(1 - 1 / 32)
    # 8 workers settle faster than one at the same rate (what asynchrony adds), as momentum would
    assert table.loc[1, "equivalent"] == 0.0 and 0.0 < table.loc[8, "equivalent"] < 0.8
    assert abs(table.loc[1, "mu"]) < 0.05 and table.loc[32, "mu"] > table.loc[8, "mu"]


@pytest.mark.slow
def test_real_runs_replay_to_their_own_parameters_and_give_a_table(tmp_path: Path) -> None:
    r = ssptk.implicit_momentum(real=(2,), predicted=(2,), updates=512, seeds=1, real_seeds=1,
                                betas=(0.0, 0.5), out=str(tmp_path / "m"))
    # the records of a real async run replay to its final model (one PS: every read the version its staleness says)
    assert r.replay_error[2] < 1e-3
    row = r.table.set_index("workers").loc[2]
    assert row["paper"] == 0.5 and np.isfinite(row["mu_real"]) and row["settle_real"] < 512
    assert "workers" in str(r) and len(r.runs[2]) == 1
    assert_gone(str(tmp_path))
