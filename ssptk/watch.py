"""Following a run while it goes: the launcher's loop over the tasks and their logs.

:func:`watch_run` polls the cluster, reads the new log records once (:class:`ssptk.logs.RunLogReader`)
and hands them to the run's observers, restarts workers that died (``--restart-failed``), and ends the
run at the first failure, or when it stops making progress (:class:`StallWatch`, ``--stall-timeout``).
"""
from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ssptk.errors import TaskFailure
from ssptk.options import RunOptions

if TYPE_CHECKING:
    from ssptk.api import RunObserver

POLL_S = 0.1
#: Seconds the tasks get, once they are up, to pass the start barrier before the stall watchdog ends the
#: run (or ``stall_timeout`` if longer): graph building and session start come first.
START_TIMEOUT_S = 120.0
#: Workers whose last records are this close together (seconds) went silent together: in a PS mode the
#: stall watchdog then blames the PS (every worker waits on it), else the worker that went silent first.
_SILENT_TOGETHER_S = 2.0



def watch_run(cluster: Any, run_dir: str, total: int, observers: list[RunObserver],
           opts: RunOptions | None = None) -> TaskFailure | None:
    """Follow the run until every worker has exited; the first failure ends it.

    With ``opts.stall_timeout`` (seconds, 0 = off) a run that stops making progress ends too: see
    :class:`StallWatch`.
    """
    from ssptk.logs import RunLogReader

    reader = RunLogReader(run_dir)
    ps_cpu0: float | None = None
    stall = StallWatch(opts.stall_timeout if opts is not None else 0.0,
                        steps_logged=opts is None or not opts.no_log)

    def read() -> list[dict[str, Any]]:
        steps, events = reader.read_new()
        for o in observers:
            o.records(steps, events, reader.n_steps, total)
        stall.saw(steps, events)
        return events

    restarts_left = opts.restart_failed if opts is not None and not cluster.serving else 0
    while True:
        failure = cluster.poll()
        if failure is not None:
            errors = [e for e in read() if e.get("event") == "error" and f"worker:{e.get('worker')}" == failure.task]
            if errors:  # the worker said why it failed: that beats a line guessed from its log
                return TaskFailure(failure.task, f"error: {errors[0].get('message', '')}", failure.exit_code,
                                   failure.log_tail)
            if restarts_left > 0 and failure.task.startswith("worker:"):  # died (killed, crashed): again
                if opts is not None and opts.mode == "sync" and failure.task == "worker:0":
                    return replace(failure, reason=f"{failure.reason} (not restarted: in sync mode worker:0 "
                                                   "runs the aggregator, and the run cannot go on without it)")
                restarts_left -= 1
                cluster.restart(failure.task, sum(cluster.restarts.values()) + 1)
                continue
            return failure
        for e in read():
            if e.get("event") == "error":
                return _error_failure(cluster, e)
            if e.get("event") == "start" and ps_cpu0 is None:
                ps_cpu0 = cluster.cpu_seconds("ps:0")
        if cluster.workers_finished():
            ps_cpu1 = cluster.cpu_seconds("ps:0") if cluster.with_ps else 0.0
            if not cluster.with_ps:
                cluster.train_cpu["ps:0"] = 0.0
            elif ps_cpu0 is not None and ps_cpu1 is not None:
                cluster.train_cpu["ps:0"] = ps_cpu1 - ps_cpu0
            read()
            return None
        failure = stall.check(cluster)
        if failure is not None:
            return failure
        time.sleep(POLL_S)


def _error_failure(cluster: Any, event: dict[str, Any]) -> TaskFailure:
    """The failure a worker's ``error`` event reports, with its exit code (it exits right after)."""
    from ssptk.cluster import log_tail

    name = f"worker:{event.get('worker')}"
    task = next((t for t in cluster.tasks if t.name == name and t.proc is not None), None)
    if task is None:
        return cluster.failure(name, f"error: {event.get('message', '')}")
    try:
        code = task.proc.wait(2.0)
    except Exception:  # still running (subprocess.TimeoutExpired): no exit code to show
        code = None
    return TaskFailure(name, f"error: {event.get('message', '')}", code, log_tail(task.log_path))


class StallWatch:
    """Ends a run that stopped making progress: a PS that is alive but no longer answers (say, stopped
    with SIGSTOP), or a worker stuck for good, would otherwise keep the launcher waiting forever.

    Until the first ``start`` event the tasks get ``max(START_TIMEOUT_S, timeout)`` seconds from the
    moment the watch begins; after it, the run fails when no worker logs anything (step or event) for
    ``timeout`` seconds. Without step records (``--no-log``) only the start is watched.
    """

    def __init__(self, timeout: float, steps_logged: bool = True) -> None:
        self.timeout = float(timeout or 0.0)
        self.steps_logged = steps_logged
        self.begun = self.last = time.monotonic()
        self.started: float | None = None  # wall time of the first start event
        self.last_step: dict[str, Any] | None = None
        self.heard: dict[int, float] = {}  # worker -> when (monotonic) its newest record arrived
        self.ended: set[int] = set()  # workers that logged done (or error)

    def saw(self, steps: list[dict[str, Any]], events: list[dict[str, Any]]) -> None:
        if not steps and not events:
            return
        now = self.last = time.monotonic()
        for r in (*steps, *events):
            w = r.get("worker")
            if isinstance(w, int):
                self.heard[w] = now
            kind = r.get("event")
            if kind == "start" and self.started is None:
                self.started = float(r.get("t") or time.time())
            elif kind in ("done", "error") and isinstance(w, int):
                self.ended.add(w)
        if steps:
            self.last_step = max(steps, key=lambda r: (r.get("t") or 0.0, r.get("global_step") or 0))

    def check(self, cluster: Any) -> TaskFailure | None:
        """A failure if the run has stalled, else ``None``."""
        if not self.timeout:
            return None
        now = time.monotonic()
        if self.started is None:
            limit = max(START_TIMEOUT_S, self.timeout)
            if now - self.begun <= limit:
                return None
            reason = (f"stalled: the workers did not pass the start barrier within {limit:g} s of starting; "
                      f"a --stall-timeout above {limit:g} waits longer")
            return self._failure(cluster, self._suspect(cluster), reason)
        if not self.steps_logged or now - self.last <= self.timeout:
            return None
        if self.last_step is not None:
            r = self.last_step
            last = f"last step at {_clock(r.get('t'))}, global step {r.get('global_step')}"
        else:
            last = f"no step since the start barrier at {_clock(self.started)}"
        task = self._suspect(cluster)
        if task in _stopped_tasks(cluster):
            advice = f"{task}'s process is stopped (SIGSTOP?)"
        else:
            advice = "use --stall-timeout to wait longer"
        return self._failure(cluster, task, f"stalled: no step logged for {self.timeout:g} s ({last}); {advice}")

    def _suspect(self, cluster: Any) -> str:
        """The task most likely to hold the run up: a stopped process; else the PS when every unfinished
        worker went silent at once (they all wait on it); else the worker that went silent first."""
        stopped = _stopped_tasks(cluster)
        if stopped:
            return stopped[0]
        n = len(cluster.spec.get("worker", []))
        silent = {w: self.heard.get(w, self.begun) for w in range(n) if w not in self.ended}
        if cluster.with_ps and (not silent or max(silent.values()) - min(silent.values()) <= _SILENT_TOGETHER_S):
            return "ps:0"
        if not silent:
            return "worker:0"
        return f"worker:{min(silent, key=lambda w: (silent[w], w))}"

    @staticmethod
    def _failure(cluster: Any, name: str, reason: str) -> TaskFailure:
        from ssptk.cluster import log_tail

        task = next((t for t in cluster.tasks if t.name == name), None)
        return TaskFailure(name, reason, None, log_tail(task.log_path) if task is not None else [])


def _stopped_tasks(cluster: Any) -> list[str]:
    stopped = getattr(cluster, "stopped_tasks", None)
    return stopped() if stopped is not None else []


def _clock(t: Any) -> str:
    """A record's wall time as local HH:MM:SS (``?`` if it has none)."""
    return time.strftime("%H:%M:%S", time.localtime(float(t))) if isinstance(t, (int, float)) else "?"
