"""What a task tells its launcher: its status file (when it is written), its exit codes, the lines it prints.

A task reports through :func:`report_ready`, :func:`report_run_done`, :func:`report_failure` and
:func:`report_end`, which write its status file (the format: :mod:`ssptk.rundir.task_status`) where the launcher asked
(``SSPTK_STATUS_DIR``); a task no launcher started writes it in its own host's run directory instead, with the run's
identity (:func:`keep_status_in`, called by :mod:`ssptk.runtime.host_dir`). A process holding several tasks (the
shared layout) writes one file per task, and only the first failure of the process: the task it names is the one
that ended it. The marker lines (``SSPTK_READY worker:1``, ...) are still printed, for the person reading the logs.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import replace

from ssptk.core.errors import DiskFull
from ssptk.rundir.task_status import FAILED_STATE, READY_STATE, STATUS_DIR_ENV, TaskError, TaskStatus, write_status

__all__ = ["EXIT_DISK_FULL", "PREDICT", "READY", "RUN_DONE", "TASK_FAILED", "keep_status_in", "report_end",
           "report_failure", "report_ready", "report_run_done"]

#: ``SSPTK_READY <task>``: the task's server is up.
READY = "SSPTK_READY"
#: ``SSPTK_RUN_DONE <run id>``: a serving (warm) worker finished a run.
RUN_DONE = "SSPTK_RUN_DONE"
#: A task's exit code when the disk holding the run directory filled up (ENOSPC's number): its own log
#: may be unwritable too, so the code alone tells the launcher.
EXIT_DISK_FULL = 28
#: ``SSPTK_TASK_FAILED <task> <code>``: in the shared layout, the task (a worker thread) whose failure ends the
#: process, which exits with ``code``.
TASK_FAILED = "SSPTK_TASK_FAILED"
#: ``SSPTK_PREDICT <job> <gradients done> <of>`` after each wave of a predicting task's replay, and
#: ``SSPTK_PREDICT <job> done`` when a predicted run's logs are written (:mod:`ssptk.runtime.predict_task`).
PREDICT = "SSPTK_PREDICT"


_lock = threading.Lock()
_reported: dict[str, TaskStatus] = {}  # task -> the last status this process wrote for it
_first_failure: list[str] = []  # the task whose failure this process reported first
_host: list[tuple[str, str]] = []  # (directory, run identity): where a task no launcher started keeps its status


def keep_status_in(directory: str, identity: str) -> None:
    """A task no launcher started: from now on its status goes to ``directory`` (its host's ``tasks/``), naming the
    run ``identity``."""
    with _lock:
        _host[:] = [(directory, identity)]


def _report(status: TaskStatus) -> None:
    """Write ``status`` where the launcher asked (``SSPTK_STATUS_DIR``) and in the host's directory (a task no
    launcher started); nothing without either. Never raises: a status that cannot be written leaves the launcher
    the exit code and the log, as before."""
    directories = [d for d in [os.environ.get(STATUS_DIR_ENV)] if d]
    if _host:
        directories.append(_host[0][0])
        status = replace(status, identity=_host[0][1])
    _reported[status.task] = status
    for directory in directories:
        with contextlib.suppress(OSError, DiskFull):
            os.makedirs(directory, exist_ok=True)
            write_status(directory, status)


def report_ready(task: str) -> None:
    """Task ``task``'s server is up (or, without a server, the task is running)."""
    with _lock:
        _report(TaskStatus(task, os.getpid(), READY_STATE, time.time()))


def report_run_done(tasks: list[str], run_id: str) -> None:
    """Serving tasks ``tasks`` finished run ``run_id`` and wait for the next one."""
    with _lock:
        for task in tasks:
            old = _reported.get(task)
            if old is None or old.state != FAILED_STATE:
                _report(replace(old or TaskStatus(task, os.getpid(), READY_STATE, 0.0), run=run_id, time=time.time()))


def report_failure(task: str, error: TaskError | None = None) -> str:
    """Task ``task`` is ending because of ``error``. Only the first failure of a process is written (in the
    shared layout, the worker that ends the process); returns the task that was reported first."""
    with _lock:
        if not _first_failure:
            _first_failure.append(task)
            old = _reported.get(task)
            _report(TaskStatus(task, os.getpid(), FAILED_STATE, time.time(), old.run if old else None, error))
        return _first_failure[0]


def report_end(task: str, state: str) -> None:
    """Task ``task`` is ending without a failure: ``done`` (its part of the run is over) or ``stopped`` (SIGTERM).
    A task that reported a failure keeps it. Called on SIGTERM too, perhaps in the main thread while it holds the
    lock: then the status is written without it rather than never."""
    held = _lock.acquire(timeout=2.0)
    try:
        old = _reported.get(task)
        if old is None or old.state != FAILED_STATE:
            _report(TaskStatus(task, os.getpid(), state, time.time(), old.run if old else None))
    finally:
        if held:
            _lock.release()
