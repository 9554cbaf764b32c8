"""A finished run as the Python API hands it back: :class:`RunResult`."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from ssptk.core.errors import TaskFailure
from ssptk.core.options import RunOptions
from ssptk.rundir import RunConfig, RunDir, Summary, read_run

__all__ = ["RunResult"]


@dataclass
class RunResult:
    """A finished (or failed) run: its directory, options, summary (:class:`~ssptk.rundir.Summary`, what
    ``summary.json`` holds: ``res.summary.steps_per_s``, or as a dict ``res.summary["steps_per_s"]``) and step
    records."""

    run_dir: str
    options: RunOptions
    summary: Summary
    failure: TaskFailure | None = None
    _loaded: tuple[pd.DataFrame, pd.DataFrame] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.summary = Summary.of(self.summary)

    @property
    def ok(self) -> bool:
        """The run finished (``status`` ok), a diverged one too: ``summary.diverged`` says whether its loss did
        (its ``repr`` and ``str`` then say ``diverged``; ``ssptk run`` exits 3)."""
        return self.summary.ok

    def _load(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        if self._loaded is None:
            self._loaded = read_run(self.run_dir)
        return self._loaded

    @property
    def df(self) -> pd.DataFrame:
        """The step records of every worker, sorted by time (columns as in docs/run-directory.md), with
        ``elapsed``: seconds since the start barrier (``t`` is the PS's epoch time)."""
        steps, events = self._load()
        if "elapsed" not in steps.columns and "t" in steps.columns:
            from ssptk.analysis import start_time

            start = start_time(events)
            t = steps["t"].astype("float64")
            steps.insert(list(steps.columns).index("t") + 1, "elapsed", t - (start if start is not None else t.min()))
        return steps

    @property
    def events(self) -> pd.DataFrame:
        return self._load()[1]

    @property
    def config(self) -> RunConfig:
        """The run's ``config.json`` (:class:`~ssptk.rundir.RunConfig`)."""
        return RunDir(self.run_dir).config()

    def plot(self) -> Any:
        """A matplotlib Figure of loss, per-worker progress, step skew, waiting and staleness."""
        from ssptk.render.figures import run_figure

        return run_figure(self.df, self.events, self.config)

    def __str__(self) -> str:
        from ssptk.render.text import format_summary

        return format_summary(self.summary)

    def __repr__(self) -> str:
        from ssptk.render.text import status_word

        s = self.summary
        rate, loss = s.steps_per_s, s.final_loss
        parts = [self.options.label, status_word(s) if s.status else "?", f"{s.total_steps or 0} steps"]
        parts += [f"{rate:.1f} steps/s"] if rate else []
        parts += [f"final loss {loss:.4g}"] if loss is not None else []
        return f"<RunResult {', '.join(parts)}: {self.run_dir}>"
