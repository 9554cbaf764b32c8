"""When a run has diverged: one rule, for ``summary.json``, the comparison table, the live dashboard and the
optional stop (``--stop-on-divergence``).

The rule works on any model's training loss. Take the overall training loss of every step record in time
order, smoothed by a rolling mean over ``window`` records (5 x workers, as everywhere in ssptk). The run has
**diverged** at the first record where the smoothed loss is

* above its starting value (the first full window), and
* more than :data:`DIVERGE_FACTOR` times its running minimum (for a loss that can be negative: it rose
  above the minimum by more than ``DIVERGE_FACTOR - 1`` times the minimum's size),

or where a loss is NaN or infinite (only seen with ``--allow-nan``; otherwise the run stops there). A
converging run's noise never rises above where it started; SGD that blows up (too large a step, too much
staleness) passes both tests within a few windows. The record's global step is ``diverged_at_step``.
"""
from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable

__all__ = ["DIVERGENCE_RULE", "DIVERGE_FACTOR", "DivergenceWatch", "divergence_stop", "find_divergence",
           "smoothing_window"]

#: How far above its running minimum the smoothed loss must rise (and above its start) to count as diverged.
DIVERGE_FACTOR = 10.0
#: The rule in words, for every message that names a diverged run.
DIVERGENCE_RULE = f"the smoothed training loss rose above {DIVERGE_FACTOR:g} x its minimum and above its start"


def divergence_stop(at: int | None) -> str:
    """Why ``--stop-on-divergence`` ended a run that diverged at global step ``at``."""
    return (f"diverged at global step {at} ({DIVERGENCE_RULE}): lower --lr or the staleness, or drop "
            "--stop-on-divergence")


def smoothing_window(workers: int) -> int:
    """Default rolling window (step records) for smoothed losses: ``5 * workers``, at least 1."""
    return max(1, 5 * int(workers))


class DivergenceWatch:
    """The rule above, fed one record at a time (:meth:`add`); :attr:`at` is where it first held."""

    def __init__(self, window: int) -> None:
        self.window = max(1, int(window))
        self._recent: deque[float] = deque()
        self._sum = 0.0
        self.start: float | None = None
        self.minimum = math.inf
        self.at: int | None = None
        self.diverged = False

    def add(self, loss: float | None, global_step: int | None) -> bool:
        """Take the next record's loss (``None``/NaN for a non-finite one); whether the run has diverged."""
        if self.diverged:
            return True
        if loss is None or not math.isfinite(loss):
            self.diverged, self.at = True, global_step
            return True
        self._recent.append(loss)
        self._sum += loss
        if len(self._recent) > self.window:
            self._sum -= self._recent.popleft()
        if len(self._recent) < self.window:
            return False
        smoothed = self._sum / self.window
        if self.start is None:
            self.start = smoothed
        self.minimum = min(self.minimum, smoothed)
        if smoothed > self.start and smoothed - self.minimum > (DIVERGE_FACTOR - 1.0) * abs(self.minimum):
            self.diverged, self.at = True, global_step
        return self.diverged


def find_divergence(losses: Iterable[float | None], global_steps: Iterable[int | None],
                    window: int) -> tuple[bool, int | None]:
    """``(diverged, global step where it did)`` of records in time order (see the module docstring)."""
    watch = DivergenceWatch(window)
    for loss, step in zip(losses, global_steps):
        if watch.add(loss, step):
            break
    return watch.diverged, watch.at
