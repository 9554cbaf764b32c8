"""The task status file: the one owner of its format (written by the task, read by its launcher).

Each task of a local cluster writes ``<status dir>/<task>.json`` (``worker-1.json``) in the directory its
launcher names in ``SSPTK_STATUS_DIR`` (the cluster's temporary directory, not the run directory)::

    {"task": "worker:1", "pid": 4711, "state": "ready", "time": 1.7e9, "run": null, "error": null}

``state`` is ``ready`` once the task's server is up, ``failed`` when the task is ending because of an error
(``error``: its ``type``, the one-line ``message`` the user sees and the ``traceback_tail``); a serving (warm)
task sets ``run`` to the id of each run it finished. The file is replaced whole (temporary name, then rename),
so a reader sees the last state or the one before, never half: the launcher reads it for readiness and for
the failure it reports, instead of looking for marker words in the task's log (as TensorBoard's
``manager.py`` info files and torch elastic's per-rank ``error.json``). When the task writes it is
:mod:`ssptk.runtime.protocol`'s; how the launcher uses it, :mod:`ssptk.launch.process`'s.

A task no launcher started (Slurm, ``TF_CONFIG``, a cluster spec given by hand) writes the same file in its own host's
run directory, ``tasks/<task>.json`` (:attr:`ssptk.rundir.RunDir.tasks_dir`), with ``identity``: the run identity
every task of one cluster shares (:func:`ssptk.runtime.host_dir.run_identity`), and ends it ``done`` (the task
finished its part of the run) or ``stopped`` (SIGTERM ended it: ``scancel``, ``srun --kill-on-bad-exit``); one
killed outright (SIGKILL, the out-of-memory killer, its host gone) leaves ``ready``. A run read from its hosts'
directories alone (:mod:`ssptk.rundir.gather`, :mod:`ssptk.analysis.blame`) learns from them how its PS ended.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from typing import Any

from ssptk.rundir.space import write_whole

__all__ = ["DONE", "FAILED_STATE", "READY_STATE", "STATUS_DIR_ENV", "STOPPED", "TRACEBACK_LINES", "TaskError",
           "TaskStatus", "read_status", "read_statuses", "status_path", "write_status"]

#: The environment variable naming the directory a task writes its status file in.
STATUS_DIR_ENV = "SSPTK_STATUS_DIR"
READY_STATE = "ready"
FAILED_STATE = "failed"
#: a task no launcher started finished its part of the run / was ended by SIGTERM (see the module's text)
DONE = "done"
STOPPED = "stopped"
_STATES = (READY_STATE, FAILED_STATE, DONE, STOPPED)
#: How many of the traceback's last lines a failure keeps.
TRACEBACK_LINES = 10


@dataclass(frozen=True)
class TaskError:
    """Why a task failed: the exception's type, the one line the user sees, the traceback's last lines."""

    type: str
    message: str
    traceback_tail: tuple[str, ...] = ()


@dataclass(frozen=True)
class TaskStatus:
    """One task's status file (see the module's docstring)."""

    task: str
    pid: int
    state: str
    time: float
    run: str | None = None
    error: TaskError | None = None
    #: the run identity of the cluster (tasks no launcher started; ``None`` elsewhere and in older files)
    identity: str | None = None

    def to_json(self) -> str:
        d = asdict(self)
        if self.error is not None:
            d["error"]["traceback_tail"] = list(self.error.traceback_tail)
        return json.dumps(d)

    @classmethod
    def from_json(cls, text: str) -> TaskStatus | None:
        """The status ``text`` holds; ``None`` for anything but a well-formed status file."""
        try:
            d = json.loads(text)
        except ValueError:
            return None
        if not isinstance(d, dict):
            return None
        task, pid, state, t, run = d.get("task"), d.get("pid"), d.get("state"), d.get("time"), d.get("run")
        identity = d.get("identity")
        if not (isinstance(task, str) and type(pid) is int and state in _STATES and isinstance(t, (int, float))
                and (run is None or isinstance(run, str)) and (identity is None or isinstance(identity, str))):
            return None
        error = _error(d.get("error"))
        if d.get("error") is not None and error is None:
            return None
        return cls(task, pid, state, float(t), run, error, identity)


def _error(d: Any) -> TaskError | None:
    if not isinstance(d, dict):
        return None
    kind, message, tail = d.get("type"), d.get("message"), d.get("traceback_tail", [])
    if not (isinstance(kind, str) and isinstance(message, str) and isinstance(tail, list)
            and all(isinstance(line, str) for line in tail)):
        return None
    return TaskError(kind, message, tuple(tail))


def status_path(directory: str, task: str) -> str:
    """Where task ``task`` (``worker:1``) writes its status in ``directory`` (``worker-1.json``)."""
    return os.path.join(directory, task.replace(":", "-") + ".json")


def write_status(directory: str, status: TaskStatus) -> None:
    """Replace ``status.task``'s file in ``directory`` whole (:class:`DiskFull` or ``OSError`` if it cannot)."""
    write_whole(status_path(directory, status.task), status.to_json() + "\n")


def read_statuses(directory: str) -> dict[str, TaskStatus]:
    """Every well-formed status file in ``directory`` (a host's ``tasks/``), by task; what it holds is not trusted:
    regular files only, each read bounded (:func:`ssptk.rundir.contract.load_json`), a file not named after the
    task it names left out."""
    from ssptk.rundir.contract import load_json

    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return {}
    found = {}
    for name in names:
        if not name.endswith(".json"):
            continue
        obj, _ = load_json(os.path.join(directory, name))
        status = TaskStatus.from_json(json.dumps(obj)) if isinstance(obj, dict) else None
        if status is not None and status_path(directory, status.task) == os.path.join(directory, name):
            found[status.task] = status
    return found


def read_status(directory: str, task: str) -> TaskStatus | None:
    """Task ``task``'s status in ``directory``; ``None`` before it wrote one (or if it cannot be read)."""
    try:
        with open(status_path(directory, task), encoding="utf-8") as f:
            return TaskStatus.from_json(f.read())
    except OSError:
        return None
