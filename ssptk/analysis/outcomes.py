"""How each setting of a comparison ended against its target (:class:`SettingOutcome`): reached it (when, in seconds, in
minibatches and as a share of its run), reached it in only some repeats, never reached it, diverged (on the training
or the held-out loss) or failed. Read from a comparison table's columns, and for repeats from the counts
:func:`ssptk.analysis.aggregate_repeats` keeps in ``attrs["counts"]``."""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

__all__ = ["DIVERGED", "EARLY_PER_WORKER", "EARLY_SHARE", "FAILED", "NEVER", "REACHED", "SINGLE_RUN_SPREAD", "SOME",
           "SettingOutcome", "run_counts", "outcomes_of"]

#: A setting's :attr:`SettingOutcome.reach`: every run reached the target; only some did; none did, and at least one
#: diverged; every run failed; none reached it in its whole run (the rest).
REACHED, SOME, DIVERGED, FAILED, NEVER = "reached", "some", "diverged", "failed", "never"
#: A target reached within this share of a run's minibatches measures its start, not what staleness costs per
#: update: such a lead is never starred.
EARLY_SHARE = 0.1
#: Each worker's first steps run at a fraction of its pace while the graphs warm up (the main job's first ten
#: steps took 20-75 ms against a 5-20 ms median), so a target reached within this many minibatches per worker
#: mixes start-up with pace: ssptk cannot tell them apart.
EARLY_PER_WORKER = 25
#: Without repeats a run has no measured spread; this share of the fastest time stands for it (the stated per-run
#: noise figure). The tradeoff benchmark's three repeats per setting spanned up to 24% of their mean time to target
#: (sync 48.3-60.7 s, benchmarks/RESULTS.md), so a lead below a quarter may be one run's luck.
SINGLE_RUN_SPREAD = 0.25


@dataclass(frozen=True)
class SettingOutcome:
    """How one setting ended. ``reach``: :data:`REACHED`, :data:`SOME`, :data:`DIVERGED`, :data:`FAILED` or
    :data:`NEVER`; ``runs`` (repeats, 1 without) and how many of them reached the target, diverged, failed;
    ``diverged_on``: ``"training"`` or ``"held-out"`` when it diverged; ``time_s`` (mean over the runs that reached
    it) with the repeats' ``time_lo``/``time_hi``; ``minibatches`` to the target (mean) out of ``total`` (the run's
    minibatches: steps/s x wall seconds); ``early``: reached within :data:`EARLY_SHARE` of its run; ``short``: not
    early, but within each worker's first :data:`EARLY_PER_WORKER` minibatches."""

    label: str
    reach: str
    runs: int = 1
    reached_runs: int = 0
    diverged_runs: int = 0
    failed_runs: int = 0
    diverged_on: str | None = None
    time_s: float | None = None
    time_lo: float | None = None
    time_hi: float | None = None
    minibatches: float | None = None
    total: float | None = None
    workers: int | None = None
    early: bool = False
    short: bool = False

    @property
    def share(self) -> float | None:
        """Minibatches to the target over the run's minibatches (``None`` when either is unknown)."""
        return None if self.minibatches is None or not self.total else self.minibatches / self.total

    @property
    def per_worker(self) -> float | None:
        """Minibatches to the target per worker (``None`` when unknown)."""
        return None if self.minibatches is None else self.minibatches / max(1, self.workers or 1)

    @property
    def total_per_worker(self) -> float | None:
        """The run's minibatches per worker (``None`` when unknown)."""
        return None if self.total is None else self.total / max(1, self.workers or 1)

    @property
    def repeated(self) -> bool:
        """The setting ran more than once (``--repeat``)."""
        return self.runs > 1

    @property
    def missed_some(self) -> bool:
        """Some of its runs did not reach the target (a setting whose every run did not is not :data:`SOME`)."""
        return self.reached_runs < self.runs

    @property
    def never_runs(self) -> int:
        """Runs that finished without reaching the target (not diverged, not failed)."""
        return max(0, self.runs - self.reached_runs - self.diverged_runs - self.failed_runs)


def _num(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def _run_ended(row: Mapping[Any, Any]) -> tuple[bool, bool, bool]:
    """``(reached, diverged, failed)`` of one run's row: a diverged run counts as diverged whatever its status (a
    run ``--stop-on-divergence`` ended is failed and diverged); a failed one as failed; else reached with a time."""
    diverged = bool(row.get("diverged")) and not pd.isna(row.get("diverged"))
    failed = not diverged and row.get("status") != "ok"
    reached = not diverged and not failed and _num(row.get("time_to_target_s")) is not None
    return reached, diverged, failed


def run_counts(runs: pd.DataFrame) -> dict[str, dict[str, int]]:
    """label -> ``{"runs", "reached", "diverged", "failed"}`` over a table with one row per run (a
    :func:`ssptk.analysis.repeat_table`): what ``aggregate_repeats`` keeps in ``attrs["counts"]``."""
    out: dict[str, dict[str, int]] = {}
    for row in runs.to_dict("records"):
        c = out.setdefault(str(row["label"]), {"runs": 0, "reached": 0, "diverged": 0, "failed": 0})
        reached, diverged, failed = _run_ended(row)
        c["runs"] += 1
        c["reached"] += reached
        c["diverged"] += diverged
        c["failed"] += failed
    return out


def _counts(row: Mapping[Any, Any], given: Mapping[str, Any], reached_given: Mapping[str, Any]) -> dict[str, int]:
    """How the runs of one row ended: the table's ``counts`` (repeats), else the row itself (one run); a table with
    repeats but no counts (saved before them) has its ``reached`` and whether any run diverged."""
    label = str(row["label"])
    if label in given:
        return {k: int(v) for k, v in given[label].items()}
    reps = row.get("repeats")
    n = 1 if reps is None or pd.isna(reps) else int(reps)
    reached, diverged, failed = _run_ended(row)
    if n == 1:
        return {"runs": 1, "reached": int(reached), "diverged": int(diverged), "failed": int(failed)}
    has_time = _num(row.get("time_to_target_s")) is not None
    got = int(reached_given[label]) if label in reached_given else (n if has_time else 0)
    status = str(row.get("status"))
    ok = int(status.split("/")[0]) if "/" in status and status.split("/")[0].isdigit() else (n if status == "ok" else 0)
    return {"runs": n, "reached": got, "diverged": int(bool(row.get("diverged"))), "failed": n - ok}


def _reach(c: Mapping[str, int]) -> str:
    if c["reached"] >= c["runs"] and not c["diverged"] and not c["failed"]:
        return REACHED
    if c["reached"]:
        return SOME
    if c["diverged"]:
        return DIVERGED
    return FAILED if c["failed"] >= c["runs"] else NEVER


def outcomes_of(table: pd.DataFrame) -> tuple[SettingOutcome, ...]:
    """One :class:`SettingOutcome` per row of a comparison table (or its repeats' aggregate), in order."""
    given = table.attrs.get("counts") or {}
    reached_given = table.attrs.get("reached") or {}
    out = []
    for row in table.to_dict("records"):
        c = _counts(row, given, reached_given)
        time = _num(row.get("time_to_target_s"))
        mb = _num(row.get("steps_to_target"))
        rate, wall = _num(row.get("steps_per_s")), _num(row.get("wall_s"))
        total = rate * wall if rate and wall else None
        workers = _num(row.get("workers"))
        lo, hi = _num(row.get("time_to_target_s_min")), _num(row.get("time_to_target_s_max"))
        on = row.get("diverged_on")
        o = SettingOutcome(label=str(row["label"]), reach=_reach(c), runs=c["runs"], reached_runs=c["reached"],
                    diverged_runs=c["diverged"], failed_runs=c["failed"],
                    diverged_on=str(on) if isinstance(on, str) else ("training" if c["diverged"] else None),
                    time_s=time, time_lo=time if lo is None else lo, time_hi=time if hi is None else hi,
                    minibatches=mb, total=total, workers=None if workers is None else int(workers))
        share, per_worker = o.share, o.per_worker
        early = share is not None and share < EARLY_SHARE
        short = not early and per_worker is not None and per_worker < EARLY_PER_WORKER
        out.append(SettingOutcome(**{**o.__dict__, "early": early, "short": short}))
    return tuple(out)
