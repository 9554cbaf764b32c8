"""What a task no launcher started (``srun``, a TFJob's ``TF_CONFIG``, a cluster spec given by hand) keeps in its own
host's run directory, so that the run can be read from its hosts' directories alone (:mod:`ssptk.rundir.gather`).

Every such task, the PS too, writes there its status file (``tasks/<task>.json``: :mod:`ssptk.rundir.task_status`,
through :mod:`ssptk.runtime.protocol`) and its log (``logs/<task>.log``: everything its stderr carried,
:mod:`ssptk.runtime.quiet_stderr`). The status names the run's identity (:func:`run_identity`), the same in every
task of one cluster, so a gather never merges two runs; and it ends ``done``, ``stopped`` (SIGTERM) or ``failed``,
or stays ``ready`` when the task was killed outright, which is how a PS that died is told from the workers that
lost it (:func:`lost_peer` names the task a worker's error says it lost). Imports: core, rundir, runtime.
"""
from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from ssptk.core.options import RunOptions
from ssptk.rundir import RunDir
from ssptk.rundir.task_status import STOPPED
from ssptk.runtime.protocol import keep_status_in, report_end
from ssptk.runtime.quiet_stderr import StderrFilter
from ssptk.runtime.reaper import on_sigterm

__all__ = ["keep_in_host_dir", "lost_peer", "lost_words", "run_identity"]

#: where TensorFlow's error text names the task at the other end of a call that failed
_PEER = re.compile(r"(?:remote target|From) /job:(ps|worker)/replica:\d+/task:(\d+)")
#: the errors that mean a connection to another task was lost (its process ended, or its host cannot be reached)
_LOST = ("UnavailableError",)


def run_identity(cluster: dict[str, list[str]], run_id: str, opts: RunOptions) -> str:
    """The identity of a run, from what every task of its cluster shares and no other run does: the cluster spec
    (its hosts and ports), the run id (under Slurm the job and step) and the run options but ``--out`` (each host's
    own directory). ``<run id>:<12 hex digits>``; tasks started by hand with the same spec, options and seed (no
    launcher hands out an id) share it, as they would share the PS."""
    options = {k: v for k, v in opts.to_dict().items() if k != "out"}
    text = json.dumps({"cluster": cluster, "run": run_id, "options": options}, sort_keys=True, default=str)
    return f"{run_id}:{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def keep_in_host_dir(run_dir: str, task: str, identity: str, log: StderrFilter | None) -> None:
    """From now on task ``task`` keeps its status (naming ``identity``) and its log (through ``log``, the task's
    stderr filter, if it has one) in ``run_dir``; SIGTERM ends its status ``stopped``."""
    rd = RunDir(run_dir)
    keep_status_in(rd.tasks_dir, identity)
    if log is not None:
        log.keep_log(rd.task_log(task))
    on_sigterm(lambda: report_end(task, STOPPED))


def lost_peer(e: BaseException, me: str) -> str | None:
    """The task (``ps:0``) whose connection ``e`` says this task (``me``) lost, if it says so: a PS first, where
    several are named."""
    if type(e).__name__ not in _LOST:
        return None
    text = str(getattr(e, "message", None) or e)
    peers = [f"{job}:{i}" for job, i in _PEER.findall(text) if f"{job}:{i}" != me]
    return next((p for p in peers if p.startswith("ps:")), peers[0] if peers else None)


def lost_words(peer: str, cluster: dict[str, Any] | None, why: str) -> str:
    """The one line a worker says when it lost ``peer`` (``why``: TensorFlow's words, ``Socket closed``)."""
    job, _, i = peer.partition(":")
    tasks = (cluster or {}).get(job) or []
    at = f" at {tasks[int(i)]}" if i.isdigit() and int(i) < len(tasks) else ""
    return (f"lost {peer}{at} ({why}): that task ended or cannot be reached; its host's run directory says how "
            f"(tasks/{peer.replace(':', '-')}.json, logs/{peer.replace(':', '-')}.log)")
