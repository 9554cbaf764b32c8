"""``--jitter trace:PATH``: a run's (or a CSV's) per-worker step times replayed as delays, in real runs and the
simulator (issue 23, point 4). The strict distribution check (quantiles within 10%) is a benchmark
(``benchmarks/bench_trace.py``); here: the reading rules, the exact replay order, and one real replay."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_gone

import ssptk
from ssptk.core.delays import DelayModel, parse_jitter
from ssptk.core.errors import UsageError
from ssptk.core.records import StepRecord
from ssptk.rundir.trace import read_step_trace, step_times
from ssptk.sim import simulate

#: A real run: ssptk run --model linear --mode ssp --staleness 2 --workers 3 --steps 120 --straggler 2:0.01
RECORDED = Path(__file__).resolve().parent / "fixtures" / "recorded" / "ssp2-straggler"


def _csv(tmp_path: Path, rows: list[tuple[int, float]], name: str = "t.csv") -> Path:
    p = tmp_path / name
    p.write_text("worker,seconds\n" + "".join(f"{w},{s}\n" for w, s in rows))
    return p


def test_a_csv_trace_is_each_workers_step_times_in_order(tmp_path: Path) -> None:
    p = _csv(tmp_path, [(0, 0.010), (1, 0.050), (0, 0.012), (1, 0.060), (0, 0.011)])
    assert read_step_trace(str(p)) == ((0.010, 0.012, 0.011), (0.050, 0.060))
    j = parse_jitter(f"trace:{p}")
    assert j is not None and str(j) == f"trace:{p}" and j.longest == pytest.approx(0.06)


def test_a_run_directory_trace_leaves_out_the_modes_waits() -> None:
    times = step_times(str(RECORDED))
    assert sorted(times) == [0, 1, 2] and all(110 <= len(t) <= 120 for t in times.values())
    # worker 2 was the straggler (10 ms a step more): its step times sit above the others'
    assert np.median(times[2]) > np.median(times[0]) + 0.007
    assert read_step_trace(str(RECORDED))[2] == tuple(round(x, 6) for x in times[2])


def test_each_worker_replays_its_source_worker_in_order_from_a_seeded_step(tmp_path: Path) -> None:
    p = _csv(tmp_path, [(0, 0.0), (0, 0.1), (0, 0.2), (1, 0.5), (1, 0.6)])
    j = parse_jitter(f"trace:{p}")
    a, again = DelayModel(0, None, j, seed=3).take(7), DelayModel(0, None, j, seed=3).take(7)
    assert list(a) == list(again)
    start = [0.0, 0.1, 0.2].index(a[0])
    assert list(a) == [[0.0, 0.1, 0.2][(start + k) % 3] for k in range(7)]
    assert set(DelayModel(1, None, j, seed=3).take(4)) <= {0.5, 0.6}
    assert set(DelayModel(2, None, j, seed=3).take(4)) <= {0.0, 0.1, 0.2}  # worker 2 of 3 takes source worker 0
    assert DelayModel(1, {1: 1.0}, j, seed=3).next() >= 1.5  # a straggler adds to the trace


def test_a_replayed_step_is_held_until_it_took_the_source_steps_time(tmp_path: Path) -> None:
    """Pacing: the delay is the source step time less this worker's own (the median of its recent steps)."""
    j = parse_jitter(f"trace:{_csv(tmp_path, [(0, 0.5), (0, 0.5)])}")
    m = DelayModel(0, None, j, seed=0, own_s=0.1)
    assert m.next() == pytest.approx(0.4)  # own_s until steps are seen
    t = 100.0
    for own, wait in [(0.2, 0.0), (0.2, 0.3), (0.2, 0.0)]:  # the mode's wait is not the worker's own time
        delay = m.next()
        t += own + wait + delay
        m.observe(StepRecord(t=t, worker=0, step=1, global_step=1, loss=0.0, wait_s=wait, staleness=0,
                             minibatch=0, delay_s=delay))
    assert m.next() == pytest.approx(0.3)
    slow = DelayModel(0, None, j, seed=0, own_s=0.8)
    assert slow.next() == 0.0  # a worker slower than the source is not held at all


@pytest.mark.parametrize("body, match", [
    (None, r"trace:.*missing: no such file or directory; give a run directory or a CSV of worker,seconds"),
    ("seconds\n0.1\n", r"the CSV needs a header with columns worker,seconds"),
    ("worker,seconds\n0,-1\n", r"line 2: seconds must be a finite number >= 0, not '-1'"),
    ("worker,seconds,note\n0,0.1,x\n", r"needs a header with columns worker,seconds and no others .*not "
                                         r"'worker,seconds,note'"),  # the extra column was ignored
    ("worker,seconds\n0,0.1\n0,0.2,0.3\n", r"line 3: 3 columns; give two, worker and seconds"),
    ("worker,seconds\n12345678901234567890,0.1\n", r"line 2: the worker must be an index from 0 to 9999 in digits, "
                                                   r"not '12345678901234567890'"),  # was taken as worker 1.2e19
    ("worker,seconds\n-1,0.1\n", r"line 2: the worker must be an index from 0 to 9999"),
    ("worker,seconds\n1_0,0.1\n", r"line 2: the worker must be an index"),  # int() reads 10
    ("worker,seconds\n", r"no step times in it"),
    ("", r"the CSV needs a header"),
])
def test_bad_traces_are_refused_in_one_line(tmp_path: Path, body: str | None, match: str) -> None:
    p = tmp_path / "missing"
    if body is not None:
        p.write_text(body)
    with pytest.raises(UsageError, match=match):
        parse_jitter(f"trace:{p}")


@pytest.mark.parametrize("kind", ["fifo", "device", "link to a device", "socket"])
def test_a_trace_that_is_not_a_regular_file_is_refused_without_reading_it(tmp_path: Path, kind: str) -> None:
    """A FIFO hung the run before it started, /dev/zero ran the machine out of memory (the 64 MiB cap used the size
    the file system gave, 0): what is neither a run directory nor a regular file is refused as it is."""
    import socket

    p = tmp_path / "trace.csv"
    if kind == "fifo":
        os.mkfifo(p)
    elif kind == "link to a device":
        os.symlink("/dev/zero", p)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(p))
    path = "/dev/zero" if kind == "device" else str(p)
    what = {"fifo": "a FIFO", "socket": "a socket"}.get(kind, "a device")
    with pytest.raises(UsageError, match=rf"--jitter trace:{re.escape(path)}: {what}, not a regular file; give a "
                                         r"run directory or a CSV of worker,seconds"):
        parse_jitter(f"trace:{path}")


def test_a_file_swapped_for_a_fifo_after_the_look_is_refused_on_the_opened_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The type is checked on the descriptor opened (without blocking), not only on the path looked at first."""
    from ssptk.rundir import trace

    regular, fifo = _csv(tmp_path, [(0, 0.1)]), tmp_path / "swapped.csv"
    os.mkfifo(fifo)
    real_stat = os.stat
    monkeypatch.setattr(trace.os, "stat", lambda p, *a, **k: real_stat(regular if str(p) == str(fifo) else p, *a, **k))
    with pytest.raises(UsageError, match=r"a FIFO, not a regular file; give a run directory or a CSV"):
        read_step_trace(str(fifo))


def test_a_directory_that_is_no_run_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"not a run directory \(no workers/ step logs\) and not a CSV"):
        ssptk.sim.simulate("async", workers=2, steps=5, jitter=f"trace:{tmp_path}")


def test_a_jobs_directory_points_to_its_gathered_run(tmp_path: Path) -> None:
    """A Slurm job's directory (runs/<job id>: a directory per node, and `gathered` once `ssptk report` merged them)
    is not a run: trace:JOBDIR is refused in one line that says what to give instead."""
    import shutil

    job = tmp_path / "1234"
    (job / "sn1" / "workers").mkdir(parents=True)
    (job / "sn1" / "tasks").mkdir()
    j = re.escape(str(job))
    with pytest.raises(UsageError, match=rf"^--jitter trace:{j}: not a run directory but the hosts' directories of "
                                         rf"one: gather them first \(ssptk report {j}/\*\), then give "
                                         rf"trace:{j}/gathered$"):
        parse_jitter(f"trace:{job}")
    shutil.copytree(RECORDED, job / "gathered")
    with pytest.raises(UsageError, match=rf"^--jitter trace:{j}: not a run directory but it holds one, gathered "
                                         rf"from its hosts: give trace:{j}/gathered$"):
        parse_jitter(f"trace:{job}")
    assert len(read_step_trace(str(job / "gathered"))) == 3


def test_the_simulator_replays_a_trace_with_its_stragglers() -> None:
    res = simulate("async", workers=3, steps=100, jitter=f"trace:{RECORDED}", overhead=0.001, seed=1)
    times = res.steps.sort_values(["worker", "step"]).groupby("worker")["t"].apply(lambda t: np.median(np.diff(t)))
    source = {w: np.median(t) for w, t in step_times(str(RECORDED)).items()}
    for w in range(3):  # async: no waits, so a simulated step takes its source step's time
        assert times[w] == pytest.approx(source[w], rel=0.2), (w, times[w], source[w])


@pytest.mark.slow
def test_a_real_run_replays_a_traces_step_times(tmp_path: Path) -> None:
    """Each worker's steps take their source worker's step times: the replay paces by its own step time."""
    rows = [(w, s) for _ in range(30) for w, s in ((0, 0.05), (1, 0.10))]
    p = _csv(tmp_path, rows)
    out = tmp_path / "rep"
    r = ssptk.run(mode="async", workers=3, steps=40, gpus="none", jitter=f"trace:{p}", out=str(out))
    assert r.ok
    times = step_times(str(out))
    for w, want in ((0, 0.05), (1, 0.10), (2, 0.05)):  # worker 2 of 3 replays source worker 0
        assert np.median(times[w]) == pytest.approx(want, rel=0.2), (w, np.median(times[w]))
        slept = [json.loads(x)["delay_s"] for x in (out / "workers" / f"worker-{w}.jsonl").read_text().splitlines()
                 if '"event"' not in x]
        assert 0 < np.median(slept) < want  # paced: held for less than the source step, by its own time
    assert json.loads((out / "config.json").read_text())["options"]["jitter"] == f"trace:{p}"
    assert_gone(str(tmp_path))
