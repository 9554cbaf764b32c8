"""Which shaped link held up a run that stopped making progress (issue 36): a link too slow for one step looks,
to the stall watchdog, like a PS that no longer answers, and to a worker like a step that hung in TensorFlow.

:class:`LinkWatch` samples the links' byte counters (:meth:`ssptk.launch.cluster.LocalCluster.traffic`) every
quarter of the stall time-out while a shaped run goes (one ``tc`` call through ``nsenter``, a few milliseconds);
when the run is about to fail for want of progress, :meth:`LinkWatch.explain` compares the counters now with the
oldest sample kept: a shaped link that carried at least :data:`BUSY_SHARE` of its rate all that while was
moving the step's tensors as fast as it could, so the link, not a task, is what the run waited for, and the
failure names it, with its rate and what to do. Nothing is sampled without ``--network`` rates.
"""
from __future__ import annotations

import subprocess
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from ssptk.core.errors import TaskFailure
from ssptk.core.network import format_rate

__all__ = ["BUSY_SHARE", "LinkWatch"]

#: The share of its rate a link must have carried over the window for the stall to be laid on it: a link waiting
#: on a stuck task carries next to nothing; one that is the bottleneck runs near its rate (92% measured at 100kbit).
BUSY_SHARE = 0.5
#: Samples kept: the window is up to this many sampling periods (about the stall time-out).
_KEPT = 4


class LinkWatch:
    """The counters of a cluster's shaped links over the last stall time-out (see the module's docstring).
    ``cluster``: anything with ``network`` (:class:`ssptk.core.network.Network` or ``None``) and ``traffic()``;
    ``timeout``: the stall time-out in seconds (0: the watchdog is off, a hang is still told at 60 s); ``clock``:
    monotonic seconds."""

    def __init__(self, cluster: Any, timeout: float, clock: Callable[[], float] = time.monotonic) -> None:
        network = getattr(cluster, "network", None)
        shaped = network is not None and any(r is not None for r in network.rates.values())
        self._traffic = getattr(cluster, "traffic", None) if shaped else None
        self.timeout = float(timeout or 0.0)
        self.every = max(2.0, (self.timeout or 60.0) / _KEPT)
        self.clock = clock
        self.samples: deque[tuple[float, dict[str, Any]]] = deque(maxlen=_KEPT)

    def tick(self) -> None:
        """From the supervisor's loop: a sample when the last is ``every`` seconds old."""
        if self._traffic is not None and (not self.samples or self.clock() - self.samples[-1][0] >= self.every):
            self._sample()

    def _sample(self) -> dict[str, Any] | None:
        try:
            traffic = self._traffic() if self._traffic is not None else None
        except (OSError, subprocess.SubprocessError, ValueError):  # nsenter or tc gone with the namespace
            return None
        if traffic:
            self.samples.append((self.clock(), traffic))
        return traffic

    def busiest(self) -> tuple[str, float, float, float] | None:
        """``(task, rate, share, seconds)``: the shaped link that carried the largest share of its rate (bits per
        second) over the last ``seconds``, if that share is at least :data:`BUSY_SHARE`; else ``None``."""
        if self._traffic is None or not self.samples:
            return None
        t0, old = self.samples[0]
        new = self._sample()
        seconds = self.clock() - t0
        if new is None or seconds < 1.0:
            return None
        best: tuple[str, float, float, float] | None = None
        for task, row in new.get("tasks", {}).items():
            rate, before = new.get("rates", {}).get(task), old.get("tasks", {}).get(task, {})
            if not rate:
                continue
            moved = max(row.get(k, 0) - before.get(k, 0) for k in ("sent", "received"))
            share = moved * 8 / (rate * seconds)
            if share >= BUSY_SHARE and (best is None or share > best[2]):
                best = (task, float(rate), share, seconds)
        return best

    def explain(self, failure: TaskFailure, log_path: Callable[[str], str | None]) -> TaskFailure:
        """``failure`` (a stall, a step that hung) laid on the link that held the run up, if one did (see
        :meth:`busiest`); ``log_path(task)``: where a task logs (the tail of the link's task goes with it)."""
        found = self.busiest()
        if found is None:
            return failure
        task, rate, share, seconds = found
        limit = f"--stall-timeout {self.timeout:g} s" if self.timeout else "the 60 s a step may take"
        reason = (f"stalled on its link: {task}'s link (--network {format_rate(rate)}) was {min(share, 1.0):.0%} "
                  f"busy over the last {seconds:.0f} s while no step finished, so one step needs more time on it "
                  f"than {limit} allows: give --network a faster rate (or use a smaller model), or a "
                  "--stall-timeout longer than a step takes")
        return TaskFailure.of(task, reason, None, log_path(task))
