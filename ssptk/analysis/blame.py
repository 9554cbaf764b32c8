"""Which task failed first, read from the logs alone: for runs whose launcher was not there to see the tasks
end (tasks started by Slurm's ``srun``, a Kubernetes operator or by hand, gathered from several hosts).

Each worker's log ends one of four ways: a ``done`` event (it finished), an ``error`` event (it failed and said
why), a ``stopped`` event (a signal ended it: ``scancel``, the job's time limit, Ctrl-C), or nothing (it was
killed outright, ``kill -9`` or the out-of-memory killer, or its host went down). The first worker to end
without finishing, in time, is the one named (an ``error`` or a signal from its event, a silent end from its
last record: it died after that), and the others after it. When every worker that did not finish was
stopped by a signal, the run was interrupted (``scancel``) rather than failed.

A PS writes no such log, but its status file (``tasks/ps-<i>.json``, :mod:`ssptk.rundir.task_status`) ends
``done``, ``failed`` or ``stopped``, or stays ``ready`` when it was killed outright. A worker that lost its connection
to a PS says so in its ``error`` event (``lost``: ``ps:0``). Those errors are the PS's death seen from the workers, not
causes: when a PS failed or ended silently and no worker ended on its own before the first of them (an error of its
own, a silent end), the PS is named (``ps:0``), the workers after it; a PS stopped by a signal makes the run
interrupted, as its workers' ``stopped`` events do. Pure: DataFrames and status files in, a :class:`TaskFailure` out.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

import pandas as pd

from ssptk.core.errors import TaskFailure
from ssptk.rundir.task_status import FAILED_STATE, READY_STATE, STOPPED, TaskStatus

__all__ = ["Ending", "endings", "first_failure"]


@dataclass(frozen=True)
class Ending:
    """How one worker's log ends: ``kind`` is ``done``, ``error``, ``stopped`` or ``silent``; ``t`` when (the
    event's time, or the last record's for a silent end; ``nan`` for a worker that logged nothing)."""

    worker: int
    kind: str
    t: float
    detail: str = ""
    signal: str | None = None
    #: an ``error`` that says the worker lost its connection to this task (``ps:0``): a consequence, not a cause
    lost: str | None = None


def endings(steps: pd.DataFrame, events: pd.DataFrame, workers: int) -> list[Ending]:
    """How each of the run's ``workers`` workers' logs end (see the module's docstring)."""
    out = []
    for w in range(workers):
        ev = events[events["worker"] == w] if not events.empty and "worker" in events else events.iloc[0:0]
        st = steps[steps["worker"] == w] if not steps.empty and "worker" in steps else steps.iloc[0:0]
        kinds = list(ev["event"]) if "event" in ev else []
        last_step = int(st["step"].max()) if "step" in st and len(st) else 0
        if "error" in kinds:
            e = ev[ev["event"] == "error"].iloc[0]
            lost = e.get("lost") if isinstance(e.get("lost"), str) else None
            out.append(Ending(w, "error", float(e["t"]), f"error: {e.get('message', '')}", lost=lost))
        elif "done" in kinds:
            out.append(Ending(w, "done", float(ev[ev["event"] == "done"]["t"].iloc[-1])))
        elif "stopped" in kinds:
            e = ev[ev["event"] == "stopped"].iloc[0]
            sig = e.get("signal") if isinstance(e.get("signal"), str) else None
            out.append(Ending(w, "stopped", float(e["t"]), f"stopped by {sig or 'a signal'} after step {last_step}",
                              sig))
        else:
            times = [float(x) for x in (*st.get("t", []), *ev.get("t", [])) if x is not None]
            last = max(times) if times else math.nan
            out.append(Ending(w, "silent", last,
                              f"its log ends after step {last_step} without finishing or saying why (killed: "
                              "SIGKILL, the out-of-memory killer or its host going down leave no record)"
                              if times else "it logged nothing (it never started, or its log is missing)"))
    return out


def first_failure(steps: pd.DataFrame, events: pd.DataFrame, workers: int,
                  tasks: Mapping[str, TaskStatus] | None = None) -> TaskFailure | None:
    """The failure of a run read from its logs (and its tasks' status files ``tasks``, by task, where the hosts'
    directories have them): the first task (in time) that ended without finishing, the others named after it;
    status ``interrupted`` when signals stopped every one of them. ``None`` when every worker finished."""
    ends = [e for e in endings(steps, events, workers) if e.kind != "done"]
    if not ends:
        return None
    ends.sort(key=lambda e: (math.inf if math.isnan(e.t) else e.t, e.worker))
    ps = _ps_failure(ends, tasks or {})
    if ps is not None:
        return ps
    first = ends[0]
    if all(e.kind == "stopped" for e in ends):
        sig = first.signal
        why = f"stopped by {sig or 'a signal'}" + (f" (workers {', '.join(str(e.worker) for e in ends)})"
                                                     if len(ends) > 1 else "")
        return replace(TaskFailure.of(f"worker:{first.worker}", why), status="interrupted", signal=sig)
    after = ("; after it: " + ", ".join(f"worker:{e.worker} {_short(e)}" for e in ends[1:])) if ends[1:] else ""
    return TaskFailure.of(f"worker:{first.worker}", first.detail + after)


def _ps_failure(ends: list[Ending], tasks: Mapping[str, TaskStatus]) -> TaskFailure | None:
    """The run's failure when a PS ended it (see the module's text): a PS that failed, was killed outright (its status
    still ``ready``: named when a worker lost it or signals stopped every worker) or was stopped by a signal that its
    workers lost; where its status is not among ``tasks``, one that the workers lost. ``None`` when no PS ended the
    run, or a worker ended on its own before the PS did."""
    lost = [e for e in ends if e.lost is not None and e.lost.startswith("ps:")]
    found: list[tuple[float, str, TaskStatus | None]] = []  # (when it ended, the PS, its status)
    for ps in sorted({t for t in tasks if t.startswith("ps:")} | {str(e.lost) for e in lost}, key=_index):
        status, seen = tasks.get(ps), [e.t for e in lost if e.lost == ps]
        state = status.state if status is not None else None
        if state in (FAILED_STATE, STOPPED) and status is not None:
            if state == FAILED_STATE or seen:
                found.append((status.time, ps, status))
        elif seen or (state == READY_STATE and all(e.kind == "stopped" for e in ends)):
            found.append((min(seen, default=math.inf), ps, status))
    if not found:
        return None
    when, ps, status = min(found, key=lambda f: (f[0], _index(f[1])))
    own = [e for e in ends if e.lost is None and e.kind != "stopped"]  # failed by themselves, or ended silently
    if own and min(e.t for e in own) < when:
        return None
    after = "; after it: " + ", ".join(f"worker:{e.worker} {'lost it' if e.lost == ps else _short(e)}" for e in ends)
    if status is None:
        why = ("its workers lost it; its own host's directory is not among those given (its tasks/ and logs/ say how "
               "it ended)")
    elif status.state == STOPPED:
        failure = TaskFailure.of(ps, f"stopped by SIGTERM{after}")
        return failure if own else replace(failure, status="interrupted", signal="SIGTERM")
    elif status.state == FAILED_STATE:
        why = f"error: {status.error.message if status.error else 'its status says it failed'}"
    else:
        why = ("ended without finishing or saying why (killed: SIGKILL, the out-of-memory killer or its host going "
               "down leave no record; its status says ready)")
    return TaskFailure.of(ps, why + after)


def _index(task: str) -> int:
    return int(task.rpartition(":")[2]) if task.rpartition(":")[2].isdigit() else 0


def _short(e: Ending) -> str:
    return {"error": "failed", "stopped": f"stopped by {e.signal or 'a signal'}", "silent": "ended silently"}[e.kind]
