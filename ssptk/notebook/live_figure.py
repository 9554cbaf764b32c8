"""The dashboard's figure, drawn cheaply enough to refresh every second while a run goes on.

One matplotlib Figure (no pyplot, no rcParams changes) built once; axis ranges move in round steps
toward the run's predicted end, so most refreshes only restore a kept background (axes, ticks, texts)
and draw the data lines and bars on it, thinned to about three points per pixel. Used by
:class:`ssptk.notebook.dashboard.LiveDashboard`.
"""
from __future__ import annotations

import io
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullLocator

from ssptk.analysis.progress import MANY_WORKERS
from ssptk.notebook.live_state import LiveRun, rolling_mean, sticky_range, thin, thin_envelope
from ssptk.render.style import (
    DELAY_COLOR,
    MAX_LEGEND,
    SKEW_COLOR,
    STALENESS_COLOR,
    WAIT_COLOR,
    color,
    draw_bound,
    skew_bound,
    wants_log_loss,
)

__all__ = ["LiveFigure", "MAX_POINTS", "FIGSIZE", "DPI"]

#: Most points drawn per line (fewer on narrow axes: about three per pixel).
MAX_POINTS = 2000
FIGSIZE = (10.0, 5.5)
DPI = 96  # 960 x 528 px: sharp when the notebook scales it to its width
PNG_LEVEL = 1  # zlib level: fast; each image is shown for a second
def _few_ticks(axis: Any, integer: bool = False) -> None:
    """About five major ticks with plain labels, no minor ticks (each tick label costs a text draw)."""
    if axis.get_scale() == "log":
        axis.set_major_locator(LogLocator(numticks=5))
        axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    else:
        axis.set_major_locator(MaxNLocator(nbins=5, integer=integer))
    axis.set_minor_locator(NullLocator())


def duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    m, s = divmod(int(round(seconds)), 60)
    return f"{m} min {s:02d} s" if m < 60 else f"{m // 60} h {m % 60:02d} min"


class LiveFigure:
    """The dashboard figure (2x3 panels as :func:`ssptk.render.report.run_figure`, one legend below).

    :meth:`update` moves a :class:`LiveRun` into the existing artists and picks axis ranges;
    :meth:`png` draws. The background (everything but the data lines and bars) is drawn only when
    an axis range, tick or scale changed, and kept as pixels; a refresh restores it and draws the
    data on top. The final drawing (``final=True``) autoscales as ``run_figure`` does.
    """

    def __init__(self, workers: int, bound: int | None, title: str, smooth: int,
                 figsize: tuple[float, float] = FIGSIZE, dpi: float = DPI) -> None:
        self.fig = Figure(figsize=figsize, dpi=dpi)
        self.canvas = FigureCanvasAgg(self.fig)
        self.workers, self.bound, self.smooth = max(int(workers), 0), bound, smooth
        axes = self.fig.subplots(2, 3)
        (self.ax_loss, self.ax_prog, self.ax_skew), (self.ax_wait, self.ax_stale, self.ax_samples) = axes
        self.axes = list(axes.flat)
        self.fig.suptitle(title, fontsize=10)
        for ax, (t, xl, yl) in zip(self.axes, (
                ("loss vs wall time", "wall time (s)", "training loss"),
                ("completed steps per worker", "wall time (s)", "completed steps"),
                ("step skew", "wall time (s)", "most - least advanced (steps)"),
                ("wait and injected delay per worker", "worker", "total seconds"),
                ("measured staleness", "staleness (updates)", "step records"),
                ("loss vs minibatches", "minibatches processed", "training loss"))):
            ax.set_title(t, fontsize=9, y=1.0, pad=3)  # a fixed y skips matplotlib's title placement
            ax.set_xlabel(xl, fontsize=8)
            ax.set_ylabel(yl, fontsize=8)
            ax.tick_params(labelsize=7)
            _few_ticks(ax.xaxis, integer=ax is self.ax_stale)
            _few_ticks(ax.yaxis, integer=ax in (self.ax_prog, self.ax_skew, self.ax_stale))
        self.loss_lines: dict[int, Any] = {}
        self.sample_lines: dict[int, Any] = {}
        self.prog_lines: dict[int, Any] = {}
        #: dozens of workers: no line per worker, but the least and most advanced one (ssptk.analysis.progress)
        self.many = self.workers >= MANY_WORKERS
        self.prog_ends = [self.ax_prog.plot([], [], drawstyle="steps-post", color=c, lw=1.2, label=label)[0]
                          for c, label in (("tab:red", "least advanced worker"), ("tab:green", "most advanced worker"))
                          ] if self.many else []
        if self.many:
            self.ax_prog.set_title(f"completed steps, {self.workers} workers", fontsize=9, y=1.0, pad=3)
            self.ax_wait.xaxis.set_major_locator(MaxNLocator(nbins=8, integer=True))
        (self.loss_all,) = self.ax_loss.plot([], [], lw=1.5, color="black", label=f"all (mean of {smooth})",
                                             zorder=3)
        (self.samples_all,) = self.ax_samples.plot([], [], lw=1.5, color="black", zorder=3)
        (self.skew_line,) = self.ax_skew.plot([], [], drawstyle="steps-post", color=SKEW_COLOR, label="skew")
        self.bound_line = None if bound is None else draw_bound(self.ax_skew, bound)
        self.wait_bars: Any = None
        self.delay_bars: Any = None
        self.stale_bars: Any = None
        self._stale_keys: tuple[int, ...] = ()
        self._ranges: dict[tuple[Any, str], tuple[float, float]] = {}
        self._log = False
        # Fixed margins, not constrained layout: laying out costs as much as drawing the whole figure
        # (~0.4 s of CPU here), which a live figure would pay at every change of an axis range.
        self.fig.subplots_adjust(left=0.06, right=0.99, top=0.91, bottom=0.17, wspace=0.3, hspace=0.5)
        self._background: Any = None
        self._relayout = True
        self.points = MAX_POINTS
        self.draws = self.backgrounds = 0
        for w in range(0 if self.many else self.workers):
            self._add_worker(w)
        self._set_bars(np.arange(self.workers, dtype="float64"), np.zeros(self.workers), np.zeros(self.workers))
        self._legend()

    def _add_worker(self, w: int) -> None:
        n = max(self.workers, w + 1)
        c = color(w, n)
        (self.loss_lines[w],) = self.ax_loss.plot([], [], lw=0.6, alpha=0.5, color=c,
                                                  label=f"worker {w}" if n <= MAX_LEGEND else None)
        (self.sample_lines[w],) = self.ax_samples.plot([], [], lw=0.6, alpha=0.5, color=c)
        (self.prog_lines[w],) = self.ax_prog.plot([], [], drawstyle="steps-post", color=c)

    def _legend(self) -> None:
        """One legend below the panels: workers, overall loss, skew, bound, the two kinds of bar."""
        for old in list(self.fig.legends):
            old.remove()
        handles = [line for _, line in sorted(self.loss_lines.items()) if not line.get_label().startswith("_")]
        handles += [*self.prog_ends, self.loss_all, self.skew_line]
        handles += [self.bound_line] if self.bound_line is not None else []
        handles += [Patch(color=WAIT_COLOR, label="wait (consistency)"),
                    Patch(color=DELAY_COLOR, label="injected delay")]
        self.fig.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 0.0), ncols=min(len(handles), 8),
                        fontsize=7, frameon=False, handlelength=1.5, columnspacing=1.2, borderaxespad=0.2)
        self._relayout = True

    def _set_bars(self, wx: np.ndarray, waits: np.ndarray, delays: np.ndarray) -> None:
        if self.wait_bars is None or len(self.wait_bars.patches) != len(wx):
            for old in (self.wait_bars, self.delay_bars):
                if old is not None:
                    old.remove()
            self.wait_bars = self.ax_wait.bar(wx - 0.2, waits, width=0.4, color=WAIT_COLOR)
            self.delay_bars = self.ax_wait.bar(wx + 0.2, delays, width=0.4, color=DELAY_COLOR)
            if not self.many:  # else a few ticks (set once): a label per worker would overlap
                self.ax_wait.set_xticks(wx, [str(int(w)) for w in wx])
            self.ax_wait.set_xlim(-0.6, len(wx) - 0.4)
            self._background = None
        for bars, heights in ((self.wait_bars, waits), (self.delay_bars, delays)):
            for p, h in zip(bars.patches, heights):
                p.set_height(h)

    def _range(self, ax: Any, which: str, lo: float, hi: float, **kw: Any) -> None:
        key = (ax, which)
        new = sticky_range(self._ranges.get(key), lo, hi, **kw)
        if new != self._ranges.get(key):
            self._ranges[key] = new
            (ax.set_xlim if which == "x" else ax.set_ylim)(*new)
            self._background = None

    def update(self, run: LiveRun, total: int = 0, final: bool = False) -> None:
        """Move the run's records into the artists (thinned) and set the axis ranges (``total``: the
        run's budget of minibatches, to aim the ranges at its end)."""
        x = run.t.values - (run.t0 or 0.0)
        worker, step, loss = run.worker.values, run.step.values, run.loss.values
        n = len(x)
        samples = np.arange(1, n + 1, dtype="float64")
        ids = [] if self.many else sorted(run.per_worker)
        if any(w not in self.loss_lines for w in ids):
            for w in ids:
                if w not in self.loss_lines:
                    self._add_worker(w)
            self._legend()
        points = self.points
        for line, values in zip(self.prog_ends, (run.lo.values, run.hi.values)):
            line.set_data(*thin(x, values, points))
        for w in ids:
            m = worker == w
            self.loss_lines[w].set_data(*thin(x[m], loss[m], points))
            self.sample_lines[w].set_data(*thin(samples[m], loss[m], points))
            self.prog_lines[w].set_data(*thin(x[m], step[m], points))
        smoothed = rolling_mean(loss, self.smooth)
        self.loss_all.set_data(*thin(x, smoothed, points))
        self.samples_all.set_data(*thin(samples, smoothed, points))
        skew = run.skew.values
        end = len(skew) if run.skew_end is None else run.skew_end
        self.skew_line.set_data(*thin_envelope(x[:end], skew[:end], points))

        wx = np.arange(max([self.workers] + [w + 1 for w in ids]), dtype="float64")
        totals = [run.per_worker.get(int(w)) for w in wx]
        self._set_bars(wx, np.array([t.wait_s if t else 0.0 for t in totals]),
                       np.array([t.delay_s if t else 0.0 for t in totals]))
        keys = tuple(sorted(run.staleness_counts))
        if keys != self._stale_keys:  # new bars are data: the background stays unless the range grows
            if self.stale_bars is not None:
                self.stale_bars.remove()
            kx = np.array(keys, dtype="float64")
            self.stale_bars = self.ax_stale.bar(kx, np.zeros(len(kx)), width=0.8, color=STALENESS_COLOR)
            self._stale_keys = keys
        if self.stale_bars is not None:
            for p, k in zip(self.stale_bars.patches, keys):
                p.set_height(run.staleness_counts[k])

        log = wants_log_loss(run.loss_min, run.loss_max, run.loss_nonpositive)
        if log != self._log:  # the rule every ssptk figure follows (ssptk.render.style)
            self._log = log
            for ax in (self.ax_loss, self.ax_samples):
                ax.set_yscale("log" if log else "linear")
                _few_ticks(ax.yaxis)
                self._ranges.pop((ax, "y"), None)
            self._background = None
        if final:
            self._autoscale()
        elif n:
            self._live_ranges(run, total, x, step, skew, n)

    def _live_ranges(self, run: LiveRun, total: int, x: np.ndarray, step: np.ndarray, skew: np.ndarray,
                     n: int) -> None:
        """Axis ranges that move in round steps, the upper ends toward the run's predicted end."""
        grow = max(1.0, total / n) if total and n >= 2 * max(1, run.workers) else None
        t_end = float(x.max())
        for ax in (self.ax_loss, self.ax_prog, self.ax_skew):
            self._range(ax, "x", 0.0, t_end, floor=0.0, ahead=t_end * grow if grow else None)
        self._range(self.ax_samples, "x", 0.0, float(n), floor=0.0, ahead=float(total) if grow else None)
        lo, hi = run.loss_min, run.loss_max
        if lo >= 0 and not self._log:
            lo = 0.0  # a falling loss would otherwise move the range at every refresh
        for ax in (self.ax_loss, self.ax_samples):
            self._range(ax, "y", lo, hi, log=self._log, floor=0.0 if lo >= 0 else None)
        top = float(np.nanmax(step)) if len(step) else 0.0
        self._range(self.ax_prog, "y", 0.0, top, floor=0.0, ahead=top * grow if grow else None)
        bound_top = -1.0 if self.bound is None else float(skew_bound(self.bound))
        self._range(self.ax_skew, "y", 0.0, max(float(skew.max()), bound_top, 1.0) * 1.25, floor=0.0)
        bars = [p.get_height() for p in self.wait_bars.patches + self.delay_bars.patches]
        top = max(bars, default=0.0)
        self._range(self.ax_wait, "y", 0.0, max(top, 1e-3), floor=0.0, ahead=top * grow if grow else None)
        if self._stale_keys:
            self._range(self.ax_stale, "x", self._stale_keys[0] - 0.6, self._stale_keys[-1] + 0.6, floor=-0.6)
            top = float(max(run.staleness_counts.values()))
            self._range(self.ax_stale, "y", 0.0, top, floor=0.0, ahead=top * grow if grow else None)

    def _autoscale(self) -> None:
        """Ranges as run_figure's (matplotlib's autoscale; skew from 0)."""
        for ax in self.axes:
            ax.relim()
            ax.set_autoscale_on(True)
            ax.autoscale_view()
        self.ax_skew.set_ylim(bottom=0)
        self.ax_wait.set_xlim(-0.6, len(self.wait_bars.patches) - 0.4)
        if not any(p.get_height() > 0 for p in self.wait_bars.patches + self.delay_bars.patches):
            self.ax_wait.set_ylim(0, 1)  # nobody waited: not an axis around 0 (as run_figure)
        if 0 < len(self._stale_keys) <= 20:  # as run_figure
            self.ax_stale.set_xticks(self._stale_keys, [str(k) for k in self._stale_keys])
        self._ranges.clear()
        self._background = None

    def png(self, relayout: bool = False, exact: bool = False) -> bytes:
        """Draw (background restored or redrawn, data on top) and encode as PNG. ``relayout``: lay the
        figure out again (done anyway the first time and when tick labels got longer); ``exact``: full
        colour (the final image) rather than a 256-colour palette."""
        self._relayout |= relayout
        if self._background is None or self._relayout:
            self._draw_background()
        renderer = self.canvas.get_renderer()
        self.canvas.restore_region(self._background)
        for ax in self.axes:
            for artist in sorted([*ax.patches, *ax.lines], key=lambda a: a.get_zorder()):
                artist.draw(renderer)
        self.draws += 1
        return self._encode(exact)

    def _draw_background(self) -> None:
        """Draw all but the data (first time, and whenever an axis range, tick or the legend changed)."""
        if self._relayout:
            self._relayout = False
            width = min(ax.bbox.width for ax in self.axes)
            self.points = int(min(MAX_POINTS, max(200, 3 * width)))
        data = [a for ax in self.axes for a in (*ax.lines, *ax.patches) if a.get_visible()]
        for a in data:
            a.set_visible(False)
        try:
            self.canvas.draw()
        finally:
            for a in data:
                a.set_visible(True)
        self._background = self.canvas.copy_from_bbox(self.fig.bbox)
        self.backgrounds += 1

    def _encode(self, exact: bool) -> bytes:
        """PNG of the canvas as it is (no second draw). Live refreshes are quantized to 256 colours
        (half the time and size of RGB, no visible loss at this size); ``exact``: RGB."""
        from PIL import Image  # matplotlib's own dependency

        w, h = self.canvas.get_width_height(physical=True)
        image = Image.frombuffer("RGBA", (w, h), self.canvas.buffer_rgba(), "raw", "RGBA", 0, 1).convert("RGB")
        if not exact:
            image = image.quantize(256, method=Image.Quantize.FASTOCTREE)
        buf = io.BytesIO()
        image.save(buf, format="png", compress_level=PNG_LEVEL)
        return buf.getvalue()
