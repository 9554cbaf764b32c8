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

A run that logged its held-out loss (``--eval-every``) has **diverged on the held-out loss** at the first
evaluation whose loss is NaN or infinite, or is both

* more than :data:`HELD_OUT_RISE` times the best (lowest) held-out loss before it, and
* above the untrained model's loss: the smoothed training loss's start (the first full window, as above).

The training rule alone misses a model that gets worse on data it does not train on while its own smoothed
loss stays calm (non-IID data, local SGD's drifting copies): the link scenario's ``local:16`` went 0.75 ->
1.53 -> 1.88 -> 3.73 held-out, ending worse than where it started. A held-out loss that overfits rises slowly
and stays far below the untrained model's; one above it (and well above its own best) is no trained model.
"""
from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable

__all__ = ["DIVERGENCE_RULE", "DIVERGE_FACTOR", "DivergenceWatch", "HELD_OUT_DIVERGENCE_RULE", "HELD_OUT_RISE",
           "divergence_stop", "find_divergence", "find_held_out_divergence", "smoothing_window"]

#: How far above its running minimum the smoothed loss must rise (and above its start) to count as diverged.
DIVERGE_FACTOR = 10.0
#: The rule in words, for every message that names a diverged run.
DIVERGENCE_RULE = f"the smoothed training loss rose above {DIVERGE_FACTOR:g} x its minimum and above its start"
#: How far above its best the held-out loss must rise (and above the untrained model's loss) to count as diverged:
#: cross-entropy of a classifier that blew up grows to a few times ln(classes), not ten times its best.
HELD_OUT_RISE = 2.0
#: The held-out rule in words.
HELD_OUT_DIVERGENCE_RULE = (f"the held-out loss rose above {HELD_OUT_RISE:g} x its best and above the untrained "
                            "model's loss, the smoothed training loss at the start")


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


def find_held_out_divergence(losses: Iterable[float | None], global_steps: Iterable[int | None],
                             untrained: float | None) -> tuple[bool, int | None]:
    """``(diverged, global step of the evaluation where it did)`` of held-out evaluations in time order, against
    ``untrained`` (the smoothed training loss's start; ``None``: only a NaN or infinite loss counts). See the module
    docstring."""
    best = math.inf
    for loss, step in zip(losses, global_steps):
        if loss is None or not math.isfinite(loss):
            return True, step
        if untrained is not None and loss > untrained and best < math.inf \
                and loss - best > (HELD_OUT_RISE - 1.0) * abs(best):
            return True, step
        best = min(best, loss)
    return False, None
