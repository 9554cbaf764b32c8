"""Comparisons: several modes with the same options, each run once or ``repeat`` times, their metrics table
and report (``ssptk compare``, ``ssptk sweep``, ``%dtrain compare``). The runs themselves are
:func:`ssptk.api.run`'s.

Layout of a comparison directory ``OUT``: ``OUT/<label>/`` per label (``ssp:2`` -> ``ssp-2``), or with
``repeat`` R > 1 ``OUT/<label>/rep-<k>/`` (k = 1..R); ``OUT/metrics.csv`` and ``OUT/report.html``
(see docs/run-directory.md).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd

from ssptk import api
from ssptk.api import RunObserver, RunResult
from ssptk.errors import UsageError
from ssptk.options import resolve

__all__ = ["CompareResult", "check_repeat", "compare", "label_dir", "parse_labels", "run_order"]


@dataclass
class CompareResult:
    """Runs of several modes with the same common options, their metrics table and report.

    ``runs``: label -> its run (with repetitions, the first). ``repeats``: label -> every repetition,
    in order. ``table``: one row per label (with repetitions, each figure's mean and its spread:
    ``<figure>_min``, ``_max``, ``_ci95``, see :func:`ssptk.analysis.aggregate_repeats`).
    ``runs_table``: one row per run (``label``, ``rep``, figures): what ``metrics.csv`` holds when
    there are repetitions.
    """

    out: str
    runs: dict[str, RunResult]
    table: pd.DataFrame
    report: Any
    repeats: dict[str, list[RunResult]] = field(default_factory=dict)
    runs_table: pd.DataFrame | None = None

    def __post_init__(self) -> None:
        if not self.repeats:
            self.repeats = {label: [r] for label, r in self.runs.items()}
        if self.runs_table is None:
            self.runs_table = self.table.copy()
            self.runs_table.insert(1, "rep", pd.array([1] * len(self.table), dtype="Int64"))

    @property
    def report_path(self) -> str:
        return os.path.join(self.out, "report.html")

    @property
    def all_runs(self) -> dict[str, RunResult]:
        """Every run: ``label`` -> run, or with repetitions ``"<label> #<k>"`` -> run."""
        if all(len(reps) == 1 for reps in self.repeats.values()):
            return {label: reps[0] for label, reps in self.repeats.items()}
        return {f"{label} #{k}": r for label, reps in self.repeats.items() for k, r in enumerate(reps, 1)}

    def _repr_html_(self) -> str:
        return self.report._repr_html_()

    def __str__(self) -> str:
        from ssptk.report import format_table

        return format_table(self.table)


def label_dir(label: str) -> str:
    """The directory name of a comparison label (``ssp:2`` -> ``ssp-2``)."""
    return label.replace(":", "-")


def parse_labels(labels: list[str] | tuple[str, ...]) -> list[tuple[str, dict[str, Any]]]:
    """``["sync", "ssp:2", "async"]`` -> ``[(label, {"mode": ..., "staleness": ...}), ...]``."""
    out = []
    for label in labels:
        mode, _, s = label.partition(":")
        kw: dict[str, Any] = {"mode": mode}
        if s:
            if mode != "ssp":
                raise UsageError(f"bad comparison label {label!r}: only ssp takes a staleness (ssp:S)")
            try:
                kw["staleness"] = int(s)
            except ValueError:
                raise UsageError(f"bad comparison label {label!r}: use ssp:S with an integer S >= 0") from None
        out.append((label, kw))
    if len({label_dir(lab) for lab, _ in out}) != len(out):
        raise UsageError("comparison labels repeat: give each mode once")
    if not out:
        raise UsageError("nothing to compare: give modes like sync ssp:2 async")
    return out


def check_repeat(repeat: Any) -> int:
    """``repeat`` as an int >= 1, else :class:`UsageError`."""
    if isinstance(repeat, (bool, np.bool_)) or not isinstance(repeat, (int, np.integer)) or repeat < 1:
        raise UsageError(f"--repeat must be an integer >= 1, not {repeat!r}")
    return int(repeat)


def run_order(labels: list[str], repeat: int) -> list[tuple[str, int]]:
    """``(label, k)`` in the order the runs go: round k = 1, 2, ... takes the labels in order, then
    reversed, and so on (A B, B A, A B, ...), so a slow phase of a busy machine hits every mode alike."""
    return [(label, k) for k in range(1, repeat + 1) for label in (labels if k % 2 else labels[::-1])]


def compare(labels: list[str] | tuple[str, ...] = ("sync", "ssp:2", "async"), *, out: str | None = None,
            progress: Callable[[str, int, int], None] | None = None,
            observer: Callable[[str], RunObserver | None] | None = None, warm: bool = False,
            repeat: int = 1, **common: Any) -> CompareResult:
    """Run each labelled mode in turn with the same ``common`` options into ``out/<label>/``.

    Writes ``out/metrics.csv`` and a self-contained ``out/report.html``. Every option is checked for
    every label before the first run starts. ``observer(label)`` may give each run an observer;
    ``warm`` runs them on a warm cluster (see :func:`ssptk.api.run`).

    ``repeat`` R > 1 runs each label R times, into ``out/<label>/rep-<k>/``, alternating the order
    (:func:`run_order`); the table then shows each figure's mean and spread, ``metrics.csv`` has one
    row per run, and ``progress`` and ``observer`` get ``"<label> #<k>"`` as the label.
    """
    plan = parse_labels(labels)
    repeat = check_repeat(repeat)
    for label, kw in plan:  # validate all before running any, or creating the directory
        api.check_before_start(resolve(**{**common, **kw, "out": None}))
    base = api.new_run_dir(out, "compare")
    options = dict(plan)
    repeats: dict[str, list[RunResult]] = {label: [] for label, _ in plan}
    for label, k in run_order([label for label, _ in plan], repeat):
        name = label if repeat == 1 else f"{label} #{k}"
        run_dir = os.path.join(base, label_dir(label), *([] if repeat == 1 else [f"rep-{k}"]))
        cb = (lambda done, total, _n=name: progress(_n, done, total)) if progress else None
        repeats[label].append(api.run(progress=cb, raise_on_failure=False, warm=warm,
                                      observer=observer(name) if observer else None,
                                      **{**common, **options[label]}, out=run_dir))
    return _compare_result(base, repeats if repeat > 1 else {label: reps[0] for label, reps in repeats.items()})


def _frames(r: RunResult) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any], dict[str, Any]]:
    return r.df, r.events, r.config, r.summary


def _compare_result(base: str, runs: dict[str, RunResult] | dict[str, list[RunResult]]) -> CompareResult:
    """Table, ``metrics.csv`` and ``report.html`` of finished runs: label -> run, or label -> its
    repetitions (a list)."""
    from ssptk.report import Repeats, build_report, write_metrics_csv

    repeated = any(isinstance(v, list) for v in runs.values())
    repeats = {label: list(v) if isinstance(v, list) else [v] for label, v in runs.items()}
    frames = {label: Repeats(_frames(r) for r in reps) if repeated else _frames(reps[0])
              for label, reps in repeats.items()}
    report = build_report(frames, title=f"ssptk comparison: {', '.join(runs)}")
    table = report.table
    write_metrics_csv(report.runs_table if repeated else table, os.path.join(base, "metrics.csv"))
    report.save(os.path.join(base, "report.html"))
    first = {label: reps[0] for label, reps in repeats.items() if reps}
    return CompareResult(base, first, table, report, repeats, report.runs_table)
