"""Non-IID data (``--data-split label``) and the held-out loss during a run (``--eval-every``): the data each
worker sees, the ``eval`` records, and targets on the held-out loss. Slow tests use real clusters."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import assert_gone, ssptk_cmd

from ssptk import analysis as an
from ssptk.core.errors import UsageError
from ssptk.core.models import data_source, digits, digits_arrays, linear, minibatch
from ssptk.core.options import resolve
from ssptk.experiment.single import check_before_start
from ssptk.render.table_notes import target_lines
from ssptk.rundir import load_run

try:
    from test_analysis import write_run
except ImportError:
    from tests.test_analysis import write_run


def test_a_label_split_gives_each_worker_its_own_labels() -> None:
    spec = digits()
    _, y, _, _ = digits_arrays()
    order = np.sort(y)
    bounds = [(s[0], s[-1]) for s in np.array_split(order, 4)]
    for worker in range(4):
        draw = data_source(spec, seed=3, batch=64, split="label", worker=worker, workers=4)
        seen = np.concatenate([draw(mb)[1] for mb in range(40)])
        lo, hi = bounds[worker]
        assert seen.min() >= lo and seen.max() <= hi, (worker, np.unique(seen), bounds[worker])
        again = data_source(spec, seed=3, batch=64, split="label", worker=worker, workers=4)
        assert np.array_equal(draw(7)[0], again(7)[0])  # seeded by (seed, minibatch index), as IID batches
    assert len(np.unique(np.concatenate([data_source(spec, 0, 64, "label", w, 4)(0)[1] for w in range(4)]))) > 4
    iid = data_source(spec, seed=3, batch=16)
    assert np.array_equal(iid(5)[0], minibatch(spec, 3, 5, 16)[0])


@pytest.mark.parametrize("kwargs, message", [
    ({"data_split": "label"}, r"--data-split label needs --eval-every K \(e\.g\. 50\): with non-IID data"),
    ({"data_split": "shards"}, r"--data-split must be iid or label, got 'shards'"),
    ({"eval_every": -5}, r"--eval-every must be >= 0 \(0: evaluate only at the end\), got -5"),
])
def test_bad_split_and_eval_options(kwargs: dict, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        resolve(model="digits", **kwargs)


def test_a_label_split_needs_a_model_with_a_training_set() -> None:
    with pytest.raises(UsageError, match=r"--data-split label needs a model with train_set .*linear has none: "
                                         r"use --model digits"):
        check_before_start(resolve(model="linear", data_split="label", eval_every=10, gpus="none"))
    with pytest.raises(UsageError, match=r"needs a model with train_set"):
        data_source(linear(), 0, 4, "label", 0, 2)


def _eval_run(tmp_path: Path, label: str, held_out: list[float], final: float, status: str = "ok",
              training: float = 0.01) -> tuple:
    """A run whose training loss is ``training`` throughout and whose worker 0 logged ``held_out`` at
    t = 11, 12, ...; 10 step records per second from t = 10."""
    n = 10 * (len(held_out) + 1)
    records = [(10.0 + 0.1 * (k + 1), k % 2, k // 2 + 1, training, 0.0, 1) for k in range(n)]
    d = write_run(tmp_path / label, records, workers=2, mode="async", staleness=0, start=10.0,
                  done={0: 10.0 + 0.1 * n, 1: 10.0 + 0.1 * n}, partial=False,
                  summary={"status": status, "mode": "async", "workers": 2, "final_loss": final})
    with open(d / "workers" / "worker-0.jsonl", "a") as f:
        for k, loss in enumerate(held_out):
            f.write(json.dumps({"event": "eval", "t": 11.0 + k, "worker": 0, "global_step": 10 * (k + 1),
                                "eval_loss": loss, "eval_accuracy": 0.5}) + "\n")
    return load_run(d)


def test_targets_are_on_the_held_out_loss_when_every_run_logged_it(tmp_path: Path) -> None:
    """'fast' has the lowest training loss (its workers fit their own labels) but a poor held-out loss:
    the table measures both runs on the held-out loss, and 'good' is first."""
    runs = {"good": _eval_run(tmp_path, "good", [2.0, 1.0, 0.3, 0.2], final=0.2, training=0.05),
            "fast": _eval_run(tmp_path, "fast", [2.0, 1.5, 1.2, 1.1], final=1.0, training=0.001)}
    table = an.compare_table(runs).set_index("label")
    assert table.attrs["target_on"] == "held-out"
    assert table.attrs["target"] == pytest.approx(0.25)  # 1.25 x the best final held-out loss
    assert table.attrs["first_to_target"] == "good"
    assert table.loc["good", "time_to_target_s"] == pytest.approx(4.0)  # the eval at t = 14 (0.2 <= 0.25)
    assert table.loc["good", "steps_to_target"] == 40  # records that landed by t = 14
    assert pd.isna(table.loc["fast", "time_to_target_s"])
    line = target_lines(an.compare_table(runs))[0]
    assert line.startswith("Target held-out loss 0.25 (1.25 x the best final held-out loss at the end")
    assert "first to reach it: good (4 s, 40 minibatches)" in line
    # a run without eval records: back to the training loss for all
    plain = _eval_run(tmp_path, "plain", [], final=0.3)
    assert an.compare_table({**runs, "plain": plain}).attrs["target_on"] == "training"


def test_the_final_evaluation_ends_the_held_out_curve(tmp_path: Path) -> None:
    steps, events, _, summary = _eval_run(tmp_path, "r", [2.0, 1.0], final=0.4)
    curve = an.held_out_curve(events, steps, summary)
    assert curve["eval_loss"].tolist() == [2.0, 1.0, 0.4]
    assert curve["t"].iloc[-1] == pytest.approx(float(steps["t"].max()))


@pytest.mark.slow
def test_a_label_split_run_logs_held_out_evaluations(tmp_path: Path) -> None:
    """async and sync, one CLI comparison (one cluster serves both runs): each logs worker 0's held-out
    evaluations each time the global step passes a multiple of --eval-every."""
    out = tmp_path / "cmp"
    proc = subprocess.run([*ssptk_cmd(), "compare", "async", "sync", "--model", "digits", "--workers", "2",
                           "--steps", "60", "--data-split", "label", "--eval-every", "20", "--gpus", "none",
                           "--out", str(out)], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for mode in ("async", "sync"):
        steps, events, config, summary = load_run(out / mode)
        assert config["options"]["data_split"] == "label" and config["options"]["eval_every"] == 20
        evals = events[events["event"] == "eval"]
        assert set(evals["worker"]) == {0}
        updates = 120 if mode == "async" else 60
        # one evaluation each time the global step passes a multiple of 20: sync's workers see every step; async's
        # worker 0 sees the steps it logs, so its evaluations are the multiples its own records pass (a worker 0 that
        # a busy machine starts late sees the first ones pass before its first step)
        passed = [int(g) // 20 for g in evals["global_step"]]
        if mode == "sync":
            assert passed == list(range(1, len(passed) + 1)) and len(passed) >= updates // 20 - 1, evals
        else:
            seen, last = [], 0
            for g in steps[steps["worker"] == 0].sort_values("step")["global_step"]:
                if int(g) // 20 > last:
                    last = int(g) // 20
                    seen.append(last)
            assert passed == seen and len(passed) >= 2, (evals, seen)
        assert evals["eval_loss"].notna().all() and evals["eval_accuracy"].between(0, 1).all()
        assert evals["eval_loss"].iloc[-1] < evals["eval_loss"].iloc[0], mode
    assert_gone(str(out))


def test_the_report_draws_the_held_out_loss_it_measured_the_target_on(tmp_path: Path) -> None:
    from ssptk.render.held_out_plot import held_out_figure
    from ssptk.render.report import build_report

    runs = {"good": _eval_run(tmp_path, "good", [2.0, 1.0, 0.3, 0.2], final=0.2),
            "fast": _eval_run(tmp_path, "fast", [2.0, 1.5, 1.2, 1.1], final=1.0)}
    report = build_report(runs, title="t")
    captions = [c for c, _ in report.figures]
    assert "Held-out loss during training (what the target is measured on)" in captions
    fig = held_out_figure(runs, 0.25)
    ax_t, ax_m = fig.axes
    assert [line.get_label() for line in ax_t.get_lines()][:2] == ["good", "fast"]
    assert list(ax_m.get_lines()[0].get_xdata()) == [10, 20, 30, 40, 50]  # minibatches landed by each evaluation
    assert ax_t.get_lines()[-1].get_ydata()[0] == pytest.approx(0.25)  # the target line
