"""Real clusters (1 PS + N TensorFlow worker processes on localhost) in every mode, checked from the logs.

The PS modes run on warm clusters (one of 2 workers, one of 3, shared by this module's tests: each run gets
fresh variables, counters and queues on the same tasks), so the suite pays TensorFlow's start-up twice, not
once per test; cold starts are what test_runs_cli, test_reliability and the other files exercise."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import max_skew, records

import ssptk
from ssptk.core.delays import DelayModel, parse_jitter
from ssptk.core.models import linear, minibatch
from ssptk.core.options import RunOptions

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("module_warm_clusters")]




def _falls(df, k: int = 20, to: float = 0.2) -> bool:
    """Every loss is finite and the mean of the last ``k`` is below ``to`` times the mean of the first ``k``."""
    loss = df["loss"].to_numpy()
    return bool(np.isfinite(loss).all() and loss[-k:].mean() < to * loss[:k].mean())


def test_async_linear_budget_convergence_and_logs(run_dir: Path) -> None:
    r = ssptk.run(model="linear", mode="async", workers=3, steps=150, out=str(run_dir))  # cold: its own tasks
    df, events = records(run_dir)
    assert len(df) == 450 and sorted(df["minibatch"]) == list(range(450))  # each minibatch exactly once
    assert sorted(df["global_step"]) == list(range(1, 451))  # every update applied, counted once
    for _w, g in df.groupby("worker"):
        assert list(g.sort_values("step")["step"]) == list(range(1, len(g) + 1))
    assert {e["event"] for e in events} == {"barrier", "start", "done"} and len(events) == 9
    assert (df["wait_s"] == 0).all() and df["staleness"].max() >= 1  # 3 workers: updates interleave
    assert _falls(df)
    assert r.summary["params"]["w"] == pytest.approx(2.0, abs=0.1)
    assert r.summary["params"]["b"] == pytest.approx(10.0, abs=0.1)
    assert r.summary["status"] == "ok" and r.summary["total_steps"] == 450
    assert (run_dir / "model" / "ckpt.index").exists() and (run_dir / "logs" / "ps-0.log").exists()
    config = json.loads((run_dir / "config.json").read_text())
    assert config["options"]["mode"] == "async" and len(config["cluster"]["worker"]) == 3
    assert config["versions"]["tensorflow"] and config["versions"]["ssptk"] == ssptk.__version__
    assert r.df.shape[0] == 450  # the API's DataFrame is the same records
    # each step's read on ps:0 (t - read_s) comes after its worker's previous landing, and the updates that landed
    # between its read and its own are its staleness (ps:0's clock and counter, not atomic together: nearly always)
    assert (df["read_s"] >= 0).all()
    read = df["t"] - df["read_s"]
    for _w, g in df.groupby("worker"):
        g = g.sort_values("step")
        assert ((g["t"] - g["read_s"]).to_numpy()[1:] >= g["t"].to_numpy()[:-1] - 1e-3).all()
    t = np.sort(df["t"].to_numpy())
    landed_between = np.searchsorted(t, df["t"].to_numpy(), "left") - np.searchsorted(t, read.to_numpy(), "right")
    assert (landed_between == df["staleness"].to_numpy()).mean() > 0.8
    assert r.summary["gap_ms"] is not None and r.summary["gap_ms"] >= 0


def test_checkpoint_loads_with_plain_tensorflow(run_dir: Path) -> None:
    import tensorflow as tf

    r = ssptk.run(model="linear", mode="async", workers=2, steps=80, out=str(run_dir), warm=True)
    reader = tf.train.load_checkpoint(str(run_dir / "model" / "ckpt"))
    assert reader.get_tensor("w") == pytest.approx(r.summary["params"]["w"])


@pytest.mark.parametrize("staleness", [0, 2])
def test_ssp_bound_holds_under_a_straggler(staleness: int, run_dir: Path) -> None:
    ssptk.run(mode="ssp", staleness=staleness, workers=3, steps=60, straggler=["2:0.02"], out=str(run_dir), warm=True)
    df, events = records(run_dir)
    # a wait that ended by the safety time-out means a wake-up was lost
    assert [e["safety_timeouts"] for e in events if e["event"] == "done"] == [0, 0, 0]
    assert len(df) == 180 and sorted(df["minibatch"]) == list(range(180))
    assert max_skew(df, 3) <= staleness + 1
    fast = df[df["worker"] != 2]
    assert fast["wait_s"].sum() > 0.3  # the fast workers really were held back...
    assert df[df["worker"] == 2]["wait_s"].sum() < 0.25 * fast["wait_s"].sum() / 2  # ...the straggler far less


def test_async_skew_grows_far_beyond_the_bound(run_dir: Path) -> None:
    ssptk.run(mode="async", workers=3, steps=60, straggler=["2:0.02"], out=str(run_dir), warm=True)
    df, _ = records(run_dir)
    assert max_skew(df, 3) > 10


def test_sync_is_lock_step(run_dir: Path) -> None:
    r = ssptk.run(mode="sync", workers=3, steps=40, straggler=["1:0.01"], out=str(run_dir), warm=True)
    df, _ = records(run_dir)
    assert df.groupby("worker").size().to_dict() == {0: 40, 1: 40, 2: 40}
    assert max_skew(df, 3) <= 1
    assert df["applied"].all() and (df["staleness"] == 0).all()
    # each update averages exactly one gradient from each worker
    per_update = df.groupby("global_step")["worker"].apply(lambda w: sorted(w))
    assert list(per_update.index) == list(range(1, 41)) and all(v == [0, 1, 2] for v in per_update)
    assert df[df["worker"] != 1]["wait_s"].sum() > 0.2
    assert r.summary["params"]["b"] > 5  # 40 averaged steps move b most of the way
    assert "read_s" not in df and r.summary["gap_ms"] is None  # sync's steps read together: no window to measure


def _linear_batch(opts: RunOptions, mb: int) -> tuple[np.ndarray, np.ndarray]:
    return minibatch(linear(), opts.seed, int(mb), opts.batch)


def _linear_loss(version: np.ndarray, opts: RunOptions, mb: int) -> float:
    x, y = _linear_batch(opts, mb)
    return float(np.mean(np.square(version[0] * x + version[1] - y)))


def _linear_versions(df: pd.DataFrame, opts: RunOptions,
                     late_reads: dict[int, np.ndarray] | None = None) -> list[np.ndarray]:
    """The parameters ``[w, b]`` after each update of a sync run of the linear model, recomputed by hand from
    its records: update ``g`` applies the mean gradient of the records applied at ``g``, each on its minibatch
    at version ``g - 1``. ``late_reads`` (record index: the parameters it read): each dropped gradient is averaged
    into the update after the one it missed instead, as an accumulator that kept late gradients would."""
    lr = np.float32(opts.update_lr(opts.lr or linear().lr))

    def grad(version: np.ndarray, mb: int) -> np.ndarray:
        x, y = _linear_batch(opts, mb)
        r = version[0] * x + version[1] - y
        return np.array([np.mean(2 * r * x), np.mean(2 * r)], np.float32)

    versions = [np.zeros(2, np.float32)]
    for g in range(1, int(df.loc[df["applied"], "global_step"].max()) + 1):
        grads = [grad(versions[g - 1], mb) for mb in df.loc[df["applied"] & (df["global_step"] == g), "minibatch"]]
        grads += [grad(read, df.at[i, "minibatch"]) for i, read in (late_reads or {}).items()
                  if df.at[i, "global_step"] == g - 1]
        versions.append(versions[g - 1] - lr * (sum(grads[1:], grads[0]) / np.float32(len(grads))))
    return versions


def test_sync_backup_drops_late_gradients(run_dir: Path) -> None:
    """With N=3 and B=1 each update averages the first N-B gradients of its step, from distinct workers, and the
    late ones are logged and dropped. Checked as properties of the records, whatever schedule a loaded machine
    makes, not as counts: every logged loss is the loss at a version its worker could have read, and the final
    parameters are exactly those of the applied gradients alone, not those with the dropped ones kept."""
    # a 0.2 s step of the straggler spans many updates of the other two, whose steps take at least 20 ms: nearly all
    # its pushes come late, the first (read at version 0) mid-run. The fast workers' own floor is what keeps it so on
    # a loaded machine: with only the straggler held (0.1 s), busy cores slowed the others to its pace, its pushes came
    # in time, and the one late push of a CI run was the last (keeping it would have changed no loss: 3e-7)
    r = ssptk.run(mode="sync", backup=1, workers=3, steps=80, straggler=["0:0.02", "1:0.02", "2:0.2"],
                  out=str(run_dir), warm=True)
    df, _ = records(run_dir)
    applied, late = df[df["applied"]], df[~df["applied"]]
    counts = applied.groupby("global_step")["worker"].agg(list)
    assert list(counts.index) == list(range(1, 81))
    # at least N-B, from distinct workers (take_grad averages all it holds: a gradient of the step's own version
    # that lands between the (N-B)-th and the take is in time, and is averaged too)
    assert all(len(set(w)) == len(w) >= 2 for w in counts), counts.to_dict()
    assert len(late) >= 1, "no gradient was late: the run cannot show that late ones are dropped"
    versions = _linear_versions(df, r.options)
    for row in applied.itertuples():  # an applied gradient was computed at its update's previous version
        assert row.loss == pytest.approx(_linear_loss(versions[row.global_step - 1], r.options, row.minibatch),
                                         rel=1e-4), row
    late_reads = {}
    for row in late.itertuples():  # a late one read a version between the step it was for and the push
        assert row.staleness >= 1, row
        # w and b are read one by one, so an update can land between the two reads (TF's PS reads are not
        # atomic across variables; CI saw one): w of one version and b of another
        span = range(row.global_step - row.staleness, row.global_step + 1)
        pairs = sorted(((vw, vb) for vw in span for vb in span), key=lambda p: p[0] != p[1])  # whole versions first
        candidates = [np.array([versions[vw][0], versions[vb][1]]) for vw, vb in pairs]
        reads = [c for c in candidates
                 if row.loss == pytest.approx(_linear_loss(c, r.options, row.minibatch), rel=1e-4)]
        assert reads, row
        late_reads[row.Index] = reads[0]
    final = [r.summary["params"]["w"], r.summary["params"]["b"]]
    np.testing.assert_allclose(final, versions[-1], rtol=1e-4)  # dropped gradients never reached the parameters
    # the losses above could tell: with the dropped gradients kept, applied ones would have seen other versions
    kept = _linear_versions(df, r.options, late_reads)
    off = [abs(row.loss / _linear_loss(kept[row.global_step - 1], r.options, row.minibatch) - 1)
           for row in applied.itertuples()]
    assert max(off) > 1e-2, f"keeping the late gradients would change no loss by 1% (at most {max(off):.1e})"


def test_allreduce_keras(run_dir: Path) -> None:
    r = ssptk.run(model="keras", mode="allreduce", workers=2, steps=60, out=str(run_dir))
    df, _ = records(run_dir)
    assert df.groupby("worker").size().to_dict() == {0: 60, 1: 60}
    assert max_skew(df, 2) <= 1 and _falls(df, 10, to=0.6)
    assert not (run_dir / "logs" / "ps-0.log").exists()  # no PS in allreduce
    assert r.summary["final_loss"] < 0.5


def test_keras_ssp_learns(run_dir: Path) -> None:
    r = ssptk.run(model="keras", mode="ssp", staleness=1, workers=2, steps=100, out=str(run_dir), warm=True)
    df, _ = records(run_dir)
    assert len(df) == 200 and max_skew(df, 2) <= 2
    assert df["loss"].iloc[-20:].mean() < 0.6 * df["loss"].iloc[:20].mean()
    assert r.summary["final_loss"] < 0.4


def test_user_model_from_import_path(run_dir: Path, user_model_path: str) -> None:
    r = ssptk.run(model="usermodels:regression", mode="ssp", staleness=1, workers=2, steps=100, out=str(run_dir))
    assert r.ok and r.summary["final_loss"] < 0.05
    final = json.loads((run_dir / "model" / "final.json").read_text())
    assert final["variables"] == {"dense/kernel": [3, 1]}


def test_seeded_delays_repeat_exactly(tmp_path: Path) -> None:
    runs = [ssptk.run(mode="async", workers=2, steps=15, jitter="exp:0.005", straggler=["1:0.002"], seed=11,
                      out=str(tmp_path / f"r{k}"), warm=True) for k in range(2)]
    frames = [records(Path(r.run_dir))[0].sort_values(["worker", "step"]) for r in runs]
    for w in (0, 1):
        got = [f[f["worker"] == w]["delay_s"].to_numpy() for f in frames]
        expected = DelayModel(w, {1: 0.002}, parse_jitter("exp:0.005"), 11).take(len(got[0]))
        np.testing.assert_allclose(got[0], np.round(expected, 6), atol=1e-6)
        np.testing.assert_allclose(got[1][: len(got[0])], got[0][: len(got[1])], atol=1e-6)
    from conftest import assert_gone

    assert_gone(str(tmp_path))
