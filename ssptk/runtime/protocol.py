"""What a task prints for its launcher: the lines :class:`ssptk.launch.cluster.LocalCluster` waits for."""
from __future__ import annotations

#: ``SSPTK_READY <task>``: the task's server is up.
READY = "SSPTK_READY"
#: ``SSPTK_RUN_DONE <run id>``: a serving (warm) worker finished a run.
RUN_DONE = "SSPTK_RUN_DONE"
