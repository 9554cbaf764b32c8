"""The six panels of one run, drawn into six given axes: one drawing for the report's figure
(:func:`ssptk.render.figures.run_figure`) and the live dashboard's (:class:`ssptk.notebook.live_figure.LiveFigure`).

:class:`RunPanels` builds the artists once (titles, axis labels, the SSP bound, a line per curve) and
:meth:`RunPanels.show` moves a :class:`ssptk.analysis.run_view.RunView` into them: once for the report, at
every refresh for the live figure, which only adds the updating (axis ranges that settle, a kept background).
Long series can be thinned to a number of points (:func:`thin`, :func:`thin_envelope`). The look comes from
:mod:`ssptk.render.style`; nothing here changes matplotlib's global state.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.ticker import MaxNLocator

from ssptk.analysis.run_view import Band, Line, RunView
from ssptk.render.skew import SKEW_BAND_ALPHA, SKEW_BUCKETS, SKEW_MEAN_LABEL, SKEW_RANGE_LABEL, skew_envelope
from ssptk.render.style import (
    DELAY_COLOR,
    EXTREME_LINES,
    LABELS,
    LOSS_BAND,
    MAX_LEGEND,
    MEDIAN_LINE,
    NOTE_COLOR,
    OVERALL_LINE,
    PROGRESS_BANDS,
    SKEW_COLOR,
    STALENESS_COLOR,
    WAIT_COLOR,
    WORKER_LINE,
    color,
    draw_bound,
    extreme_label,
    wants_log_loss,
    worker_label,
)

__all__ = ["RunPanels", "panel_titles", "set_band", "thin", "thin_envelope"]

NO_WAIT = "no worker waited, no delay injected"


def panel_titles(view: RunView) -> tuple[str, ...]:
    """The six panels' titles, in the order of the axes :class:`RunPanels` takes."""
    return ("loss vs wall time",
            f"completed steps, {view.workers} workers" if view.many else "completed steps per worker",
            "step skew", "wait and injected delay per worker",
            "staleness (simulated)" if view.predicted else "measured staleness", "loss vs minibatches")


def thin(x: np.ndarray, y: np.ndarray, limit: int | None) -> tuple[np.ndarray, np.ndarray]:
    """At most ``limit`` evenly spaced points of a series (first and last kept; ``None``: all)."""
    if limit is None or len(x) <= limit:
        return x, y
    idx = np.linspace(0, len(x) - 1, limit).round().astype(np.int64)
    return x[idx], y[idx]


def thin_envelope(x: np.ndarray, y: np.ndarray, limit: int | None) -> tuple[np.ndarray, np.ndarray]:
    """At most about ``limit`` points that keep a jumpy series' look (the step skew's): per bucket of
    consecutive points its largest ``y`` at the bucket's start and its smallest at the bucket's
    middle, so both peaks and dips survive; then the last point (``None``: all points)."""
    if limit is None or len(x) <= limit:
        return x, y
    buckets = max(1, limit // 2)
    starts = np.linspace(0, len(x), buckets, endpoint=False).astype(np.int64)
    ends = np.append(starts[1:], len(x))
    xs = np.empty(2 * buckets + 1)
    ys = np.empty(2 * buckets + 1)
    xs[0:-1:2], xs[1:-1:2], xs[-1] = x[starts], x[(starts + ends) // 2], x[-1]
    ys[0:-1:2], ys[1:-1:2], ys[-1] = np.maximum.reduceat(y, starts), np.minimum.reduceat(y, starts), y[-1]
    return xs, ys


def _thin_band(band: Band, limit: int | None, inner: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(x, lo, hi)`` of a band, or of its middle half (``inner``), at most ``limit`` points."""
    lo, hi = (band.q25, band.q75) if inner and band.q25 is not None and band.q75 is not None else (band.lo, band.hi)
    if limit is None or len(band.x) <= limit:
        return band.x, lo, hi
    idx = np.linspace(0, len(band.x) - 1, limit).round().astype(np.int64)
    return band.x[idx], lo[idx], hi[idx]


def set_band(band: Any, x: np.ndarray, lo: np.ndarray, hi: np.ndarray, step: bool = False) -> None:
    """Move a band made by ``fill_between`` (``step``: with ``step="post"``) to new data. Matplotlib >= 3.10
    can do it; before, the band's polygon is set (points where ``lo`` or ``hi`` is missing left out)."""
    if hasattr(band, "set_data"):
        band.set_data(x, lo, hi)
        return
    if step and len(x):
        x, lo, hi = np.repeat(x, 2)[1:], np.repeat(lo, 2)[:-1], np.repeat(hi, 2)[:-1]
    ok = np.isfinite(x) & np.isfinite(lo) & np.isfinite(hi)
    x, lo, hi = x[ok], lo[ok], hi[ok]
    band.set_verts([np.column_stack([np.r_[x, x[::-1]], np.r_[hi, lo[::-1]]])] if len(x) else [])


class RunPanels:
    """A run's six panels in ``axes`` (loss vs wall time, completed steps, step skew; wait and delay per
    worker, measured staleness, loss vs minibatches), built for ``view``'s kind of run (its workers, SSP
    staleness, few or many workers). :meth:`show` draws a view of it; call it again with a newer one."""

    def __init__(self, axes: Sequence[Axes], view: RunView) -> None:
        self.axes = list(axes)
        self.ax_loss, self.ax_prog, self.ax_skew, self.ax_wait, self.ax_stale, self.ax_samples = self.axes
        self.many, self.workers, self.smooth, self.bound = view.many, view.workers, view.smooth, view.bound
        self.titles = panel_titles(view)
        stale = "staleness (updates)"
        for ax, title, xlabel, ylabel in zip(self.axes, self.titles, (
                "wall time (s)", "wall time (s)", "wall time (s)", "worker", stale,
                "minibatches processed"), (
                "training loss", "completed steps", "most - least advanced (steps)", "total seconds", "step records",
                "training loss")):
            ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
        self.loss_lines: dict[int, Any] = {}
        self.sample_lines: dict[int, Any] = {}
        self.prog_lines: dict[int, Any] = {}
        band_label = LABELS["loss_band"].format(smooth=self.smooth)
        self.loss_bands = [ax.fill_between([], [], [], **LOSS_BAND, label=band_label)
                           for ax in (self.ax_loss, self.ax_samples)] if self.many else []
        self.prog_bands = [self.ax_prog.fill_between([], [], [], step="post", **style, label=LABELS[k])
                           for style, k in zip(PROGRESS_BANDS, ("all_workers", "middle_half"))] if self.many else []
        self.prog_median = self.ax_prog.plot([], [], drawstyle="steps-post", **MEDIAN_LINE,
                                             label=LABELS["median"])[0] if self.many else None
        self.prog_ends = [self.ax_prog.plot([], [], drawstyle="steps-post", **EXTREME_LINES[which],
                                            label=extreme_label(which))[0]
                          for which in ("slowest", "fastest")] if self.many else []
        for w in view.ids:
            self._add_worker(w)
        self.overall = [ax.plot([], [], **OVERALL_LINE, label=LABELS["overall"].format(smooth=self.smooth))[0]
                        for ax in (self.ax_loss, self.ax_samples)]
        # a skew that flips faster than the axis has pixels: a band of its range under its highest (render/skew.py)
        self.skew_band = self.ax_skew.fill_between([], [], [], step="post", color=SKEW_COLOR, alpha=SKEW_BAND_ALPHA,
                                                   lw=0, label="_" + SKEW_RANGE_LABEL)
        (self.skew_line,) = self.ax_skew.plot([], [], drawstyle="steps-post", color=SKEW_COLOR, label=LABELS["skew"])
        self.bound_line = None if self.bound is None else draw_bound(self.ax_skew, self.bound)
        if self.many:  # a tick per worker would overlap
            self.ax_wait.xaxis.set_major_locator(MaxNLocator(nbins=8, integer=True))
        self.wait_bars: Any = None
        self.delay_bars: Any = None
        self.stale_bars: Any = None
        self.stale_keys: tuple[float, ...] = ()
        self.log_loss = False
        self._no_wait: Any = None

    def _add_worker(self, w: int) -> None:
        c = color(w, max(self.workers, w + 1))
        label = worker_label(w) if max(self.workers, w + 1) <= MAX_LEGEND else None
        (self.loss_lines[w],) = self.ax_loss.plot([], [], **WORKER_LINE, color=c, label=label)
        (self.sample_lines[w],) = self.ax_samples.plot([], [], **WORKER_LINE, color=c, label=label)
        (self.prog_lines[w],) = self.ax_prog.plot([], [], drawstyle="steps-post", color=c, label=label)

    def show(self, view: RunView, points: int | None = None, settled: bool = False) -> bool:
        """Draw ``view`` (each line thinned to about ``points`` points; ``None``: all). ``settled``: the view
        will not change any more (the report, a live run's end): name the extreme workers, say when nobody
        waited, label the staleness values, fit every axis to its data. Returns whether legend entries,
        ticks or scales changed (what a kept background shows)."""
        changed = False
        for w in view.ids:
            if w not in self.loss_lines:
                self._add_worker(w)
                changed = True
        for lines, curves in ((self.loss_lines, view.loss_time.per_worker), (self.sample_lines,
                              view.loss_samples.per_worker), (self.prog_lines, view.progress.per_worker)):
            for w, line in curves.items():
                lines[w].set_data(*thin(line.x, line.y, points))
        for artist, panel in zip(self.overall, (view.loss_time, view.loss_samples)):
            artist.set_data(*thin(panel.overall.x, panel.overall.y, points))
        for band, panel in zip(self.loss_bands, (view.loss_time, view.loss_samples)):
            if panel.band is not None:
                set_band(band, *_thin_band(panel.band, points))
        changed |= self._show_progress(view, points, settled)
        changed |= self._show_skew(view, points)
        changed |= self._show_waits(view)
        self._show_staleness(view.staleness_counts)
        log = wants_log_loss(*view.loss_range)
        if log != self.log_loss:  # the rule every ssptk figure follows (ssptk.render.style)
            self.log_loss = log
            for ax in (self.ax_loss, self.ax_samples):
                ax.set_yscale("log" if log else "linear")
            changed = True
        if settled:
            self._settle(view)
        return changed

    def _show_progress(self, view: RunView, points: int | None, settled: bool) -> bool:
        p, changed = view.progress, False
        if p.band is not None:
            for artist, inner in zip(self.prog_bands, (False, True)):
                set_band(artist, *_thin_band(p.band, points, inner), step=True)
            if self.prog_median is not None and p.band.median is not None:
                self.prog_median.set_data(*thin(p.band.x, p.band.median, points))
        for end_line, which, end in zip(self.prog_ends, ("slowest", "fastest"), (p.slowest, p.fastest)):
            line = end[1] if end is not None else Line()
            end_line.set_data(*thin(line.x, line.y, points))
            # while a run goes on the extreme workers change: named once it has ended
            label = extreme_label(which, end[0] if settled and end is not None else None)
            if end_line.get_label() != label:
                end_line.set_label(label)
                changed = True
        return changed

    def _show_skew(self, view: RunView, points: int | None) -> bool:
        """The skew as steps, or when it is dense, its mean per slice of time over a band of its range
        (:func:`ssptk.render.skew.skew_envelope`, a slice per ~6 points); whether the legend changed."""
        x, lo, hi, mean, dense = skew_envelope(view.skew.x, view.skew.y,
                                               SKEW_BUCKETS if points is None else points // 6)
        if not dense:
            x, mean = thin_envelope(x, hi, points)
        self.skew_line.set_data(x, mean)
        empty = np.empty(0)
        shown = (x, lo, hi) if dense else (empty, empty, empty)
        set_band(self.skew_band, shown[0], shown[1], shown[2], step=True)
        labels = (SKEW_RANGE_LABEL, SKEW_MEAN_LABEL) if dense else ("_" + SKEW_RANGE_LABEL, LABELS["skew"])
        if (self.skew_band.get_label(), self.skew_line.get_label()) == labels:
            return False
        self.skew_band.set_label(labels[0])
        self.skew_line.set_label(labels[1])
        return True

    def _show_waits(self, view: RunView) -> bool:
        waits, changed = view.waits, False
        x = np.arange(len(waits.worker), dtype="float64")
        if self.wait_bars is None or len(self.wait_bars.patches) != len(x):
            for old in (self.wait_bars, self.delay_bars):
                if old is not None:
                    old.remove()
            self.wait_bars = self.ax_wait.bar(x - 0.2, np.zeros(len(x)), width=0.4, color=WAIT_COLOR,
                                              label=LABELS["wait"])
            self.delay_bars = self.ax_wait.bar(x + 0.2, np.zeros(len(x)), width=0.4, color=DELAY_COLOR,
                                               label=LABELS["delay"])
            if not self.many:
                self.ax_wait.set_xticks(x, [str(int(w)) for w in waits.worker])
            self.ax_wait.set_xlim(-0.6, len(x) - 0.4)
            changed = True
        for bars, heights in ((self.wait_bars, waits.wait_s), (self.delay_bars, waits.delay_s)):
            for patch, h in zip(bars.patches, np.nan_to_num(heights)):
                patch.set_height(h)
        return changed

    def _show_staleness(self, counts: Line) -> None:
        keys = tuple(counts.x.tolist())
        if self.stale_bars is None or keys != self.stale_keys:  # new bars are data: the axes stay as they are
            if self.stale_bars is not None:
                self.stale_bars.remove()
            self.stale_bars = self.ax_stale.bar(counts.x, np.zeros(len(keys)), width=0.8, color=STALENESS_COLOR)
            self.stale_keys = keys
        for patch, h in zip(self.stale_bars.patches, counts.y):
            patch.set_height(h)

    def _settle(self, view: RunView) -> None:
        """The finished look: axes fitted to the data; what only a finished run can say."""
        for ax in self.axes:
            ax.relim()
            for c in ax.collections:  # relim leaves out bands
                box = c.get_datalim(ax.transData)
                if np.isfinite(box.get_points()).all():
                    ax.update_datalim(box.get_points())
            ax.set_autoscale_on(True)
            ax.autoscale_view()
        self.ax_skew.set_ylim(bottom=-0.03 * max(1.0, self.ax_skew.get_ylim()[1]))  # a skew of 0 shows off the axis
        self.ax_wait.set_xlim(-0.6, len(view.waits.worker) - 0.4)
        waited = bool(np.nansum(view.waits.wait_s) > 0 or np.nansum(view.waits.delay_s) > 0)
        if not waited:  # not an axis around 0 with -0.04
            self.ax_wait.set_ylim(0, 1)
        else:  # room above the bars for the legend
            self.ax_wait.set_ylim(0, 1.35 * float(np.nanmax(np.r_[view.waits.wait_s, view.waits.delay_s])))
        if self._no_wait is None:
            self._no_wait = self.ax_wait.text(0.5, 0.5, NO_WAIT, transform=self.ax_wait.transAxes, ha="center",
                                              va="center", color=NOTE_COLOR, fontsize="small")
        self._no_wait.set_visible(not waited)
        most = view.waits.most_wait
        title = self.titles[3]
        if self.many and most is not None:
            title = f"{title}\n(most wait: worker {most[0]}, {most[1]:.1f} s)"
        self.ax_wait.title.set_text(title)
        self._stale_ticks()

    def _stale_ticks(self) -> None:
        """A tick per staleness value while they are few and close; else at most 8 round ticks (values far
        apart, 0-2 and 13-17, would run together: "13141516"). At least 6 units wide: one bar is not a wall."""
        keys = self.stale_keys
        if not keys:
            return
        lo, hi = min(keys), max(keys)
        if len(keys) <= 8 and hi - lo <= 10:
            self.ax_stale.set_xticks(list(keys), [f"{k:g}" for k in keys])
        else:
            self.ax_stale.xaxis.set_major_locator(MaxNLocator(nbins=8, integer=True))
        self.ax_stale.set_xlim(lo - 0.6, max(hi, lo + 5) + 0.6)

    def legend_entries(self) -> tuple[list[Any], list[str]]:
        """Every panel's legend entries, each label once (for one legend of the whole figure); a worker by its
        progress line (its loss lines are faint)."""
        handles, labels = [], []
        for ax in (self.ax_prog, self.ax_loss, self.ax_skew, self.ax_wait, self.ax_samples):
            for h, lab in zip(*ax.get_legend_handles_labels()):
                if lab not in labels:
                    handles.append(h)
                    labels.append(lab)
        return handles, labels
