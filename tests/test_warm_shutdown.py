"""``ssptk.shutdown()`` while a warm run is going (issue 26.9): it said "no warm cluster was running" and the
cluster went back to the pool when the run ended. It says the run's cluster stops as soon as the run ends, lets
the run finish, and stops it then."""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import warm_processes

import ssptk
from ssptk.launch import warm
from ssptk.launch.warm import Stopped


def test_what_shutdown_says() -> None:
    assert repr(Stopped(0)) == "no warm cluster was running"
    assert repr(Stopped(2)) == "stopped 2 warm clusters"
    assert repr(Stopped(0, 1)) == "1 warm cluster in use by a run will stop as soon as that run ends"
    assert str(Stopped(1, 2)) == "stopped 1 warm cluster; 2 warm clusters in use by a run will stop as soon as " \
                                 "their runs end"
    assert Stopped(1, 2) == 1 and Stopped(1, 2).in_use == 2


@pytest.mark.slow
def test_shutdown_during_a_warm_run_stops_its_cluster_when_the_run_ends(tmp_path: Path, warm_pool: None) -> None:
    going = threading.Event()
    box: dict[str, Any] = {}

    def train() -> None:
        box["result"] = ssptk.run(mode="async", workers=2, steps=100, straggler=["0:0.01", "1:0.01"], warm=True,
                                  out=str(tmp_path / "a"), progress=lambda done, total: done >= 5 and going.set())

    runner = threading.Thread(target=train)
    runner.start()
    try:
        assert going.wait(120), "the warm run never got going"
        said = ssptk.shutdown()
        assert (int(said), said.in_use) == (0, 1), repr(said)
        assert repr(said) == "1 warm cluster in use by a run will stop as soon as that run ends"
        assert len(warm_processes()) == 3, "shutdown() stopped the tasks of a run still going"
    finally:
        runner.join(180)
    assert box["result"].ok and len(box["result"].df) == 200  # the run itself went on to its end
    assert not warm.idle_clusters(), "the run's cluster went back to the pool after shutdown()"
    deadline = time.monotonic() + 10
    while warm_processes() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not warm_processes(), "the run's cluster was not stopped when the run ended"
