"""Which task failed first, read from the logs alone: for runs whose launcher was not there to see the tasks
end (tasks started by Slurm's ``srun``, a Kubernetes operator or by hand, gathered from several hosts).

Each worker's log ends one of four ways: a ``done`` event (it finished), an ``error`` event (it failed and said
why), a ``stopped`` event (a signal ended it: ``scancel``, the job's time limit, Ctrl-C), or nothing (it was
killed outright, ``kill -9`` or the out-of-memory killer, or its host went down). The first worker to end
without finishing, in time, is the one named (an ``error`` or a signal from its event, a silent end from its
last record: it died after that), and the others after it. When every worker that did not finish was
stopped by a signal, the run was interrupted (``scancel``) rather than failed. Pure: DataFrames in, a
:class:`TaskFailure` out.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import pandas as pd

from ssptk.core.errors import TaskFailure

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
            out.append(Ending(w, "error", float(e["t"]), f"error: {e.get('message', '')}"))
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


def first_failure(steps: pd.DataFrame, events: pd.DataFrame, workers: int) -> TaskFailure | None:
    """The failure of a run read from its logs: the first worker (in time) that ended without finishing, the
    others named after it; status ``interrupted`` when signals stopped every one of them. ``None`` when every
    worker finished."""
    ends = [e for e in endings(steps, events, workers) if e.kind != "done"]
    if not ends:
        return None
    ends.sort(key=lambda e: (math.inf if math.isnan(e.t) else e.t, e.worker))
    first = ends[0]
    if all(e.kind == "stopped" for e in ends):
        sig = first.signal
        why = f"stopped by {sig or 'a signal'}" + (f" (workers {', '.join(str(e.worker) for e in ends)})"
                                                     if len(ends) > 1 else "")
        return replace(TaskFailure.of(f"worker:{first.worker}", why), status="interrupted", signal=sig)
    after = ("; after it: " + ", ".join(f"worker:{e.worker} {_short(e)}" for e in ends[1:])) if ends[1:] else ""
    return TaskFailure.of(f"worker:{first.worker}", first.detail + after)


def _short(e: Ending) -> str:
    return {"error": "failed", "stopped": f"stopped by {e.signal or 'a signal'}", "silent": "ended silently"}[e.kind]
