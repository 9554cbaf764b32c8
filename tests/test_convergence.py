"""Convergence, not only speed: the divergence rule, targets that a diverged or failed run cannot win, and the
learning-rate convention. Fast tests use hand-made losses and run directories; slow ones real clusters."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from ssptk import analysis as an
from ssptk.core.divergence import DivergenceWatch, find_divergence
from ssptk.core.errors import UsageError
from ssptk.core.options import resolve
from ssptk.render.table_notes import target_lines
from ssptk.render.tables import format_table
from ssptk.rundir import load_run

try:  # shared synthetic run directories
    from test_analysis import write_run
except ImportError:  # tests/ imported as a package
    from tests.test_analysis import write_run


# --- the divergence rule ----------------------------------------------------------------------------

def test_a_converging_noisy_loss_never_diverges() -> None:
    rng = np.random.default_rng(0)
    losses = 100 * np.exp(-np.arange(2000) / 50) + 0.1 + rng.exponential(0.3, 2000)  # noise 3x the floor
    assert find_divergence(losses.tolist(), list(range(1, 2001)), window=15) == (False, None)


pytestmark = pytest.mark.usefixtures("module_warm_clusters")


def test_an_exploding_loss_diverges_where_it_passes_both_tests() -> None:
    losses = [100.0 * 0.9 ** k for k in range(60)] + [0.18 * 2.0 ** k for k in range(30)]
    diverged, at = find_divergence(losses, list(range(1, 91)), window=5)
    assert diverged
    smoothed = pd.Series(losses).rolling(5).mean()
    expected = next(i for i in range(4, 90) if smoothed[i] > smoothed[4] and smoothed[i] > 10 * smoothed[4:i + 1].min())
    assert at == expected + 1  # the global step of that record


def test_rising_but_below_the_start_is_not_divergence() -> None:
    losses = [100.0] * 10 + [1.0] * 10 + [50.0] * 40  # 50x its minimum, but never above where it started
    assert find_divergence(losses, list(range(60)), window=5) == (False, None)


def test_non_finite_losses_and_negative_losses() -> None:
    assert find_divergence([1.0, 0.5, math.nan, 0.1], [1, 2, 3, 4], window=2) == (True, 3)
    assert find_divergence([1.0, None, 0.1], [1, 2, 3], window=2) == (True, 2)
    falling = [-float(k) for k in range(50)]  # a negative loss that keeps improving
    assert find_divergence(falling, list(range(50)), window=3) == (False, None)
    watch = DivergenceWatch(window=3)
    for k, loss in enumerate([-1.0, -2.0, -3.0, -3.0, -3.0, 40.0, 40.0, 40.0]):
        watch.add(loss, k)
    assert watch.diverged and watch.at == 6  # smoothed 25.7 > start -2 and 28.7 above |min| 3 by > 9x


# --- targets and the table --------------------------------------------------------------------------

def _records(losses: list[float], workers: int = 2, t0: float = 10.0) -> list[tuple]:
    """(t, worker, step, loss, wait_s, staleness) per record, alternating workers, 0.1 s apart."""
    return [(t0 + 0.1 * (k + 1), k % workers, k // workers + 1, loss, 0.0, 1) for k, loss in enumerate(losses)]


@pytest.fixture
def runs(tmp_path: Path) -> dict[str, tuple]:
    """sync converges to ~0.1; async dips below it early, then diverges; ssp is slow but converges; failed
    was fastest to a low loss and then failed."""
    falling = [10.0 * 0.8 ** k + 0.1 for k in range(60)]
    dips_then_explodes = [10.0 * 0.5 ** k + 0.05 for k in range(20)] + [0.05 * 3.0 ** k for k in range(20)]
    slow = [10.0 * 0.9 ** k + 0.12 for k in range(120)]
    fast_then_failed = [10.0 * 0.3 ** k + 0.01 for k in range(12)]
    specs = {"sync": (falling, "ok"), "async": (dips_then_explodes, "ok"), "ssp:2": (slow, "ok"),
             "failed": (fast_then_failed, "failed")}
    out = {}
    for label, (losses, status) in specs.items():
        mode = label.partition(":")[0] if label != "failed" else "async"
        write_run(tmp_path / label, _records(losses), workers=2, mode=mode, staleness=2, start=10.0,
                  done={0: 10.0 + 0.1 * len(losses), 1: 10.0 + 0.1 * len(losses)},
                  summary={"status": status, "mode": mode, "workers": 2, "final_loss": losses[-1]})
        out[label] = load_run(tmp_path / label)
    return out


def test_a_diverged_or_failed_run_is_never_first_to_the_target(runs: dict[str, tuple]) -> None:
    table = an.compare_table(runs).set_index("label")
    assert bool(table.loc["async", "diverged"]) and not table["diverged"].drop("async").any()
    # the target: 1.25 x the best final smoothed loss among the converged runs (sync ~0.1, ssp ~0.12)
    best = min(runs["sync"][0]["loss"].tail(10).mean(), runs["ssp:2"][0]["loss"].tail(10).mean())
    assert table.attrs["target"] == pytest.approx(1.25 * best)
    assert table.attrs["first_to_target"] == "sync"
    assert pd.isna(table.loc["async", "time_to_target_s"]) and pd.isna(table.loc["failed", "time_to_target_s"])
    assert pd.isna(table.loc["async", "steps_to_target"])
    assert table.loc["sync", "time_to_target_s"] < table.loc["ssp:2", "time_to_target_s"]
    text = format_table(an.compare_table(runs))
    assert "DIVERGED" in text.splitlines()[3]  # async's row, beside its label
    lines = target_lines(an.compare_table(runs))
    assert lines[0].startswith(f"Target training loss {1.25 * best:.4g} (1.25 x the best final smoothed")
    assert "first to reach it: sync" in lines[0] and lines[1].startswith("Diverged: async")


def test_an_explicit_target_and_no_converged_run(runs: dict[str, tuple]) -> None:
    table = an.compare_table(runs, target=5.0)
    assert table.attrs["target"] == 5.0 and not table.attrs["target_auto"]
    assert pd.isna(table.set_index("label").loc["async", "time_to_target_s"])  # diverged: never a time
    only_bad = an.compare_table({k: runs[k] for k in ("async", "failed")})
    assert only_bad.attrs["target"] is None and only_bad.attrs["first_to_target"] is None
    assert only_bad["time_to_target_s"].isna().all()
    assert target_lines(only_bad)[0].startswith("Target training loss: none (no run converged)")


def test_summary_fields_and_repeats(runs: dict[str, tuple]) -> None:
    s = an.summarize(runs["async"][0], runs["async"][1], runs["async"][2])
    assert s["diverged"] is True and isinstance(s["diverged_at_step"], int)
    assert an.summarize(runs["sync"][0], runs["sync"][1], runs["sync"][2])["diverged"] is False
    table = an.aggregate_repeats(an.repeat_table({"async": [runs["async"], runs["sync"]], "sync": [runs["sync"]]}))
    row = table.set_index("label").loc["async"]
    assert bool(row["diverged"]) and row["time_to_target_s"] == pytest.approx(
        table.set_index("label").loc["sync", "time_to_target_s"])  # only the converged repetition counts


@pytest.mark.parametrize("bad", ["x", float("nan"), float("inf"), True])
def test_bad_targets_are_refused(bad: object, tmp_path: Path) -> None:
    import ssptk

    with pytest.raises(UsageError, match="--target must be a training loss"):
        ssptk.compare(["sync", "async"], out=str(tmp_path / "c"), target=bad)
    assert not (tmp_path / "c").exists()


# --- the learning-rate convention ---------------------------------------------------------------------

def test_lr_convention_options() -> None:
    assert resolve(mode="sync", workers=4).update_lr(0.1) == pytest.approx(0.4)
    assert resolve(mode="sync", workers=4, backup=1).update_lr(0.1) == pytest.approx(0.3)
    assert resolve(mode="allreduce", workers=3).update_lr(0.1) == pytest.approx(0.3)
    assert resolve(mode="async", workers=4).update_lr(0.1) == resolve(mode="ssp", workers=4).update_lr(0.1) == 0.1
    assert resolve(mode="sync", workers=4, lr_convention="mean").update_lr(0.1) == 0.1
    with pytest.raises(UsageError, match="--lr-convention must be minibatch or mean, got 'sum'"):
        resolve(lr_convention="sum")


def test_the_live_dashboard_and_the_explorer_line_say_diverged() -> None:
    from ssptk.notebook.dashboard import LiveDashboard
    from ssptk.render.overlay import summary_line

    dash = LiveDashboard(interval=0, sink=lambda *a: None)
    dash.started("x", resolve(mode="async", workers=2), 200)
    losses = [10.0 * 0.7 ** k + 0.1 for k in range(30)] + [0.1 * 2.0 ** k for k in range(25)]
    steps = [{"t": 10.0 + 0.01 * k, "worker": k % 2, "step": k // 2 + 1, "global_step": k + 1, "loss": loss}
             for k, loss in enumerate(losses)]
    dash.records(steps[:30], [], 30, 200)
    assert "DIVERGED" not in dash.progress_text()
    dash.records(steps[30:], [], len(steps), 200)
    assert dash.state.divergence.diverged
    assert f"DIVERGED at global step {dash.state.divergence.at}" in dash.progress_text()
    assert "color:#b00" in dash._progress_html()
    line = summary_line("S=4", {"status": "ok", "diverged": True, "diverged_at_step": 37, "steps_per_s": 10.0})
    assert line.startswith("S=4: DIVERGED at global step 37: 10.0 steps/s")


# --- with real clusters ------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("mode, convention, scale", [("sync", "minibatch", 1.0), ("sync", "mean", 0.5),
                                                     ("allreduce", "minibatch", 1.0)])
def test_one_update_moves_the_parameters_by_the_documented_step(mode: str, convention: str, scale: float,
                                                                  tmp_path: Path) -> None:
    """One sync (allreduce) update of the linear model from w = b = 0, checked against NumPy: with the
    minibatch convention it is lr x the sum of the two workers' gradients, with the mean one lr x their mean."""
    from conftest import assert_gone

    import ssptk
    from ssptk.core.models import linear, minibatch

    lr, batch, seed = 0.1, 8, 3
    # warm (sync): the parametrisations and the inverse-staleness test share one cluster's tasks
    r = ssptk.run(mode=mode, workers=2, steps=1, lr=lr, batch=batch, seed=seed, lr_convention=convention,
                  out=str(tmp_path / "r"), gpus="none", warm=True)
    grad_w = grad_b = 0.0
    for mb in (0, 1):  # step 1's minibatches: worker i computes minibatch i
        x, y = (a.astype("float64") for a in minibatch(linear(), seed, mb, batch))
        grad_w += float(np.mean(-2.0 * y * x))  # d/dw mean((w x + b - y)^2) at w = b = 0
        grad_b += float(np.mean(-2.0 * y))
    assert r.summary["params"]["w"] == pytest.approx(-lr * scale * grad_w, rel=1e-4)
    assert r.summary["params"]["b"] == pytest.approx(-lr * scale * grad_b, rel=1e-4)
    assert r.config["options"]["lr_convention"] == convention
    assert_gone(str(tmp_path))


@pytest.mark.slow
def test_a_diverging_async_run_is_marked_and_sync_is_first_to_the_target(tmp_path: Path) -> None:
    """The issue's own scenario: at lr 0.45 with SyncReplicasOptimizer's convention (sync applies the mean of
    4 gradients), sync converges while async's stale gradients blow up. async used to rank first."""
    from conftest import assert_gone

    import ssptk

    common = {"model": "linear", "lr": 0.45, "lr_convention": "mean", "workers": 4, "jitter": "exp:0.01",
              "gpus": "none"}
    try:  # one warm cluster for the three runs (the failed one discards it)
        cmp = ssptk.compare(["sync", "async"], out=str(tmp_path / "cmp"), steps=150, warm=True, **common)
        _check_divergence_table(cmp, tmp_path)
        with pytest.raises(ssptk.RunFailed,
                           match=r"^ssptk: diverged at global step \d+ \(the smoothed training loss"):
            ssptk.run(mode="async", steps=5000, stop_on_divergence=True, out=str(tmp_path / "stop"), warm=True,
                      **common)
    finally:
        ssptk.shutdown()
    summary = json.loads((tmp_path / "stop" / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["diverged"] and summary["total_steps"] < 2000
    assert_gone(str(tmp_path))


def _check_divergence_table(cmp: Any, tmp_path: Path) -> None:
    table = cmp.table.set_index("label")
    assert cmp.runs["async"].summary["diverged"] is True and cmp.runs["async"].summary["diverged_at_step"] > 0
    assert cmp.runs["sync"].summary["diverged"] is False and cmp.runs["sync"].ok and cmp.runs["async"].ok
    assert bool(table.loc["async", "diverged"]) and pd.isna(table.loc["async", "time_to_target_s"])
    assert table.loc["sync", "time_to_target_s"] > 0 and cmp.table.attrs["first_to_target"] == "sync"
    csv = pd.read_csv(tmp_path / "cmp" / "metrics.csv").set_index("label")
    assert pd.isna(csv.loc["async", "time_to_target_s"]) and pd.isna(csv.loc["async", "steps_to_target"])
    text = " ".join(str(cmp).split())  # the lines under the table are wrapped at 100 columns
    assert "first to reach it: sync" in text and "Diverged: async" in text


@pytest.mark.slow
def test_inverse_staleness_scales_each_update(tmp_path: Path) -> None:
    """--lr-staleness inverse: each async update is lr / (staleness + 1) x its gradient. Two workers, one
    minibatch each, from w = b = 0: the final parameters are replayed in NumPy from the logged minibatches,
    the parameters each gradient was computed at, and the logged scales."""
    from conftest import assert_gone

    import ssptk
    from ssptk.core.models import linear, minibatch

    lr, batch, seed = 0.1, 8, 5
    r = ssptk.run(mode="async", workers=2, steps=1, lr=lr, batch=batch, seed=seed, lr_staleness="inverse",
                  straggler=["1:0.3"], out=str(tmp_path / "r"), gpus="none", warm=True)
    records = r.df.sort_values("global_step")
    assert len(records) == 2 and list(records["global_step"]) == [1, 2]
    assert list(records["lr_scale"]) == pytest.approx([1.0 / (s + 1) for s in records["staleness"]])
    params = [np.zeros(2)]  # (w, b) after each update
    for rec in records.itertuples():
        x, y = (a.astype("float64") for a in minibatch(linear(), seed, int(rec.minibatch), batch))
        w, b = params[rec.global_step - 1 - rec.staleness]  # what this step read
        err = w * x + b - y
        grad = np.array([np.mean(2 * err * x), np.mean(2 * err)])
        params.append(params[-1] - lr * rec.lr_scale * grad)
    assert [r.summary["params"]["w"], r.summary["params"]["b"]] == pytest.approx(list(params[-1]), rel=1e-4)
    with pytest.raises(ssptk.UsageError, match="--lr-staleness applies to async and ssp, not sync"):
        ssptk.run(mode="sync", lr_staleness="inverse", out=str(tmp_path / "no"))
    assert_gone(str(tmp_path))


def test_inverse_staleness_scales_each_update_by_its_own_recorded_staleness(tmp_path: Path) -> None:
    """Four busy async workers: every update's scale is 1 / (its logged staleness + 1). The scale was once read from
    the global step before the update, and another worker's update counted in between left it scaled for less
    staleness than its record says (155 of 400 records here; the intermittent [1.0, 1.0] of the test above)."""
    from conftest import assert_gone

    import ssptk

    r = ssptk.run(mode="async", workers=4, steps=100, lr=0.01, lr_staleness="inverse", model="mlp:64",
                  out=str(tmp_path / "r"), gpus="none")
    records = r.df
    assert len(records) == 400 and (records["staleness"] > 0).any()
    mismatched = records[(records["lr_scale"] - 1.0 / (records["staleness"] + 1)).abs() > 1e-12]
    assert mismatched.empty, mismatched[["worker", "global_step", "staleness", "lr_scale"]].head().to_string()
    assert_gone(str(tmp_path))


# --- the digits model -----------------------------------------------------------------------------------

def test_digits_has_a_fixed_held_out_split() -> None:
    from ssptk.core.models import digits, eval_batch, load_model, minibatch

    spec = load_model("digits")
    x, y = minibatch(spec, 0, 0, 16)
    assert x.shape == (16, 64) and x.dtype == np.float32 and 0.0 <= x.min() and x.max() <= 1.0
    assert y.dtype == np.int64 and set(y) <= set(range(10))
    xe, ye = eval_batch(spec, 0)
    assert xe.shape == (359, 64) and sorted(set(ye)) == list(range(10))
    assert np.array_equal(eval_batch(digits(), 7)[0], xe)  # the same held-out images for every run and seed
    train = {row.tobytes() for row in minibatch(spec, 0, 1, 5000)[0]}
    assert not any(row.tobytes() in train for row in xe)  # no training draw is a held-out image


@pytest.mark.slow
def test_digits_trains_in_every_mode_and_reports_accuracy(tmp_path: Path) -> None:
    from conftest import assert_gone

    import ssptk

    try:  # warm: the three PS modes share one cluster (allreduce starts its own)
        cmp = ssptk.compare(["sync", "ssp:2", "async", "allreduce"], out=str(tmp_path / "cmp"), model="digits",
                            workers=3, steps=200, gpus="none", warm=True)
    finally:
        ssptk.shutdown()
    table = cmp.table.set_index("label")
    assert (table["status"] == "ok").all() and not table["diverged"].any()
    assert table.loc["sync", "final_accuracy"] >= 0.9, table["final_accuracy"]
    assert (table["final_accuracy"] > 0.8).all(), table["final_accuracy"]
    final = json.loads((tmp_path / "cmp" / "sync" / "model" / "final.json").read_text())
    assert final["eval_accuracy"] == pytest.approx(cmp.runs["sync"].summary["final_accuracy"])
    assert "accuracy (held out)" in str(cmp.runs["sync"])
    assert_gone(str(tmp_path))


def test_comparison_labels_can_carry_the_inverse_mitigation() -> None:
    from ssptk.experiment.compare import parse_labels
    from ssptk.render.table_notes import lr_lines

    assert parse_labels(["async", "async+inverse", "ssp:4+inverse"]) == [
        ("async", {"mode": "async"}), ("async+inverse", {"mode": "async", "lr_staleness": "inverse"}),
        ("ssp:4+inverse", {"mode": "ssp", "staleness": 4, "lr_staleness": "inverse"})]
    with pytest.raises(UsageError, match=r"bad comparison label 'sync\+inverse': \+inverse \(--lr-staleness "
                                         r"inverse\) applies to ssp and async only"):
        parse_labels(["sync+inverse"])
    lines = lr_lines([{"lr_convention": "minibatch"}, {"lr_convention": "minibatch", "lr_staleness": "inverse"}])
    assert len(lines) == 2 and lines[1].startswith("Runs with --lr-staleness inverse (labels ending in +inverse)")
