"""What a comparison says, decided once: :class:`Verdict`, from every run of it (reached, never reached, diverged on
the training or the held-out loss, failed), computed where the comparison table is made
(:func:`ssptk.analysis.compare_table`, :func:`ssptk.analysis.aggregate_repeats`) and carried by the table
(``attrs["verdict"]``) to every renderer: the report, the terminal, the notebook helpers, the widgets and the figures
word it and never decide again.

It says who reached the target and when, as a share of each run (:mod:`ssptk.analysis.outcomes`); who was fastest,
who tied with it, whether its lead is more than noise (with repeats: their min–max spread; without: the stated
per-run figure :data:`SINGLE_RUN_SPREAD`), whether the target was reached too early to rank anything, what staleness
cost per update with never-reached and diverged runs as the largest cost (:class:`StalenessCost`), and facts that
explain figures a student would misread (:mod:`ssptk.analysis.verdict_facts`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from ssptk.analysis.outcomes import (
    EARLY_PER_WORKER,
    EARLY_SHARE,
    REACHED,
    SINGLE_RUN_SPREAD,
    SettingOutcome,
    outcomes_of,
)
from ssptk.analysis.verdict_facts import Fact, StalenessCost, dc_facts, skew_facts, staleness_cost

__all__ = ["EARLY_PER_WORKER", "EARLY_SHARE", "KINDS", "SINGLE_RUN_SPREAD", "TIE_SHARE", "Noise", "Verdict",
           "comparison_verdict", "verdict_of"]

#: Times within this share of each other are a tie: the tables show 4 significant digits, and a simulated clock
#: (``ssptk.predict``) gives settings with the same schedule the same time.
TIE_SHARE = 1e-3
#: Why the time to the target has a winner or not: ``winner`` (a real one), ``single`` (one setting: nothing to
#: compare), ``none`` (no setting reached the target), ``unreliable`` (the fastest diverged, failed or missed it in
#: some repeats), ``early`` (reached within :data:`EARLY_SHARE` of its run: the times measure start-up), ``short``
#: (reached within each worker's first :data:`EARLY_PER_WORKER` minibatches, later than ``early``: start-up and
#: pace cannot be told apart), ``tie`` (another setting reached it at the same time), ``noise`` (another within noise).
KINDS = ("winner", "single", "none", "unreliable", "early", "short", "tie", "noise")


@dataclass(frozen=True)
class Noise:
    """How the verdict told a lead from noise. ``basis``: ``"repeats"`` (each setting's repeats: a lead counts when
    the min–max ranges do not overlap) or ``"per-run"`` (one run each: another setting within ``figure`` of the
    fastest's time is within noise; a single run cannot measure its own spread). ``predicted``: the runs are the
    simulator's (a deterministic clock, no machine noise, but no surer than one run)."""

    basis: str
    figure: float
    repeats: tuple[int, ...] = ()
    predicted: bool = False


@dataclass(frozen=True)
class Verdict:
    """What a comparison says (see the module docstring). ``outcomes``: one per setting, in the table's order.
    ``fastest``: the least (mean) time to the target, ``None`` when none reached it; ``tied``: the others that reached
    it at the same time (within :data:`TIE_SHARE`); ``winner``: ``fastest`` when its lead is real, else ``None`` (a
    figure stars only it); ``kind``: one of :data:`KINDS`, why; ``close``: the settings within noise of the fastest;
    ``noise``: how noise was judged; ``cost``: what staleness cost per update; ``facts``: explanations owed to the
    reader (:mod:`ssptk.analysis.verdict_facts`)."""

    outcomes: tuple[SettingOutcome, ...]
    fastest: str | None
    winner: str | None
    kind: str
    noise: Noise
    cost: StalenessCost
    tied: tuple[str, ...] = ()
    close: tuple[str, ...] = ()
    facts: tuple[Fact, ...] = ()
    target: float | None = None
    target_on: str = "training"
    target_auto: bool = True
    predicted: bool = False

    def outcome(self, label: str) -> SettingOutcome:
        """The outcome of setting ``label`` (``KeyError`` for a label the comparison lacks)."""
        for o in self.outcomes:
            if o.label == label:
                return o
        raise KeyError(label)

    @property
    def no_tradeoff(self) -> bool:
        """The times to the target say nothing about the tradeoff (start-up, a tie or noise) AND every setting that
        did not fail reached the target at about the same cost per update: the tradeoff is not in this run."""
        return self.kind in ("early", "short", "tie", "noise") and self.cost.kind == "same"

    @property
    def diverged(self) -> tuple[SettingOutcome, ...]:
        """The settings that diverged in some run (on the training or the held-out loss)."""
        return tuple(o for o in self.outcomes if o.diverged_runs)


def _time(o: SettingOutcome) -> float:
    return float("inf") if o.time_s is None else o.time_s


def _fastest(outcomes: tuple[SettingOutcome, ...]) -> tuple[SettingOutcome | None, tuple[str, ...]]:
    """The setting with the least time to the target (the first in order on equal times) and those tied with it."""
    timed = [o for o in outcomes if o.time_s is not None]
    if not timed:
        return None, ()
    best = min(timed, key=_time)
    tied = tuple(o.label for o in timed if o is not best and o.time_s is not None and best.time_s is not None
                 and abs(o.time_s - best.time_s) <= TIE_SHARE * abs(best.time_s))
    return best, tied


def _close(outcomes: tuple[SettingOutcome, ...], best: SettingOutcome, tied: tuple[str, ...],
           noise: Noise) -> tuple[str, ...]:
    """The settings (other than ``best`` and its ties) whose time is within noise of ``best``'s."""
    out = []
    for o in outcomes:
        if o is best or o.label in tied or o.time_s is None or best.time_s is None:
            continue
        if noise.basis == "repeats":
            near = (o.time_lo if o.time_lo is not None else o.time_s) <= \
                (best.time_hi if best.time_hi is not None else best.time_s)
        else:
            near = o.time_s <= best.time_s * (1.0 + noise.figure)
        if near:
            out.append(o.label)
    return tuple(out)


def _kind(outcomes: tuple[SettingOutcome, ...], best: SettingOutcome | None, tied: tuple[str, ...],
          close: tuple[str, ...]) -> str:
    """One of :data:`KINDS` (see :class:`Verdict`), checked in that order."""
    if len(outcomes) < 2:
        return "single"
    if best is None:
        return "none"
    if best.reach != REACHED:
        return "unreliable"
    if best.early:
        return "early"
    if best.short:
        return "short"
    if tied:
        return "tie"
    return "noise" if close else "winner"


def comparison_verdict(table: pd.DataFrame) -> Verdict:
    """The :class:`Verdict` of a comparison table (:func:`ssptk.analysis.compare_table`, or
    :func:`ssptk.analysis.aggregate_repeats` of repeats, whose ``attrs["counts"]`` say how each label's runs ended)."""
    outcomes = outcomes_of(table)
    repeats = tuple(sorted({o.runs for o in outcomes}))
    predicted = bool(table.attrs.get("predicted"))
    noise = Noise("repeats" if any(n > 1 for n in repeats) else "per-run", SINGLE_RUN_SPREAD, repeats, predicted)
    best, tied = _fastest(outcomes)
    close = () if best is None else _close(outcomes, best, tied, noise)
    kind = _kind(outcomes, best, tied, close)
    target = table.attrs.get("target")
    return Verdict(outcomes=outcomes, fastest=None if best is None else best.label,
                   winner=best.label if kind == "winner" and best is not None else None, kind=kind, noise=noise,
                   cost=staleness_cost(outcomes), tied=tied, close=close if kind == "noise" else (),
                   facts=skew_facts(table) + dc_facts(table), target=None if target is None else float(target),
                   target_on=str(table.attrs.get("target_on") or "training"),
                   target_auto=bool(table.attrs.get("target_auto", True)), predicted=predicted)


def verdict_of(table: pd.DataFrame) -> Verdict:
    """The verdict the comparison ``table`` carries (``attrs["verdict"]``); a table built by hand without one gets
    :func:`comparison_verdict`'s, kept in its ``attrs`` so that every view of it words the same one."""
    verdict: Any = table.attrs.get("verdict")
    if not isinstance(verdict, Verdict):
        verdict = comparison_verdict(table)
        table.attrs["verdict"] = verdict
    return verdict
