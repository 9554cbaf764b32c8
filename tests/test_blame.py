"""Which task failed first, from the logs alone (ssptk.analysis.blame): for runs whose tasks Slurm, an operator
or a user started, gathered from their hosts. The real-process cases are in test_cluster_env.py."""
from __future__ import annotations

import pandas as pd

from ssptk.analysis.blame import endings, first_failure
from ssptk.rundir.task_status import FAILED_STATE, READY_STATE, STOPPED, TaskError, TaskStatus


def _frames(steps: list[tuple[int, int, float]], events: list[dict]) -> tuple[pd.DataFrame, pd.DataFrame]:
    return (pd.DataFrame([{"worker": w, "step": s, "t": t} for w, s, t in steps]),
            pd.DataFrame(events, columns=["event", "t", "worker", "message", "signal"]))


def test_every_worker_done_is_no_failure() -> None:
    steps, events = _frames([(0, 1, 1.0), (1, 1, 1.0)], [{"event": "done", "t": 2.0, "worker": w} for w in (0, 1)])
    assert first_failure(steps, events, 2) is None


def test_a_silent_end_before_the_others_stops_is_named_first() -> None:
    steps, events = _frames([(0, 9, 10.0), (1, 4, 5.0), (2, 9, 10.0)],
                            [{"event": "stopped", "t": 11.0, "worker": w, "signal": "SIGTERM"} for w in (0, 2)])
    f = first_failure(steps, events, 3)
    assert f is not None and f.task == "worker:1" and f.status == "failed"
    assert f.reason.startswith("its log ends after step 4 without finishing or saying why (killed: SIGKILL")
    assert f.reason.endswith("; after it: worker:0 stopped by SIGTERM, worker:2 stopped by SIGTERM")


def test_signals_to_every_unfinished_worker_are_an_interruption() -> None:
    steps, events = _frames([(0, 9, 10.0), (1, 9, 10.0)],
                            [{"event": "done", "t": 10.5, "worker": 0},
                             {"event": "stopped", "t": 11.0, "worker": 1, "signal": "SIGTERM"}])
    f = first_failure(steps, events, 2)
    assert f is not None and (f.task, f.status, f.signal) == ("worker:1", "interrupted", "SIGTERM")


def test_the_first_error_in_time_is_named_with_its_message() -> None:
    steps, events = _frames([(0, 3, 3.0), (1, 3, 3.0)],
                            [{"event": "error", "t": 6.0, "worker": 0, "message": "UnavailableError: ps:0"},
                             {"event": "error", "t": 4.0, "worker": 1, "message": "loss became nan"}])
    f = first_failure(steps, events, 2)
    assert f is not None and f.task == "worker:1" and f.reason == "error: loss became nan; after it: worker:0 failed"


def test_a_worker_that_logged_nothing_is_named_last() -> None:
    steps, events = _frames([(0, 3, 3.0)], [{"event": "stopped", "t": 5.0, "worker": 0, "signal": "SIGTERM"}])
    ends = endings(steps, events, 2)
    assert [e.kind for e in ends] == ["stopped", "silent"] and ends[1].detail.startswith("it logged nothing")
    f = first_failure(steps, events, 2)
    assert f is not None and f.task == "worker:0" and f.status == "failed"  # a task that never logged: not all stopped


def _status(task: str, state: str, t: float = 1.0, error: str | None = None) -> TaskStatus:
    return TaskStatus(task, 1, state, t, None, TaskError("UnavailableError", error) if error else None, "run:1")


def _lost(worker: int, t: float) -> dict:
    return {"event": "error", "t": t, "worker": worker, "message": "lost ps:0 at h:1 (Socket closed): ...",
            "lost": "ps:0"}


def _lost_frames(events: list[dict]) -> tuple[pd.DataFrame, pd.DataFrame]:
    steps = pd.DataFrame([{"worker": w, "step": 9, "t": 10.0} for w in (0, 1)])
    return steps, pd.DataFrame(events, columns=["event", "t", "worker", "message", "signal", "lost"])


def test_a_ps_killed_outright_is_named_not_the_worker_that_lost_it_first() -> None:
    """kill -9 of the PS: its status stays ready; the workers' errors say they lost it (the first in time is not the
    cause); srun's SIGTERM may stop a worker before it noticed."""
    steps, events = _lost_frames([_lost(1, 11.0), {"event": "stopped", "t": 11.5, "worker": 0, "signal": "SIGTERM"}])
    f = first_failure(steps, events, 2, {"ps:0": _status("ps:0", READY_STATE)})
    assert f is not None and (f.task, f.status) == ("ps:0", "failed")
    assert f.reason.startswith("ended without finishing or saying why (killed: SIGKILL")
    assert f.reason.endswith("; after it: worker:1 lost it, worker:0 stopped by SIGTERM")
    # every worker stopped by srun before noticing: the silent PS is still the one
    steps, events = _lost_frames([{"event": "stopped", "t": 11.0, "worker": w, "signal": "SIGTERM"} for w in (0, 1)])
    f = first_failure(steps, events, 2, {"ps:0": _status("ps:0", READY_STATE)})
    assert f is not None and (f.task, f.status) == ("ps:0", "failed")
    # without the PS's status (its host's directory not given) the workers' words still name it
    steps, events = _lost_frames([_lost(0, 11.0), _lost(1, 11.1)])
    f = first_failure(steps, events, 2)
    assert f is not None and f.task == "ps:0" and "its own host's directory is not among those given" in f.reason


def test_a_failed_ps_gives_its_error_and_a_worker_that_failed_before_it_is_named() -> None:
    steps, events = _lost_frames([_lost(0, 11.0), _lost(1, 11.1)])
    f = first_failure(steps, events, 2, {"ps:0": _status("ps:0", FAILED_STATE, 10.5, "OSError: disk gone")})
    assert f is not None and f.task == "ps:0" and f.reason.startswith("error: OSError: disk gone; after it:")
    # worker:1 died silently (its last record at 10.0), then the PS was killed: worker:1 is named
    steps, events = _lost_frames([_lost(0, 12.0)])
    f = first_failure(steps, events, 2, {"ps:0": _status("ps:0", READY_STATE)})
    assert f is not None and f.task == "worker:1" and f.reason.startswith("its log ends after step 9")


def test_a_ps_stopped_by_a_signal_is_an_interruption_and_a_finished_ps_changes_nothing() -> None:
    steps, events = _lost_frames([_lost(0, 11.0), {"event": "stopped", "t": 11.0, "worker": 1, "signal": "SIGTERM"}])
    f = first_failure(steps, events, 2, {"ps:0": _status("ps:0", STOPPED, 10.9)})
    assert f is not None and (f.task, f.status, f.signal) == ("ps:0", "interrupted", "SIGTERM")
    # scancel: every task stopped, none lost the PS: as before, the workers' interruption
    steps, events = _lost_frames([{"event": "stopped", "t": 11.0, "worker": w, "signal": "SIGTERM"} for w in (0, 1)])
    f = first_failure(steps, events, 2, {"ps:0": _status("ps:0", STOPPED, 10.9)})
    assert f is not None and (f.task, f.status) == ("worker:0", "interrupted")
    steps, events = _lost_frames([{"event": "done", "t": 11.0, "worker": w} for w in (0, 1)])
    assert first_failure(steps, events, 2, {"ps:0": _status("ps:0", READY_STATE)}) is None
