"""The live dashboard a notebook shows while a run goes on (``%dtrain``).

:class:`LiveDashboard` is a :class:`ssptk.api.RunObserver`: the run's watcher hands it the new step and
event records about every 0.1 s; it accumulates them (:class:`ssptk.notebook.live_state.LiveRun`) and redraws at most
once per ``interval`` seconds, and once more at the end: the panels of :func:`ssptk.render.figures.run_figure`
(one drawing, :class:`ssptk.render.run_panels.RunPanels`) and a progress line (minibatches done of the budget,
steps/s, elapsed, ETA). Before the first step records (the cluster's start: no records come) it shows no figure,
and the line says how many tasks are ready (the run's ``starting`` calls) with an elapsed time its own thread
moves every second.

Cheap by construction (:class:`LiveFigure`): one matplotlib Figure (no pyplot, no rcParams changes)
built once; axis ranges grow in round steps with the data (never sized for the whole budget), so most
refreshes only restore a kept background (axes, ticks, texts) and draw the data lines and bars on it, thinned to
about three points per pixel. When a refresh is slow the interval stretches so that drawing stays
under :data:`RENDER_SHARE` of one core (never past 1 s unless one refresh takes longer).

Where it draws: in a Jupyter kernel, two outputs of the running cell (the figure as image/png and the
progress line as HTML) updated in place, the last update staying in the saved notebook; with
``widget=True``, an ipywidgets ``VBox(Image, HTML)`` (:attr:`LiveDashboard.widget`) the caller shows,
updated from the run's thread (for runs in the background); elsewhere (plain Python, the CLI) nothing,
and :attr:`LiveDashboard.png` renders on demand::

    ssptk.run(..., observer=LiveDashboard())                  # blocking: shows in the running cell
    dash = LiveDashboard(widget=True); display(dash.widget)   # background: show first, then
    threading.Thread(target=ssptk.run, kwargs={..., "observer": dash}).start()
"""
from __future__ import annotations

import base64
import html
import math
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from ssptk.notebook.live_figure import DPI, LIVE_FIGSIZE, MAX_POINTS, LiveFigure, duration
from ssptk.notebook.live_state import LiveRun
from ssptk.render.traffic_words import split_html, status_text
from ssptk.rundir import Summary

__all__ = ["LiveDashboard", "LiveFigure", "in_kernel", "MAX_POINTS", "RENDER_SHARE", "TICK_S"]

#: Share of one core that drawing may take: a slow refresh stretches the interval (up to 1 s).
RENDER_SHARE = 0.05
#: Seconds between refreshes of the progress line while the cluster starts (no records come then; a cold start
#: takes ~40 s on 2 cores, and the line said "elapsed 0.0 s" all along).
TICK_S = 1.0
INSTALL_HINT = "LiveDashboard(widget=True) needs ipywidgets: pip install 'ssptk[notebook]'"

#: ``sink(png, progress, final)``; ``png`` is None when only the progress line changed.
Sink = Callable[[bytes | None, str, bool], None]


def in_kernel() -> bool:
    """Whether this runs inside an IPython kernel (a notebook), not plain Python or a terminal."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    ip = get_ipython()
    return ip is not None and getattr(ip, "kernel", None) is not None


class LiveDashboard:
    """Live figure and progress line of a run; a :class:`ssptk.api.RunObserver`.

    ``interval``: seconds between refreshes at most (default 1.0; 0: at every call), stretched while
    refreshes are slow (:data:`RENDER_SHARE`). ``widget=True``: draw into :attr:`widget` (ipywidgets)
    rather than the cell's outputs. ``sink(png, progress, final)``: draw nowhere but hand every refresh
    to this callable. ``controls``: widgets shown beside the progress line (with ``widget=True``: a stop
    button). ``clock``: monotonic seconds (tests pass a fake one); a refresh's cost is the
    lesser of its duration on this clock and its CPU time. An error inside the dashboard never reaches the
    run: drawing stops with a warning and :attr:`error` keeps it.

    Until the first step records the figure is not shown (its panels would be empty) and the progress line
    says how far the cluster's start has come (``starting: 2 of 4 tasks ready``, from :meth:`starting`), its
    elapsed time refreshed every ``tick`` seconds by a thread of its own (default :data:`TICK_S` when it draws
    into a widget or a cell's outputs; 0: never; a ``sink`` only hears it with a ``tick`` given).
    """

    def __init__(self, interval: float = 1.0, *, widget: bool = False, sink: Sink | None = None,
                 clock: Callable[[], float] = time.monotonic, dpi: float = DPI,
                 figsize: tuple[float, float] = LIVE_FIGSIZE, controls: Sequence[Any] = (),
                 tick: float | None = None) -> None:
        self.interval = max(0.0, float(interval))
        self.tick = tick
        #: ``(tasks ready, tasks)`` while the cluster starts (``None`` before the first word of it).
        self.ready: tuple[int, int] | None = None
        self._ticking: threading.Event | None = None  # set: the start-up clock stops
        self.clock, self.sink, self.dpi, self.figsize = clock, sink, dpi, figsize
        self.state = LiveRun()
        self.figure: LiveFigure | None = None
        self.redraws = 0
        #: Wall and CPU (this thread's) seconds of each refresh: what the dashboard costs.
        self.render_times: list[float] = []
        self.render_cpu: list[float] = []
        self.error: BaseException | None = None
        self.done = self.total = 0
        self.status = "waiting"  # then running, ok, failed or interrupted
        self.summary = Summary()
        self.run_dir: str | None = None
        self._png: bytes | None = None
        self._png_version = -1
        self._lock = threading.RLock()
        self._t_start = self._last = -math.inf
        self._wait = self.interval
        self._handles: tuple[Any, Any] | None = None
        self.widget: Any = None
        if widget:
            try:
                import ipywidgets
            except ImportError:
                raise ImportError(INSTALL_HINT) from None
            # hidden until the first figure: an Image without a value shows as a broken image
            self._img = ipywidgets.Image(format="png", layout=ipywidgets.Layout(max_width="100%", display="none"))
            self._html = ipywidgets.HTML(value=self._progress_html())
            if controls:
                self._html.layout.flex = "1 1 auto"  # the progress line takes the row's width beside the controls
            self.widget = ipywidgets.VBox([self._img, ipywidgets.HBox([*controls, self._html],
                                                                      layout=ipywidgets.Layout(align_items="center"))
                                           if controls else self._html])

    # --- the RunObserver protocol ---------------------------------------------------------------

    def started(self, run_dir: str, opts: Any, total: int) -> None:
        """A run begins: build the figure; show the progress line (the figure follows with records)."""
        self._guard(self._started, run_dir, opts, total)

    def starting(self, ready: list[str], pending: list[str]) -> None:
        """The cluster's start so far (task names up, and still starting): shown in the progress line."""
        self._guard(self._starting, ready, pending)

    def records(self, steps: list[dict[str, Any]], events: list[dict[str, Any]], done: int, total: int) -> None:
        """New records since the last call: keep them; refresh once the interval has passed."""
        self._guard(self._records, steps, events, done, total)

    def finished(self, result: Any) -> None:
        """The run ended (``result`` None: interrupted): draw the final figure and progress line."""
        self._guard(self._finished, result)

    # --- what it shows --------------------------------------------------------------------------

    @property
    def png(self) -> bytes:
        """The figure as PNG bytes as of the latest records (drawn now if out of date)."""
        with self._lock:
            if self._png is None or self._png_version != self.state.version:
                self._render(final=self.state.final)
            assert self._png is not None
            return self._png

    def progress_text(self, split: bool = True) -> str:
        """The progress line: minibatches done of the budget, steps/s, elapsed, ETA; or the outcome (with the
        traffic, a worker's step split too, unless ``split`` is false: the HTML shows it as a bar under the line)."""
        s, done, total = self.state, self.done, self.total
        elapsed = duration(max(0.0, self.clock() - self._t_start)) if math.isfinite(self._t_start) else "-"
        frac = f"{done}/{total} minibatches ({100 * done / total:.0f}%)" if total else f"{done} minibatches"
        if self.status == "ok":
            m = self.summary
            head = f"done: {s.n_steps if m.total_steps is None else m.total_steps} minibatches"
            if m.wall_s is not None:
                head += f" in {duration(m.wall_s)}"
            parts = [head] + ([f"{m.steps_per_s:.1f} steps/s"] if m.steps_per_s else [])
            parts += [f"final loss {m.final_loss:.4g}"] if m.final_loss is not None else []
            parts += [f"max skew {m.max_skew}"] if m.max_skew is not None else []
            parts += [net] if (net := status_text(m, split)) else []  # what crossed the links: MB/step, link capacity
            return " · ".join(parts + self._diverged())
        if self.status == "failed":
            return f"failed after {frac}: {self.summary.reason or 'see the run directory'}"
        if self.status == "interrupted":
            return f"interrupted after {frac} · elapsed {elapsed}"
        if not s.n_steps:
            return f"{self._start_up()} · elapsed {elapsed}"
        span = (s.last_t or 0.0) - (s.t0 or 0.0)
        rate = s.n_steps / span if span > 0 else None
        parts = [frac] + ([f"{rate:.1f} steps/s"] if rate else []) + [f"elapsed {elapsed}"]
        parts += [f"network {s.options.network}"] if s.options.network else []
        if rate and total:
            parts.append(f"ETA {duration(max(0, total - done) / rate)}")
        return " · ".join(parts + self._diverged())

    def _start_up(self) -> str:
        """How far the start has come: ``starting: 2 of 4 tasks ready``, or waiting for the first steps."""
        if self.ready is None:
            return "starting the cluster\u2026"
        ready, tasks = self.ready
        if ready < tasks:
            return f"starting: {ready} of {tasks} tasks ready"
        return f"{tasks} of {tasks} tasks ready: waiting for the first step records"

    def _diverged(self) -> list[str]:
        watch = self.state.divergence
        return [f"DIVERGED at global step {watch.at}"] if watch.diverged else []

    def _progress_html(self) -> str:
        """The progress line as HTML; at the end of a run that measured its traffic, a worker's step under it as a
        stacked bar with its parts in words (:func:`ssptk.render.traffic_words.split_html`)."""
        panel = split_html(self.summary.traffic or {}, "16em", line=True) if self.status == "ok" else ""
        text = self.progress_text(split=not panel)
        bar = ""
        if self.total:
            value = self.total if self.status == "ok" else min(self.done, self.total)
            bar = (f'<progress value="{value}" max="{self.total}" '
                   'style="width:16em;vertical-align:middle;margin-right:0.6em"></progress>')
        color = {"failed": "#b00", "interrupted": "#a60"}.get(self.status, "inherit")
        if self.state.divergence.diverged:
            color = "#b00"
        top, bound = self.state.skew_shown()
        skew = f' data-max-skew="{top}"' + (f' data-skew-bound="{bound}"' if bound is not None else "")
        return (f'<div class="ssptk-live"{skew} style="font-family:monospace;font-size:12px;color:{color}">'
                f"{bar}{html.escape(text)}"
                + (f'<div class="ssptk-step-split" style="margin-top:4px;font-family:sans-serif">{panel}</div>'
                   if panel else "") + "</div>")

    def _ipython_display_(self) -> None:
        from IPython.display import Image, display

        display(self.widget if self.widget is not None else Image(self.png))

    # --- internals ------------------------------------------------------------------------------

    def _guard(self, fn: Callable[..., None], *args: Any) -> None:
        if self.error is not None:
            return
        try:
            with self._lock:
                fn(*args)
        except Exception as e:  # noqa: BLE001 - a dashboard bug must never end a training run
            self.error = e
            warnings.warn(f"ssptk live dashboard stopped: {e!r}", RuntimeWarning, stacklevel=3)

    def _drawing(self) -> bool:
        return self.sink is not None or self.widget is not None or self._handles is not None

    def _new_figure(self) -> LiveFigure:
        return LiveFigure(self.state.view(), self.figsize, self.dpi)

    def _started(self, run_dir: str, opts: Any, total: int) -> None:
        self.run_dir, self.total, self.done = run_dir, int(total), 0
        options = opts.to_dict() if hasattr(opts, "to_dict") else dict(vars(opts)) if opts is not None else {}
        self.state = LiveRun(int(getattr(opts, "workers", 0) or 0), options)
        self.figure = self._new_figure()
        self.status, self.summary, self._png, self.ready = "running", Summary(), None, None
        self._t_start = self._last = self.clock()
        if self.sink is None and self.widget is None and in_kernel():
            from IPython.display import display

            # the figure comes with the first records (laying it out costs most while tasks start)
            self._handles = (display({"text/plain": "(the figure comes with the first step records)"},
                                     raw=True, display_id=True),
                             display(self._text_bundle(self.progress_text()), raw=True, display_id=True))
        elif self._drawing():
            self._push(None, final=False)
        self._start_clock()

    def _start_clock(self) -> None:
        """Refresh the progress line every ``tick`` seconds until the first step records (see the class)."""
        self._stop_clock()
        every = self.tick if self.tick is not None else (
            TICK_S if self.widget is not None or self._handles is not None else 0.0)
        if every and every > 0:
            self._ticking = stop = threading.Event()
            threading.Thread(target=self._tick, args=(every, stop), name="ssptk-dashboard-clock",
                             daemon=True).start()

    def _stop_clock(self) -> None:
        if self._ticking is not None:
            self._ticking.set()
            self._ticking = None

    def _tick(self, every: float, stop: threading.Event) -> None:
        while not stop.wait(every):
            with self._lock:
                if stop.is_set() or self.error is not None or self.status != "running" or self.state.n_steps:
                    return
                self._guard(self._push, None, False)

    def _starting(self, ready: list[str], pending: list[str]) -> None:
        self.ready = (len(ready), len(ready) + len(pending))
        if self.figure is not None and self.status == "running" and not self.state.n_steps and self._drawing():
            self._push(None, final=False)

    def _records(self, steps: list[dict[str, Any]], events: list[dict[str, Any]], done: int, total: int) -> None:
        if self.figure is None:  # records without started(): follow the run all the same
            self._started("", None, total)
        self.state.add(steps, events)
        self.done, self.total = int(done), int(total)
        if self.state.n_steps:
            self._stop_clock()
        if not self._drawing():
            return
        now = self.clock()
        if now - self._last < self._wait:
            return
        self._last = now
        if self._png_version != self.state.version and self.state.n_steps:  # no figure of empty panels
            self._render()
            self._push(self._png, final=False)
        else:
            self._push(None, final=False)

    def _finished(self, result: Any) -> None:
        self._stop_clock()
        if result is None:
            self.status = "interrupted"
        else:
            self.summary = Summary(getattr(result, "summary", None) or {})
            self.status = "ok" if self.summary.ok else "failed"
        if self.figure is None:
            self.figure = self._new_figure()
        self.state.finalize()
        if self._drawing():
            self._render(final=True)
            self._push(self._png if self.state.n_steps else None, final=True)

    def _render(self, final: bool = False) -> None:
        if self.figure is None:
            self.figure = self._new_figure()
        t0, p0, c0 = self.clock(), time.perf_counter(), time.thread_time()
        self.figure.update(self.state.view(), self.total, final=final)
        self._png = self.figure.png(exact=final)
        self._png_version = self.state.version
        self.render_times.append(time.perf_counter() - p0)
        self.render_cpu.append(time.thread_time() - c0)
        self.redraws += 1
        # drawing stays under RENDER_SHARE of a core: stretch the interval, up to 1 s (or one refresh).
        # The cost is CPU time: on a crowded machine a refresh waits for a core much longer than it works.
        took = min(self.clock() - t0, self.render_cpu[-1])
        self._wait = max(self.interval, min(took / RENDER_SHARE, max(1.0, took)))

    def _png_bundle(self) -> dict[str, str]:
        assert self._png is not None
        data = base64.b64encode(self._png).decode("ascii")
        # As HTML, the image fills the notebook's width like the --background widget (a bare PNG shows at its
        # pixel size: its tick labels ~6 px in a JupyterLab window); the PNG stays for other front ends.
        return {"text/html": f'<img src="data:image/png;base64,{data}" alt="ssptk live dashboard" '
                             'style="width:100%;max-width:1400px;height:auto">',
                "image/png": data, "text/plain": f"<ssptk live dashboard: {self.run_dir}>"}

    def _text_bundle(self, text: str) -> dict[str, str]:
        return {"text/html": self._progress_html(), "text/plain": text}

    def _push(self, png: bytes | None, final: bool) -> None:
        text = self.progress_text()
        if self.sink is not None:
            self.sink(png, text, final)
        elif self.widget is not None:
            if png is not None:
                self._img.value = png
                self._img.layout.display = ""
            self._html.value = self._progress_html()
        elif self._handles is not None:
            if png is not None:
                self._handles[0].update(self._png_bundle(), raw=True)
            self._handles[1].update(self._text_bundle(text), raw=True)
