"""The look every ssptk figure shares: colours, when the loss axis goes logarithmic, the SSP bound line,
and PNG encoding. Figures are built without pyplot, so nothing here touches the user's global matplotlib
style (no rcParams changes, no list of open figures)."""
from __future__ import annotations

import base64
import io
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from ssptk.core.options import skew_bound
from ssptk.rundir import StoredOptions

__all__ = ["BOUND_COLOR", "BOUND_STYLE", "DELAY_COLOR", "EXTREME_LINES", "LABELS", "LOSS_BAND", "MAX_LEGEND",
           "MEDIAN_LINE", "NOTE_COLOR", "OVERALL_LINE", "PROGRESS_BANDS", "SKEW_COLOR", "STALENESS_COLOR",
           "STEP_SPLIT_COLORS", "TARGET_STYLE", "WAIT_COLOR", "WORKER_LINE", "NotebookFigure", "bound_label",
           "color", "default_colors", "draw_bound", "draw_target", "extreme_label", "figure_png",
           "figure_to_png_base64", "model_name", "palette", "run_title", "set_loss_scale", "skew_bound",
           "wants_log_loss", "worker_label"]

#: Most per-worker entries a legend lists; beyond it the workers go unnamed.
MAX_LEGEND = 10
BOUND_COLOR = "tab:red"
SKEW_COLOR = "tab:purple"
WAIT_COLOR = "tab:orange"
DELAY_COLOR = "tab:gray"
STALENESS_COLOR = "tab:blue"
#: The parts of a worker's step (ssptk.analysis.step_split), in the report's network section and the dashboard.
STEP_SPLIT_COLORS: dict[str, str] = {"compute": "tab:blue", "transfer": "tab:red", "wait": WAIT_COLOR, "other": "0.75"}
#: Notes written in a panel ("no step records").
NOTE_COLOR = "0.4"
#: One worker's curve (thin, faint) and the overall curve of a run (thick, black).
WORKER_LINE: dict[str, Any] = {"lw": 0.6, "alpha": 0.5}
OVERALL_LINE: dict[str, Any] = {"lw": 1.8, "color": "black", "zorder": 3}
#: Many workers: the spread of their loss; of their progress (all of them, the middle half) and its median; the
#: slowest and the fastest worker.
LOSS_BAND: dict[str, Any] = {"color": "0.6", "alpha": 0.35, "lw": 0}
PROGRESS_BANDS: tuple[dict[str, Any], dict[str, Any]] = ({"color": "tab:blue", "alpha": 0.15, "lw": 0},
                                                         {"color": "tab:blue", "alpha": 0.35, "lw": 0})
MEDIAN_LINE: dict[str, Any] = {"color": "tab:blue", "lw": 1.0}
EXTREME_LINES: dict[str, dict[str, Any]] = {"slowest": {"color": "tab:red", "lw": 1.4},
                                            "fastest": {"color": "tab:green", "lw": 1.4}}
#: The SSP bound on a skew axis (dashed) and a loss target (dotted: apart from dashed predicted curves).
BOUND_STYLE: dict[str, Any] = {"ls": "--", "color": BOUND_COLOR}
TARGET_STYLE: dict[str, Any] = {"ls": ":", "color": "0.3", "lw": 1.0}
#: Legend words of a run's figure (the report's and the live dashboard's); ``{smooth}``: the rolling window.
LABELS: dict[str, str] = {
    "overall": "all (mean of {smooth})",
    "loss_band": "10-90% of the step records ({smooth})",
    "all_workers": "all workers",
    "middle_half": "middle half",
    "median": "median",
    "skew": "skew",
    "wait": "wait (consistency)",
    "delay": "injected delay",
}
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


def run_title(options: Mapping[str, Any]) -> str:
    """A figure's title from a run's options: ``ssp, staleness S=2 · 3 workers · model linear`` (``· optimizer adam``
    after the mode where it is not sgd) and the conditions
    it ran under (PS shards, ``--network``, ``--jitter``) (no
    ``staleness=None`` for the modes that have none; a model from a file, ``DIR/user_model.py:mlp2``, as ``mlp2``)."""
    opts = StoredOptions.of(options)
    mode, s = opts.mode, opts.bound
    parts = [f"ssp, staleness S={s}" if mode == "ssp" and s is not None else str(mode or "run")]
    if mode == "local" and opts.local_steps:  # local:H, as its label says
        parts = [f"local:{opts.local_steps} (local SGD, averaging every {opts.local_steps} local steps)"]
    if opts.optimizer not in (None, "sgd"):
        parts.append(f"optimizer {opts.optimizer}")
    if opts.workers:
        parts.append(f"{opts.workers} workers")
    if opts.model:
        parts.append(f"model {model_name(opts.model)}")
    if opts.ps and opts.ps > 1 and mode != "allreduce":
        parts.append(f"{opts.ps} PS shards")
    if opts.network:
        parts.append(f"network {opts.network}")
    if opts.jitter:
        parts.append(f"jitter {opts.jitter}")
    return " \u00b7 ".join(parts)


def model_name(model: str) -> str:
    """A model as titles name it: ``--model`` as given, but a model from a file (a ``%%dtrain`` cell's
    ``runs/<stamp>/user_model.py:mlp2``) by its function's name, ``mlp2``."""
    module, colon, function = str(model).rpartition(":")
    return function if colon and module.endswith(".py") else str(model)


def bound_label(staleness: int) -> str:
    """The legend entry of the SSP bound of staleness S: ``bound: skew ≤ S+1 = 3``."""
    return f"bound: skew \u2264 S+1 = {skew_bound(staleness)}"


def worker_label(worker: int) -> str:
    """The legend entry of one worker's curve."""
    return f"worker {worker}"


def extreme_label(which: str, worker: int | None = None) -> str:
    """The legend entry of the ``"slowest"`` or ``"fastest"`` worker of many, named when ``worker`` is given."""
    return f"{which} worker" if worker is None else f"{which}: worker {worker}"


def draw_bound(ax: Axes, staleness: int, **kw: Any) -> Line2D:
    """The SSP bound of staleness S as a dashed horizontal line at S+1 on a skew axis (``kw`` overrides
    colour, label, ...)."""
    return ax.axhline(skew_bound(staleness), **{**BOUND_STYLE, "label": bound_label(staleness), **kw})


def draw_target(ax: Axes, target: float, **kw: Any) -> Line2D:
    """A loss target as a dotted horizontal line (``kw``: its label, ...)."""
    return ax.axhline(target, **{**TARGET_STYLE, **kw})


class NotebookFigure(Figure):
    """The matplotlib Figure every ssptk renderer returns: a plain ``Figure``, which also shows itself as a
    PNG in Jupyter without ``%matplotlib inline`` (IPython falls back to ``_repr_png_`` when no backend has
    registered a formatter for figures; with one, that formatter wins and nothing changes)."""

    def _repr_png_(self) -> bytes:
        return figure_png(self, dpi=80)


def figure_png(fig: Figure, dpi: int = 100) -> bytes:
    """``fig`` rendered to PNG bytes (headless: the Agg canvas, no pyplot)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def figure_to_png_base64(fig: Figure, dpi: int = 100) -> str:
    """Render ``fig`` to PNG and return it base64-encoded (ASCII, no ``data:`` prefix)."""
    return base64.b64encode(figure_png(fig, dpi)).decode("ascii")
