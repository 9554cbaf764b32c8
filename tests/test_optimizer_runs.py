"""``--optimizer`` with real clusters: every mode trains with momentum and Adam and says so, a predicted sync run
replays the real run's every loss, Adam in async reaches SGD's held-out accuracy, a restarted worker finds the
slots the PS kept, and the slots cost no byte on the wire."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_gone, kill_worker_when
from helpers import records

import ssptk
from ssptk.experiment.predicted_runs import predict_run
from ssptk.render.style import run_title
from ssptk.render.text import format_summary

pytestmark = pytest.mark.slow

#: the names each mode's checkpoint saves the slots under (local SGD's inner slots are each worker's own: none)
SAVED = {"momentum:0.9": {"w/Momentum", "b/Momentum"},
         "adam": {"w/Adam", "w/Adam_1", "w/beta1_power", "w/beta2_power", "b/Adam", "b/Adam_1"}}


@pytest.mark.parametrize("mode", ["sync", "ssp:1", "async", "local:4", "allreduce"])
@pytest.mark.parametrize("optimizer", ["momentum:0.9", "adam"])
def test_every_mode_trains_with_momentum_and_adam_and_says_so(tmp_path: Path, mode: str, optimizer: str) -> None:
    import tensorflow as tf

    out = tmp_path / "r"
    r = ssptk.run(mode=mode, optimizer=optimizer, workers=2, steps=60, lr=0.02 if optimizer != "adam" else None,
                  out=str(out), gpus="none")
    assert r.ok, r.summary["reason"]
    label = f"{mode}\u00b7{optimizer}"
    assert r.options.label == label
    assert json.loads((out / "config.json").read_text())["options"]["optimizer"] == optimizer
    assert r.summary["optimizer"] == optimizer
    assert f"optimizer {optimizer}" in format_summary(r.summary)
    assert f"optimizer {optimizer}" in run_title(r.options.to_dict())
    df = r.df.sort_values("t")
    first, last = df["loss"].iloc[:10].mean(), df["loss"].iloc[-10:].mean()
    assert last < 0.5 * first, (first, last)  # trained: from ~100 (b = 0 against 10) far down
    saved = {name for name, _ in tf.train.list_variables(str(out / "model" / "ckpt"))}
    if mode == "allreduce":  # a tf.train.Checkpoint: the slots under their own names, with the model
        assert sum("slot" in name for name in saved) == 2 * (1 if optimizer != "adam" else 2)
    elif mode.startswith("local"):
        assert saved == {"w", "b"}
    else:
        assert SAVED[optimizer] <= saved, saved
    assert_gone(str(tmp_path))


@pytest.mark.parametrize("optimizer", ["momentum:0.9", "adam"])
def test_a_predicted_sync_run_with_momentum_or_adam_is_the_real_run(tmp_path: Path, optimizer: str) -> None:
    """As for SGD (test_predict.py): the replay applies the optimizer as the PS does, its slots from update to update,
    so every step's loss and the final model match the real run's to float precision."""
    common = dict(mode="sync", model="digits", workers=3, steps=25, seed=4, batch=16, lr=0.02, optimizer=optimizer)
    real = ssptk.run(out=str(tmp_path / "real"), gpus="none", **common)
    pred = predict_run(out=str(tmp_path / "pred"), **common)
    assert pred.summary["predicted"] and pred.ok and pred.summary["optimizer"] == optimizer
    assert pred.summary["final_loss"] == pytest.approx(real.summary["final_loss"], rel=1e-4)
    assert pred.summary["final_accuracy"] == pytest.approx(real.summary["final_accuracy"], abs=1e-6)
    a, _ = records(tmp_path / "real")
    b, _ = records(tmp_path / "pred")
    merged = a.merge(b, on="minibatch", suffixes=("_real", "_pred"))
    assert len(merged) == 3 * 25
    assert (merged["global_step_real"] == merged["global_step_pred"]).all()
    np.testing.assert_allclose(merged["loss_pred"], merged["loss_real"], rtol=1e-4)
    # the same run with plain SGD is another run: the optimizer is what made these losses
    sgd = predict_run(out=str(tmp_path / "sgd"), **{**common, "optimizer": "sgd"})
    assert abs(sgd.summary["final_loss"] - real.summary["final_loss"]) > 1e-3
    assert_gone(str(tmp_path))


def test_adam_in_async_reaches_the_held_out_accuracy_sgd_reaches(tmp_path: Path) -> None:
    """digits, async, each at its default learning rate (SGD: the model's 0.1; Adam: the model's adam_lr, 0.01)."""
    common = dict(mode="async", model="digits", workers=3, steps=200, seed=1, gpus="none")
    sgd = ssptk.run(out=str(tmp_path / "sgd"), **common)
    adam = ssptk.run(out=str(tmp_path / "adam"), optimizer="adam", **common)
    assert sgd.ok and adam.ok
    assert sgd.summary["final_accuracy"] > 0.85  # SGD trained
    assert adam.summary["final_accuracy"] >= sgd.summary["final_accuracy"] - 0.01, (adam.summary, sgd.summary)
    assert_gone(str(tmp_path))


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_a_restarted_worker_finds_the_slots_the_ps_kept(run_dir: Path, mode: str) -> None:
    killed: list[int] = []
    killer = kill_worker_when(run_dir, 1, 30, killed)
    r = ssptk.run(mode=mode, workers=3, steps=200, optimizer="momentum:0.9", lr=0.01, restart_failed=1,
                  out=str(run_dir), straggler=["0:0.04", "1:0.04", "2:0.04"], raise_on_failure=False)
    killer.join()
    assert killed, "the worker was not killed: the test proves nothing"
    assert r.ok, r.summary["reason"]
    _, events = records(run_dir)
    restart = [e for e in events if e["event"] == "restart"]
    assert len(restart) == 1 and restart[0]["worker"] == 1
    # the momentum the run built up before the death, read from the PS by the restarted worker: not zeros again
    assert restart[0]["optimizer_slots_norm"] > 0.1, restart[0]
    assert abs(r.summary["params"]["w"] - 2.0) < 0.15 and abs(r.summary["params"]["b"] - 10.0) < 0.15


@pytest.mark.needs_tc
def test_the_slots_cost_no_byte_on_the_wire(tmp_path: Path) -> None:
    """The slots live beside their variables on the PS: a shaped run's bytes per minibatch are SGD's. What Adam adds
    is not its slots' bytes: the checkpoint reads each slot once at the end (2 x 0.34 MB), and every 10th step's full
    trace (``--network``'s transfer timing) carries the stats of a PS graph with more ops (measured without the
    traces: 350.4 against 349.8 KB per minibatch; with them, about 2% more)."""
    per_minibatch = {}
    for optimizer in ("sgd", "momentum:0.9", "adam"):
        out = tmp_path / optimizer.replace(":", "-")
        r = ssptk.run(mode="async", model="mlp:256", workers=2, steps=100, network="ps=1gbit", lr=0.01,
                      optimizer=optimizer, out=str(out), gpus="none")
        assert r.ok, r.summary["reason"]
        tasks = json.loads((out / "traffic.json").read_text())["tasks"]
        moved = tasks["ps:0"]["sent"] + tasks["ps:0"]["received"]
        per_minibatch[optimizer] = moved / r.summary["total_steps"]
    assert per_minibatch["sgd"] > 2 * 340_000  # a pull and a push of the 85 k float32 parameters
    assert per_minibatch["momentum:0.9"] == pytest.approx(per_minibatch["sgd"], rel=0.02), per_minibatch
    assert per_minibatch["adam"] == pytest.approx(per_minibatch["sgd"], rel=0.04), per_minibatch
    assert_gone(str(tmp_path))
