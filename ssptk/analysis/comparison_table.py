"""The comparison table: one row per run of several modes, with a loss target they are measured against."""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from ssptk.analysis.delay_comp_summary import dc_correction_summary
from ssptk.analysis.held_out import held_out_curve, held_out_divergence, held_out_to_target
from ssptk.analysis.metrics import prepare_steps, run_options, smoothing_window, start_time, summarize, time_to_target
from ssptk.analysis.step_split import blocked_share, step_split
from ssptk.analysis.values import clean
from ssptk.analysis.verdict import comparison_verdict
from ssptk.rundir import RunConfig, StoredOptions, Summary, TrafficSection

__all__ = ["COMPARE_COLUMNS", "FIGURE_COLUMNS", "SPREAD_SUFFIXES", "TARGET_FACTOR", "RunTuple", "auto_target",
           "compare_table", "converged", "first_to_target"]

#: ``(steps, events, config, summary)`` of one run, as :func:`ssptk.rundir.load_run` returns it.
RunTuple = tuple[pd.DataFrame, pd.DataFrame, Mapping[str, Any], Mapping[str, Any]]

#: Automatic target of :func:`compare_table`: this factor times the best final smoothed training loss among
#: the runs that converged (ok, not diverged). A margin above the best, so that every converged run's noisy
#: smoothed loss crosses it, and never derived from a run that did badly.
TARGET_FACTOR = 1.25
#: Columns of :func:`compare_table`, in order.
COMPARE_COLUMNS: tuple[str, ...] = (
    "label", "mode", "bound", "lr_staleness", "workers", "steps_per_s", "measured_over_ideal", "wall_s",
    "final_loss", "final_accuracy", "time_to_target_s", "steps_to_target", "max_skew", "wait_fraction",
    "mean_staleness", "max_staleness", "mb_per_minibatch", "link_busy", "transfer_share", "dc_correction_mean",
    "dc_correction_median", "dc_correction_max", "diverged", "diverged_on", "status",
)
#: The measured figures of :data:`COMPARE_COLUMNS`: what :func:`aggregate_repeats` averages and spreads.
FIGURE_COLUMNS: tuple[str, ...] = (
    "steps_per_s", "measured_over_ideal", "wall_s", "final_loss", "final_accuracy", "time_to_target_s",
    "steps_to_target", "max_skew", "wait_fraction", "mean_staleness", "max_staleness", "mb_per_minibatch",
    "link_busy", "transfer_share", "dc_correction_mean", "dc_correction_median", "dc_correction_max",
)
#: Suffixes of the spread columns :func:`aggregate_repeats` adds for each figure.
SPREAD_SUFFIXES: tuple[str, ...] = ("_min", "_max", "_ci95")
_MODES_WITHOUT_BOUND = ("sync", "async", "allreduce")  # modes where the bound (--staleness) means nothing
_FLOAT_COLUMNS = ("steps_per_s", "measured_over_ideal", "wall_s", "final_loss", "final_accuracy", "time_to_target_s",
                  "wait_fraction", "mean_staleness", "mb_per_minibatch", "link_busy", "transfer_share",
                  "dc_correction_mean", "dc_correction_median", "dc_correction_max")

def _traffic_columns(traffic: TrafficSection | None) -> dict[str, Any]:
    """``mb_per_minibatch`` (MB the workers sent and received per minibatch, measured on their links) and
    ``link_busy`` (the busiest shaped link's share of its rate; ``None`` without ``--network``), ``transfer_share``
    (the transfer part of a worker's step, each second of it counted once: timed in sync, ssp and async, else the
    share its own bytes need at the link's rate, an estimate and a floor: :func:`ssptk.analysis.step_split.step_split`;
    ``None`` likewise)."""
    t = traffic or TrafficSection()
    split = step_split(t)
    return {"mb_per_minibatch": clean(t.mb_per_minibatch), "link_busy": clean(t.busiest_share),
            "transfer_share": clean(None if split is None else split.transfer)}


def _dc_columns(summary: Summary, steps: pd.DataFrame | None, opts: StoredOptions) -> dict[str, Any]:
    """``lr_staleness`` (the run's option: ``none``, ``inverse``, ``dc:0.04``, ``dca:2.0``) and delay compensation's
    correction against the gradient, ``dc_correction_mean``, ``_median`` and ``_max``
    (``None`` without it): the summary's, else from the step records (a summary written before ssptk kept them)."""
    size = summary if summary.has_dc_correction else Summary(dc_correction_summary(steps))
    return {"lr_staleness": summary.lr_staleness or opts.lr_staleness or "none",
            "dc_correction_mean": clean(size.dc_correction_mean),
            "dc_correction_median": clean(size.dc_correction_median),
            "dc_correction_max": clean(size.dc_correction_max)}


def auto_target(smoothed: Iterable[float | None]) -> float | None:
    """:data:`TARGET_FACTOR` above the best (lowest) of the converged runs' final smoothed losses (for a
    negative loss, ``best + 0.25 * |best|``); ``None`` when there is none."""
    values = [v for v in smoothed if v is not None and math.isfinite(v)]
    if not values:
        return None
    best = min(values)
    return best + (TARGET_FACTOR - 1.0) * abs(best)


def converged(row: Mapping[Any, Any]) -> bool:
    """A run that may be measured against a target: it finished (``ok``) and did not diverge."""
    return row.get("status") == "ok" and not row.get("diverged")


def compare_table(
    runs: Mapping[str, tuple[pd.DataFrame, pd.DataFrame, Mapping[str, Any], Mapping[str, Any]]],
    target: float | None = None,
) -> pd.DataFrame:
    """One row per run of ``label -> (steps, events, config, summary)``; :data:`COMPARE_COLUMNS`.

    Numbers come from ``summary`` when it has them (``final_loss`` only from there: it is the
    evaluation loss) and are otherwise computed from the logs with :func:`summarize`.
    ``bound`` (SSP's S) is blank for modes where it means nothing (sync, async, allreduce); ``status``
    is the summary's (``"unknown"`` without one); ``diverged`` follows :mod:`ssptk.core.divergence`, on the
    training loss or the held-out loss (``diverged_on``: ``"training"``, ``"held-out"`` or missing), whether or not
    the run's summary (written before the held-out rule) says so. ``lr_staleness``, ``dc_correction_mean``,
    ``_median``, ``_max``: the run's option and delay compensation's correction against the gradient.
    Time and steps to target use each run's default :func:`smoothing_window` and run from the start
    barrier; only converged runs (ok, not diverged) get them: a failed or diverged run shows *not
    reached* (missing), whatever its loss did on the way.

    With ``target=None`` the target is :func:`auto_target` of the converged runs' final smoothed training
    losses (``loss_smoothed_last``): 1.25 x the best. When every converged run logged its held-out loss
    during training (``--eval-every``), the target is on the held-out loss instead (1.25 x the best
    ``final_loss``), reached at the first ``eval`` record at or below it (:mod:`ssptk.analysis.held_out`).
    ``attrs``: ``target`` (``None`` when no run converged), ``target_auto`` (chosen automatically or
    given), ``target_on`` (``"held-out"`` or ``"training"``), ``first_to_target`` (the label that reached
    it in the least time, or ``None``: a raw figure, ties and noise not weighed), ``predicted`` (every run is a
    predicted one, ``ssptk.predict``), ``verdict`` (:func:`ssptk.analysis.verdict.comparison_verdict`: what the
    comparison says, the one object every sentence, star and marker about it is worded from).
    """
    rows: list[dict[str, Any]] = []
    prepared: dict[str, tuple[pd.DataFrame, int]] = {}
    smoothed: dict[str, float | None] = {}
    curves: dict[str, tuple[pd.DataFrame | None, float | None]] = {}
    unmeasured: dict[str, str] = {}
    for label, (steps, events, config, stored) in runs.items():
        summary, logs = Summary.of(stored), summarize(steps, events, config)
        curve = held_out_curve(events, steps, summary)
        rows.append(_row(str(label), steps, summary, logs, run_options(config), curve))
        if steps is not None and not steps.empty:
            prepared[str(label)] = (prepare_steps(steps, start_time(events)),
                                    smoothing_window(rows[-1]["workers"] or steps["worker"].nunique()))
        if summary.traffic_not_measured:
            unmeasured[str(label)] = str(summary.traffic_not_measured)
        smoothed[str(label)] = logs.loss_smoothed_last
        curves[str(label)] = (curve, start_time(events))
    auto = target is None
    target, held_out = _to_target(rows, prepared, smoothed, curves, target)
    table = pd.DataFrame(rows, columns=list(COMPARE_COLUMNS))
    for col in _FLOAT_COLUMNS:
        table[col] = pd.to_numeric(table[col], errors="coerce").astype("float64")
    for col in ("bound", "workers", "steps_to_target", "max_skew", "max_staleness"):
        table[col] = pd.to_numeric(table[col], errors="coerce").astype("Int64")
    table["diverged"] = table["diverged"].astype(bool)
    table["diverged_on"] = table["diverged_on"].astype("object").where(table["diverged_on"].notna(), None)
    table.attrs.update(target=None if target is None else float(target), target_auto=auto,
                       target_on="held-out" if held_out else "training", first_to_target=first_to_target(table),
                       traffic_not_measured=unmeasured,  # label -> why (summary.json's traffic_not_measured)
                       **_predicted_attrs(runs))
    table.attrs["verdict"] = comparison_verdict(table)
    return table


def _either(stored: Any, computed: Any) -> Any:
    """A figure as the summary has it, else as computed from the logs."""
    return clean(stored) if stored is not None else computed


def _row(label: str, steps: pd.DataFrame | None, summary: Summary, logs: Summary, opts: StoredOptions,
         curve: pd.DataFrame | None) -> dict[str, Any]:
    """One run's row of :func:`compare_table`, without its time and minibatches to target (filled in later)."""
    workers = summary.workers or logs.workers or None
    mode = summary.mode or opts.mode
    bound = summary.bound if summary.has(Summary.bound) else opts.bound
    diverged = _diverged(_either(summary.diverged, logs.diverged),
                         _either(summary.diverged_on, logs.diverged_on), curve, steps, workers)
    return {
        "label": label, **diverged, "mode": mode,
        "bound": None if mode in _MODES_WITHOUT_BOUND else bound, "workers": workers,
        "steps_per_s": _either(summary.steps_per_s, logs.steps_per_s), "wall_s": _either(summary.wall_s, logs.wall_s),
        # the simulator's view of the run (from summary.json only): see docs/run-directory.md
        "measured_over_ideal": clean(summary.measured_over_ideal),
        "final_loss": clean(summary.final_loss), "final_accuracy": clean(summary.final_accuracy),
        "time_to_target_s": None, "steps_to_target": None,
        "max_skew": _either(summary.max_skew, logs.max_skew),
        "wait_fraction": blocked_share(summary, _either(summary.wait_fraction, logs.wait_fraction)),
        "mean_staleness": _either(summary.mean_staleness, logs.mean_staleness),
        "max_staleness": _either(summary.max_staleness, logs.max_staleness),
        **_traffic_columns(summary.traffic), **_dc_columns(summary, steps, opts),
        "status": summary.status or "unknown",
    }


def _predicted_attrs(runs: Mapping[str, RunTuple]) -> dict[str, Any]:
    """``predicted``: every run is a predicted one (``ssptk.predict``: say so wherever the table is shown, their
    clock is simulated); ``predicted_cores``: the cores their simulated workers shared, where a shaped network made
    them matter (``None``: each its own)."""
    predicted = [RunConfig.of(r[2]).predicted for r in runs.values()]
    return {"predicted": bool(runs) and all(predicted),
            "predicted_cores": sorted({p.cores for p in predicted if p is not None and p.shows_cores},
                                      key=lambda c: -1.0 if c is None else float(c))}


def _diverged(diverged: Any, on: str | None, curve: pd.DataFrame | None, steps: pd.DataFrame | None,
              workers: Any) -> dict[str, Any]:
    """``diverged`` and ``diverged_on`` of one run: its summary's (or its logs') training rule, else the held-out
    rule on its evaluations (:func:`ssptk.analysis.held_out.held_out_divergence`)."""
    if diverged:
        return {"diverged": True, "diverged_on": on or "training"}
    window = smoothing_window(int(workers) if workers else (steps["worker"].nunique() if steps is not None
                                                            and not steps.empty else 1))
    held = held_out_divergence(curve, steps, window)["diverged"]
    return {"diverged": held, "diverged_on": "held-out" if held else None}


def _to_target(rows: list[dict[str, Any]], prepared: Mapping[str, tuple[pd.DataFrame, int]],
               smoothed: Mapping[str, float | None],
               curves: Mapping[str, tuple[pd.DataFrame | None, float | None]],
               target: float | None) -> tuple[float | None, bool]:
    """Fill the converged rows' time and minibatches to ``target`` (chosen automatically when ``None``);
    ``(target, whether it is on the held-out loss)``. See :func:`compare_table`."""
    finished = [r for r in rows if converged(r)]
    held_out = bool(finished) and all(curves[r["label"]][0] is not None for r in finished)
    if target is None:
        target = auto_target((r["final_loss"] for r in finished) if held_out
                             else (smoothed[r["label"]] for r in finished))
    if target is not None:
        for row in finished:
            if row["label"] not in prepared:
                continue
            df, window = prepared[row["label"]]
            curve, t0 = curves[row["label"]]
            row["time_to_target_s"], row["steps_to_target"] = (
                held_out_to_target(curve, df, target, t0) if held_out and curve is not None
                else time_to_target(df, target, window))
    return target, held_out


def first_to_target(table: pd.DataFrame) -> str | None:
    """The label with the least ``time_to_target_s`` (``None`` if no run reached the target)."""
    times = pd.to_numeric(table["time_to_target_s"], errors="coerce").to_numpy(dtype="float64")
    return None if np.isnan(times).all() else str(table["label"].iloc[int(np.nanargmin(times))])
