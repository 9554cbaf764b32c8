"""Local SGD (``--mode local:H``) in real TensorFlow clusters: local:1 is sync, one worker is plain SGD, the records
of a round, the final model (the PS's average, checked against a NumPy replay of the rounds), and the shared layout
with two PS shards, a backup worker and the DiLoCo outer optimizer."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import records

import ssptk
from ssptk.analysis.held_out import held_out_to_target
from ssptk.core.models import linear, minibatch
from ssptk.core.options import RunOptions

BATCH = RunOptions().batch




pytestmark = pytest.mark.usefixtures("module_warm_clusters")


def _by_worker(df: pd.DataFrame) -> dict[int, np.ndarray]:
    return {int(w): g.sort_values("step")["loss"].to_numpy() for w, g in df.groupby("worker")}


def _grad(w: float, b: float, x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """The linear model's MSE gradient, in float64."""
    r = 2.0 * (w * x + b - y)
    return float(np.mean(r * x)), float(np.mean(r))


def _local_sgd(workers: int, steps: int, h: int, lr: float, seed: int) -> tuple[float, float]:
    """NumPy local SGD on the linear model: every round each worker takes its steps from the average, then the
    parameters move by the SUM of the deltas (outer lr 1 under --lr-convention minibatch: N x their mean)."""
    w = b = 0.0
    for r in range(-(-steps // h)):
        dw = db = 0.0
        for i in range(workers):
            lw, lb = w, b
            for s in range(r * h, min(steps, (r + 1) * h)):
                gw, gb = _grad(lw, lb, *minibatch(linear(), seed, s * workers + i, BATCH))
                lw, lb = lw - lr * gw, lb - lr * gb
            dw, db = dw + lw - w, db + lb - b
        w, b = w + dw, b + db
    return w, b


@pytest.mark.slow
def test_local_1_is_sync_step_for_step(run_dir: Path) -> None:
    """Same seed, same warm cluster: every worker's per-step loss and the final parameters agree."""
    sync = ssptk.run(model="linear", mode="sync", workers=3, steps=8, seed=3, out=str(run_dir / "sync"), warm=True)
    local = ssptk.run(model="linear", mode="local:1", workers=3, steps=8, seed=3, out=str(run_dir / "local"),
                      warm=True)
    a, b = _by_worker(sync.df), _by_worker(local.df)
    assert a.keys() == b.keys() == {0, 1, 2}
    for w in a:
        np.testing.assert_allclose(b[w], a[w], rtol=1e-5)
    assert (local.df["global_step"].sort_values().to_numpy() == np.repeat(np.arange(1, 9), 3)).all()
    assert (local.df["staleness"] == 0).all() and local.df["applied"].all()
    for name, value in sync.summary["params"].items():
        assert local.summary["params"][name] == pytest.approx(value, rel=1e-5)
    assert local.summary["final_loss"] == pytest.approx(sync.summary["final_loss"], rel=1e-5)


@pytest.mark.slow
def test_local_h_with_one_worker_is_plain_sgd(run_dir: Path) -> None:
    """One worker, H=3, 10 steps (the last round is one step): async with one worker is plain SGD, step for step
    (in the shared layout: one process for both runs)."""
    plain = ssptk.run(model="linear", mode="async", workers=1, steps=10, seed=5, out=str(run_dir / "async"),
                      layout="shared", warm=True)
    local = ssptk.run(model="linear", mode="local:3", workers=1, steps=10, seed=5, out=str(run_dir / "local"),
                      layout="shared", warm=True)
    np.testing.assert_allclose(_by_worker(local.df)[0], _by_worker(plain.df)[0], rtol=1e-5)
    w, b = _local_sgd(1, 10, 3, 0.05, 5)  # one worker: the NumPy reference is plain SGD too
    assert local.summary["params"]["w"] == pytest.approx(w, rel=1e-4)
    assert local.summary["params"]["b"] == pytest.approx(b, rel=1e-4)
    assert sorted(local.df["global_step"]) == [1, 1, 1, 2, 2, 2, 3, 3, 3, 4]


@pytest.mark.slow
def test_three_workers_local_4_rounds_records_and_the_averaged_model(run_dir: Path) -> None:
    """10 steps of local:4 on 3 workers (rounds of 4, 4 and 2 steps), worker 2 a straggler: each worker's records
    cycle local_step 0..3 (staleness 0: no delta missed its round) with global_step = its round, the fast workers wait at each round's end, and the final
    model is the PS's average, as a NumPy replay of the rounds computes it."""
    r = ssptk.run(model="linear", mode="local:4", workers=3, steps=10, seed=7, straggler=["2:0.02"],
                  eval_every=1, out=str(run_dir), warm=True)
    df, events = records(run_dir)
    assert len(df) == 30 and sorted(df["minibatch"]) == list(range(30))
    for i, g in df.groupby("worker"):
        g = g.sort_values("step")
        assert list(g["local_step"]) == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1] and (g["staleness"] == 0).all()
        assert list(g["global_step"]) == list(g["local_round"]) == [1] * 4 + [2] * 4 + [3] * 2
        assert list(g["minibatch"]) == [s * 3 + int(i) for s in range(10)]
        ends = g[g["local_step"] == g.groupby("global_step")["local_step"].transform("max")]
        assert (g.drop(ends.index)["wait_s"] == 0).all()  # only a round's last step waits
    fast_ends = df[(df["worker"] != 2) & df["local_step"].isin([1, 3])]
    assert fast_ends["wait_s"].sum() > 0.02  # the others waited for the straggler's deltas
    w, b = _local_sgd(3, 10, 4, 0.05, 7)
    assert r.summary["params"]["w"] == pytest.approx(w, rel=1e-4)
    assert r.summary["params"]["b"] == pytest.approx(b, rel=1e-4)
    final = json.loads((run_dir / "model" / "final.json").read_text())
    assert final["params"]["w"] == pytest.approx(w, rel=1e-4)
    evals = [e for e in events if e["event"] == "eval"]
    assert [e["global_step"] for e in evals] == [1, 2, 3]  # rounds
    # minibatches to a held-out target: a round lands its 3 x 4 minibatches when it is applied
    curve = pd.DataFrame([{"t": e["t"], "global_step": e["global_step"], "eval_loss": e["eval_loss"]} for e in evals])
    assert held_out_to_target(curve, df, float(curve["eval_loss"].iloc[1]) + 1e-9, None)[1] == 24


@pytest.mark.slow
def test_local_shared_layout_two_shards_backup_and_outer_momentum(run_dir: Path) -> None:
    """The shared layout, --ps 2, a backup worker and DiLoCo's outer optimizer run local SGD to the end."""
    r = ssptk.run(model="linear", mode="local:2", workers=3, steps=8, backup=1, ps=2, layout="shared",
                  outer_lr=0.7, outer_momentum=0.9, jitter="exp:0.002", out=str(run_dir))
    df, _ = records(run_dir)
    assert r.summary["status"] == "ok" and np.isfinite(r.summary["final_loss"])
    assert df["local_step"].max() == 1 and df["local_round"].max() == 4
    assert (df.loc[df["applied"], "staleness"] == 0).all()  # a late delta's: the rounds it missed
    applied = df[df["applied"] & (df["local_step"] == 1)]
    assert applied.groupby("local_round").size().ge(2).all()  # the first N-B = 2 deltas of each round
    assert np.isfinite(df["loss"].to_numpy(dtype=float)).all()
