"""The step skew as a figure can show it. A skew that changes more often than the axis has pixels (sync's and
SSP's flip between two values at every step: 0↔1, S↔S+1) drawn as steps is a solid block of vertical lines; it
is drawn instead as a light band, the skew's range in each slice of time (its top: the largest skew, the one the
SSP bound is about, never thinned away), and a line through its time-weighted mean in each. A sparse skew stays
steps."""
from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.axes import Axes

__all__ = ["SKEW_BAND_ALPHA", "SKEW_BUCKETS", "SKEW_MEAN_LABEL", "SKEW_RANGE_LABEL", "draw_skew", "skew_envelope"]

#: Slices of time a settled figure's skew axis is cut into (about one per pixel of a panel at notebook width).
SKEW_BUCKETS = 120
SKEW_BAND_ALPHA = 0.3
#: The band's legend entry.
SKEW_RANGE_LABEL = "skew: its range"
#: The line's legend entry when the skew is a band.
SKEW_MEAN_LABEL = "skew: its mean"


def skew_envelope(x: np.ndarray, y: np.ndarray, buckets: int = SKEW_BUCKETS
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, bool]:
    """``(x, lo, hi, mean, dense)`` of a step series (``steps-post``: ``y[i]`` holds from ``x[i]`` to ``x[i+1]``).

    Dense (more than two points per slice of ``buckets`` equal slices of time): per slice its start, the least
    and largest value the series takes in it (the one in force at its start included) and its time-weighted
    mean, then the end with the last slice's; else the series itself (``lo`` = ``hi`` = ``mean`` = ``y``)."""
    x = np.asarray(x, dtype="float64")
    y = np.asarray(y, dtype="float64")
    buckets = max(1, int(buckets))
    if len(x) <= 2 * buckets or not x[-1] > x[0]:
        return x, y, y, y, False
    edges = np.linspace(x[0], x[-1], buckets + 1)
    first = np.clip(np.searchsorted(x, edges[:-1], "right") - 1, 0, len(x) - 1)  # in force at the slice's start
    last = np.maximum(np.searchsorted(x, edges[1:], "left") - 1, first)  # the last change inside the slice
    idx = np.column_stack([first, last + 1]).ravel()
    padded = np.append(y, y[-1])
    hi = np.maximum.reduceat(padded, idx)[::2]
    lo = np.minimum.reduceat(padded, idx)[::2]
    area = np.concatenate([[0.0], np.cumsum(y[:-1] * np.diff(x))])  # the integral, linear between points
    mean = np.diff(np.interp(edges, x, area)) / np.diff(edges)
    # the end repeats the last slice (steps-post draws no jump there)
    return edges, *(np.append(v, v[-1]) for v in (lo, hi, mean)), True  # type: ignore[return-value]


def draw_skew(ax: Axes, x: Any, y: Any, color: Any, label: str | None = None, band: bool = True,
              buckets: int = SKEW_BUCKETS, **kw: Any) -> Any:
    """A step skew on ``ax`` in ``color``: steps, or when dense (:func:`skew_envelope`) its mean per slice over
    (``band``) a light band of its range. ``kw`` goes to the line (width, alpha, gid, ...). Returns the line."""
    xs, lo, hi, mean, dense = skew_envelope(np.asarray(x, dtype="float64"), np.asarray(y, dtype="float64"), buckets)
    if dense and band:
        ax.fill_between(xs, lo, hi, step="post", color=color, alpha=SKEW_BAND_ALPHA * kw.get("alpha", 1.0), lw=0)
    (line,) = ax.plot(xs, mean if dense else hi, drawstyle="steps-post", color=color, label=label, **kw)
    return line
