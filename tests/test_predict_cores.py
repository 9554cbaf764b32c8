"""``--cores``: the cores the simulated workers share, in every prediction path (``ssptk sim``, ``ssptk.simulate``,
``ssptk.predict``, ``compare --predict``) and a run's ideal steps/s, which uses the cores the run had
(config.json's ``tasks.cores``). A free run's step is the overhead as measured; the simulator takes its CPU work."""
from __future__ import annotations

from pathlib import Path

import pytest
from conftest import assert_gone, skip_or_fail
from helpers import ideal

import ssptk
from ssptk.commands import build_parser
from ssptk.core.errors import UsageError
from ssptk.core.option_args import from_namespace, to_argv
from ssptk.core.options import resolve
from ssptk.core.resources import machine_cores
from ssptk.render.text import format_summary
from ssptk.rundir import recorded_cores
from ssptk.sim import simulate as sim_simulate
from ssptk.sim.spec import shared_cores

MODEL_BYTES = 4.0 * 85_000  # mlp:256's parameters, float32
BOUND = "ps=20mbit"  # 7 pulls/s of mlp:256: the link keeps the workers apart
FREE = "ps=10gbit"


# --- the option -------------------------------------------------------------------------------------------------

def test_the_cli_parses_cores_for_every_command_and_passes_them_on() -> None:
    parser = build_parser()
    for argv in (["sim", "--cores", "4"], ["run", "--cores", "4"], ["compare", "sync", "--cores", "4"]):
        assert from_namespace(parser.parse_args(argv)).cores == 4.0
    assert from_namespace(parser.parse_args(["sim", "--cores", "0"])).cores == 0.0
    assert from_namespace(parser.parse_args(["sim"])).cores is None  # not given: this machine's, resolved later
    opts = resolve(cores=2.5)
    assert to_argv(opts)[to_argv(opts).index("--cores") + 1] == "2.5" and "--cores" not in to_argv(resolve())
    shown = " ".join(parser.commands["sim"].format_help().split())
    assert "--cores C the CPU cores the workers share in a prediction" in shown
    assert "0: each worker has a machine of its own" in shown


@pytest.mark.parametrize("bad", [-1, "two", True, float("inf"), float("nan")])
def test_bad_cores_are_refused_in_one_line(bad: object) -> None:
    with pytest.raises(UsageError, match=r"^--cores must be a number"):
        resolve(cores=bad)
    with pytest.raises(UsageError, match=r"^--cores must be a number"):
        ssptk.simulate("async", 4, 10, network=BOUND, model_bytes=MODEL_BYTES, cores=bad)


def test_the_cli_refuses_negative_cores_with_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    from ssptk.cli import main

    assert main(["sim", "--mode", "async", "--cores", "-2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--cores must be a number of cores >= 0" in err[0]


def test_cores_resolve_against_the_machine_or_the_run() -> None:
    assert machine_cores() >= 1
    assert shared_cores(None, 3) == 3.0 and shared_cores(None, None) is None  # not given: the default
    assert shared_cores(0, 3) is None and shared_cores(2, None) == 2.0  # 0: each its own machine
    assert recorded_cores({"tasks": {"cores": 2}}) == 2.0
    assert recorded_cores({"tasks": {"warm": True}}) is None and recorded_cores({"tasks": {"cores": -1}}) is None
    assert recorded_cores({}) is None and recorded_cores(None) is None


def _cores_in_a_cgroup_with_a_quota(cpus: float) -> str:
    """``machine_cores()`` as a process in a fresh cgroup (v1's cpu controller, or v2's) limited to ``cpus``."""
    import os
    import subprocess
    import sys
    import uuid

    v1 = Path("/sys/fs/cgroup/cpu")
    group = (v1 if (v1 / "cpu.cfs_quota_us").exists() else Path("/sys/fs/cgroup")) / f"ssptk-test-{uuid.uuid4().hex[:8]}"
    try:
        group.mkdir()
        if group.parent == v1:
            (group / "cpu.cfs_period_us").write_text("100000")
            (group / "cpu.cfs_quota_us").write_text(str(int(cpus * 100000)))
        else:
            (group / "cpu.max").write_text(f"{int(cpus * 100000)} 100000")
    except OSError as e:
        skip_or_fail(f"needs a cgroup whose CPU quota this user may set ({e}): run the tests as root")
    try:
        code = "from ssptk.core.resources import machine_cores; print(machine_cores())"
        enter = f"echo $$ > {group / 'cgroup.procs'} && exec {sys.executable} -c '{code}'"
        return subprocess.run(["sh", "-c", enter], capture_output=True, text=True, check=True, timeout=60,
                              env=dict(os.environ)).stdout.strip()
    finally:
        group.rmdir()


def test_a_cgroups_cpu_quota_narrows_this_machines_cores() -> None:
    cpus = len(__import__("os").sched_getaffinity(0))
    assert _cores_in_a_cgroup_with_a_quota(0.5) == "0.5"  # a container given half a CPU
    if cpus >= 2:
        assert _cores_in_a_cgroup_with_a_quota(1.5) == "1.5"
    assert _cores_in_a_cgroup_with_a_quota(cpus + 3) == str(cpus)  # a quota above the CPUs there changes nothing


def test_the_tightest_quota_from_a_cgroup_up_counts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ssptk.core import resources

    # cgroup v2's files, which this machine's cpu controller (v1) cannot show: a parent at 3 CPUs, its child at 1.25
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "cpu.max").write_text("max 100000\n")
    (tmp_path / "a" / "cpu.max").write_text("300000 100000\n")
    (tmp_path / "a" / "b" / "cpu.max").write_text("125000 100000\n")
    monkeypatch.setattr(resources, "_cgroup_paths", lambda: {"": "/a/b"})
    assert resources.cgroup_cpus(str(tmp_path)) == 1.25
    monkeypatch.setattr(resources, "_cgroup_paths", lambda: {"": "/"})
    assert resources.cgroup_cpus(str(tmp_path)) is None  # "max": no quota


# --- the timing-only predictions ---------------------------------------------------------------------------------

def test_ssptk_simulate_shares_this_machines_cores_by_default() -> None:
    kw = dict(overhead=0.07, network="ps=100mbit", model_bytes=MODEL_BYTES, seed=1)
    default = ssptk.simulate("async", 4, 150, **kw)
    own = ssptk.simulate("async", 4, 150, cores=0, **kw)
    two = ssptk.simulate("async", 4, 150, cores=2, **kw)
    assert default.cores == float(machine_cores()) and own.cores is None and two.cores == 2.0
    # a 70 ms step measured with 4 workers on 2 cores is 35 ms of CPU: kept apart by the link, each computes it
    # faster than 70 ms, so more steps fit in; each on its own machine a step is its 70 ms
    assert two.steps_per_s > 1.05 * own.steps_per_s
    # where nothing keeps them apart (the free link), the cores change nothing: the overhead is the measured step
    free = [ssptk.simulate("async", 8, 40, overhead=0.06, network=FREE, model_bytes=MODEL_BYTES, cores=c).steps_per_s
            for c in (0, 2)]
    assert free[1] == pytest.approx(free[0], rel=0.05)
    # and without a shaped network they change nothing at all
    plain = [ssptk.simulate("async", 8, 40, overhead=0.06, straggler={1: 0.03}, cores=c) for c in (0, 2)]
    assert plain[0].steps_per_s == plain[1].steps_per_s and plain[1].cores is None


def test_the_ideal_uses_the_cores_the_run_had_and_does_not_count_them_twice() -> None:
    """A simulated shaped run (a 300 ms free step, 4 workers on 2 cores), calibrated as a real run's summary would
    be: with the cores it had, the ideal finds its free step and pace again (the overhead taken as the measured step
    and turned into CPU work once); taking each worker on its own CPU, the overhead comes out too small."""
    net = "ps=100mbit"
    run = sim_simulate("async", 4, 40, overhead=0.3, network=net, model_bytes=MODEL_BYTES, seed=1, cores=2)
    kw = dict(seed=1, network=net, model_bytes=MODEL_BYTES)
    had = ideal(run.steps, "async", 4, 40, cores=2, **kw)
    own = ideal(run.steps, "async", 4, 40, **kw)
    assert had["ideal_cores"] == 2.0 and own["ideal_cores"] is None
    assert had["overhead_ms"] == pytest.approx(300, rel=0.05)  # the free run's step, found again
    assert had["ideal_steps_per_s"] == pytest.approx(run.steps_per_s, rel=0.1)
    assert own["overhead_ms"] < 0.9 * had["overhead_ms"]
    assert ideal(run.steps, "async", 4, 40, seed=1, cores=2)["ideal_cores"] is None  # no network: no cores


def test_a_predictions_summary_says_whose_cores() -> None:
    base = {"status": "ok", "mode": "async", "workers": 4, "overhead_ms": 20.0}
    shared = format_summary({**base, "predicted": {"overhead_s": 0.02, "cores": 2.0}})
    own = format_summary({**base, "predicted": {"overhead_s": 0.02, "cores": None}})
    plain = format_summary({**base, "predicted": {"overhead_s": 0.02}})
    assert "the workers sharing 2 cores (--cores)" in shared
    assert "each worker on a machine of its own (--cores 0)" in own
    assert "cores" not in plain
    ideal = format_summary({**base, "ideal_steps_per_s": 30.0, "measured_over_ideal": 0.9, "ideal_cores": 2.0})
    assert "overhead, the workers sharing 2 cores (--cores): measured / ideal 0.90" in ideal


def test_a_planned_prediction_shares_this_machines_cores_unless_told(tmp_path: Path) -> None:
    from ssptk.experiment.predicted_runs import plan

    common = dict(model="digits", mode="async", workers=4, steps=5)
    shaped = plan(0.01, run_dir=str(tmp_path / "a"), network=BOUND, **common)
    assert shaped.cores == float(machine_cores()) and shaped.shown_cores == {"cores": float(machine_cores())}
    own = plan(0.01, run_dir=str(tmp_path / "b"), network=BOUND, cores=0, **common)
    assert own.cores is None and own.shown_cores == {"cores": None}
    three = plan(0.01, run_dir=str(tmp_path / "c"), network=BOUND, cores=3, **common)
    assert three.cores == 3.0
    free = plan(0.01, run_dir=str(tmp_path / "d"), **common)  # no shaped network: config.json says nothing of them
    assert free.shown_cores == {}
    with pytest.raises(UsageError, match="^--cores must be a number of cores >= 0"):
        plan(0.01, run_dir=str(tmp_path / "e"), network=BOUND, cores=-1, **common)


def test_recorded_cores_are_held_to_the_contract() -> None:
    from ssptk.rundir.contract import check_config, check_summary

    base = {"options": {"mode": "async", "workers": 2, "steps": 5}}
    good, why = check_config({**base, "tasks": {"warm": False, "cores": 2}, "predicted": {"overhead_s": 0.01,
                                                                                          "cores": None}})
    assert why == "" and good["tasks"]["cores"] == 2 and good["predicted"]["cores"] is None
    for bad in ({"tasks": {"cores": -1}}, {"tasks": {"cores": "x"}}, {"predicted": {"overhead_s": 0.01, "cores": "x"}},
                {"options": {**base["options"], "cores": -2}}):
        kept, why = check_config({**base, **bad})
        assert why and recorded_cores(kept) is None and kept.get("options", {}).get("cores") is None
    assert check_summary({"ideal_cores": 0})[1] and check_summary({"ideal_cores": 2.0}) == ({"ideal_cores": 2.0}, "")


def test_a_comparison_of_predictions_says_whose_cores() -> None:
    import pandas as pd

    from ssptk.analysis import compare_table
    from ssptk.render.terminal_table import terminal_text

    steps = sim_simulate("async", 2, 10, overhead=0.01).steps
    events = pd.DataFrame(columns=["event", "t", "worker"])

    def run(predicted: dict) -> tuple:
        config = {"options": {"mode": "async", "workers": 2, "steps": 10}, "predicted": predicted}
        return steps, events, config, {"status": "ok", "predicted": predicted}

    shared = compare_table({"a": run({"overhead_s": 0.01, "cores": 2.0}), "b": run({"overhead_s": 0.01, "cores": 2.0})})
    assert shared.attrs["predicted_cores"] == [2.0]
    assert "overhead_ms); the workers sharing 2 cores (--cores)." in " ".join(terminal_text(shared).split())
    plain = compare_table({"a": run({"overhead_s": 0.01})})  # no shaped network: the cores changed nothing
    assert plain.attrs["predicted_cores"] == [] and "--cores" not in terminal_text(plain)
    own = compare_table({"a": run({"overhead_s": 0.01, "cores": None})})
    assert "each worker on a machine of its own (--cores)" in " ".join(terminal_text(own).split())


# --- a real run and its prediction ------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.needs_tc
@pytest.mark.usefixtures("module_warm_clusters")
def test_compare_predict_records_and_uses_the_cores_the_runs_had(tmp_path: Path) -> None:
    """A shaped run records the cores it had; its summary's ideal and its prediction let the workers share them."""
    from ssptk.core.models import builtin_parameters
    from ssptk.rundir import RunDir

    cmp = ssptk.compare(["async"], model="mlp:256", workers=3, steps=6, network=BOUND, gpus="none", predict=True,
                        out=str(tmp_path / "cmp"))
    run, pred = cmp.runs["async"], cmp.predicted["async"]
    assert run.ok and pred.ok
    had = RunDir(run.run_dir).config()["tasks"]["cores"]
    assert had == machine_cores()
    assert run.summary["ideal_cores"] == float(had)
    # the ideal is the one with those cores (recomputed from the run's own records), not the one without
    kw = dict(seed=0, network=BOUND, model_bytes=4.0 * builtin_parameters("mlp:256"))
    with_cores = ideal(run.df, "async", 3, 6, cores=float(had), **kw)
    assert run.summary["ideal_steps_per_s"] == pytest.approx(with_cores["ideal_steps_per_s"])
    # the prediction: the run's overhead as measured (a free step on those cores), the same cores
    predicted = RunDir(pred.run_dir).config()["predicted"]
    assert predicted["cores"] == float(had)
    assert predicted["overhead_s"] == pytest.approx(run.summary["overhead_ms"] / 1000.0)
    # and where its steps read: the run's gap, measured from its records' read_s, which the prediction's summary says
    assert run.summary["gap_ms"] is not None and "read_s" in run.df
    assert predicted.get("gap_s", 0.0) == pytest.approx(min(run.summary["gap_ms"], run.summary["overhead_ms"]) / 1000)
    assert pred.summary["gap_ms"] == pytest.approx(1000 * predicted.get("gap_s", 0.0))
    assert f"the workers sharing {had:g} cores" in format_summary(pred.summary)
    assert_gone(str(tmp_path))
