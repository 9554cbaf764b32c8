"""Notebook views of several runs: the static PNG and HTML forms a widget view also offers, so a saved
notebook, nbconvert or a frontend without widgets still shows the figure and the table."""
from __future__ import annotations

from typing import Any

import pandas as pd

from ssptk import analysis as an
from ssptk.core.errors import UsageError
from ssptk.notebook.forwarding import Forwarding
from ssptk.render.overlay import RunFrames, static_html
from ssptk.render.style import figure_png
from ssptk.render.table_notes import target_lines
from ssptk.render.tables import ShownTable
from ssptk.render.tradeoff_plot import tradeoff_figure
from ssptk.render.verdict_words import verdict_lines

__all__ = ["KeepRecords", "StaticView"]


class StaticView:
    """Mixin for a notebook view of several runs: the PNG of its current figure (cached per view), the
    metrics table, and display as the subclass's ``widget`` plus a static figure and table as
    ``text/html``, which frontends without widgets (nbconvert HTML, an untrusted notebook) show instead.
    Displayed outputs are updated by :meth:`_update_displays`, so a saved notebook keeps the latest view.

    Subclasses provide ``figure()``, ``_view_key()`` (what the figure depends on), ``_runs()`` (label ->
    RunResult, in order), ``_caption()`` and ``widget`` (raising :class:`UsageError` without ipywidgets).
    """

    title = "ssptk"

    def __init__(self) -> None:
        self._png: dict[Any, bytes] = {}
        self._run_frames: dict[Any, RunFrames] = {}
        self._handles: list[Any] = []
        self._tables: dict[Any, pd.DataFrame] = {}

    def _frames_of(self, key: Any, result: Any) -> RunFrames:
        if key not in self._run_frames:
            self._run_frames[key] = (result.df, result.events, result.config)
        return self._run_frames[key]

    def png(self) -> bytes:
        """The current ``figure()`` as PNG bytes (rendered once per view)."""
        key = self._view_key()  # type: ignore[attr-defined]
        if key not in self._png:
            self._png[key] = figure_png(self.figure(), dpi=80)  # type: ignore[attr-defined]
        return self._png[key]

    def tradeoff_png(self) -> bytes:
        """The cost-and-gain figure of the runs so far (:func:`ssptk.render.tradeoff_plot.tradeoff_figure`: minibatches,
        steps/s and time to the target per staleness); empty with fewer than two runs."""
        key = ("tradeoff", tuple(self._runs()))  # type: ignore[attr-defined]
        if key not in self._png:
            table = self.table()
            self._png[key] = (figure_png(tradeoff_figure(table, table.attrs.get("target"), an.verdict_of(table)),
                                         dpi=80) if len(table) > 1 else b"")
        return self._png[key]

    def verdict(self) -> an.Verdict:
        """What the runs so far say as a comparison (:class:`ssptk.analysis.Verdict`, made with :meth:`table`)."""
        return an.verdict_of(self.table())

    def notes(self) -> list[str]:
        """The verdict of the runs so far in sentences (who reached the target first, whether that is a winner, what
        each cost per update, what a figure would mislead about); none for fewer than two runs."""
        table = self.table()
        if len(table) < 2:
            return []
        verdict = an.verdict_of(table)
        return [*target_lines(table, verdict), *verdict_lines(verdict)]

    def table(self) -> pd.DataFrame:
        """:func:`ssptk.analysis.compare_table` of the runs, labelled as in the figure; a notebook shows it
        formatted (:class:`ssptk.render.tables.ShownTable`), every column still in the DataFrame."""
        runs = self._runs()  # type: ignore[attr-defined]
        key = tuple((label, id(r)) for label, r in runs.items())
        if key not in self._tables:  # one comparison (and its verdict) per set of runs
            table = an.compare_table({label: (r.df, r.events, r.config, r.summary) for label, r in runs.items()})
            shown = ShownTable(table)
            shown.attrs.update(table.attrs)
            self._tables = {key: shown}
        return self._tables[key]

    def static_pngs(self) -> list[bytes]:
        """Every figure the view shows, as PNG bytes: the overlay, then what staleness costs and buys (with two
        runs or more)."""
        return [png for png in (self.png(), self.tradeoff_png()) if png]

    def show_static(self) -> None:
        """Display every figure the view shows (:meth:`static_pngs`) as plain PNG images (they stay in the saved
        notebook)."""
        from IPython.display import Image, display

        for png in self.static_pngs():
            display(Image(data=png, format="png"))

    def _repr_html_(self) -> str:
        return static_html(self.title, self._caption(), self.figure(), self.table(),  # type: ignore[attr-defined]
                           self.notes())

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        try:
            data = dict(self.widget._repr_mimebundle_() or {})  # type: ignore[attr-defined]
        except UsageError:  # no ipywidgets: the static view only
            data = {}
        return {**data, "text/plain": repr(self), "text/html": self._repr_html_()}

    def _ipython_display_(self) -> None:
        from IPython.display import display

        handle = display(self._repr_mimebundle_(), raw=True, display_id=True)
        if handle is not None:
            self._handles.append(handle)

    def _update_displays(self) -> None:
        for handle in self._handles:
            handle.update(self._repr_mimebundle_(), raw=True)


class KeepRecords(Forwarding):
    """A run observer that keeps the run's step and event records as they come, for a figure of the run in
    progress, and hands everything on to ``inner`` (if any)."""

    def __init__(self, inner: Any = None) -> None:
        super().__init__(inner)
        self.steps: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.options: dict[str, Any] = {}

    def started(self, run_dir: str, opts: Any, total: int) -> None:
        self.options = dict(opts.to_dict()) if hasattr(opts, "to_dict") else {}
        super().started(run_dir, opts, total)

    def records(self, steps: list[dict[str, Any]], events: list[dict[str, Any]], done: int, total: int) -> None:
        self.steps += steps
        self.events += events
        super().records(steps, events, done, total)
