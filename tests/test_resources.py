"""Sizes bounded before start (issue 26.5): a run's memory estimated from its options, and what this machine
cannot hold refused in one line before any process starts (``--workers 500`` grew to 9.2 GB, ``--batch
1000000000`` to 6 GB, ``ssptk sim --steps 1000000000000`` to 4 GB, with and without ``--model``)."""
from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from conftest import ssptk_cmd

import ssptk
from ssptk.core.errors import UsageError
from ssptk.core.option_checks import check_memory
from ssptk.core.options import OPTIONS, resolve
from ssptk.core.resources import (
    RECORD_BYTES,
    SHARED_TASK_BYTES,
    SIM_RECORD_BYTES,
    TASK_BYTES,
    available_bytes,
    check_fits,
    check_sim,
    run_estimate,
    sim_estimate,
)
from ssptk.experiment.predicted_runs import predict_run

GB = 2**30


def test_estimates_grow_with_each_size_the_options_set() -> None:
    default = run_estimate(3, 16, 200, per_example=8.0)
    assert 1 * GB < default.total < 2 * GB  # measured: PSS 1.0-1.2 GB for 2 workers and their PS
    shared = run_estimate(500, 16, 200, shared=True, per_example=8.0)
    assert shared.largest[0] == "501 TensorFlow servers in one process" and shared.largest[2] == "--workers"
    more = run_estimate(500, 16, 40, shared=True, records=False).total
    assert more - run_estimate(100, 16, 40, shared=True, records=False).total == 400 * SHARED_TASK_BYTES
    processes = run_estimate(4, 16, 200).total - run_estimate(3, 16, 200).total
    assert processes == TASK_BYTES + 200 * RECORD_BYTES
    big_batch = run_estimate(3, 10**9, 200, per_example=8.0)
    assert big_batch.largest[2] == "--batch" and big_batch.total > 100 * GB
    assert run_estimate(3, 10**9, 200, per_example=None).largest[2] == "--workers"  # an unknown model: no batch term
    assert run_estimate(3, 16, 10**9, records=False).largest[2] == "--workers"  # --no-log keeps no records
    assert run_estimate(3, 16, 10**9).largest[2] == "--steps"
    allreduce = run_estimate(3, 16, 200, with_ps=False)
    assert allreduce.total == run_estimate(3, 16, 200).total - TASK_BYTES
    timing = sim_estimate(3, 10**12)
    assert timing.largest == ("3000000000000 simulated steps", 3 * 10**12 * SIM_RECORD_BYTES, "--steps")
    assert sim_estimate(3, 200, model=True).total > sim_estimate(3, 200).total + TASK_BYTES


def test_what_does_not_fit_is_refused_in_one_line_naming_the_option() -> None:
    with pytest.raises(UsageError, match=r"^--workers 500 --batch 16 --steps 200 needs about 2\d\.\d GB of memory "
                                         r"\(501 TensorFlow servers in one process: 2\d\.\d GB\), more than the 8\.0 GB "
                                         r"this machine has available: lower --workers, or free memory$"):
        check_memory(resolve(workers=500), available=8 * GB)
    with pytest.raises(UsageError, match=r"\(3 minibatches of 1000000000 examples, 8 copies each: 178\.8 GB\).*"
                                         r"lower --batch"):
        check_memory(resolve(batch=10**9), available=8 * GB)
    with pytest.raises(UsageError, match=r"^simulating --workers 3 --steps 1000000000000 needs about 1\.6 PB .*"
                                         r"lower --steps"):
        check_sim(3, 10**12, available=8 * GB)
    with pytest.raises(UsageError, match=r"lower --steps"):
        check_memory(resolve(steps=10**12, stall_timeout=0), predicted=True, available=8 * GB)
    check_memory(resolve(), available=2 * GB)  # the default run fits a small machine
    check_memory(resolve(workers=64), available=4 * GB)  # so do 64 workers in the shared layout
    check_fits(run_estimate(10**6, 16, 200), "x", available=None if available_bytes() is None else 10**18)
    check_sim("3", 10**12, available=1)  # bad values are the simulator's to refuse, in its words
    # a notebook cell's model (saved in the run directory only later) is not loaded to weigh its examples
    check_memory(resolve(model="user_model.py:cell", batch=10**9), available=8 * GB, sized=False)


def test_this_machine_says_what_it_has() -> None:
    room = available_bytes()
    assert room is not None and 100 * 2**20 < room, room


def test_runs_and_simulations_too_big_for_this_machine_start_nothing(tmp_path: Path) -> None:
    """The Python API and the CLI refuse before anything is created or started (in one line, exit 2)."""
    with pytest.raises(UsageError, match=r"lower --batch"):
        ssptk.run(batch=10**13, out=str(tmp_path / "a"))
    with pytest.raises(UsageError, match=r"lower --steps"):
        ssptk.simulate("async", 3, 10**15)
    with pytest.raises(UsageError, match=r"lower --steps"):
        predict_run("async", 3, 10**15, model="linear", out=str(tmp_path / "b"))
    assert not list(tmp_path.iterdir())
    done = subprocess.run([*ssptk_cmd(), "run", "--workers", "1000000", "--out", str(tmp_path / "c")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("ssptk: error: --workers 1000000 --batch 16 --steps 200 needs about "), done.stderr
    assert not (tmp_path / "c").exists()
    helped = {o.name: o.help for o in OPTIONS}  # what --help says, run and sim alike
    assert "a run is refused before it starts when its memory" in helped["workers"]
    assert f"the simulator every step it simulates ({SIM_RECORD_BYTES} bytes each)" in helped["steps"]


def test_a_momentary_dip_in_available_memory_is_waited_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """A busy machine's MemAvailable dips for a moment; a run that fits the machine waits for it, up to
    MEMORY_DIP_S, and is refused only if memory does not come back (or could never fit)."""
    from ssptk.core import resources

    seen = iter([GB // 2, GB // 2, 3 * GB])
    monkeypatch.setattr(resources, "available_bytes", lambda: next(seen, 3 * GB))
    resources.check_fits(run_estimate(3, 16, 200), "--workers 3")  # fits after the dip: no error
    monkeypatch.setattr(resources, "available_bytes", lambda: GB // 2)
    monkeypatch.setattr(resources, "MEMORY_DIP_S", 0.6)
    started = time.monotonic()
    with pytest.raises(UsageError, match=r"^--workers 3 needs about 1\.6 GB .* more than the 0\.5 GB this machine"):
        resources.check_fits(run_estimate(3, 16, 200), "--workers 3")
    assert 0.5 < time.monotonic() - started < 5
    started = time.monotonic()
    with pytest.raises(UsageError, match="lower --workers"):  # beyond the whole machine: refused at once
        resources.check_fits(run_estimate(10**6, 16, 200), "--workers 1000000")
    assert time.monotonic() - started < 0.5
