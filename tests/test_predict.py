"""Predicted runs (``ssptk.predict([...], model=M)``, one: ``predict_run``, ``ssptk sim --model M``): the
simulator's schedule replayed with the model's real gradients in one TensorFlow process, checked against real runs
and plain SGD."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import assert_gone, ssptk_cmd
from helpers import records

import ssptk
from ssptk.core.models import linear, minibatch
from ssptk.experiment.predicted_runs import predict_run

pytestmark = pytest.mark.slow


def test_a_predicted_sync_run_is_the_real_run(tmp_path: Path) -> None:
    """Without staleness to model, prediction and reality must agree exactly: the same initial values (the
    run's seed), the same minibatches, the same averaged updates, so every step's loss and the final model
    match to float precision."""
    common = dict(mode="sync", model="digits", workers=3, steps=25, seed=4, batch=16)
    real = ssptk.run(out=str(tmp_path / "real"), gpus="none", **common)
    pred = predict_run(out=str(tmp_path / "pred"), **common)
    assert pred.summary["predicted"] and pred.ok
    assert pred.summary["final_loss"] == pytest.approx(real.summary["final_loss"], rel=1e-4)
    assert pred.summary["final_accuracy"] == pytest.approx(real.summary["final_accuracy"], abs=1e-6)
    a, _ = records(tmp_path / "real")
    b, _ = records(tmp_path / "pred")
    merged = a.merge(b, on="minibatch", suffixes=("_real", "_pred"))
    assert len(merged) == 3 * 25
    assert (merged["worker_real"] == merged["worker_pred"]).all()
    assert (merged["global_step_real"] == merged["global_step_pred"]).all()
    np.testing.assert_allclose(merged["loss_pred"], merged["loss_real"], rtol=1e-4)
    assert_gone(str(tmp_path))


def test_one_async_worker_predicts_plain_sgd_and_the_schedule_s_staleness(tmp_path: Path) -> None:
    pred = predict_run("async", workers=1, steps=40, model="linear", lr=0.05, out=str(tmp_path / "one"))
    spec = linear()
    w = b = np.float32(0.0)
    for k in range(40):
        x, y = minibatch(spec, 0, k, 16)
        r = w * x + b - y
        w, b = w - np.float32(0.05) * np.mean(2 * r * x), b - np.float32(0.05) * np.mean(2 * r)
    assert pred.summary["params"]["w"] == pytest.approx(float(w), rel=1e-5)
    assert pred.summary["params"]["b"] == pytest.approx(float(b), rel=1e-5)
    # several workers: the records carry the very schedule the timing simulator makes
    opts = dict(workers=4, steps=30, jitter="exp:0.01", seed=2)
    many = predict_run("ssp:1", model="linear", out=str(tmp_path / "many"), overhead=0.004, **opts)
    timing = ssptk.simulate("ssp:1", overhead=0.004, **opts)
    df, _ = records(tmp_path / "many")
    got = df.sort_values("minibatch")[["worker", "staleness", "global_step"]].reset_index(drop=True)
    want = timing.steps.sort_values("minibatch")[["worker", "staleness", "global_step"]].reset_index(drop=True)
    pd.testing.assert_frame_equal(got, want, check_dtype=False)
    assert many.summary["max_skew"] <= 2  # ssp:1's bound, S+1
    assert_gone(str(tmp_path))


def test_a_diverging_setting_diverges_in_prediction(tmp_path: Path) -> None:
    """The convergence tests' scenario (lr 0.45, mean convention, 4 workers): async diverges, sync does not."""
    common = dict(model="linear", lr=0.45, lr_convention="mean", workers=4, jitter="exp:0.01", steps=150,
                  overhead=0.006)
    both = ssptk.predict(["sync", "async"], out=str(tmp_path / "both"), **common)  # one predicting process
    sync, run = both.runs["sync"], both.runs["async"]
    assert not sync.summary["diverged"] and sync.ok
    assert run.summary["diverged"] and run.summary["diverged_at_step"] > 0
    assert both.table.attrs["first_to_target"] == "sync"  # a diverged run is never ranked
    with pytest.raises(ssptk.RunFailed, match=r"^ssptk: diverged at global step \d+ \(the smoothed training loss"):
        predict_run("async", out=str(tmp_path / "stop"), stop_on_divergence=True, **common)
    stopped = json.loads((tmp_path / "stop" / "summary.json").read_text())
    assert stopped["status"] == "failed" and stopped["predicted"] and stopped["total_steps"] < 600
    assert_gone(str(tmp_path))


def test_cli_sim_with_a_model(tmp_path: Path) -> None:
    out = tmp_path / "p"
    r = subprocess.run([*ssptk_cmd(), "sim", "--model", "digits", "--mode", "ssp", "--staleness", "2", "--workers",
                        "4", "--steps", "40", "--eval-every", "40", "--target", "1.5", "--out", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "PREDICTED" in r.stdout and "predicted by the simulator" in r.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["predicted"]["overhead_s"] == 0.005 and summary["final_accuracy"] > 0.5
    # --target: the predicted time and minibatches to it (held-out: the run evaluates every 40 updates)
    assert summary["target"] == 1.5 and summary["target_on"] == "held-out"
    assert summary["steps_to_target"] in (40, 80, 120, 160) and summary["time_to_target_s"] > 0
    assert "target    held-out loss 1.5: reached in" in r.stdout
    _, events = records(out)
    assert [e["global_step"] for e in events if e["event"] == "eval"] == [40, 80, 120, 160]
    rep = subprocess.run([*ssptk_cmd(), "report", str(out)], capture_output=True, text=True, timeout=120)
    assert rep.returncode == 0 and "PREDICTED" in rep.stdout
    # a non-finite loss ends a predicted run as it ends a real one: one line (saying what it was: here the loss
    # overflows to inf before any NaN), exit code 1
    nan = subprocess.run([*ssptk_cmd(), "sim", "--model", "linear", "--mode", "async", "--workers", "2", "--steps",
                          "200", "--lr", "20", "--out", str(tmp_path / "nan")], capture_output=True, text=True,
                         timeout=300)
    assert nan.returncode == 1
    assert "loss became inf at step" in nan.stderr and "Traceback" not in nan.stderr
    # training options without a model: the timing-only simulator cannot honour them
    bad = subprocess.run([*ssptk_cmd(), "sim", "--lr", "0.1"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--lr needs --model" in bad.stderr
    bad = subprocess.run([*ssptk_cmd(), "sim", "--target", "0.1"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--target needs --model" in bad.stderr
    assert_gone(str(tmp_path))


def test_predict_is_a_comparison_without_a_cluster(tmp_path: Path) -> None:
    cmp = ssptk.predict(["sync", "ssp:1", "async"], model="linear", workers=3, steps=40, jitter="exp:0.01",
                        out=str(tmp_path / "p"))
    assert list(cmp.table["label"]) == ["sync", "ssp:1", "async"] and set(cmp.table["status"]) == {"ok"}
    assert all(r.summary["predicted"] for r in cmp.runs.values())
    assert (tmp_path / "p" / "report.html").is_file() and (tmp_path / "p" / "metrics.csv").is_file()
    assert (tmp_path / "p" / "logs" / "predict.log").is_file()  # one process for the three
    assert cmp.table.attrs["first_to_target"] in ("sync", "ssp:1", "async")
    assert "PREDICTED: no cluster ran" in str(cmp)  # said under the table
    with pytest.raises(ssptk.UsageError, match=r"^bad comparison label 'ssp:-1': use ssp:S with an integer S >= 0"):
        ssptk.predict(["ssp:-1"], model="linear", out=str(tmp_path / "bad"))
    assert not (tmp_path / "bad").exists()  # refused before anything was created
    assert_gone(str(tmp_path))


def test_a_user_model_and_backup_workers_are_predicted(tmp_path: Path, user_model_path: str) -> None:
    """Any model ssptk runs can be predicted (here a user ModelSpec, importable by the predicting process), and
    sync with --backup drops the late gradients as the engine does (computed and logged, not applied)."""
    r = predict_run("sync", workers=3, steps=30, backup=1, model="usermodels:regression", jitter="exp:0.01",
                       out=str(tmp_path / "u"))
    df, _ = records(tmp_path / "u")
    applied = df[df["applied"]]
    assert r.ok and len(applied) == 30 * 2 and (~df["applied"]).any()
    assert applied.groupby("global_step")["worker"].nunique().eq(2).all()
    assert df["loss"].notna().all() and df["loss"].iloc[-10:].mean() < df["loss"].iloc[:10].mean()
    assert_gone(str(tmp_path))


def test_a_cancelled_prediction_stops_its_process_and_says_so(tmp_path: Path) -> None:
    """The stop button (``cancel``) or Ctrl-C during a prediction: the predicting process is stopped, nothing is
    left running, and the run's summary says it was interrupted (as a real run's does)."""
    import threading

    from ssptk.experiment.predicted_runs import plan, predict

    cancel = threading.Event()
    p = plan(None, mode="async", workers=4, steps=3000, model="digits", out=str(tmp_path / "c"), stall_timeout=0)
    with pytest.raises(ssptk.RunInterrupted):
        predict([p], progress=lambda job, done, total: cancel.set(), cancel=cancel)  # stop at the first wave
    summary = json.loads((tmp_path / "c" / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["predicted"]
    assert_gone(str(tmp_path))
