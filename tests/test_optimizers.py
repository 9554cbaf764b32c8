"""``--optimizer SPEC``: its grammar and refusals, the labels that say it, the memory its slots take, and its NumPy
rule (the replay's), without a cluster."""
from __future__ import annotations

import subprocess

import numpy as np
import pytest
from conftest import ssptk_cmd

import ssptk
from ssptk.core.labels import canonical_label, label_dir, label_options
from ssptk.core.optimizers import Optimizer, apply, learning_rate, new_state, parse_optimizer
from ssptk.core.option_checks import check_memory
from ssptk.core.options import resolve
from ssptk.core.resources import run_estimate, slot_part
from ssptk.experiment.compare import parse_labels


@pytest.mark.parametrize("spec, canonical, slots", [
    ("sgd", "sgd", 0), ("momentum:0.9", "momentum:0.9", 1), ("momentum", "momentum:0.9", 1),
    ("nesterov:0.5", "nesterov:0.5", 1), ("momentum:0", "momentum:0.0", 1), ("adam", "adam", 2),
    ("adam:0.9,0.999,1e-8", "adam", 2), ("ADAM:0.8", "adam:0.8,0.999,1e-08", 2), ("adam:0.9,0.99,0", "adam:0.9,0.99,0.0", 2),
])
def test_specs_and_their_canonical_form(spec: str, canonical: str, slots: int) -> None:
    opt = parse_optimizer(spec)
    assert str(opt) == canonical and opt.slots == slots
    assert resolve(optimizer=spec).optimizer == canonical  # config.json keeps the canonical spec


@pytest.mark.parametrize("spec, match", [
    ("adamw", r"^unknown optimizer 'adamw': did you mean adam\? \(use sgd, momentum:BETA"),
    ("rmsprop", r"^unknown optimizer 'rmsprop': use sgd, momentum:BETA, nesterov:BETA, adam or adam:B1,B2,EPS$"),
    ("momentum:1", r"^bad --optimizer 'momentum:1': BETA must be a number in \[0, 1\), got '1'"),
    ("nesterov:-0.1", r"^bad --optimizer 'nesterov:-0.1': BETA must be a number in \[0, 1\), got '-0.1'"),
    ("momentum:nan", r"BETA must be a number in \[0, 1\), got 'nan'"),
    ("adam:1.0", r"B1 must be a number in \[0, 1\), got '1.0'"),
    ("adam:0.9,1.5", r"B2 must be a number in \[0, 1\), got '1.5'"),
    ("adam:0.9,0.999,-1e-8", r"EPS must be a finite number >= 0, got '-1e-8'"),
    ("adam:0.9,0.999,inf", r"EPS must be a finite number >= 0, got 'inf'"),
    ("adam:0.9,0.999,nan", r"EPS must be a finite number >= 0, got 'nan'"),
    ("adam:0.9,0.999,1e-8,3", r"adam takes at most three numbers"),
    ("sgd:0.1", r"sgd takes no numbers"),
    ("momentum:0.5,0.5", r"momentum takes one number, BETA"),
])
def test_a_bad_spec_is_refused_in_one_line(spec: str, match: str) -> None:
    with pytest.raises(ssptk.UsageError, match=match) as e:
        resolve(optimizer=spec)
    assert "\n" not in str(e.value)


def test_the_cli_refuses_a_bad_spec_with_exit_2_before_anything_starts(tmp_path) -> None:
    for spec, said in (("adamw", "unknown optimizer 'adamw'"), ("momentum:1.5", "BETA must be a number in [0, 1)"),
                       ("adam:0.9,0.999,-1", "EPS must be a finite number >= 0")):
        r = subprocess.run([*ssptk_cmd(), "run", "--optimizer", spec, "--out", str(tmp_path / "r")],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 2, r.stderr
        assert r.stderr.startswith("ssptk: error: ") and said in r.stderr and r.stderr.count("\n") == 1, r.stderr
        assert not (tmp_path / "r").exists()
    r = subprocess.run([*ssptk_cmd(), "compare", "async", "async@adamw", "--out", str(tmp_path / "c")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "bad comparison label 'async@adamw': unknown optimizer" in r.stderr, r.stderr
    r = subprocess.run([*ssptk_cmd(), "sim", "--optimizer", "adam"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--optimizer needs --model" in r.stderr, r.stderr


def test_labels_say_the_optimizer_and_sgd_changes_none() -> None:
    assert resolve(mode="async").label == "async" and resolve(mode="ssp:3", optimizer="sgd").label == "ssp:3"
    assert resolve(mode="async", optimizer="adam").label == "async\u00b7adam"
    assert resolve(mode="local:4", optimizer="nesterov:0.5").label == "local:4\u00b7nesterov:0.5"
    assert label_options("async\u00b7adam") == {"mode": "async", "optimizer": "adam"}
    assert label_options("ssp:4+inverse@momentum") == {"mode": "ssp", "staleness": 4, "lr_staleness": "inverse",
                                                       "optimizer": "momentum:0.9"}
    assert canonical_label("async@momentum") == "async\u00b7momentum:0.9"
    assert canonical_label("sync", "adam") == "sync\u00b7adam" and canonical_label("sync", "sgd") == "sync"
    assert label_dir("async@momentum") == label_dir("async\u00b7momentum:0.9") == "async.momentum-0.9"
    # a comparison's own optimizer goes on every label that has none; a label's own wins
    plan = parse_labels(["sync", "async\u00b7momentum:0.5", "ssp:2"], "adam")
    assert [label for label, _ in plan] == ["sync\u00b7adam", "async\u00b7momentum:0.5", "ssp:2\u00b7adam"]
    assert [label for label, _ in parse_labels(["sync", "ssp:2", "async+inverse"])] == ["sync", "ssp:2",
                                                                                       "async+inverse"]
    with pytest.raises(ssptk.UsageError, match="comparison labels repeat"):
        parse_labels(["async@adam", "async\u00b7adam"])


def test_adam_s_default_learning_rate_is_the_model_s_adam_lr() -> None:
    from ssptk.core.models import digits, load_model

    assert learning_rate(None, digits(), "sgd") == 0.1 and learning_rate(None, digits(), "momentum:0.9") == 0.1
    assert learning_rate(None, digits(), "adam") == 0.01
    assert learning_rate(None, load_model("mlp:256"), "adam") == 1e-3  # no adam_lr of its own: Kingma and Ba's
    assert learning_rate(0.3, digits(), "adam") == 0.3


def test_the_memory_estimate_counts_the_slots_where_they_live() -> None:
    assert slot_part("sgd", 0, 10**6, 1) == {}
    assert slot_part("adam", 2, None, 1) == {}  # a user model: its size is not known before it is built
    base = run_estimate(3, 16, 200).total
    on_ps = run_estimate(3, 16, 200, slots=slot_part("adam", 2, 10**6, 1)).total
    assert on_ps - base == 8 * 10**6
    per_worker = slot_part("momentum:0.9", 1, 10**6, 3)
    assert list(per_worker.values())[0][0] == 12 * 10**6 and "on each of 3 workers" in list(per_worker)[0]
    # mlp:8192 (67.7 M parameters): Adam's two slots on each of 16 allreduce workers are 8.1 GB more than SGD needs
    sgd = resolve(model="mlp:8192", mode="allreduce", workers=16)
    check_memory(sgd, available=6 * 2**30, sized=False)
    with pytest.raises(ssptk.UsageError, match=r"--optimizer adam's slots, 2 x 67731466 parameters on each of 16 "
                                               r"workers: 8\.1 GB"):
        check_memory(resolve(model="mlp:8192", mode="allreduce", workers=16, optimizer="adam"),
                     available=6 * 2**30, sized=False)


def _momentum_by_hand(beta: float, nesterov: bool, grads: list[np.ndarray], lr: float) -> np.ndarray:
    w, a = np.float32(1.0), np.float32(0.0)
    for g in grads:
        a = a * np.float32(beta) + g
        w = w - (g * np.float32(lr) + a * np.float32(beta) * np.float32(lr) if nesterov else a * np.float32(lr))
    return w


def test_the_numpy_rules_carry_their_slots_from_update_to_update() -> None:
    grads = [np.float32(g) for g in (0.5, -0.25, 1.0, 0.75)]
    for spec in ("momentum:0.9", "nesterov:0.5"):
        opt = parse_optimizer(spec)
        params = [np.asarray(np.float32(1.0))]
        state = new_state(opt, params)
        for g in grads:
            params = apply(opt, params, [np.asarray(g)], 0.1, state)
        assert float(params[0]) == pytest.approx(float(_momentum_by_hand(opt.beta, opt.name == "nesterov", grads, 0.1)))
    # Adam's first step moves each parameter by lr against its gradient's sign (bias-corrected m / sqrt(v) = 1)
    opt = Optimizer("adam")
    params = [np.array([1.0, 1.0], np.float32)]
    state = new_state(opt, params)
    params = apply(opt, params, [np.array([3.0, -1e-3], np.float32)], 0.01, state)
    np.testing.assert_allclose(params[0], [0.99, 1.01], rtol=1e-4)
    assert state[0][2] == np.float32(0.9) * np.float32(0.9)  # beta1^t after one update: the next step's correction


# --- sliding over momentum: the sweep (CLI, magics, API) and the staleness explorer --------------------------------

def test_the_sweep_command_slides_over_momentum_in_any_mode() -> None:
    from ssptk.commands import build_parser, compare_plan

    for notebook in (False, True):
        parser = build_parser(notebook=notebook)
        plan = compare_plan(parser.parse_args("sweep --momentum 0.9,0,0.5 --workers 2".split()))
        assert plan.labels == ["async", "async\u00b7momentum:0.5", "async\u00b7momentum:0.9"]
        plan = compare_plan(parser.parse_args("sweep --momentum 0,0.9 --mode ssp:4".split()))
        assert plan.labels == ["ssp:4", "ssp:4\u00b7momentum:0.9"]
        with pytest.raises(ssptk.UsageError, match="--mode goes with --momentum"):
            compare_plan(parser.parse_args("sweep --staleness 0,1 --mode async".split()))
        with pytest.raises(ssptk.UsageError, match="exactly one of --staleness"):
            compare_plan(parser.parse_args("sweep --momentum 0 --staleness 1".split()))
    with pytest.raises(ssptk.UsageError, match=r"invalid momentum list '0,1': use numbers in \[0, 1\)"):
        build_parser(notebook=True).parse_args("sweep --momentum 0,1".split())


def test_the_api_sweep_and_the_explorer_slide_over_momentum(tmp_path, monkeypatch) -> None:
    from test_widgets import FakeRunner

    from ssptk.notebook import staleness_widgets

    monkeypatch.chdir(tmp_path)
    fake = FakeRunner(tmp_path / "runs")
    sw = staleness_widgets.sweep(momentum=[0.9, 0.0], runner=fake, workers=2, steps=5, mode="sync")
    assert list(sw.results) == ["sync", "sync\u00b7momentum:0.9"]
    assert [(c["mode"], c.get("optimizer", "sgd")) for c in fake.calls] == [("sync", "sgd"), ("sync", "momentum:0.9")]
    sw.widget
    assert sw.slider.description == "momentum \u03b2" and sw.title.startswith("ssptk momentum sweep")
    with pytest.raises(ssptk.UsageError, match="a momentum sweep sets --optimizer"):
        staleness_widgets.sweep(momentum=[0.5], runner=fake, optimizer="adam")
    ex = staleness_widgets.staleness_explorer(workers=2, staleness=[0, 2], momentum=[0, 0.9], runner=fake, steps=5)
    assert ex.momentum_slider is not None and ex.momentum_slider.description == "momentum \u03b2"
    ex.run(2)
    ex.momentum_slider.value = 0.9
    ex.run(2)
    assert [c.get("optimizer") for c in fake.calls[-2:]] == ["sgd", "momentum:0.9"]
    assert [c["staleness"] for c in fake.calls[-2:]] == [2, 2]
    assert sorted(ex._labels(list(ex.results)).values()) == ["S=2 \u03b2=0", "S=2 \u03b2=0.9"]
    with pytest.raises(ssptk.UsageError, match="drop optimizer"):
        staleness_widgets.staleness_explorer(momentum=[0.5], optimizer="adam", runner=fake)
