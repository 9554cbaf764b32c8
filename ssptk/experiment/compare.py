"""Comparisons: several modes with the same options, each run once or ``repeat`` times, their metrics table
and report (``ssptk compare``, ``ssptk sweep``, ``%dtrain compare``). The runs themselves are
:func:`ssptk.experiment.single.run`'s.

Every path of the comparison directory ``OUT`` (a run per label, or per repetition, ``metrics.csv``,
``report.html``, ``predicted/``) comes from :class:`ssptk.rundir.ComparisonDir` (see docs/run-directory.md).
"""
from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from ssptk.analysis.comparison_table import RunTuple
from ssptk.analysis.verdict import Verdict, verdict_of
from ssptk.core.errors import RunFailed, UsageError
from ssptk.core.labels import canonical_label, label_dir, label_options
from ssptk.core.option_checks import check_target
from ssptk.core.options import RunOptions, resolve
from ssptk.experiment import single
from ssptk.experiment.result import RunResult
from ssptk.launch.observers import RunObserver
from ssptk.rundir import ComparisonDir, RunDir

__all__ = ["CompareResult", "Runner", "call_runner", "check_repeat", "compare_resolved", "compare", "parse_labels",
           "predict_comparison", "resolve_labels", "run_order", "run_tuple"]


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
    #: ``compare(..., predict=True)``: label -> its predicted run (``report.predicted`` holds them beside the runs)
    predicted: dict[str, RunResult] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from ssptk.render.tables import ShownTable

        attrs = dict(self.table.attrs)
        self.table = ShownTable(self.table)  # a missing figure shows as "-" in a notebook, as in the CLI
        self.table.attrs.update(attrs)
        if not self.repeats:
            self.repeats = {label: [r] for label, r in self.runs.items()}
        if self.runs_table is None:
            self.runs_table = self.table.copy()
            self.runs_table.insert(1, "rep", pd.Series([1] * len(self.table), dtype="Int64", index=self.table.index))

    @property
    def report_path(self) -> str:
        return ComparisonDir(self.out).report_path

    @property
    def all_runs(self) -> dict[str, RunResult]:
        """Every run: ``label`` -> run, or with repetitions ``"<label> #<k>"`` -> run."""
        if all(len(reps) == 1 for reps in self.repeats.values()):
            return {label: reps[0] for label, reps in self.repeats.items()}
        return {f"{label} #{k}": r for label, reps in self.repeats.items() for k, r in enumerate(reps, 1)}

    @property
    def verdict(self) -> Verdict:
        """What the comparison says (:class:`ssptk.analysis.Verdict`): made once with its table, worded by the
        report, the terminal text and :meth:`best_line` alike."""
        return verdict_of(self.table)

    def best_line(self) -> str:
        """``best: ssp:8 (...)``, or ``best: none (no winner: ...)``: the verdict's winner in one line, for a
        notebook to print (never the raw first to the target: a lead within noise or a tie has no winner)."""
        from ssptk.render.verdict_words import best_line

        return best_line(self.verdict)

    def _repr_html_(self) -> str:
        return self.report._repr_html_()

    def __str__(self) -> str:
        from ssptk.render.terminal_table import terminal_text

        return terminal_text(self.table, predicted=self.report.predicted, verdict=self.verdict)


def parse_labels(labels: list[str] | tuple[str, ...], optimizer: str | None = None) -> list[tuple[str, dict[str, Any]]]:
    """``["sync", "ssp:2", "async", "async+inverse"]`` -> ``[(label, {"mode": ..., "staleness": ...}), ...]``;
    a label ending in ``+inverse`` also sets ``lr_staleness="inverse"`` (:func:`ssptk.core.labels.label_options`).
    A label is kept as given, but one that names an optimizer gets its canonical form (``async@momentum`` ->
    ``async·momentum:0.9``) and, where the comparison's ``optimizer`` is not sgd, one that does not gets it
    (``async·adam``), so every table and title says what its runs applied."""
    parsed = [(label, label_options(label)) for label in labels]  # a bad label refused as one first
    out = [(canonical_label(label, optimizer or "sgd"), kw) for label, kw in parsed]
    if len({label_dir(lab) for lab, _ in out}) != len(out):
        raise UsageError("comparison labels repeat: give each mode once")
    if not out:
        raise UsageError("nothing to compare: give modes like sync ssp:2 async")
    return out


def resolve_labels(labels: list[str] | tuple[str, ...], common: dict[str, Any]) -> dict[str, RunOptions]:
    """Each label's run options, resolved once (and so checked, before anything starts): the ``common`` ones the user
    gave, and what the label sets (its mode, its number, its suffix's options: ``local:4 sync``: sync gets no local
    steps; ``async+dc`` alone: a comparison). ``out`` is left to each run."""
    return {label: resolve(**{**common, **kw, "out": None})
            for label, kw in parse_labels(labels, common.get("optimizer"))}


def check_repeat(repeat: Any) -> int:
    """``repeat`` as an int >= 1, else :class:`UsageError`."""
    if isinstance(repeat, (bool, np.bool_)) or not isinstance(repeat, (int, np.integer)) or repeat < 1:
        raise UsageError(f"--repeat must be an integer >= 1, not {repeat!r}")
    return int(repeat)


def run_order(labels: list[str], repeat: int) -> list[tuple[str, int]]:
    """``(label, k)`` in the order the runs go: round k = 1, 2, ... takes the labels in order, then
    reversed, and so on (A B, B A, A B, ...), so a slow phase of a busy machine hits every mode alike."""
    return [(label, k) for k in range(1, repeat + 1) for label in (labels if k % 2 else labels[::-1])]


#: What runs one run: :func:`ssptk.experiment.single.run` by default; the widgets' tests pass stand-ins.
Runner = Callable[..., RunResult]


def compare(labels: list[str] | tuple[str, ...] = ("sync", "ssp:2", "async"), *, out: str | None = None,
            progress: Callable[[str, int, int], None] | None = None,
            observer: Callable[[str], RunObserver | None] | None = None, warm: bool = False,
            repeat: int = 1, runner: Runner | None = None, target: float | None = None, predict: bool = False,
            **common: Any) -> CompareResult:
    """Run each labelled mode in turn with the same ``common`` options into ``out/<label>/``.

    Writes ``out/metrics.csv`` and a self-contained ``out/report.html``. Every option is checked for
    every label before the first run starts. ``observer(label)`` may give each run an observer;
    ``warm`` runs them on a warm cluster (see :func:`ssptk.experiment.single.run`). A failed run stays
    in the result (status ``failed``) and the comparison goes on.

    ``repeat`` R > 1 runs each label R times, into ``out/<label>/rep-<k>/``, alternating the order
    (:func:`run_order`); the table then shows each figure's mean and spread, ``metrics.csv`` has one
    row per run, and ``progress`` and ``observer`` get ``"<label> #<k>"`` as the label.
    ``runner(**options)``: what does one run (default :func:`ssptk.experiment.single.run`). ``target``: the
    training loss time and minibatches to target are measured to (default: see
    :func:`ssptk.analysis.comparison_table.compare_table`). ``predict``: after the runs, predict each label with the
    same options (:mod:`ssptk.experiment.predicted_runs`, its clock from the label's calibrated per-step overhead,
    its workers sharing the cores the runs had: ``cores``, else what their config.json recorded) into
    ``out/predicted/<label>/``; the report draws the predictions over the runs and holds them to the
    same target (``CompareResult.predicted``, ``report.predicted``).
    """
    resolved = resolve_labels(labels, common)
    return compare_resolved(resolved, out=out, progress=progress, observer=observer, warm=warm, repeat=repeat,
                            runner=runner, target=target, predict=predict,
                            given={label: {**common, **kw}
                                   for label, kw in parse_labels(labels, common.get("optimizer"))})


def compare_resolved(resolved: dict[str, RunOptions], *, out: str | None = None,
                     progress: Callable[[str, int, int], None] | None = None,
                     observer: Callable[[str], RunObserver | None] | None = None, warm: bool = False,
                     repeat: int = 1, runner: Runner | None = None, target: float | None = None,
                     predict: bool = False, given: dict[str, dict[str, Any]] | None = None) -> CompareResult:
    """:func:`compare` of each label's options, resolved once (:func:`resolve_labels`); ``given``: each label's
    options as given, what a ``runner`` of one's own is called with (default: the resolved ones)."""
    repeat = check_repeat(repeat)
    target = check_target(target)
    for opts in resolved.values():  # check all before running any, or creating the directory
        single.check_before_start(opts)
    base = RunDir.create(out, "compare").path
    cd = ComparisonDir(base)
    repeats: dict[str, list[RunResult]] = {label: [] for label in resolved}
    for label, k in run_order(list(resolved), repeat):
        name = label if repeat == 1 else f"{label} #{k}"
        opts = replace(resolved[label], out=cd.run_path(label, None if repeat == 1 else k))
        cb = _LabelledProgress(progress, name) if progress else None
        kwargs = {**(given or {}).get(label, opts.to_dict()), "out": opts.out, "warm": warm}
        repeats[label].append(_one(runner, opts, kwargs, cb, observer(name) if observer else None))
    predicted = _predict_labels(base, resolved, repeats, progress) if predict else None
    return _compare_result(base, repeats if repeat > 1 else {label: reps[0] for label, reps in repeats.items()},
                           target, predicted)


def predict_comparison(labels: list[str] | tuple[str, ...] = ("sync", "ssp:2", "async"), *, out: str | None = None,
                       overhead: float | None = None, progress: Callable[[str, int, int], None] | None = None,
                       target: float | None = None, gap: float | None = None, **common: Any) -> CompareResult:
    """``ssptk.predict``: a comparison without a cluster. Every label is predicted (the simulator's schedule
    replayed with the model's real gradients, :mod:`ssptk.experiment.predicted_runs`) in one process, into
    ``out/<label>/`` (default ``runs/<timestamp>-predicted``), and gets the table, ``metrics.csv`` and report of
    :func:`compare`. ``overhead``: the per-step cost the clocks are simulated with (default
    :data:`ssptk.experiment.predicted_runs.DEFAULT_OVERHEAD_S`; a real run's ``overhead_ms`` / 1000 for times that
    mean something on that machine); ``gap``: where in that cost a step reads (a real run's ``gap_ms`` / 1000; default
    0: as it starts). A prediction whose loss became NaN stays in the result, failed."""
    from ssptk.experiment.predicted_runs import plan_resolved, predict

    resolved = resolve_labels(labels, {"stall_timeout": 0, **common})  # every option checked before anything is made
    target = check_target(target)
    base = RunDir.create(out, "predicted").path
    plans = [plan_resolved(opts, overhead, run_dir=ComparisonDir(base).run_path(label), gap=gap)
             for label, opts in resolved.items()]
    names = list(resolved)

    def heard(job: int, done: int, total: int) -> None:
        if progress is not None:
            progress(names[job], done, total)

    results = predict(plans, log_dir=base, progress=heard, raise_on_failure=False)
    return _compare_result(base, dict(zip(names, results)), target)


def _predict_labels(base: str, options: dict[str, RunOptions], runs: dict[str, list[RunResult]],
                    progress: Callable[[str, int, int], None] | None) -> dict[str, RunResult]:
    """Each label predicted with its options, its clock from the median calibrated overhead of its runs (and the
    median of their ``gap_ms``: where a step's read comes), its workers sharing the cores the runs had (``cores``
    given, else recorded; neither: each its own machine, as the runs' summaries' ideal took them), so the overhead
    means what it meant there."""
    from ssptk.experiment.predicted_runs import DEFAULT_OVERHEAD_S, plan_resolved, predict
    cd = ComparisonDir(base)
    plans = []
    for label, opts in options.items():
        measured = [float(r.summary.overhead_ms) for r in runs[label] if r.summary.overhead_ms]
        overhead = float(np.median(measured)) / 1000.0 if measured else DEFAULT_OVERHEAD_S
        gaps = [float(r.summary.gap_ms) for r in runs[label] if r.summary.gap_ms is not None]
        had = next((c for c in (r.config.tasks.cores for r in runs[label]) if c is not None), None)
        cores = opts.cores if opts.cores is not None else had or 0.0
        plans.append(plan_resolved(replace(opts, out=None, cores=cores), overhead, run_dir=cd.predicted_path(label),
                                   gap=float(np.median(gaps)) / 1000.0 if gaps else None))
    labels = list(options)

    def heard(job: int, done: int, total: int) -> None:
        if progress is not None:
            progress(f"{labels[job]} (predicted)", done, total)

    results = predict(plans, log_dir=cd.predicted_dir, progress=heard, raise_on_failure=False)
    return dict(zip(labels, results))


class _LabelledProgress:
    """A comparison's ``progress(label, done, total)`` as one run's ``progress(done, total)``; where the
    callback has ``starting(label, ready, pending)``, the run's cluster start reaches it too."""

    def __init__(self, fn: Callable[[str, int, int], None], label: str) -> None:
        self.fn, self.label = fn, label

    def __call__(self, done: int, total: int) -> None:
        self.fn(self.label, done, total)

    def starting(self, ready: list[str], pending: list[str]) -> None:
        starting = getattr(self.fn, "starting", None)
        if callable(starting):
            starting(self.label, ready, pending)


def call_runner(runner: Runner, kwargs: dict[str, Any], progress: Callable[[int, int], None] | None,
                observer: Any) -> RunResult:
    """``runner(**kwargs)``, with ``progress`` where it takes one (or ``**kwargs``), and ``observer`` if any."""
    try:
        params = inspect.signature(runner).parameters
        takes = "progress" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())
    except (TypeError, ValueError):
        takes = False
    extra: dict[str, Any] = {"progress": progress} if progress is not None and takes else {}
    if observer is not None:
        extra["observer"] = observer
    return runner(**kwargs, **extra)


def _one(runner: Runner | None, opts: RunOptions, kwargs: dict[str, Any], progress: Callable[[int, int], None] | None,
         observer: RunObserver | None) -> RunResult:
    """One run of a comparison (``opts``; a ``runner`` of one's own gets ``kwargs``); a failed run is kept, not
    raised."""
    if runner is None:
        return single.run_resolved(opts, progress=progress, observer=observer, raise_on_failure=False,
                                   warm=bool(kwargs.get("warm")))
    try:
        return call_runner(runner, kwargs, progress, observer)
    except RunFailed as e:
        if e.result is None:
            raise
        return e.result  # type: ignore[return-value]


def run_tuple(r: RunResult) -> RunTuple:
    """``(steps, events, config, summary)`` of a finished run: what reports and tables take."""
    return r.df, r.events, r.config, r.summary


def _compare_result(base: str, runs: dict[str, RunResult] | dict[str, list[RunResult]],
                    target: float | None = None, predicted: dict[str, RunResult] | None = None) -> CompareResult:
    """Table, ``metrics.csv`` and ``report.html`` of finished runs: label -> run, or label -> its
    repetitions (a list); ``predicted``: label -> its predicted run."""
    from ssptk.render.report import Repeats, build_report, comparison_title

    repeated = any(isinstance(v, list) for v in runs.values())
    repeats = {label: list(v) if isinstance(v, list) else [v] for label, v in runs.items()}
    frames = {label: Repeats(run_tuple(r) for r in reps) if repeated else run_tuple(reps[0])
              for label, reps in repeats.items()}
    report = build_report(frames, title=comparison_title(runs), target=target,
                          predicted={label: run_tuple(r) for label, r in predicted.items()} if predicted else None)
    table = report.table
    per_run = report.runs_table if repeated and report.runs_table is not None else table
    cd = ComparisonDir(base)
    cd.write_metrics(per_run)
    report.save(cd.report_path)
    first = {label: reps[0] for label, reps in repeats.items() if reps}
    return CompareResult(base, first, table, report, repeats, report.runs_table, predicted or {})
