"""Local SGD (``local:H``) and delay compensation (``--lr-staleness dc``) in the simulator and its replay.

Pure Python with a NumPy least-squares oracle (milliseconds): local:1's schedule and replay are sync's, local:H
with one worker is plain SGD, a round is the mean of private copies' deltas (outer scale, Nesterov momentum),
DC with lambda 0 is async and DC's correction matches a NumPy reference. The predicted runs (TensorFlow) are
marked slow.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import ideal

import ssptk
from ssptk.core.errors import UsageError
from ssptk.sim import simulate
from ssptk.sim.replay import compensated, replay
from ssptk.sim.replay_local import replay_local
from tests.test_replay import Quadratic, batch, data

DELAYS = dict(jitter="exp:0.01", straggler={1: 0.004}, overhead=0.005, seed=4)


def grad(w: np.ndarray, minibatch: int) -> np.ndarray:
    x, y = batch(minibatch)
    return (2.0 * x.T @ (x @ w - y) / len(y)).astype(np.float32)


@pytest.mark.parametrize("backup", [0, 1])
def test_local_1_schedule_is_syncs(backup: int) -> None:
    sync = simulate("sync", 4, 25, backup=backup, **DELAYS)
    local = simulate("local:1", 4, 25, backup=backup, **DELAYS)
    rounds, applied = local.steps.pop("local_round"), local.steps["applied"]
    assert (rounds[applied] == local.steps.loc[applied, "global_step"]).all()
    assert (local.steps.pop("local_step") == 0).all()  # one local step a round
    if backup:  # a dropped delta missed the rounds a late sync gradient missed: the same staleness
        assert (~sync.steps["applied"]).any() and (sync.steps.loc[~sync.steps["applied"], "staleness"] > 0).all()
    pd.testing.assert_frame_equal(local.steps, sync.steps)
    assert (local.updates, local.pushes, local.wall_s) == (sync.updates, sync.pushes, sync.wall_s)
    assert local.local_steps == 1 and sync.local_steps is None


def test_local_schedule_records_rounds() -> None:
    r = simulate("local:4", 3, 10, **DELAYS)  # 10 local steps: rounds of 4, 4 and 2
    df = r.steps
    assert r.updates == 3 and r.pushes == 9 and len(df) == 30
    for _, mine in df.groupby("worker"):
        mine = mine.sort_values("step")
        assert mine["step"].tolist() == list(range(1, 11))
        assert mine["global_step"].tolist() == [1] * 4 + [2] * 4 + [3] * 2
        assert mine["local_step"].tolist() == [0, 1, 2, 3] * 2 + [0, 1]
        assert (mine["staleness"] == 0).all()  # no delta missed its round
        assert (mine["t"].diff().dropna() >= 0).all()
        last = mine.groupby("global_step")["step"].transform("max") == mine["step"]
        assert (mine.loc[~last, "wait_s"] == 0).all()
    assert sorted(df["minibatch"]) == list(range(30))  # (round * H + j) * N + worker: each once
    # the round's last steps are logged when its average is applied: all three at one time
    assert df[df["local_step"] == 3].groupby("global_step")["t"].nunique().eq(1).all()
    assert (df["t"].diff().dropna() >= 0).all()


def test_local_backup_drops_late_deltas() -> None:
    r = simulate("local:3", 4, 12, backup=1, jitter="exp:0.02", overhead=0.005, seed=2)
    df = r.steps
    assert r.updates == 4
    counted = df.groupby(["local_round", "worker"])["applied"].all()
    assert counted.groupby("local_round").sum().tolist() == [3] * 4  # the first N-B deltas of every round
    # as the runtime logs a late delta: its last step not applied, at the version when it arrived
    late = df[~df["applied"]]
    assert len(late) and (late["local_step"] == 2).all() and (late["global_step"] > late["local_round"] - 1).all()
    # its staleness: the rounds applied since its own began, as a late sync gradient's
    assert (late["staleness"] == late["global_step"] - late["local_round"] + 1).all() and (late["staleness"] > 0).all()
    ends = df[df["applied"] & (df["local_step"] == 2)]
    assert (ends["global_step"] == ends["local_round"]).all()


def test_local_under_a_network_pushes_h_times_less() -> None:
    net = dict(network="100mbit", model_bytes=2e6, overhead=0.005, jitter="exp:0.002")
    sync = simulate("sync", 4, 32, **net)
    local = simulate("local:8", 4, 32, **net)
    assert sync.pushes == 4 * 32 and local.pushes == 4 * 4
    assert len(local.steps) == len(sync.steps)
    # the link is the bound: 8x fewer transfers make local:8 several times faster
    assert local.steps_per_s > 4 * sync.steps_per_s


def test_bad_local_input_is_refused() -> None:
    with pytest.raises(UsageError, match="bad mode 'local:0'"):
        simulate("local:0", 2, 10)
    with pytest.raises(UsageError, match="--staleness applies to ssp only"):
        simulate("local:2", 2, 10, staleness=1)
    with pytest.raises(UsageError, match="conflicts with --local-steps 3"):
        simulate("local:2", 2, 10, local_steps=3)
    with pytest.raises(UsageError, match="--local-steps applies to local only"):
        simulate("sync", 2, 10, local_steps=3)
    with pytest.raises(UsageError, match="--backup applies to sync and local only"):
        simulate("async", 3, 10, backup=1)
    assert simulate("local", 2, 10, local_steps=5).updates == 2
    assert ssptk.simulate("local:5", workers=2, steps=10).updates == 2


def test_local_1_replays_sync() -> None:
    sync = replay(simulate("sync", 3, 20, **DELAYS).steps, Quadratic(), data, update_lr=0.3)
    local = replay_local(simulate("local:1", 3, 20, **DELAYS).steps, Quadratic(), data, lr=0.1, outer_scale=3.0)
    # the same arithmetic but for float32 rounding (a delta is copy - pulled, then averaged and scaled)
    np.testing.assert_allclose(local.steps["loss"], sync.steps["loss"], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(local.params[0], sync.params[0], rtol=1e-5)
    assert local.updates == sync.updates == 20 and local.oracle_calls == 20


def test_local_with_one_worker_is_plain_sgd() -> None:
    out = replay_local(simulate("local:4", 1, 23, overhead=0.01).steps, Quadratic(), data, lr=0.1, outer_scale=1.0)
    w = np.zeros(3, np.float32)
    for k in range(23):
        w = w - np.float32(0.1) * grad(w, k)
    np.testing.assert_allclose(out.params[0], w, rtol=1e-6)
    assert out.updates == 6 and out.gradients == 23


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_local_rounds_average_private_copies(momentum: float) -> None:
    sched = simulate("local:3", 4, 12, backup=1, jitter="exp:0.02", overhead=0.005, seed=2).steps
    oracle = Quadratic()
    out = replay_local(sched, oracle, data, lr=0.05, outer_scale=0.7 * 3, outer_momentum=momentum, eval_every=2)
    w, buf = np.zeros(3, np.float32), np.zeros(3, np.float32)
    for r in range(1, 5):
        deltas = []
        for _, rows in sched[sched["local_round"] == r].groupby("worker"):
            c = w
            for mb in rows.sort_values("local_step")["minibatch"]:
                c = c - np.float32(0.05) * grad(c, mb)
            if rows["applied"].all():
                deltas.append(c - w)
        assert len(deltas) == 3
        mean = np.mean(deltas, axis=0)
        if momentum:  # Nesterov on the pseudo-gradient -mean
            buf = np.float32(momentum) * buf - mean
            w = w - np.float32(2.1) * (-mean + np.float32(momentum) * buf)
        else:
            w = w + np.float32(2.1) * mean
    np.testing.assert_allclose(out.params[0], w, rtol=1e-5)
    assert out.evals["global_step"].tolist() == [2, 4]
    assert out.steps["loss"].notna().all()  # late deltas' losses too
    assert oracle.calls == 4 * 3  # one wave per local step of a round


def test_dc_with_lambda_zero_is_plain_async() -> None:
    sched = simulate("async", 4, 30, jitter="exp:0.02", overhead=0.005, seed=3).steps
    plain = replay(sched, Quadratic(), data, update_lr=0.05)
    dc = replay(sched, Quadratic(), data, update_lr=0.05, delay_comp=0.0)
    np.testing.assert_array_equal(dc.params[0], plain.params[0])
    np.testing.assert_array_equal(dc.steps["loss"], plain.steps["loss"])


@pytest.mark.parametrize("mode", ["async", "ssp:2"])
def test_dc_corrects_each_gradient_by_its_read_version(mode: str) -> None:
    sched = simulate(mode, 4, 30, jitter="exp:0.02", overhead=0.005, seed=3).steps
    assert sched["staleness"].max() >= 2
    lam, lr = 0.5, 0.05
    out = replay(sched, Quadratic(), data, update_lr=lr, delay_comp=lam)
    assert np.isfinite(out.steps["loss"]).all()
    versions = [np.zeros(3, np.float64)]  # the reference in float64: the correction is what differs, not rounding
    for row in sched.sort_values("global_step").itertuples():
        read = versions[row.global_step - 1 - row.staleness]
        x, y = batch(row.minibatch)
        g = 2.0 * x.T.astype(np.float64) @ (x @ read - y) / len(y)
        versions.append(versions[-1] - lr * (g + lam * g * g * (versions[-1] - read)))
    np.testing.assert_allclose(out.params[0], versions[-1], rtol=1e-4)
    half = sched["global_step"] <= 20
    mid = versions[20]  # the version after 20 updates: where the runs still differ
    plain = replay(sched[half], Quadratic(), data, update_lr=lr)
    dc = replay(sched[half], Quadratic(), data, update_lr=lr, delay_comp=lam)
    np.testing.assert_allclose(dc.params[0], mid, rtol=1e-4)
    assert np.abs(plain.params[0] - dc.params[0]).max() > 0.05  # the correction did something


def test_compensated_gradient_on_a_quadratic() -> None:
    g = [np.array([1.0, -2.0, 3.0], np.float32)]
    now, read = [np.array([0.5, 0.5, 0.5], np.float32)], [np.array([0.0, 1.0, 0.5], np.float32)]
    out = compensated(g, now, read, 0.1)
    np.testing.assert_allclose(out[0], [1.0 + 0.1 * 1 * 0.5, -2.0 + 0.1 * 4 * -0.5, 3.0], rtol=1e-6)
    assert out[0].dtype == np.float32


@pytest.mark.slow
def test_predicted_local_1_is_sync_and_dc_0_is_async(tmp_path: Path) -> None:
    from ssptk.experiment.predicted_runs import plan, predict

    common = dict(model="linear", workers=3, steps=30, jitter="exp:0.005", seed=1, lr=0.02, stall_timeout=0)
    runs = {"sync": {}, "local:1": {}, "local:4": {}, "async": {}, "dc0": dict(mode="async", lr_staleness="dc:0"),
            "dc": dict(mode="async", lr_staleness="dc")}
    plans = [plan(None, run_dir=str(tmp_path / name.replace(":", "-")), **{"mode": name, **common, **kw})
             for name, kw in runs.items()]
    sync, local1, local4, plain, dc0, dc = predict(plans)  # one predicting process
    key = ["t", "worker"]
    np.testing.assert_allclose(local1.df.sort_values(key)["loss"], sync.df.sort_values(key)["loss"], rtol=1e-4)
    assert local4.summary["total_steps"] == 90 and local4.df["local_step"].max() == 3
    assert sorted(local4.df["local_round"].unique()) == list(range(1, 9))
    assert local4.summary["final_loss"] < local4.df["loss"].iloc[:3].mean()
    np.testing.assert_array_equal(dc0.df["loss"], plain.df["loss"])
    assert np.isfinite(dc.df["loss"]).all() and not np.array_equal(dc.df["loss"], plain.df["loss"])


def test_ideal_for_a_local_run_calibrates_its_local_steps() -> None:

    run = simulate("local:4", 3, 40, jitter="exp:0.01", overhead=0.004, seed=2)
    predicted = ideal(run.steps, "local:4", 3, 40, jitter="exp:0.01", seed=2)
    assert predicted["overhead_ms"] == pytest.approx(4.0, rel=0.05)
    assert predicted["ideal_steps_per_s"] == pytest.approx(run.steps_per_s, rel=0.05)


def test_calibration_spreads_a_rounds_traffic_over_its_steps() -> None:
    from ssptk.sim import calibrate_overhead

    shaped = simulate("local:4", 3, 40, network="20mbit", model_bytes=2e5, overhead=0.004, jitter="exp:0.01", seed=2)
    per_step = calibrate_overhead(shaped.steps, 3)
    assert per_step > 0.05  # not the 4 ms of a local step: the round's pull and push count, spread over its 4 steps
    free = simulate("local:4", 3, 40, overhead=per_step, jitter="exp:0.01", seed=2)
    # within 15%: the shaped rounds queue at the link in arrival order, which a constant overhead does not hold
    assert free.steps_per_s == pytest.approx(shaped.steps_per_s, rel=0.15)
