"""The owners of on-disk formats: the step record (:mod:`ssptk.core.records`: one type, one JSON-line rule) and
the comparison directory (:class:`ssptk.rundir.ComparisonDir`: every path, and what is there)."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ssptk.core.errors import UsageError
from ssptk.core.records import STEP_COLUMNS, StepRecord, finite_or_null, json_line
from ssptk.rundir import ComparisonDir, RunDir, read_run
from ssptk.rundir import logs as rundir_logs
from ssptk.runtime.recorder import Recorder
from ssptk.sim import COLUMNS as SIM_COLUMNS


def _record(**kw: object) -> StepRecord:
    fields: dict = {"t": 1.5, "worker": 1, "step": 2, "global_step": 5, "loss": 0.25, "wait_s": 0.1234567,
                    "staleness": 1, "minibatch": 7, "delay_s": 0.0, **kw}
    return StepRecord(**fields)


# --- the step record ----------------------------------------------------------------------------------------

def test_a_step_record_line_is_what_workers_always_wrote() -> None:
    """Byte for byte the line the recorder wrote before the record had a type (old run directories and new ones
    read alike): compact, keys in contract order, wait and delay to the microsecond, lr_scale only when set."""
    assert _record().json_line() == ('{"t":1.5,"worker":1,"step":2,"global_step":5,"loss":0.25,"wait_s":0.123457,'
                                     '"staleness":1,"minibatch":7,"delay_s":0.0,"applied":true}\n')
    line = _record(loss=np.float32("nan"), applied=False, lr_scale=0.5, t=np.float64(2.0), minibatch=np.int64(3))
    assert json.loads(line.json_line()) == {"t": 2.0, "worker": 1, "step": 2, "global_step": 5, "loss": None,
                                            "wait_s": 0.123457, "staleness": 1, "minibatch": 3, "delay_s": 0.0,
                                            "applied": False, "lr_scale": 0.5}
    assert list(json.loads(line.json_line())) == [*STEP_COLUMNS, "lr_scale"]


def test_the_step_record_takes_keywords_only() -> None:
    with pytest.raises(TypeError):
        StepRecord(1.0, 0, 1, 1, 0.5, 0.0, 0, 0, 0.0)  # positional: refused


def test_one_column_list_for_logs_simulator_and_record() -> None:
    assert rundir_logs.STEP_COLUMNS == SIM_COLUMNS == STEP_COLUMNS
    assert STEP_COLUMNS == ("t", "worker", "step", "global_step", "loss", "wait_s", "staleness", "minibatch",
                            "delay_s", "applied")


@pytest.mark.parametrize("value, expected", [(None, None), (float("nan"), None), (-math.inf, None),
                                             (np.float32(0.5), 0.5), (3, 3.0)])
def test_finite_or_null(value: object, expected: float | None) -> None:
    assert finite_or_null(value) == expected


def test_the_recorder_writes_records_and_events_as_lines(tmp_path: Path) -> None:
    rd = RunDir(tmp_path)
    rec = Recorder(rd.worker_log(1), 1)
    rec.event("start", cpu_s=0.5)
    rec.step(_record(loss=math.inf))
    rec.close()
    lines = Path(rd.worker_log(1)).read_text().splitlines(keepends=True)
    assert lines[1] == _record(loss=None).json_line()
    assert json.loads(lines[0])["event"] == "start" and lines[0] == json_line(json.loads(lines[0]))
    steps, events = read_run(tmp_path)
    assert list(steps.columns) == list(STEP_COLUMNS) and steps["loss"].isna().all()
    assert list(events["event"]) == ["start"]


# --- the comparison directory -------------------------------------------------------------------------------

def _run(path: Path) -> None:
    path.mkdir(parents=True)
    (path / "summary.json").write_text("{}")


def test_comparison_paths(tmp_path: Path) -> None:
    cd = ComparisonDir(tmp_path / "out")
    out = str(tmp_path / "out")
    assert os.fspath(cd) == out
    assert cd.run_path("ssp:2") == os.path.join(out, "ssp-2")
    assert cd.run_path("ssp:2", 3) == os.path.join(out, "ssp-2", "rep-3")
    assert cd.predicted_path("ssp:2") == os.path.join(out, "predicted", "ssp-2")
    assert cd.predicted_dir == os.path.join(out, "predicted")
    assert (cd.metrics_path, cd.report_path) == (os.path.join(out, "metrics.csv"), os.path.join(out, "report.html"))


def test_comparison_lists_labels_in_metrics_order(tmp_path: Path) -> None:
    """Labels as metrics.csv lists them, the others by name; repetitions by k (10 after 2); predicted runs
    beside them; directories that are no run (``predicted/`` itself, ``logs/``, a rep-k without a run) left out."""
    out = tmp_path / "out"
    _run(out / "async")
    for k in (1, 2, 10):
        _run(out / "ssp-2" / f"rep-{k}")
    (out / "ssp-2" / "rep-3").mkdir()
    _run(out / "sync")
    _run(out / "predicted" / "ssp-2")
    (out / "logs").mkdir()
    cd = ComparisonDir(out)
    cd.write_metrics(pd.DataFrame({"label": ["ssp:2", "async", "gone"], "rep": [1, 1, 1]}))
    assert cd.listed_labels() == ["ssp:2", "async", "gone"]
    found = cd.labels()
    assert [x.label for x in found] == ["ssp:2", "async", "sync"]
    ssp = found[0]
    assert ssp.path == cd.label_path("ssp:2") and ssp.predicted == cd.predicted_path("ssp:2")
    assert ssp.reps == tuple(cd.run_path("ssp:2", k) for k in (1, 2, 10))
    assert found[1].reps == () and found[1].predicted is None
    assert cd.run_dirs() == []  # no config.json nor workers/ anywhere
    os.makedirs(RunDir(cd.run_path("sync")).workers_dir)
    assert cd.run_dirs() == [cd.run_path("sync")]


def test_comparison_without_runs_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="is not a directory; pass a comparison output directory"):
        ComparisonDir(tmp_path / "nothing").labels()
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match=r"^no run directories \(with config.json, summary.json or workers/\)"):
        ComparisonDir(tmp_path / "empty").labels()
    assert ComparisonDir(tmp_path / "empty").listed_labels() == []


# --- summary.json and config.json: typed owners -------------------------------------------------------------

def test_the_typed_owners_have_every_key_the_contract_holds() -> None:
    """Each key :mod:`ssptk.rundir.contract` holds summary.json and config.json (and their sections) to is an
    attribute of its owner: a key added to the contract without one fails here."""
    from ssptk.rundir import Predicted, RunConfig, Summary, TaskInfo, TrafficSection, contract

    assert set(contract._SUMMARY) <= set(Summary.KEYS), set(contract._SUMMARY) - set(Summary.KEYS)
    assert set(contract._TRAFFIC_SUMMARY) <= set(TrafficSection.KEYS)
    assert set(contract._CONFIG) <= set(RunConfig.KEYS) | {"options"}
    assert {"warm", "reused", "runs_served", "layout", "isolation", "traffic", "tracking"} <= set(TaskInfo.KEYS)
    assert set(Predicted.KEYS) == {"overhead_s", "gap_s", "cores"}


def test_a_summary_reads_as_attributes_and_is_written_back_as_it_was_read(tmp_path: Path) -> None:
    """A summary.json of a later version (a key this one does not know) or an older one (keys missing) reads: what
    it lacks is ``None``, what this version does not know is kept, and writing it back gives the same JSON."""
    from ssptk.rundir import Summary, TrafficSection

    stored = {"status": "ok", "steps_per_s": 12.5, "traffic": {"step_ms": 80.0, "busiest": ["ps:0", 0.5]},
              "predicted": {"overhead_s": 0.01}, "a_later_key": [1, 2]}
    rd = RunDir(tmp_path)
    rd.write_summary(stored)
    before = Path(rd.summary_path).read_bytes()
    s = rd.summary()
    assert isinstance(s, Summary) and s == stored
    assert (s.ok, s.steps_per_s, s.overhead_ms, s.diverged, s.per_worker_steps) == (True, 12.5, None, None, {})
    assert isinstance(s.traffic, TrafficSection) and s.traffic.busiest_share == 0.5 and s.traffic.split is None
    assert s.predicted is not None and s.predicted.overhead_s == 0.01 and not s.predicted.shows_cores
    rd.write_summary(s)
    assert Path(rd.summary_path).read_bytes() == before
    assert json.loads(before)["a_later_key"] == [1, 2]
    assert RunDir(tmp_path / "none").summary() == {} and RunDir(tmp_path / "none").summary().status is None


def test_an_old_config_reads_as_attributes() -> None:
    """The recorded run's config.json (written before ``tasks``, ``launched`` and ``predicted`` existed) reads: its
    options as stored, resolved ones with defaults, and ``None`` or empty for the rest."""
    from ssptk.rundir import RunConfig

    recorded = Path(__file__).resolve().parent / "fixtures" / "recorded" / "ssp2-straggler"
    config = RunDir(recorded).config()
    assert isinstance(config, RunConfig) and config.options is not None
    assert (config.mode, config.workers, config.bound, config.options.eval_every) == ("ssp", 3, 2, None)
    assert config.options.resolved().straggler == ((2, 0.01),)
    assert (config.tasks.cores, config.tasks.reused, config.tasks.traffic_not_measured) == (None, False, None)
    assert (config.predicted, config.launched, config.cluster) == (None, None, {})
    assert RunConfig.of({"options": {"mode": "sync", "workers": 2}}).bound is None
    assert RunConfig.of({"tasks": {"cores": 1.5, "traffic": "not measured (no tc)"}}).tasks.traffic_not_measured \
        == "no tc"


# --- the contract's version ---------------------------------------------------------------------------------

def _write_lines(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_a_version_1_local_run_reads_as_version_2(tmp_path: Path) -> None:
    """A local SGD run written before the contract's version 2 (no ``contract`` in config.json; its records keep the
    local steps since the last average in ``staleness``, and have no ``local_step``) reads as version 2 has it:
    ``local_step`` the local steps, ``staleness`` the rounds a delta missed (a late one's: the rounds applied
    since its own began)."""
    from ssptk.core.records import upgraded
    from ssptk.rundir import load_run
    from ssptk.rundir.contract import CONTRACT_VERSION

    old = {"options": {"mode": "local", "local_steps": 2, "workers": 1, "steps": 4, "model": "linear"}}
    (tmp_path / "config.json").write_text(json.dumps(old))
    step = {"worker": 0, "loss": 1.0, "wait_s": 0.0, "delay_s": 0.0}
    _write_lines(tmp_path / "workers" / "worker-0.jsonl", [
        {"event": "start", "t": 1.0, "worker": 0},
        {**step, "t": 1.1, "step": 1, "global_step": 1, "staleness": 0, "minibatch": 0, "applied": True, "local_round": 1},
        {**step, "t": 1.2, "step": 2, "global_step": 1, "staleness": 1, "minibatch": 1, "applied": True, "local_round": 1},
        {**step, "t": 1.3, "step": 3, "global_step": 2, "staleness": 0, "minibatch": 2, "applied": True, "local_round": 2},
        {**step, "t": 1.4, "step": 4, "global_step": 4, "staleness": 1, "minibatch": 3, "applied": False,
         "local_round": 2}])
    steps, _, config, _ = load_run(tmp_path)
    assert config.contract == 1 and CONTRACT_VERSION == 2
    assert steps["local_step"].tolist() == [0, 1, 0, 1]
    assert steps["staleness"].tolist() == [0, 0, 0, 3]  # the late delta of round 2 arrived at global step 4
    new = {"t": 2.0, "worker": 0, "step": 1, "global_step": 1, "staleness": 0, "local_round": 1, "local_step": 1}
    assert upgraded(new) is new  # a version-2 record is left as it is; so is a record of another mode
    recorded = Path(__file__).resolve().parent / "fixtures" / "recorded" / "ssp2-straggler"
    assert "local_step" not in load_run(recorded)[0] and RunDir(recorded).config().contract == 1


def test_a_new_run_directory_says_its_contract_version(tmp_path: Path) -> None:
    from ssptk.core.options import resolve
    from ssptk.rundir.contract import CONTRACT_VERSION

    RunDir(tmp_path).write_config(resolve(mode="local:2"), {}, {})
    assert json.loads((tmp_path / "config.json").read_text())["contract"] == CONTRACT_VERSION
    assert RunDir(tmp_path).config().contract == CONTRACT_VERSION
    record = _record(local_round=1, local_step=1)
    assert list(record.to_dict())[-2:] == ["local_round", "local_step"]
