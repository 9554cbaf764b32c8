"""The staleness explorer's predictions (:class:`ExplorerPredictions`, a part of
:class:`ssptk.notebook.explorer.Explorer`): the Predict button, the predicted cost-and-gain figure, and what the
predictions say beside the real runs: how far, and why, a predicted pace is from a real run's
(:func:`ssptk.analysis.pace_gaps`)."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ssptk import analysis as an
from ssptk.core.errors import RunFailed, UsageError
from ssptk.notebook.runner import CacheKey
from ssptk.notebook.slider_predictions import steady_straggler_note
from ssptk.render.verdict_words import pace_lines

if TYPE_CHECKING:
    from ssptk.experiment.result import RunResult

__all__ = ["ExplorerPredictions", "error_line"]


def error_line(exc: BaseException) -> str:
    """One line for the status line: what went wrong with a run or a prediction."""
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    if isinstance(exc, RunFailed):
        return f"run failed: {text}"
    return text if isinstance(exc, UsageError) else f"error: {type(exc).__name__}: {text}"


class ExplorerPredictions:
    """The explorer's predicted runs, drawn dashed beside the real ones: ``predicted`` (cache key -> RunResult),
    :meth:`predict`, :meth:`predicted_png`, :meth:`pace_lines`. The explorer provides the rest (its sliders, status
    line, runs and the cache of PNGs)."""

    predicted: dict[CacheKey, RunResult]
    results: dict[CacheKey, RunResult]
    knob: Any
    progress: Any
    _status: Any
    _values: list[int]
    _extra: dict[str, Any]
    _png: dict[Any, bytes]

    # the explorer's methods
    key: Callable[..., CacheKey | None]
    options: Callable[..., dict[str, Any]]
    _value: Callable[[CacheKey], int]
    _labels: Callable[[list[CacheKey]], dict[CacheKey, str]]
    _busy: Callable[[bool], None]
    _refresh: Callable[[], None]
    _update_displays: Callable[[], None]

    def _predicted_here(self) -> dict[CacheKey, RunResult]:
        """The predictions made for the sliders' current workers and straggler, by staleness."""
        here = self.key(strict=False)
        if here is None:
            return {}
        same = {n: v for n, v in here if n in ("workers", "straggler")}
        return dict(sorted(((k, r) for k, r in self.predicted.items()
                            if all(dict(k)[n] == v for n, v in same.items())), key=lambda kr: self._value(kr[0])))

    def predict(self) -> dict[CacheKey, RunResult]:
        """What the Predict button does: every value of the slider (S, or H for local), predicted for the current
        workers and straggler (cached), their clock from the real runs' calibrated overhead where there are any."""
        return self._predict_all(reraise=True)

    def _predict_all(self, reraise: bool) -> dict[CacheKey, RunResult]:
        from ssptk.notebook.slider_predictions import calibrated_gap, calibrated_overhead, predict_staleness

        def progress(done: int, total: int) -> None:
            self.progress.max, self.progress.value = total, done
            self._status.value = f"predicting every {self.knob.noun}: {done}/{total} runs"

        self._busy(True)
        self._status.value = f"predicting every {self.knob.noun} ({len(self._values)} runs, one process)"
        try:
            real = self.results.values()
            made = predict_staleness(self.options(), self._values, calibrated_overhead(real), self._extra.get("out"),
                                     progress, gap=calibrated_gap(real))
        except BaseException as e:  # predict() raises it again; the button shows one line
            self._busy(False)
            self._status.value = f"prediction: {error_line(e)}"
            if reraise or not isinstance(e, (RunFailed, UsageError)):
                raise
            return {}
        self._busy(False)
        self.predicted.update(made)
        self._refresh()
        self._update_displays()
        return made

    def predicted_png(self) -> bytes:
        """What staleness costs and buys, predicted for every value of the slider (empty before Predict)."""
        runs = self._predicted_here()
        key = ("predicted-tradeoff", tuple(runs))
        if key not in self._png:
            from ssptk.render.style import figure_png
            from ssptk.render.tradeoff_plot import tradeoff_figure

            self._png[key] = b""
            if len(runs) > 1:
                table = an.compare_table({f"{self.knob.letter}={self._value(k)}": (r.df, r.events, r.config,
                                                                                   r.summary)
                                          for k, r in runs.items()})
                fig = tradeoff_figure(table, table.attrs.get("target"), an.verdict_of(table))
                note = None if self.knob.mode != "ssp" else steady_straggler_note(
                    table, dict(next(iter(runs)))["workers"], self.options().get("straggler"))
                fig.suptitle(f"predicted for every {self.knob.noun} (the simulator's replay, no cluster)"
                             + (f"\n{note}" if note else ""), fontsize=9 if note else None)
                self._png[key] = figure_png(fig, dpi=80)
        return self._png[key]

    def pace_lines(self) -> list[str]:
        """For each value both run and predicted (the sliders' workers and straggler): how far the predicted steps/s
        are from the real run's, and why as far as the summaries tell (:func:`ssptk.analysis.pace_gaps`); nothing
        where they agree within :data:`ssptk.analysis.verdict_facts.PACE_TOLERANCE`."""
        both = [k for k in self._predicted_here() if k in self.results]
        labels = self._labels(both)
        gaps = an.pace_gaps({labels[k]: self.results[k].summary for k in both},
                            {labels[k]: self.predicted[k].summary for k in both})
        return pace_lines(gaps)
