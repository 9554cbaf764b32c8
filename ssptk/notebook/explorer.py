"""The staleness explorer widget, :class:`Explorer` (made by
:func:`ssptk.notebook.staleness_widgets.staleness_explorer`): its sliders and buttons, the runs it keeps by their
options, its overlay of them, and the Run button's run.

Runs execute in the kernel's main thread, inside the Run button's handler. ipykernel handles widget
messages one at a time on that thread, so clicks and slider moves made during a run wait (the controls
are disabled meanwhile), while the status line, progress bar and image still update live: widget state
goes out through ipykernel's IOPub thread. On the main thread the kernel's interrupt button raises
``KeyboardInterrupt`` inside :func:`ssptk.api.run`, which stops every task; the tasks get
``PR_SET_PDEATHSIG`` (set only for runs started from the main thread); and matplotlib never renders from
two threads at once. A background thread would free the kernel for the seconds a run takes, at the
price of all three. ipywidgets is imported lazily.
"""
from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ssptk.core.errors import RunFailed, UsageError
from ssptk.core.optimizers import parse_optimizer
from ssptk.core.options import DEFAULT_STALENESS, resolve
from ssptk.experiment.compare import call_runner
from ssptk.experiment.sweep import KNOBS, MOMENTUM, Knob
from ssptk.notebook.explorer_predictions import ExplorerPredictions, error_line
from ssptk.notebook.runner import CacheKey, ObserverFactory, Runner, cache_key, default_runner, ipywidgets
from ssptk.notebook.slider_predictions import PREDICTED
from ssptk.notebook.views import KeepRecords, StaticView
from ssptk.render.overlay import notes_html, summary_line
from ssptk.render.style import model_name

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from ssptk.experiment.result import RunResult

__all__ = ["FIGURE_EVERY_S", "Explorer"]

#: Every explorer's finished runs in this kernel, by :func:`cache_key`: a new explorer (the cell run again)
#: starts with those of its options family (:func:`_family`).
_RUNS: dict[CacheKey, RunResult] = {}
#: While a run goes on, the explorer's figure (which says so) is redrawn at most this often.
FIGURE_EVERY_S = 2.0


def _family(key: CacheKey) -> CacheKey:
    """What an explorer fixes: a cache key without the options its sliders change."""
    return tuple((name, value) for name, value in key
                 if name not in ("staleness", "local_steps", "workers", "straggler", "optimizer"))


class Explorer(StaticView, ExplorerPredictions):
    """The staleness explorer of :func:`staleness_explorer`: ``widget`` (the ipywidgets container), ``results``
    (:func:`cache_key` -> RunResult), :meth:`run`, :meth:`select`, :meth:`figure`, :meth:`table`, ``show_static()``.
    ``knob`` says what its main slider varies: SSP's staleness S or local SGD's local steps H."""

    def __init__(self, values: list[int], base: dict[str, Any], workers: int, straggler: float | None,
                 runner: Runner | None = None, observer_factory: ObserverFactory | None = None,
                 extra: Mapping[str, Any] | None = None, knob: Knob = KNOBS["ssp"],
                 momenta: list[float] | None = None) -> None:
        w = ipywidgets()
        super().__init__()
        self.knob = knob
        self.title = "ssptk staleness explorer" if knob.mode == "ssp" else "ssptk local SGD explorer"
        # runs made by an earlier explorer with the same options (re-running the cell keeps them)
        self.results: dict[CacheKey, RunResult] = {}
        self._running: str | None = None  # the status line of the run in progress, also shown in the figure
        self._live: KeepRecords | None = None  # the records of the run in progress, drawn as it goes
        self._drawn_at = -math.inf
        self.runner: Runner = runner or default_runner
        self.last_exception: BaseException | None = None
        self._values, self._base, self._extra = values, base, dict(extra or {})
        self._observer_factory = observer_factory
        self._attempts = 0
        style = {"description_width": "initial"}
        initial = DEFAULT_STALENESS if DEFAULT_STALENESS in values and knob.mode == "ssp" else values[0]
        #: The main slider: staleness S (ssp) or local steps H (local), whatever ``knob`` says.
        self.staleness_slider = w.SelectionSlider(options=values, value=initial, description=knob.slider, style=style)
        fixed = [i for i, _ in resolve(**{**base, "mode": knob.mode, knob.option: values[0],
                                          "workers": workers}).straggler]  # indices given in run_options
        self.workers_slider = w.IntSlider(value=workers, min=max(fixed, default=0) + 1, max=max(8, workers),
                                          description="workers N", style=style)
        self.straggler_slider = None if straggler is None else w.FloatSlider(
            value=straggler, min=0.0, max=max(0.2, 2 * straggler), step=0.005, readout_format=".3f",
            description="straggler: worker N-1 + s", style=style)
        #: The explicit momentum's slider (``--optimizer momentum:BETA``, 0: sgd), where ``momentum=`` gave values.
        self.momentum_slider = None if not momenta else w.SelectionSlider(
            options=momenta, value=momenta[0], description=MOMENTUM.slider, style=style)
        self.run_button = w.Button(description="Run", button_style="primary", icon="play")
        self.predict_button = w.Button(description=f"Predict every {knob.letter}", icon="forward",
                                       tooltip=f"predict this N and straggler at every {knob.noun} of the slider: "
                                               "the simulator's schedule replayed with the model's gradients, no "
                                               "cluster")
        #: Predicted runs (:func:`ssptk.notebook.slider_predictions.predict_staleness`), drawn dashed beside the
        #: real ones.
        self.predicted: dict[CacheKey, RunResult] = {}
        #: What staleness costs and buys, predicted for every staleness of the slider (after Predict).
        self.predicted_image = w.Image(format="png", layout=w.Layout(max_width="100%", display="none"))
        self.progress = w.IntProgress(value=0, min=0, max=1, layout=w.Layout(width="180px", visibility="hidden"))
        self._status = w.Label(value="")
        self.image = w.Image(format="png", layout=w.Layout(max_width="100%"))
        #: What staleness costs and buys over the runs so far: grows as the slider's values are run.
        self.tradeoff_image = w.Image(format="png", layout=w.Layout(max_width="100%", display="none"))
        self._controls = [c for c in (self.staleness_slider, self.momentum_slider, self.workers_slider,
                                      self.straggler_slider) if c is not None]
        #: What the runs so far say (their verdict in words) and how far predictions are from them, under the figures.
        self.notes_html = w.HTML(value="")
        self.widget = w.VBox([w.HBox([*self._controls, self.run_button, self.predict_button]),
                              w.HBox([self._status, self.progress]), self.image, self.tradeoff_image,
                              self.predicted_image, self.notes_html])
        for slider in self._controls:
            slider.observe(lambda _change: self._refresh(), names="value")
        self._controls += [self.run_button, self.predict_button]
        self.run_button.on_click(lambda _button: self._run(force=False, reraise=False))
        self.predict_button.on_click(lambda _button: self._predict_all(reraise=False))
        family = _family(cache_key(self.options()))
        self.results = {k: r for k, r in _RUNS.items() if _family(k) == family}
        self.predicted = {k: r for k, r in PREDICTED.items() if _family(k) == family}
        self._refresh()

    @property
    def status(self) -> str:
        """The status line's text."""
        return str(self._status.value)

    def options(self, staleness: int | None = None) -> dict[str, Any]:
        """The run options the sliders select (``staleness`` overrides the main slider: S, or H for local)."""
        opts = {**self._base, "mode": self.knob.mode, "workers": int(self.workers_slider.value),
                self.knob.option: int(self.staleness_slider.value if staleness is None else staleness)}
        if self.momentum_slider is not None:
            beta = float(self.momentum_slider.value)
            opts["optimizer"] = f"momentum:{beta!r}" if beta else "sgd"
        if self.straggler_slider is not None:
            seconds = round(float(self.straggler_slider.value), 6)
            opts["straggler"] = [f"{opts['workers'] - 1}:{seconds!r}"] if seconds > 0 else []
        return opts

    def key(self, staleness: int | None = None, strict: bool = True) -> CacheKey | None:
        """The cache key of :meth:`options`; a bad combination raises :class:`UsageError` (gives ``None`` if not
        ``strict``)."""
        try:
            return cache_key(self.options(staleness))
        except UsageError:
            if strict:
                raise
        return None

    def select(self, staleness: int) -> None:
        """Move the main slider (S, or H for local): a cached run shows at once; nothing is trained."""
        if staleness not in self._values:
            raise UsageError(f"{self.knob.slider} = {staleness!r} is not on the slider: choose one of {self._values}")
        self.staleness_slider.value = staleness

    def _labels(self, keys: list[CacheKey]) -> dict[CacheKey, str]:
        """``S=2`` (``H=4``), plus ``N=..`` and the straggler seconds (``+0.05s``) where those differ among
        ``keys``."""
        dicts = {k: {**dict(k), "delay": sum(s for _, s in dict(k)["straggler"]),
                     "beta": parse_optimizer(dict(k).get("optimizer", "sgd")).momentum} for k in keys}
        varies = [n for n in ("workers", "delay") if len({d[n] for d in dicts.values()}) > 1]
        letter, option = self.knob.letter, self.knob.option
        return {k: " ".join([f"{letter}={d[option]}"]
                            + ([f"{MOMENTUM.letter}={d['beta']:g}"] if self.momentum_slider is not None else [])
                            + ([f"N={d['workers']}"] if "workers" in varies else [])
                            + ([f"+{d['delay']:g}s"] if "delay" in varies else [])) for k, d in dicts.items()}

    def _value(self, key: CacheKey) -> int:
        """The main slider's value (S or H) of a run's key."""
        return int(dict(key)[self.knob.option])

    def _shown(self) -> list[CacheKey]:
        return sorted(self.results, key=lambda k: (dict(k)["workers"], dict(k)["straggler"], self._value(k)))

    def _runs(self) -> dict[str, RunResult]:
        return {label: self.results[k] for k, label in self._labels(self._shown()).items()}

    def _title(self) -> str:
        o = self.options()
        straggler = ", ".join(str(s) for s in o.get("straggler") or ()) or "none"
        return f"{self.knob.title}, model {model_name(str(o.get('model')))}: N={o['workers']}, straggler {straggler}"

    def figure(self) -> Figure:
        """The current overlay (a new Figure): every cached run, the slider's run highlighted."""
        from ssptk.render.overlay import overlay_figure, staleness_looks

        current, keys = self.key(strict=False), self._shown()
        labels = self._labels(keys + ([current] if current is not None and current not in keys else []))
        # the run in progress, drawn as far as it has come
        running = current if self._live is not None and self._live.steps and current not in self.results else None
        drawn = keys + ([running] if running is not None else [])
        colors, styles = staleness_looks({labels[k]: (self._value(k), (dict(k)["workers"], dict(k)["straggler"]))
                                          for k in drawn}, self._values)
        note = self._running or (None if current in self.results else
                                 ("not run yet: press Run" if current else self.status))
        runs = {labels[k]: self._frames_of(k, self.results[k]) for k in keys}
        for k, result in self._predicted_here().items():  # dashed, after the real runs; "run too" where both are
            name = f"{labels.get(k) or self._labels([k])[k]} predicted" + (" (run too)" if k in self.results else "")
            runs[name] = self._frames_of(("predicted", k), result)
            colors[name] = colors.get(labels.get(k, ""), None) or staleness_looks(
                {name: (self._value(k), 0)}, self._values)[0][name]
            styles[name] = "--"
        highlight = labels[current] if current is not None and current in self.results else None
        if running is not None and self._live is not None:
            import pandas as pd

            runs[labels[running]] = (pd.DataFrame(self._live.steps), pd.DataFrame(self._live.events),
                                     {"options": self._live.options})
            highlight = labels[running]
        return overlay_figure(runs, highlight, colors=colors, styles=styles, title=self._title(), note=note,
                              verdict=self.verdict() if keys else None)

    def _view_key(self) -> Any:
        current = self.key(strict=False)
        return (tuple(self._shown()), current, self._title(), self.status if current is None else None,
                self._running, tuple(self._predicted_here()))

    def static_pngs(self) -> list[bytes]:
        """The overlay, what staleness costs and buys over the runs, and over the predictions (after Predict)."""
        return [*super().static_pngs(), *([self.predicted_png()] if self.predicted_png() else [])]

    def _caption(self) -> str:
        return self.status

    def notes(self) -> list[str]:
        """The runs' verdict in sentences (:meth:`ssptk.notebook.views.StaticView.notes`), then how far each
        prediction's pace is from its real run, and why (:meth:`pace_lines`)."""
        return [*super().notes(), *self.pace_lines()]

    def _refresh(self) -> None:
        try:
            current = self.key()
        except UsageError as e:
            self._status.value = str(e)
        else:
            assert current is not None  # strict: a bad combination raised above
            label = self._labels([current])[current]
            self._status.value = (summary_line(label, self.results[current].summary) if current in self.results
                                  else f"{label}: not run yet: press Run")
        self.image.value = self.png()
        tradeoff = self.tradeoff_png()
        self.tradeoff_image.value = tradeoff
        self.tradeoff_image.layout.display = "" if tradeoff else "none"
        predicted = self.predicted_png()
        self.predicted_image.value = predicted
        self.predicted_image.layout.display = "" if predicted else "none"
        self.notes_html.value = notes_html(self.notes())

    def run(self, staleness: int | None = None, *, force: bool = False) -> RunResult | None:
        """What the Run button does, after :meth:`select` of ``staleness`` when given.

        A cached run is shown, not repeated, unless ``force``. Run errors (``RunFailed``, ``UsageError``)
        go to the status line and give ``None``; anything else (an interrupt, a bug) is shown, then raised.
        """
        if staleness is not None:
            self.select(staleness)
        return self._run(force=force, reraise=True)

    def _busy(self, busy: bool) -> None:
        for control in self._controls:
            control.disabled = busy
        self.progress.layout.visibility = "visible" if busy else "hidden"

    def _run(self, force: bool, reraise: bool) -> RunResult | None:
        try:
            options = self.options()
            key = cache_key(options)
        except UsageError as e:
            self._status.value = error_line(e)
            return None
        if key in self.results and not force:
            self._refresh()
            return self.results[key]
        label = self._labels([key])[key]

        def progress(done: int, total: int) -> None:
            self.progress.max, self.progress.value = max(total, 1), min(done, max(total, 1))
            # The status line and the figure say the same count: both change together, at most every
            # FIGURE_EVERY_S seconds, once minibatches are done (the progress bar moves at every call).
            if done > 0 and time.monotonic() - self._drawn_at >= FIGURE_EVERY_S:
                self._drawn_at = time.monotonic()
                self._status.value = f"{label}: running, {done}/{total} minibatches"
                self._running = f"{self._status.value}: drawn as it goes"
                self.image.value = self.png()

        self._attempts += 1  # an ``out`` given to the explorer is a parent folder: out/<n>-S<s> (local: <n>-H<h>)
        out = self._extra.get("out")
        out = None if out is None else os.path.join(str(out), f"{self._attempts}-{label.replace('=', '')}")
        kwargs = {**self._extra, **options, "out": out}
        # the figure draws the run as it goes from what this keeps (and hands on to a dashboard, if any)
        observer = self._live = KeepRecords(self._observer_factory(label) if self._observer_factory else None)
        self.progress.value, self._drawn_at = 0, -math.inf
        self._status.value = f"{label}: starting"
        self._running = f"{label}: starting (drawn as it goes once minibatches are done)"
        self._busy(True)
        self.image.value = self.png()
        try:
            result, error = call_runner(self.runner, kwargs, progress, observer), None
        except BaseException as e:  # noqa: BLE001 - one line on the status line; run() raises it again
            result, error = None, e
        self._busy(False)
        self._running, self._live = None, None
        if result is not None and result.ok:
            self.results[key] = _RUNS[key] = result
            self._png.clear()
        self._refresh()
        if error is not None:
            self._status.value = f"{label}: interrupted" if isinstance(error, KeyboardInterrupt) else \
                f"{label}: {error_line(error)}"
            if not isinstance(error, (RunFailed, UsageError)):
                self.last_exception = error
                if reraise:
                    raise error
            return None
        assert result is not None
        if not result.ok:  # a runner that returns failed runs instead of raising
            self._status.value = summary_line(label, result.summary)
            return None
        self._update_displays()  # the saved notebook keeps the latest static overlay too
        return result

    def __repr__(self) -> str:
        return f"Explorer({self.knob.option}={self._values}, runs={len(self.results)}, status={self.status!r})"
