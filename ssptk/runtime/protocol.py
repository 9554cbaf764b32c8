"""What a task prints for its launcher: the lines :class:`ssptk.launch.cluster.LocalCluster` waits for."""
from __future__ import annotations

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
#: ``SSPTK_PREDICT <job> done`` when a predicted run's logs are written (:mod:`ssptk.runtime.predict`).
PREDICT = "SSPTK_PREDICT"
