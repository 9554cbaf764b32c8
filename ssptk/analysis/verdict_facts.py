"""Parts of a comparison's verdict beyond who won: what staleness cost per update (:class:`StalenessCost`), and typed
facts that explain figures a student would otherwise misread: a max skew far above the mean staleness, or an
unbounded setting less stale on average than a bounded one (:class:`SkewOverStaleness`); how large a delay
compensation's correction was, and whether it was too small to change anything (:class:`DelayCompensation`); a
predicted pace that differs from the real runs' (:class:`PaceGap`, :func:`pace_gaps`)."""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from ssptk.analysis.outcomes import FAILED, SINGLE_RUN_SPREAD, SettingOutcome
from ssptk.core.labels import LabelError, label_of, parse_dc
from ssptk.rundir import Summary

__all__ = ["DC_NEGLIGIBLE", "PACE_TOLERANCE", "SKEW_OVER_STALENESS", "STEADY_RATE_SPREAD", "DelayCompensation", "Fact",
           "PaceGap", "SkewOverStaleness", "StalenessCost", "dc_fact", "dc_facts", "pace_gaps", "same_pace",
           "skew_facts", "staleness_cost"]

#: A max skew at least this many times (mean staleness + 1) is "far above" it: the two measure different things.
SKEW_OVER_STALENESS = 10.0
#: Predicted and real steps/s (or per-step overheads) that differ by more than this share "differ".
PACE_TOLERANCE = 0.1
#: Settings whose steps/s differ by less than this share run at "the same pace" (:func:`same_pace`).
STEADY_RATE_SPREAD = 0.1
#: A delay compensation that corrected no update by this share of its gradient or more changed next to nothing: its
#: run trained as the same mode without it would. The largest correction, not the mean, decides: a few very stale
#: updates corrected by 10-60% moved predicted held-out losses by 3-5% while the mean stayed under 1%.
DC_NEGLIGIBLE = 0.01
_BOUNDED = ("sync", "ssp", "allreduce")  # modes whose staleness a bound holds (local SGD's counts something else)


@dataclass(frozen=True)
class StalenessCost:
    """What staleness cost per update: minibatches to the target, with the settings that never reached it or
    diverged as the largest cost (not left out). ``kind``: ``"same"`` (every setting that did not fail reached the
    target, needing ``least``-``most`` minibatches, within :data:`SINGLE_RUN_SPREAD`: staleness cost no progress per
    update here), ``"differs"`` (some needed more, never reached it, or diverged) or ``"unknown"`` (fewer than two
    settings to compare). ``order``: the settings from the cheapest per update to the dearest, the never-reached
    then the diverged last; ``failed``: settings whose every run failed (their cost is unknown)."""

    kind: str
    least: float | None = None
    most: float | None = None
    never: tuple[str, ...] = ()
    diverged: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    order: tuple[str, ...] = ()


def staleness_cost(outcomes: tuple[SettingOutcome, ...]) -> StalenessCost:
    """:class:`StalenessCost` of a comparison's outcomes."""
    failed = tuple(o.label for o in outcomes if o.reach == FAILED)
    known = [o for o in outcomes if o.reach != FAILED]
    diverged = tuple(o.label for o in known if o.diverged_runs)
    never = tuple(o.label for o in known if o.never_runs and o.label not in diverged)
    costs = sorted((o.minibatches, o.label) for o in known if o.minibatches is not None
                    and o.label not in never + diverged)
    order = tuple(label for _, label in costs) + never + diverged
    least, most = (costs[0][0], costs[-1][0]) if costs else (None, None)
    if never or diverged:
        kind = "differs" if len(known) > 1 else "unknown"
    elif len(costs) < 2 or least is None or most is None:
        kind = "unknown"
    else:
        kind = "same" if most <= least * (1.0 + SINGLE_RUN_SPREAD) else "differs"
    return StalenessCost(kind, least, most, never, diverged, failed, order)


@dataclass(frozen=True)
class SkewOverStaleness:
    """``label``'s max skew (steps one worker was ahead of another) says something its mean staleness (updates
    between a step's read and its own) does not: ``far`` (the skew is at least :data:`SKEW_OVER_STALENESS` x
    (mean staleness + 1)), and/or ``less_stale_than``: bounded settings (label, mean staleness) with a higher mean
    staleness, though this one is unbounded. A worker racing ahead while the others wait (for a core, a pause)
    applies its updates with few others in between: a large skew with a low staleness."""

    label: str
    max_skew: int
    mean_staleness: float
    far: bool
    less_stale_than: tuple[tuple[str, float], ...] = ()
    workers: int | None = None


@dataclass(frozen=True)
class DelayCompensation:
    """What ``label``'s delay compensation did: its correction ``|lambda g*g*(w_now - w_read)|`` averaged ``mean`` of
    its gradient ``|g|`` over the run's updates (``median``: their median; repeats: the mean over them), and was at
    most ``largest`` (repeats: the largest of any). ``negligible``: ``largest`` (else ``mean``) is below
    :data:`DC_NEGLIGIBLE`, so it trained as ``plain``, the same setting without compensation, would; ``plain_here``:
    the comparison has ``plain`` too. ``form``: ``"dc"`` (a constant lambda) or ``"dca"`` (DC-ASGD-a, lambda0 over
    the gradients' running root mean square), ``lam`` its lambda (or lambda0); both ``None`` when the run's options
    do not say."""

    label: str
    mean: float
    median: float | None
    negligible: bool
    plain: str
    form: str | None = None
    lam: float | None = None
    plain_here: bool = False
    largest: float | None = None


#: A typed fact a renderer words.
Fact = SkewOverStaleness | DelayCompensation


def _float(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def _finished(status: Any) -> bool:
    """A run that finished (``ok``), or repeats of which some did (``2/3 ok``): their figures are measured."""
    text = str(status)
    return text == "ok" or (text.endswith(" ok") and not text.startswith("0/"))


def skew_facts(table: pd.DataFrame) -> tuple[Fact, ...]:
    """:class:`SkewOverStaleness` for each finished run of a comparison table whose skew and staleness disagree."""
    rows = [r for r in table.to_dict("records") if _finished(r.get("status")) and r.get("mode") != "local"]
    stale = {str(r["label"]): _float(r.get("mean_staleness")) for r in rows}
    bounded = [(str(r["label"]), stale[str(r["label"])]) for r in rows if r.get("mode") in _BOUNDED]
    out: list[Fact] = []
    for r in rows:
        label, skew, mean = str(r["label"]), _float(r.get("max_skew")), stale[str(r["label"])]
        if skew is None or mean is None:
            continue
        far = skew >= SKEW_OVER_STALENESS * (mean + 1.0)
        below = tuple((b, s) for b, s in bounded if r.get("mode") not in _BOUNDED and s is not None and s > mean)
        if far or below:
            workers = _float(r.get("workers"))
            out.append(SkewOverStaleness(label, int(skew), mean, far, below, None if workers is None else int(workers)))
    return tuple(out)


def dc_fact(label: str, row: Mapping[Any, Any], plain_here: bool = False) -> DelayCompensation | None:
    """The :class:`DelayCompensation` of one run or setting, from its table row or ``summary.json`` (``mode``,
    ``staleness``, ``lr_staleness``, ``dc_correction_mean``, ``dc_correction_median`` and ``dc_correction_max``, or
    of repeats ``dc_correction_max_max``); ``None`` without a correction logged."""
    mean = _float(row.get("dc_correction_mean"))
    if mean is None:
        return None
    largest = _float(row.get("dc_correction_max_max", row.get("dc_correction_max")))
    try:
        dc = parse_dc(row.get("lr_staleness"))
    except LabelError:
        dc = None
    mode = str(row.get("mode") or "async")
    bound = _float(row.get("bound", row.get("staleness")))  # a table row's bound, a summary's (summary.json: staleness)
    plain = label_of(mode, None if bound is None else int(bound))
    return DelayCompensation(label, mean, _float(row.get("dc_correction_median")),
                             (mean if largest is None else largest) < DC_NEGLIGIBLE, plain,
                             None if dc is None else dc.form, None if dc is None else dc.lam, plain_here, largest)


def dc_facts(table: pd.DataFrame) -> tuple[DelayCompensation, ...]:
    """:class:`DelayCompensation` for each setting of a comparison table that logged delay compensation's
    correction (``dc_correction_mean``), whatever its outcome: a diverged or failed run applied it too."""
    if "dc_correction_mean" not in table.columns:
        return ()
    rows = table.to_dict("records")
    plain = {str(r["label"]) for r in rows if str(r.get("lr_staleness") or "none") == "none"}
    out = []
    for r in rows:
        fact = dc_fact(str(r["label"]), r)
        if fact is not None:
            out.append(replace(fact, plain_here=fact.plain in plain))
    return tuple(out)


@dataclass(frozen=True)
class PaceGap:
    """A predicted pace that differs from the real run's (same options), by more than :data:`PACE_TOLERANCE`.
    ``ratio``: predicted / real steps/s. Why, as far as the summaries tell (``reasons``, in order): ``"clock"``
    (the prediction's per-step overhead differs from the one this run calibrated: it was predicted before the run,
    from other runs or the default), ``"cores"`` (the prediction's workers shared other cores than the run's),
    ``"unmodelled"`` (the run itself is off the simulator with its own overhead, ``measured_over_ideal``: what the
    simulator leaves out, start-up and the OS's scheduling); none: ssptk cannot tell why."""

    label: str
    predicted: float
    real: float
    ratio: float
    overhead_predicted_ms: float | None = None
    overhead_real_ms: float | None = None
    real_over_ideal: float | None = None
    cores_predicted: float | None = None
    cores_real: float | None = None
    reasons: tuple[str, ...] = ()

    @property
    def above(self) -> bool:
        """The prediction is faster than the real run."""
        return self.ratio > 1.0


def _differ(a: float | None, b: float | None) -> bool:
    return a is not None and b is not None and b > 0 and abs(a / b - 1.0) > PACE_TOLERANCE


def pace_gaps(real: Mapping[str, Mapping[str, Any]], predicted: Mapping[str, Mapping[str, Any]]) -> tuple[PaceGap, ...]:
    """A :class:`PaceGap` per label whose real and predicted summaries (``label -> summary.json``) differ in steps/s
    by more than :data:`PACE_TOLERANCE`, in the order of ``real``."""
    out = []
    for label, given in real.items():
        s, p = Summary.of(given), Summary.maybe(predicted.get(label))
        if p is None or not s.ok or not p.ok:
            continue
        rate, pace = _float(s.steps_per_s), _float(p.steps_per_s)
        if rate is None or pace is None or not _differ(pace, rate):
            continue
        over_pred, over_real = _float(p.overhead_ms), _float(s.overhead_ms)
        cores_pred, cores_real = _float(None if p.predicted is None else p.predicted.cores), _float(s.ideal_cores)
        ideal = _float(s.measured_over_ideal)
        reasons = tuple(r for r, holds in (("clock", _differ(over_pred, over_real)),
                                           ("cores", cores_pred != cores_real and (cores_pred or cores_real)),
                                           ("unmodelled", ideal is not None and abs(ideal - 1.0) > PACE_TOLERANCE))
                        if holds)
        out.append(PaceGap(label, pace, rate, pace / rate, over_pred, over_real, ideal, cores_pred, cores_real,
                           reasons))
    return tuple(out)


def same_pace(table: pd.DataFrame) -> tuple[float, float] | None:
    """``(least, most)`` steps/s when a comparison's settings (two or more) all ran within
    :data:`STEADY_RATE_SPREAD` of each other: the same pace (a steady straggler holds every SSP bound to its own);
    ``None`` otherwise."""
    if "steps_per_s" not in table.columns or len(table) < 2:
        return None
    rates = pd.to_numeric(table["steps_per_s"], errors="coerce").dropna()
    if rates.empty or rates.min() <= 0 or rates.max() / rates.min() - 1 >= STEADY_RATE_SPREAD:
        return None
    return float(rates.min()), float(rates.max())
