"""Which task failed first, from the logs alone (ssptk.analysis.blame): for runs whose tasks Slurm, an operator
or a user started, gathered from their hosts. The real-process cases are in test_cluster_env.py."""
from __future__ import annotations

import pandas as pd

from ssptk.analysis.blame import endings, first_failure


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
