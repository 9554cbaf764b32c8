"""The shared option grammar: parsing, validation messages, and the CLI's exit code 2 before any process."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ssptk_cmd

from ssptk.api import compare, new_run_dir, parse_labels, run
from ssptk.cli import build_parser
from ssptk.core.delays import DelayModel, parse_jitter, parse_straggler
from ssptk.core.errors import UsageError
from ssptk.core.labels import DelayComp
from ssptk.core.models import load_model
from ssptk.core.option_args import from_namespace, to_argv
from ssptk.core.options import OPTIONS, resolve


def test_defaults_and_ssp_shorthand() -> None:
    o = resolve()
    assert (o.mode, o.bound, o.workers, o.steps) == ("ssp", 2, 3, 200)
    o = resolve(mode="ssp:7", straggler=["1:0.5", "1:0.25"], jitter="uniform:0.01:0.02")
    assert o.bound == 7 and o.stragglers == {1: 0.75} and str(o.jitter_spec) == "uniform:0.01:0.02"


def test_argv_round_trip() -> None:
    o = resolve(mode="sync", backup=1, workers=4, straggler=["3:0.02"], jitter="exp:0.01", no_log=True)
    ns = build_parser().parse_args(["run", *to_argv(o)])
    assert from_namespace(ns) == o


def test_every_option_is_in_the_cli_help() -> None:
    helptext = build_parser().commands["run"].format_help()
    for o in OPTIONS:
        assert "--" + o.name.replace("_", "-") in helptext


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "bsp"}, r"unknown mode 'bsp': did you mean ssp\? \(choose one of sync, ssp, async, allreduce"),
        ({"mode": "asnyc"}, r"unknown mode 'asnyc': did you mean async\? \(choose one of sync, ssp, async"),
        ({"mode": "xyz"}, r"unknown mode 'xyz': choose one of sync, ssp, async, allreduce"),
        ({"model": "resnet"}, r"unknown model 'resnet'"),
        ({"mode": "async", "staleness": 2}, r"--staleness applies to ssp only, not async"),
        ({"mode": "ssp", "staleness": -1}, r"--staleness must be an integer >= 0"),
        ({"workers": 0}, r"--workers must be >= 1"),
        ({"steps": 0}, r"--steps must be >= 1"),
        ({"mode": "sync", "backup": 3, "workers": 3}, r"--backup must be >= 0 and less than --workers \(3\)"),
        ({"mode": "ssp", "backup": 1}, r"--backup applies to sync and local only"),
        ({"straggler": ["3:0.1"], "workers": 3}, r"--straggler index 3 is out of range: workers are 0\.\.2"),
        ({"straggler": ["x"]}, r"bad --straggler 'x': use I:SECONDS"),
        ({"jitter": "normal:1"}, r"bad --jitter 'normal:1': use exp:MEAN, uniform:LO:HI or pause:P:SECONDS"),
        ({"jitter": "uniform:2:1"}, r"bad --jitter"),
        ({"lr": -1.0}, r"--lr must be a finite number > 0"),
        ({"lr": float("inf")}, r"--lr must be a finite number > 0, got inf"),
        ({"lr": float("nan")}, r"--lr must be a finite number > 0, got nan"),
        ({"seed": -1}, r"--seed must be an integer in \[0, 2\*\*32\), got -1"),
        ({"seed": 2**32}, r"--seed must be an integer in \[0, 2\*\*32\)"),
        ({"straggler": ["1:nan"]}, r"--straggler 1:nan: the seconds must be a finite number >= 0"),
        ({"straggler": ["1:inf"]}, r"--straggler 1:inf: the seconds must be a finite number"),
        ({"jitter": "exp:inf"}, r"bad --jitter 'exp:inf': the seconds must be finite numbers"),
        ({"jitter": "uniform:0:inf"}, r"bad --jitter 'uniform:0:inf': the seconds must be finite"),
        ({"colour": "red"}, r"unknown option 'colour'"),
    ],
)
def test_bad_options_say_what_to_do(kwargs: dict, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        resolve(**kwargs)


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("nosuchpkg.mod:fn", r"cannot import module 'nosuchpkg.mod' \(ModuleNotFoundError"),
        ("usermodels:missing", r"module 'usermodels' has no function 'missing'"),
        ("usermodels:raises", r"raises\(\) raised RuntimeError: broken on purpose"),
        ("usermodels:returns_wrong_type", r"returned dict, expected ssptk.ModelSpec"),
    ],
)
def test_user_model_errors_name_the_part_that_failed(path: str, message: str, user_model_path: str) -> None:
    with pytest.raises(UsageError, match=message):
        load_model(path)


def test_api_refuses_bad_input_before_creating_anything(tmp_path: Path, user_model_path: str) -> None:
    out = tmp_path / "r"
    with pytest.raises(UsageError, match="has no function"):
        run(model="usermodels:missing", out=str(out))
    with pytest.raises(UsageError, match="unknown GPU id 7"):
        run(gpus="7", out=str(out))
    assert not out.exists()
    with pytest.raises(UsageError, match=r"only ssp \(ssp:S\) and local \(local:H\) take a number"):
        compare(["sync", "async:3"], out=str(out))
    with pytest.raises(UsageError, match="--straggler index 5"):
        compare(["sync", "ssp:2"], straggler=["5:0.1"], out=str(out))
    assert not out.exists()


def test_non_empty_output_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "keep.txt").write_text("mine")
    with pytest.raises(UsageError, match=r"exists and is not empty: choose another --out"):
        new_run_dir(str(tmp_path / "old"), "ssp")
    assert (tmp_path / "old" / "keep.txt").read_text() == "mine"
    assert new_run_dir(str(tmp_path / "empty"), "ssp") == str(tmp_path / "empty")


def test_comparison_labels() -> None:
    assert parse_labels(["sync", "ssp:4", "async"]) == [
        ("sync", {"mode": "sync"}), ("ssp:4", {"mode": "ssp", "staleness": 4}), ("async", {"mode": "async"})]
    with pytest.raises(UsageError, match="labels repeat"):
        parse_labels(["ssp:2", "ssp:2"])


def test_delays_are_seeded_per_worker() -> None:
    a = DelayModel(1, {1: 0.5}, parse_jitter("exp:0.1"), seed=3).take(50)
    b = DelayModel(1, {1: 0.5}, parse_jitter("exp:0.1"), seed=3).take(50)
    c = DelayModel(0, {1: 0.5}, parse_jitter("exp:0.1"), seed=3).take(50)
    assert (a == b).all() and (a >= 0.5).all() and not (a - 0.5 == c).all()
    assert (DelayModel(0, None, None, 0).take(5) == 0).all()
    assert parse_straggler("2:0.25") == (2, 0.25)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "--mode", "bsp"], "unknown mode 'bsp'"),
        (["run", "--workers", "2", "--straggler", "2:0.1"], "--straggler index 2 is out of range"),
        (["run", "--jitter", "exp"], "bad --jitter 'exp'"),
        (["run", "--model", "nosuch.module:f"], "cannot import module 'nosuch.module'"),
        (["compare", "sync", "bsp"], "unknown mode 'bsp'"),
        (["sim", "--mode", "sync", "--staleness", "1"], "--staleness applies to ssp only"),
        (["report", "/nonexistent/dir"], "is not a directory"),
    ],
)
def test_cli_usage_errors_exit_2_with_one_line(args: list[str], message: str, tmp_path: Path) -> None:
    p = subprocess.run([*ssptk_cmd(), *args, *(["--out", str(tmp_path / "o")] if args[0] in ("run", "compare") else [])],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    assert message in p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_cli_argparse_errors_exit_2(tmp_path: Path) -> None:
    p = subprocess.run([*ssptk_cmd(), "run", "--workers", "three"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "invalid int value" in p.stderr


def test_worker_command_help_and_bad_task() -> None:
    p = subprocess.run([sys.executable, "-m", "ssptk.worker", "--cluster", '{"worker": ["h:1"]}', "--task", "worker:3"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--task 'worker:3' is not in the cluster" in p.stderr


@pytest.mark.parametrize("name", ["workers", "steps", "batch", "seed", "backup", "restart_failed"])
def test_booleans_are_not_integers(name: str) -> None:
    """Regression: run(workers=True) ran one worker (True was taken as 1)."""
    with pytest.raises(UsageError, match=rf"--{name.replace('_', '-')} must be an integer, got True"):
        resolve(**{name: True})
    with pytest.raises(UsageError, match=r"--staleness must be an integer >= 0, got False"):
        resolve(mode="ssp", staleness=False)


def test_a_repeated_straggler_means_the_same_in_runs_and_the_simulator() -> None:
    """Regression: ``--straggler 2:0.01 --straggler 2:0.02`` added up in a real run and took the last one in
    simulate(). Both add up now."""
    from ssptk.core.delays import DelayModel
    from ssptk.sim import simulate

    o = resolve(workers=3, straggler=["2:0.01", "2:0.02"])
    assert o.stragglers == {2: pytest.approx(0.03)}
    assert DelayModel(2, o.stragglers, None, 0).next() == pytest.approx(0.03)  # what the worker sleeps
    twice = simulate("async", 3, 20, straggler=["2:0.01", "2:0.02"])
    once = simulate("async", 3, 20, straggler=["2:0.03"])
    assert twice.wall_s == pytest.approx(once.wall_s) and twice.steps.equals(once.steps)
    delays = twice.steps.loc[twice.steps["worker"] == 2, "delay_s"].tolist()
    assert delays and delays == pytest.approx([0.03] * len(delays))


def test_local_sgd_and_dc_grammar() -> None:
    """local:H and the suffixes +dc, +dc:LAMBDA, +outer parse once, for --mode and comparison labels alike."""
    o = resolve(mode="local:4", workers=3)
    assert (o.mode, o.local_steps, o.label) == ("local", 4, "local:4")
    assert o.outer_scale == 3.0  # minibatch convention: the round's deltas summed, as sync sums its gradients
    assert resolve(mode="local", lr_convention="mean").outer_scale == 1.0  # mean: plain periodic averaging
    assert resolve(mode="local").local_steps == 4
    assert resolve(mode="local", workers=4, backup=1).aggregated == 3
    assert resolve(mode="async", lr_staleness="dc").lr_staleness == "dc:0.04"
    assert resolve(mode="ssp", lr_staleness="dc:0").delay_comp == DelayComp(0.0)
    assert parse_labels(["local:2", "async+dc", "ssp:3+dc:0.5", "local:8+outer"]) == [
        ("local:2", {"mode": "local", "local_steps": 2}),
        ("async+dc", {"mode": "async", "lr_staleness": "dc:0.04"}),
        ("ssp:3+dc:0.5", {"mode": "ssp", "lr_staleness": "dc:0.5", "staleness": 3}),
        ("local:8+outer", {"mode": "local", "outer_lr": 0.7, "outer_momentum": 0.9, "local_steps": 8})]
    assert to_argv(resolve(mode="local:3", outer_momentum=0.5))[:8] == [
        "--model", "linear", "--mode", "local", "--local-steps", "3", "--outer-momentum", "0.5"]
    # --outer-lr applies to the deltas' mean (1: plain averaging, DiLoCo 0.7); its default follows the convention
    assert resolve(mode="local:4", workers=3, outer_lr=1.0).outer_scale == 1.0
    assert resolve(mode="local:4", workers=3, backup=1).outer_scale == 2.0


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"mode": "local:0"}, r"bad mode 'local:0': use local:H with an integer H >= 1"),
    ({"mode": "local:-1"}, r"bad mode 'local:-1': use local:H with an integer H >= 1"),
    ({"mode": "local8"}, r"did you mean local:8\?"),
    ({"mode": "local", "local_steps": 0}, r"--local-steps must be an integer H >= 1"),
    ({"mode": "sync", "lr_staleness": "dc"}, r"--lr-staleness applies to async and ssp, not sync"),
    ({"mode": "local", "lr_staleness": "dc"}, r"--lr-staleness applies to async and ssp, not local"),
    ({"mode": "async", "lr_staleness": "dc:-0.1"}, r"needs a finite LAMBDA >= 0"),
    ({"mode": "async", "lr_staleness": "dc:x"}, r"needs a finite LAMBDA >= 0"),
    ({"mode": "async", "lr_staleness": "dcc"}, r"none, inverse, dc\[:LAMBDA\] or dca\[:LAMBDA0\]"),
    ({"mode": "sync", "outer_lr": 0.5}, r"--outer-lr applies to local only, not sync"),
    ({"mode": "ssp", "local_steps": 2}, r"--local-steps applies to local only, not ssp"),
    ({"mode": "local", "outer_momentum": 1.0}, r"--outer-momentum must be >= 0 and < 1"),
    ({"mode": "local", "outer_lr": 0}, r"--outer-lr must be a finite number > 0"),
    ({"mode": "async", "backup": 1}, r"--backup applies to sync and local only"),
])
def test_bad_local_and_dc_options_are_refused_in_one_line(kwargs: dict, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        resolve(**kwargs)


@pytest.mark.parametrize(("label", "message"), [
    ("sync+dc", r"bad comparison label 'sync\+dc': \+dc \(--lr-staleness dc\) applies to ssp and async only"),
    ("async+outer", r"\+outer \(DiLoCo's outer optimizer\) applies to local:H only"),
    ("async+dc:-1", r"needs a finite LAMBDA >= 0"),
    ("local:0", r"use local:H with an integer H >= 1"),
    ("async+foo", r"unknown suffix '\+foo'"),
])
def test_bad_semi_sync_labels(label: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_labels([label])


def test_local_sgd_evaluates_every_k_steps_per_worker_as_sync_does() -> None:
    """--eval-every K counts updates: sync's is one step per worker, local:H's round is H, so a local run evaluates
    every K/H rounds (at least 1) and its held-out curve is as fine-grained as sync's."""
    assert resolve(mode="sync", eval_every=50).eval_period == 50
    assert resolve(mode="local:8", eval_every=50).eval_period == 6
    assert resolve(mode="local:8", eval_every=4).eval_period == 1
    assert resolve(mode="local:8", eval_every=0).eval_period == 0


@pytest.mark.parametrize("argv, runs", [
    # one label with a suffix, alone: refused as an unknown mode, though it worked beside another label
    (["compare", "async+dc"], {"async+dc": {"mode": "async", "lr_staleness": "dc:0.04"}}),
    (["compare", "ssp:4+dc:0.1"], {"ssp:4+dc:0.1": {"mode": "ssp", "staleness": 4, "lr_staleness": "dc:0.1"}}),
    (["compare", "local:4+outer"], {"local:4+outer": {"mode": "local", "local_steps": 4, "outer_lr": 0.7}}),
    # what the first label sets is its own: local:4's H was given to sync ("--local-steps applies to local only")
    (["compare", "local:4", "sync"], {"local:4": {"local_steps": 4}, "sync": {"mode": "sync", "local_steps": None}}),
    (["compare", "local:4+outer", "local:8", "--outer-lr", "0.5"],
     {"local:4+outer": {"outer_lr": 0.7, "outer_momentum": 0.9}, "local:8": {"outer_lr": 0.5, "outer_momentum": 0.0}}),
    (["compare", "async+dc", "async", "--lr-staleness", "inverse"],
     {"async+dc": {"lr_staleness": "dc:0.04"}, "async": {"lr_staleness": "inverse"}}),
])
def test_a_comparison_plans_each_label_with_its_own_options(argv: list[str], runs: dict[str, dict]) -> None:
    from ssptk.commands import compare_plan

    plan = compare_plan(build_parser().parse_args(argv))
    assert plan.labels == list(runs) == list(plan.options)
    for label, opts in plan.options.items():  # what compare() runs for this label, resolved once
        assert {k: opts.to_dict()[k] for k in runs[label]} == runs[label], label


def test_a_label_and_its_option_must_agree() -> None:
    """``ssp:2`` with ``staleness=3`` (or ``local:2`` with ``local_steps=3``) was silently ssp:2; the same number twice
    is fine."""
    with pytest.raises(UsageError, match=r"^--mode ssp:2 conflicts with --staleness 3: give the number once$"):
        resolve(mode="ssp:2", staleness=3)
    with pytest.raises(UsageError, match=r"^--mode local:2 conflicts with --local-steps 3"):
        resolve(mode="local:2", local_steps=3)
    assert resolve(mode="ssp:2", staleness=2).bound == 2
