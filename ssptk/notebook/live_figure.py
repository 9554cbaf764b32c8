"""The dashboard's figure, drawn cheaply enough to refresh every second while a run goes on.

The same six panels as the report's figure, drawn by :class:`ssptk.render.run_panels.RunPanels` from a
:class:`ssptk.analysis.run_view.RunView` of the run so far; this module only adds the updating. One
matplotlib Figure (no pyplot, no rcParams changes) built once; axis ranges grow in round steps with the
data (never sized for the whole budget up front), so most refreshes only restore a kept background (axes,
ticks, texts) and draw the data lines, bands and bars on it, thinned to about three points per pixel. Used by
:class:`ssptk.notebook.dashboard.LiveDashboard`.
"""
from __future__ import annotations

import io
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullLocator

from ssptk.analysis.run_view import RunView
from ssptk.notebook.live_state import sticky_range
from ssptk.render.fit import legend_below, legend_columns, wrap_title
from ssptk.render.run_panels import RunPanels
from ssptk.render.style import run_title, skew_bound

__all__ = ["LiveFigure", "MAX_POINTS", "LIVE_FIGSIZE", "DPI"]

#: Most points drawn per line (fewer on narrow axes: about three per pixel).
MAX_POINTS = 2000
LIVE_FIGSIZE = (10.0, 5.5)
DPI = 96  # 960 x 528 px: sharp when the notebook scales it to its width
PNG_LEVEL = 1  # zlib level: fast; each image is shown for a second
#: While a run goes on, an axis reaches at most this many times the data so far (not the whole budget: at 1%
#: of a long run the data would be a sliver at the left edge).
GROWTH = 2.0
#: Points of the title and of the legend's words.
TITLE_SIZE, LEGEND_SIZE = 10.0, 7.0


def _line_in(points: float) -> float:
    """The height of a line of text at ``points``, in inches."""
    return 1.35 * points / 72.0


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
    """The dashboard figure (the 2x3 panels of :func:`ssptk.render.figures.run_figure`, one legend below).

    Built for ``view``'s kind of run (:meth:`ssptk.notebook.live_state.LiveRun.view`, records or not).
    :meth:`update` shows a newer view in the existing artists and picks axis ranges; :meth:`png` draws. The
    background (everything but the data lines, bands and bars) is drawn only when an axis range, tick,
    scale or the legend changed, and kept as pixels; a refresh restores it and draws the data on top. The
    final drawing (``final=True``) fits the axes to the data as ``run_figure`` does.
    """

    def __init__(self, view: RunView, figsize: tuple[float, float] = LIVE_FIGSIZE, dpi: float = DPI) -> None:
        self.fig = Figure(figsize=figsize, dpi=dpi)
        self.canvas = FigureCanvasAgg(self.fig)
        self.axes = list(self.fig.subplots(2, 3).flat)
        title = wrap_title(run_title(view.options), figsize[0], TITLE_SIZE)
        self.fig.suptitle(title, fontsize=TITLE_SIZE)
        # Fixed margins, not constrained layout: laying out costs as much as drawing the whole figure
        # (~0.4 s of CPU here), which a live figure would pay at every change of an axis range. Room above for
        # the title's lines; on the right for half the last tick label ("4000" at 0.99 was cut).
        top = 1.0 - (0.5 + _line_in(TITLE_SIZE) * title.count("\n")) / figsize[1]
        self.fig.subplots_adjust(left=0.06, right=0.975, top=top, bottom=0.17, wspace=0.3, hspace=0.5)
        self._ranges: dict[tuple[Any, str], tuple[float, float]] = {}
        self._background: Any = None
        self._relayout = True
        self.points = MAX_POINTS
        self.draws = self.backgrounds = 0
        self._build(view)

    def _build(self, view: RunView) -> None:
        """The panels for ``view``'s kind of run, in the dashboard's small type."""
        for ax in self.axes:
            ax.cla()
        self.panels = RunPanels(self.axes, view)
        self._log = False
        for ax in self.axes:
            ax.set_title(ax.get_title(), fontsize=9, y=1.0, pad=3)  # a fixed y skips matplotlib's title placement
            ax.xaxis.label.set_fontsize(8)
            ax.yaxis.label.set_fontsize(8)
            ax.tick_params(labelsize=7)
            if ax is not self.ax_wait:  # the wait panel's ticks are the workers (RunPanels)
                _few_ticks(ax.xaxis, integer=ax is self.ax_stale)
            _few_ticks(ax.yaxis, integer=ax in (self.ax_prog, self.ax_skew, self.ax_stale))
        self._ranges.clear()
        self._legend()

    @property
    def ax_loss(self) -> Any:
        return self.panels.ax_loss

    @property
    def ax_prog(self) -> Any:
        return self.panels.ax_prog

    @property
    def ax_skew(self) -> Any:
        return self.panels.ax_skew

    @property
    def ax_wait(self) -> Any:
        return self.panels.ax_wait

    @property
    def ax_stale(self) -> Any:
        return self.panels.ax_stale

    @property
    def ax_samples(self) -> Any:
        return self.panels.ax_samples

    @property
    def bound_line(self) -> Any:
        """The SSP bound's line on the skew panel (``None`` for other modes)."""
        return self.panels.bound_line

    def _legend(self) -> None:
        """One legend below the panels: every panel's entries once, in as many columns as fit the width (at 32
        workers eight columns ran past both edges); the panels' foot rises above its rows."""
        for old in list(self.fig.legends):
            old.remove()
        handles, labels = self.panels.legend_entries()
        legend_below(self.fig, handles, labels, fontsize=LEGEND_SIZE, handlelength=1.5, columnspacing=1.2,
                              borderaxespad=0.2)
        rows = -(-len(labels) // legend_columns(labels, self.fig.get_figwidth(), LEGEND_SIZE))
        # the tick labels and the axis label (0.42 in), then the legend's rows
        self.fig.subplots_adjust(bottom=(0.42 + 0.1 + rows * _line_in(LEGEND_SIZE)) / self.fig.get_figheight())
        self._relayout = True

    def _range(self, ax: Any, which: str, lo: float, hi: float, **kw: Any) -> None:
        key = (ax, which)
        new = sticky_range(self._ranges.get(key), lo, hi, **kw)
        if new != self._ranges.get(key):
            self._ranges[key] = new
            (ax.set_xlim if which == "x" else ax.set_ylim)(*new)
            self._background = None

    def update(self, view: RunView, total: int = 0, final: bool = False) -> None:
        """Show ``view`` in the artists (thinned) and set the axis ranges (``total``: the run's budget of
        minibatches, to aim the ranges at its end; ``final``: the run has ended, fit the axes to the data)."""
        if view.many != self.panels.many:  # the workers turned out to be many (or few): other artists
            self._build(view)
        if self.panels.show(view, self.points, settled=final):
            self._legend()
        if self.panels.log_loss != self._log:
            self._log = self.panels.log_loss
            for ax in (self.ax_loss, self.ax_samples):
                _few_ticks(ax.yaxis)
                self._ranges.pop((ax, "y"), None)
            self._background = None
        if final:
            self._ranges.clear()
            self._background = None
        elif view.n_records:
            self._live_ranges(view, total)

    def _live_ranges(self, view: RunView, total: int) -> None:
        """Axis ranges that grow with the data in round steps: an upper end aims at :data:`GROWTH` times the data
        so far (at most the run's predicted end), so the data fill about half the axes or more and a range moves
        only when the data outgrow it."""
        n = view.n_records
        grow = min(GROWTH, max(1.0, total / n)) if total and n >= 2 * max(1, view.workers) else None
        t_end = view.t_end
        for ax in (self.ax_loss, self.ax_prog, self.ax_skew):
            self._range(ax, "x", 0.0, t_end, floor=0.0, ahead=t_end * grow if grow else None)
        self._range(self.ax_samples, "x", 0.0, float(n), floor=0.0, ahead=float(n) * grow if grow else None)
        lo, hi, _ = view.loss_range
        if lo >= 0 and not self._log:
            lo = 0.0  # a falling loss would otherwise move the range at every refresh
        for ax in (self.ax_loss, self.ax_samples):
            self._range(ax, "y", lo, hi, log=self._log, floor=0.0 if lo >= 0 else None)
        top = view.steps_max
        self._range(self.ax_prog, "y", 0.0, top, floor=0.0, ahead=top * grow if grow else None)
        skew_top = float(view.skew.y.max()) if len(view.skew) else 0.0
        skew_bound_y = -1.0 if view.bound is None else float(skew_bound(view.bound))
        self._range(self.ax_skew, "y", 0.0, max(skew_top, skew_bound_y, 1.0) * 1.25, floor=0.0)
        top = float(max(np.nanmax(view.waits.wait_s, initial=0.0), np.nanmax(view.waits.delay_s, initial=0.0)))
        self._range(self.ax_wait, "y", 0.0, max(top, 1e-3), floor=0.0, ahead=top * grow if grow else None)
        keys = view.staleness_counts
        if len(keys):
            self._range(self.ax_stale, "x", keys.x[0] - 0.6, keys.x[-1] + 0.6, floor=-0.6)
            top = float(keys.y.max())
            self._range(self.ax_stale, "y", 0.0, top, floor=0.0, ahead=top * grow if grow else None)

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
            for artist in sorted(_data(ax), key=lambda a: a.get_zorder()):
                artist.draw(renderer)
        self.draws += 1
        return self._encode(exact)

    def _draw_background(self) -> None:
        """Draw all but the data (first time, and whenever an axis range, tick or the legend changed)."""
        if self._relayout:
            self._relayout = False
            width = min(ax.bbox.width for ax in self.axes)
            self.points = int(min(MAX_POINTS, max(200, 3 * width)))
        data = [a for ax in self.axes for a in _data(ax) if a.get_visible()]
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


def _data(ax: Any) -> list[Any]:
    """The artists of ``ax`` drawn at every refresh: lines, bars and bands."""
    return [*ax.collections, *ax.patches, *ax.lines]
