"""Supervising a run while it goes: the launcher's loop over the tasks and their logs.

:func:`supervise` polls the cluster, reads the new log records once (:class:`ssptk.rundir.RunLogReader`)
and hands them to the run's observers, restarts workers that died (``--restart-failed``), and ends the
run at the first failure, when it stops making progress (:class:`StallWatch`, ``--stall-timeout``), or
when its ``cancel`` event is set (:class:`~ssptk.core.errors.RunInterrupted`). It returns a typed
:class:`Outcome` and never writes on the cluster.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from ssptk.core.divergence import DivergenceWatch, divergence_stop, smoothing_window
from ssptk.core.errors import TaskFailure, raise_if_stopped
from ssptk.core.options import RunOptions
from ssptk.launch.link_watch import LinkWatch
from ssptk.launch.observers import RunObserver
from ssptk.rundir import RunLogReader

__all__ = ["Outcome", "StallWatch", "SupervisedCluster", "supervise", "not_restarted_in_start_up", "POLL_S",
           "START_TIMEOUT_S"]

POLL_S = 0.1
#: Seconds the tasks get, once they are up, to pass the start barrier before the stall watchdog ends the
#: run (or ``stall_timeout`` if longer): graph building and session start come first.
START_TIMEOUT_S = 120.0
#: Workers whose last records are this close together (seconds) went silent together: in a PS mode the
#: stall watchdog then blames the PS (every worker waits on it), else the worker that went silent first.
_SILENT_TOGETHER_S = 2.0


class SupervisedCluster(Protocol):
    """What :func:`supervise` needs of a cluster (:class:`ssptk.launch.cluster.LocalCluster` is one)."""

    with_ps: bool
    serving: bool
    spec: dict[str, list[str]]

    def poll(self) -> TaskFailure | None: ...

    def workers_finished(self) -> bool: ...

    def exited_workers(self) -> list[str]: ...

    def restart(self, name: str) -> int: ...

    def cpu_seconds(self, name: str) -> float | None: ...

    def stopped_tasks(self) -> list[str]: ...

    def failure(self, name: str, reason: str, code: int | None = None) -> TaskFailure: ...

    def wait_exit(self, name: str, timeout: float) -> int | None: ...

    def log_path(self, name: str) -> str | None: ...


@dataclass(frozen=True)
class Outcome:
    """How a supervised run ended: ``failure`` (``None``: every worker finished) and the CPU seconds the
    PS spent training (``None`` where it was not measured; 0 without a PS)."""

    failure: TaskFailure | None
    ps_train_cpu_s: float | None = None


def supervise(cluster: SupervisedCluster, run_dir: str, total: int, observers: list[RunObserver],
              opts: RunOptions | None = None, cancel: threading.Event | None = None) -> Outcome:
    """Follow the run until every worker has finished; the first failure ends it.

    With ``opts.stall_timeout`` (seconds, 0 = off) a run that stops making progress ends too: see
    :class:`StallWatch`. Setting ``cancel`` raises :class:`RunInterrupted` (the caller stops the tasks).
    """
    reader = RunLogReader(run_dir)
    ps_cpu0: float | None = None
    stall = StallWatch(opts.stall_timeout if opts is not None else 0.0,
                       steps_logged=opts is None or not opts.no_log)
    links = LinkWatch(cluster, stall.timeout)  # a link too slow for a step is named, not the task it holds up
    divergence = DivergenceWatch(smoothing_window(opts.workers)) if opts is not None and opts.stop_on_divergence \
        else None

    def read() -> list[dict[str, Any]]:
        steps, events = reader.read_new()
        for o in observers:
            o.records(steps, events, reader.n_steps, total)
        stall.saw(steps, events)
        if divergence is not None:
            for r in steps:
                loss = r.get("loss")
                divergence.add(float(loss) if isinstance(loss, (int, float)) else None, r.get("global_step"))
        return events

    restarts_left = opts.restart_failed if opts is not None and not cluster.serving else 0
    restarting: dict[int, float] = {}  # restarted worker -> when; until its `restart` event, as at the start
    while True:
        raise_if_stopped(cancel, "stopped by the user; every task was stopped and the logs kept")
        exited = cluster.exited_workers()  # before reading: a done event written before the exit is read now
        failure = cluster.poll()
        events = read()
        if failure is None:
            failure = _exited_unfinished(cluster, exited, stall.ended)
        if failure is not None:
            ended = _ending(failure, events, restarts_left, stall.started is not None, opts, links, cluster.log_path)
            if ended is None:  # a worker died (killed, crashed): started again
                restarts_left -= 1
                cluster.restart(failure.task)
                restarting[int(failure.task.rpartition(":")[2])] = time.monotonic()
                continue
            # a stopped task held the failed worker up: name it, not the one that waited (restarts or not)
            return Outcome(stall.held_up_by(cluster, failure) or ended)
        for e in events:
            if e.get("event") == "error":
                return Outcome(_error_failure(cluster, e))
            if e.get("event") == "start" and ps_cpu0 is None:
                ps_cpu0 = cluster.cpu_seconds("ps:0")
        if divergence is not None and divergence.diverged:
            return Outcome(TaskFailure.of("ssptk", divergence_stop(divergence.at)))
        if cluster.workers_finished():
            ps_cpu1 = cluster.cpu_seconds("ps:0") if cluster.with_ps else 0.0
            read()
            if not cluster.with_ps:
                return Outcome(None, 0.0)
            return Outcome(None, ps_cpu1 - ps_cpu0 if ps_cpu0 is not None and ps_cpu1 is not None else None)
        for e in events:  # a restarted worker rejoined; one that takes longer than a start is watched again
            if e.get("event") == "restart":
                restarting.pop(e.get("worker"), None)  # type: ignore[arg-type]
        restarting = {w: t for w, t in restarting.items() if time.monotonic() - t <= START_TIMEOUT_S}
        failure = None if restarting else stall.check(cluster)
        if failure is not None:
            return Outcome(failure if cluster.stopped_tasks() else links.explain(failure, cluster.log_path))
        links.tick()
        time.sleep(POLL_S)


def _ending(failure: TaskFailure, events: list[dict[str, Any]], restarts_left: int, started: bool,
            opts: RunOptions | None, links: LinkWatch, log_path: Callable[[str], str | None]) -> TaskFailure | None:
    """What ends the run after ``failure`` (a task's process ended), or ``None`` where the worker is to be started
    again (``--restart-failed``, restarts left, the run past its start)."""
    errors = [e for e in events if e.get("event") == "error" and f"worker:{e.get('worker')}" == failure.task]
    if errors:  # the worker said why it failed: that beats a line guessed from its log
        return replace(failure, reason=f"error: {errors[0].get('message', '')}")
    hung = [e for e in events if e.get("event") == "hung" and f"worker:{e.get('worker')}" == failure.task]
    if hung and not restarts_left:  # a step hung inside TensorFlow: restartable, but not asked to
        return links.explain(replace(failure, reason=f"error: {hung[0].get('message', '')}"), log_path)
    if restarts_left > 0 and not started:
        return not_restarted_in_start_up(failure)
    if restarts_left > 0 and failure.task.startswith("worker:"):
        if opts is not None and opts.mode in ("sync", "local") and failure.task == "worker:0":
            return replace(failure, reason=f"{failure.reason} (not restarted: in {opts.mode} mode worker:0 runs the "
                                           "aggregator, and the run cannot go on without it)")
        return None
    return failure


def not_restarted_in_start_up(failure: TaskFailure) -> TaskFailure:
    """``failure`` of a run asked to restart failed workers, when it happened before the start barrier
    (whether the launcher still waited for the tasks to come up or they were building their graphs)."""
    if not failure.task.startswith("worker:"):
        return failure
    return replace(failure, reason=f"{failure.reason} (during start-up: not restarted, since a restarted worker "
                                   "skips the start barrier its peers wait at)")


def _exited_unfinished(cluster: SupervisedCluster, exited: list[str], ended: set[int]) -> TaskFailure | None:
    """A worker whose process exited 0 without logging ``done`` (user code that called ``exit``, say)."""
    for name in exited:
        if int(name.rpartition(":")[2]) not in ended:
            return cluster.failure(name, "exited without finishing: its process ended (exit code 0) before the "
                                         "run's end; does the model's code call exit()?", 0)
    return None


def _error_failure(cluster: SupervisedCluster, event: dict[str, Any]) -> TaskFailure:
    """The failure a worker's ``error`` event reports, with its exit code (it exits right after)."""
    name = f"worker:{event.get('worker')}"
    failure = TaskFailure.of(name, f"error: {event.get('message', '')}", None, cluster.log_path(name))
    return replace(failure, exit_code=cluster.wait_exit(name, 2.0))  # the worker's words stay the reason


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
        self.arrived: set[int] = set()  # workers that built their graph and reached the start barrier

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
            elif kind == "barrier" and isinstance(w, int):
                self.arrived.add(w)
        if steps:
            self.last_step = max(steps, key=lambda r: (r.get("t") or 0.0, r.get("global_step") or 0))

    def check(self, cluster: SupervisedCluster) -> TaskFailure | None:
        """A failure if the run has stalled, else ``None``."""
        if not self.timeout:
            return None
        now = time.monotonic()
        if self.started is None:
            limit = max(START_TIMEOUT_S, self.timeout)
            if now - self.begun <= limit:
                return None
            n = len(cluster.spec.get("worker", []))
            missing = [w for w in range(n) if w not in self.arrived]
            if self.arrived and missing and not cluster.stopped_tasks():  # some are there, these are not
                names = ", ".join(f"worker:{w}" for w in missing)
                reason = (f"stalled: did not reach the start barrier within {limit:g} s, while the other workers "
                          f"did (still building its graph or model? see its log); a --stall-timeout above "
                          f"{limit:g} waits longer" if len(missing) == 1 else
                          f"stalled: {names} did not reach the start barrier within {limit:g} s")
                return self._failure(cluster, f"worker:{missing[0]}", reason)
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
        if task in cluster.stopped_tasks():
            return self._failure(cluster, task, f"stalled: {stopped_words(task)}: no step logged for "
                                                f"{self.timeout:g} s ({last})")
        return self._failure(cluster, task, f"stalled: no step logged for {self.timeout:g} s ({last}); use "
                                            "--stall-timeout to wait longer")

    def held_up_by(self, cluster: SupervisedCluster, failure: TaskFailure) -> TaskFailure | None:
        """The run's failure when ``failure`` (a worker that ended: its step hung, say) came while another
        task is stopped (state T): the stopped one held it up, and is named; ``None`` if no task is stopped."""
        stopped = [t for t in cluster.stopped_tasks() if t != failure.task]
        if not stopped:
            return None
        return self._failure(cluster, stopped[0], f"stalled: {stopped_words(stopped[0])}, and {failure.task} "
                                                  "ended waiting on it")

    def _suspect(self, cluster: SupervisedCluster) -> str:
        """The task most likely to hold the run up: a stopped process; else the PS when the unfinished
        workers (two or more) went silent at once (they all wait on it); else the worker that went silent
        first, a lone unfinished one too (the others finished, so the PS answered: it is stuck in its own code,
        its model or its ``data()``)."""
        stopped = cluster.stopped_tasks()
        if stopped:
            return stopped[0]
        n = len(cluster.spec.get("worker", []))
        silent = {w: self.heard.get(w, self.begun) for w in range(n) if w not in self.ended}
        together = len(silent) > 1 and max(silent.values()) - min(silent.values()) <= _SILENT_TOGETHER_S
        if cluster.with_ps and (not silent or together):
            return "ps:0"
        if not silent:
            return "worker:0"
        return f"worker:{min(silent, key=lambda w: (silent[w], w))}"

    @staticmethod
    def _failure(cluster: SupervisedCluster, name: str, reason: str) -> TaskFailure:
        return TaskFailure.of(name, reason, None, cluster.log_path(name))


def stopped_words(task: str) -> str:
    """How a message says that ``task``'s process is stopped (state T in ``/proc/PID/stat``): alive, doing
    nothing, as opposed to a task that waits on another."""
    return f"{task} is stopped (SIGSTOP or a debugger, state T)"


def _clock(t: Any) -> str:
    """A record's wall time as local HH:MM:SS (``?`` if it has none)."""
    return time.strftime("%H:%M:%S", time.localtime(float(t))) if isinstance(t, (int, float)) else "?"
