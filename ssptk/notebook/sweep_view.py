"""Finished runs behind a slider (:class:`SweepResult`): what ``%dtrain sweep`` and :func:`sweep` show, and
:func:`from_runs` for any runs. The slider only scrubs: nothing is trained; over ``ssp:S`` runs it is a slider over
S, over ``local:H`` runs one over H. Predicted runs of the same labels (``--predict``) are drawn with them, dashed."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ssptk.core.errors import UsageError
from ssptk.experiment.sweep import MOMENTUM, Knob, label_knob, sweep_labels, sweep_mode
from ssptk.notebook.runner import ObserverFactory, Runner, default_runner, ipywidgets, split_runner_options
from ssptk.notebook.views import StaticView
from ssptk.render.overlay import summary_line

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from ssptk.experiment.result import RunResult

__all__ = ["SweepResult", "from_runs", "sweep"]

class SweepResult(StaticView):
    """Finished runs by label, and a slider (``widget``) that scrubs through them without training."""

    def __init__(self, results: Mapping[str, RunResult], title: str | None = None,
                 predicted: Mapping[str, RunResult] | None = None) -> None:
        if not results:
            raise UsageError("no runs to show")
        super().__init__()
        #: What the runs vary when they are ``ssp:S`` or ``local:H`` of one mode (the slider's text and order).
        self.knob: Knob | None = label_knob(results)
        self.results: dict[str, RunResult] = dict(results)
        if title is None:
            title = "ssptk runs" if self.knob is None else _sweep_title(self.knob, list(results))
        #: label -> its predicted run (``--predict``), drawn dashed in the label's colour
        self.predicted: dict[str, RunResult] = dict(predicted or {})
        self.title = title
        self.selected: str = next(iter(self.results))
        self._widget: Any = None

    @property
    def widget(self) -> Any:
        """A slider over the runs, the selected run's summary line, and the overlay image."""
        if self._widget is None:
            w = ipywidgets()
            text = "run" if self.knob is None else self.knob.slider
            self.slider = w.SelectionSlider(options=list(self.results), value=self.selected, description=text,
                                            style={"description_width": "initial"})
            self.line = w.Label(value=self.summary())
            self.image = w.Image(value=self.png(), format="png", layout=w.Layout(max_width="100%"))
            self.slider.observe(lambda change: self.select(change["new"]), names="value")
            self._widget = w.VBox([self.slider, self.line, self.image])
        return self._widget

    def select(self, label: str) -> None:
        """Highlight run ``label`` (and move the slider when the widget exists)."""
        if label not in self.results:
            raise UsageError(f"no run {label!r}: choose one of {', '.join(self.results)}")
        self.selected = label
        if self._widget is not None:
            self.slider.value, self.line.value, self.image.value = label, self.summary(), self.png()

    def summary(self, label: str | None = None) -> str:
        """One line for run ``label`` (default: the selected one): steps/s, max skew, final loss, wait."""
        label = self.selected if label is None else label
        return summary_line(label, self.results[label].summary)

    def figure(self, label: str | None = None) -> Figure:
        """Every run overlaid, ``label`` (default: the selected one) highlighted."""
        from ssptk.render.overlay import overlay_figure
        from ssptk.render.style import default_colors

        runs = {lab: self._frames_of(lab, r) for lab, r in self.results.items()}
        colors = default_colors(list(runs))
        styles = {}
        for lab, r in self.predicted.items():
            runs[f"{lab} predicted"] = self._frames_of(("predicted", lab), r)
            colors[f"{lab} predicted"], styles[f"{lab} predicted"] = colors.get(lab, "0.5"), "--"
        return overlay_figure(runs, self.selected if label is None else label, colors=colors, styles=styles,
                              title=self.title, verdict=self.verdict())

    def _view_key(self) -> str:
        return self.selected

    def _runs(self) -> dict[str, RunResult]:
        return self.results

    def _caption(self) -> str:
        return self.summary()

    def __repr__(self) -> str:
        return f"SweepResult({', '.join(self.results)}; selected {self.selected})"


def _sweep_title(knob: Knob, labels: list[str]) -> str:
    if knob is MOMENTUM:
        return f"ssptk momentum sweep: {', '.join(labels)}"
    if knob.mode == "ssp":
        return f"ssptk staleness sweep: {', '.join(labels)}"
    return f"ssptk local SGD sweep over H, the local steps per average: {', '.join(labels)}"


def from_runs(results: Mapping[str, RunResult], title: str | None = None,
              predicted: Mapping[str, RunResult] | None = None) -> SweepResult:
    """A :class:`SweepResult` viewer of existing runs (``label -> RunResult``), in the given order, with their
    predicted runs (``label -> RunResult``) drawn dashed. Runs labelled ``ssp:S`` (or ``local:H``) of one mode get
    a slider over S (over H) and a sweep's title; other labels ``title`` (default ``ssptk runs``)."""
    return SweepResult(results, title, predicted)


def sweep(staleness: int | str | Iterable[int] | None = None, runner: Runner | None = None, *,
          local_steps: int | str | Iterable[int] | None = None,
          momentum: float | str | Iterable[float] | None = None,
          progress: Callable[[str, int, int], None] | None = None,
          observer_factory: ObserverFactory | None = None, **run_options: Any) -> SweepResult:
    """Run mode ssp once per staleness value (labels ``ssp:S``), or with ``local_steps=[1, 2, 4, 8]`` mode local
    once per number of local steps between averages (labels ``local:H``), and return a :class:`SweepResult`.

    The same sweep as ``ssptk sweep`` (:func:`ssptk.experiment.sweep.sweep`; one of ``staleness`` and
    ``local_steps``, neither: ssp at 0,1,2,4,8): every option is checked before the first run, runs go to
    ``out/ssp-S/`` or ``out/local-H/`` (``out`` default ``runs/<timestamp>-compare``) with the comparison's
    ``metrics.csv`` and ``report.html``, and a failed run stays in the result (status ``failed`` in the table).
    ``progress(label, done, total)`` and ``observer_factory(label)`` (an observer per run, passed as
    ``observer=``) follow the runs; ``runner`` does each run (default :func:`default_runner`).
    ``momentum=[0, 0.5, 0.9]``: the run options' ``mode`` (default async) once per explicit momentum instead
    (labels ``async``, ``async·momentum:0.5``, ...; 0: plain sgd), a slider over them.
    """
    from ssptk.experiment.sweep import sweep_runs as run_sweep

    if momentum is not None:
        sweep_labels(staleness, local_steps, momentum=momentum, options=dict(run_options))  # bad values fail here
        what = "a momentum sweep"
        swept: dict[str, Any] = {"momentum": momentum}
    else:
        labels = sweep_labels(staleness, local_steps)  # bad values fail here, before any run
        knob = label_knob(labels)
        assert knob is not None
        what = "a staleness sweep" if knob.mode == "ssp" else "a local-steps sweep"
        sweep_mode(run_options, knob, what)
        swept = {knob.option: [int(label.partition(":")[2]) for label in labels]}
    mode = run_options.pop("mode", None) if momentum is not None else None  # any mode, with momentum
    extra = split_runner_options(run_options, what)
    if mode is not None:
        run_options["mode"] = mode
    if extra.get("model_source") is not None:
        raise UsageError(f"{what} takes a model by name (--model package.module:function), not model code")
    result = run_sweep(**swept, runner=runner or default_runner, progress=progress,
                       observer=observer_factory, warm=bool(extra.get("warm", True)), **run_options)
    return SweepResult(result.runs)
