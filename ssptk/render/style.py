"""The look every ssptk figure shares: colours, when the loss axis goes logarithmic, the SSP bound line,
and PNG encoding. Figures are built without pyplot, so nothing here touches the user's global matplotlib
style (no rcParams changes, no list of open figures)."""
from __future__ import annotations

import base64
import io
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

__all__ = ["BOUND_COLOR", "DELAY_COLOR", "MAX_LEGEND", "SKEW_COLOR", "STALENESS_COLOR", "WAIT_COLOR",
           "bound_label", "color", "default_colors", "draw_bound", "figure_png", "figure_to_png_base64",
           "palette", "set_loss_scale", "skew_bound", "wants_log_loss"]

#: Most per-worker entries a legend lists; beyond it the workers go unnamed.
MAX_LEGEND = 10
BOUND_COLOR = "tab:red"
SKEW_COLOR = "tab:purple"
WAIT_COLOR = "tab:orange"
DELAY_COLOR = "tab:gray"
STALENESS_COLOR = "tab:blue"
#: Positive losses spanning more than this ratio get a log axis.
LOG_SPAN = 100.0


def palette(n: int) -> Any:
    """The qualitative colour map for ``n`` lines (tab10, tab20 beyond ten)."""
    return colormaps["tab10" if n <= 10 else "tab20"]


def color(i: int, n: int) -> Any:
    """Colour of line ``i`` of ``n`` (workers of a run, runs of a comparison)."""
    cmap = palette(n)
    return cmap(i % cmap.N)


def default_colors(labels: Sequence[str]) -> dict[str, Any]:
    """One qualitative colour per label, in order."""
    return {label: color(i, len(labels)) for i, label in enumerate(labels)}


def wants_log_loss(lo: float, hi: float, nonpositive: bool = False) -> bool:
    """Log scale when the losses are positive and span more than two decades (early losses would otherwise
    flatten every later difference between modes into the axis). ``lo``/``hi``: the smallest and largest
    finite loss; ``nonpositive``: some loss was <= 0."""
    return not nonpositive and lo > 0 and hi > LOG_SPAN * lo


def set_loss_scale(ax: Axes, losses: pd.Series | Iterable[pd.Series]) -> None:
    """Put ``ax`` on a log scale when :func:`wants_log_loss` says so for ``losses`` (a series or several)."""
    series = [losses] if isinstance(losses, pd.Series) else list(losses)
    values = pd.to_numeric(pd.concat(series), errors="coerce").dropna() if series else pd.Series(dtype=float)
    values = values[np.isfinite(values)]
    if len(values) and wants_log_loss(float(values.min()), float(values.max()), bool((values <= 0).any())):
        ax.set_yscale("log")


def skew_bound(staleness: int) -> int:
    """The largest step skew the logs can show under SSP with bound S: S + 1 (a worker that may start a
    step while S ahead is S + 1 ahead once it completes it; see docs/run-directory.md)."""
    return int(staleness) + 1


def bound_label(staleness: int) -> str:
    return f"bound (S+1 = {skew_bound(staleness)})"


def draw_bound(ax: Axes, staleness: int, **kw: Any) -> Line2D:
    """The SSP bound as a dashed horizontal line on a skew axis (``kw`` overrides colour, label, ...)."""
    style: dict[str, Any] = {"ls": "--", "color": BOUND_COLOR, "label": bound_label(staleness), **kw}
    return ax.axhline(skew_bound(staleness), **style)


def figure_png(fig: Figure, dpi: int = 100) -> bytes:
    """``fig`` rendered to PNG bytes (headless: the Agg canvas, no pyplot)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def figure_to_png_base64(fig: Figure, dpi: int = 100) -> str:
    """Render ``fig`` to PNG and return it base64-encoded (ASCII, no ``data:`` prefix)."""
    return base64.b64encode(figure_png(fig, dpi)).decode("ascii")
