"""The replay of a simulated schedule (ssptk.sim.replay), with a NumPy oracle: no TensorFlow, milliseconds.

A linear least-squares model whose gradient is exact in closed form lets every expectation be computed by
hand: plain SGD for one async worker, the mean of N gradients at one point for sync, each gradient at the
version its record says it read for async and ssp.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import pytest

import ssptk
from ssptk.sim.replay import read_versions, replay

W = np.array([1.0, -2.0, 0.5], np.float32)


class Quadratic:
    """loss = mean((x @ w - y)^2) on 3 features; counts what it was asked."""

    def __init__(self, start: float = 0.0) -> None:
        self.start = start
        self.asked: list[np.ndarray] = []
        self.calls = 0

    def initial(self) -> list[np.ndarray]:
        return [np.full(3, self.start, np.float32)]

    def gradients(self, params: Sequence[list[np.ndarray]], batches: Sequence[tuple[np.ndarray, np.ndarray]]
                  ) -> tuple[np.ndarray, list[list[np.ndarray]]]:
        self.calls += 1
        losses, grads = [], []
        for (w,), (x, y) in zip(params, batches):
            self.asked.append(w.copy())
            r = x @ w - y
            losses.append(float(np.mean(r * r)))
            grads.append([(2.0 * x.T @ r / len(y)).astype(np.float32)])
        return np.asarray(losses), grads

    def evaluate(self, params: list[np.ndarray]) -> tuple[float, float | None]:
        x, y = batch(10**6)
        r = x @ params[0] - y
        return float(np.mean(r * r)), None


def batch(index: int, size: int = 8) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng([7, index])
    x = rng.standard_normal((size, 3)).astype(np.float32)
    return x, x @ W


def data(worker: int, minibatch: int) -> tuple[np.ndarray, np.ndarray]:
    return batch(minibatch)


def test_one_async_worker_is_plain_sgd() -> None:
    sched = ssptk.simulate("async", workers=1, steps=60, overhead=0.01).steps
    out = replay(sched, Quadratic(), data, update_lr=0.1)
    w = np.zeros(3, np.float32)
    for k in range(60):
        x, y = batch(k)
        w = w - np.float32(0.1) * (2.0 * x.T @ (x @ w - y) / len(y)).astype(np.float32)
    np.testing.assert_allclose(out.params[0], w, rtol=1e-6)
    assert out.updates == 60 and out.gradients == 60 and out.stopped is None
    assert out.steps["loss"].iloc[-1] < out.steps["loss"].iloc[0] / 100


def test_sync_applies_the_mean_of_each_updates_gradients_at_one_point() -> None:
    sched = ssptk.simulate("sync", workers=3, steps=20, jitter="exp:0.01", overhead=0.01).steps
    oracle = Quadratic()
    out = replay(sched, oracle, data, update_lr=0.3)
    w = np.zeros(3, np.float32)
    for g in range(1, 21):
        rows = sched[sched["global_step"] == g]
        assert len(rows) == 3
        grads = [(2.0 * x.T @ (x @ w - y) / len(y)).astype(np.float32) for x, y in map(batch, rows["minibatch"])]
        w = w - np.float32(0.3) * (sum(grads[1:], grads[0]) / np.float32(3))
    np.testing.assert_allclose(out.params[0], w, rtol=1e-5)
    assert oracle.calls == 20  # one wave per update: the cluster's width


def test_async_gradients_are_computed_at_the_version_each_record_read() -> None:
    sched = ssptk.simulate("async", workers=4, steps=30, jitter="exp:0.02", overhead=0.005, seed=3).steps
    assert sched["staleness"].max() >= 3  # the schedule really has stale gradients
    oracle = Quadratic()
    out = replay(sched, oracle, data, update_lr=0.05)
    # the same updates applied one by one, each gradient at the version global_step - 1 - staleness
    order = sched.sort_values("global_step")
    versions = [np.zeros(3, np.float32)]
    for row in order.itertuples():
        x, y = batch(row.minibatch)
        w_read = versions[row.global_step - 1 - row.staleness]
        versions.append(versions[-1] - np.float32(0.05) * (2.0 * x.T @ (x @ w_read - y) / len(y)).astype(np.float32))
    np.testing.assert_allclose(out.params[0], versions[-1], rtol=1e-5)
    assert oracle.calls < len(sched) / 2  # gradients are asked for in waves, not one by one


def test_read_versions_of_dropped_sync_gradients() -> None:
    steps = pd.DataFrame({"global_step": [1, 1, 2], "staleness": [0, 0, 1], "applied": [True, True, False]})
    assert read_versions(steps).tolist() == [0, 0, 1]


def test_backup_gradients_are_computed_and_dropped() -> None:
    sched = ssptk.simulate("sync", workers=4, steps=15, backup=1, jitter="exp:0.02", overhead=0.005).steps
    late = sched[~sched["applied"]]
    assert len(late)
    out = replay(sched, Quadratic(), data, update_lr=0.1)
    assert out.steps["loss"].notna().all()  # every computed gradient has its loss, applied or not
    assert out.updates == 15
    # the parameters are the applied gradients' alone: each update the mean of its N-B, at its previous version
    versions = [np.zeros(3, np.float32)]
    for g in range(1, 16):
        rows = sched[sched["applied"] & (sched["global_step"] == g)]
        assert len(rows) == 3
        grads = [(2.0 * x.T @ (x @ versions[-1] - y) / len(y)).astype(np.float32) for x, y in map(batch, rows["minibatch"])]
        versions.append(versions[-1] - np.float32(0.1) * (sum(grads[1:], grads[0]) / np.float32(3)))
    np.testing.assert_allclose(out.params[0], versions[-1], rtol=1e-5)
    # and each dropped one was computed, at the version it read (its logged loss), though never applied
    for row in out.steps[~out.steps["applied"]].itertuples():
        x, y = batch(row.minibatch)
        r = x @ versions[row.global_step - row.staleness] - y
        assert row.loss == pytest.approx(float(np.mean(r * r)), rel=1e-5)


def test_inverse_staleness_scales_each_gradient() -> None:
    sched = ssptk.simulate("async", workers=3, steps=20, jitter="exp:0.02", overhead=0.005, seed=1).steps
    out = replay(sched, Quadratic(), data, update_lr=0.05, inverse_staleness=True)
    w = np.zeros(3, np.float32)
    versions = [w]
    for row in sched.sort_values("global_step").itertuples():
        x, y = batch(row.minibatch)
        w_read = versions[row.global_step - 1 - row.staleness]
        g = (2.0 * x.T @ (x @ w_read - y) / len(y)).astype(np.float32) * np.float32(1.0 / (row.staleness + 1))
        versions.append(versions[-1] - np.float32(0.05) * g)
    np.testing.assert_allclose(out.params[0], versions[-1], rtol=1e-5)
    np.testing.assert_allclose(out.steps["lr_scale"], 1.0 / (out.steps["staleness"] + 1.0))


def test_a_non_finite_loss_ends_the_run_where_the_real_one_would() -> None:
    sched = ssptk.simulate("async", workers=2, steps=200, overhead=0.01).steps
    out = replay(sched, Quadratic(), data, update_lr=5.0)  # far too large: it blows up to inf, then NaN
    loss = out.steps.sort_values("t")["loss"].to_numpy()
    assert not np.isfinite(loss[-1]) and np.isfinite(loss[:-1]).all()  # cut after the first bad record
    assert loss[-1] == np.inf  # and the message says so, as a real run's would (not "nan")
    last = out.steps.sort_values("t").iloc[-1]
    assert out.stopped == (f"loss became inf at step {last['step']} (worker {last['worker']}, global step "
                           f"{last['global_step']}): lower --lr, check the model, or pass --allow-nan")
    kept = replay(sched, Quadratic(), data, update_lr=5.0, allow_nan=True)
    assert kept.stopped is None and len(kept.steps) == len(sched)
    nan = replay(sched, Quadratic(start=float("nan")), data, update_lr=0.1)
    assert nan.stopped is not None and nan.stopped.startswith("loss became nan at step 1 ")


def test_held_out_every_k_updates() -> None:
    sched = ssptk.simulate("ssp:1", workers=3, steps=40, jitter="exp:0.01", overhead=0.005).steps
    out = replay(sched, Quadratic(), data, update_lr=0.05, eval_every=30)
    assert out.evals["global_step"].tolist() == [30, 60, 90, 120]
    assert out.evals["eval_loss"].is_monotonic_decreasing
    assert out.final_loss == pytest.approx(out.evals["eval_loss"].iloc[-1])
