"""A worker's mean step as a partition: transfer, wait, compute and other, each second of the step counted once.

What is measured overlaps: a process's CPU clock runs while its tensors are serialised and sent, and allreduce's
``wait_s`` (the time in the all-reduce call) holds the collective's own transfer. So the parts are taken in one
order, each given at most what the ones before it left of the step:

1. **transfer**, the time the worker's own tensors were on the wire. *Timed* (sync, ssp, async on CPU workers,
   under ``--network``): on the traced steps (every 10th, the step records' ``transfer_s``, which counts no
   second in which the worker computed), the share of their time *not blocked by the mode* (their ``t`` less the
   worker's previous ``t``, less their ``wait_s``) in which some tensor of theirs was on its way; times the run's
   share not blocked (1 - ``wait_fraction``). The wait is measured on every step and the transfer on one in ten,
   and a worker that waits less at a barrier spends more of its step on the wire (its pull queued behind the
   others'), so the sample gives the transfer's share of the unblocked time rather than of the whole step.
   *Estimated* elsewhere (local SGD, allreduce, GPU workers): the step's own bytes at the rate of the narrowest
   shaped link they cross (:func:`ssptk.analysis.traffic.traffic_summary`), a floor; capped at the whole step;
2. **wait**, what the mode blocked (``wait_fraction``, measured on every step). In the parameter-server modes
   and local SGD the worker's own tensors are not on the wire while it is blocked (sync and local: from its push
   landing on the PS to the aggregate being applied; ssp: before its step's run), so nothing is taken off. In
   allreduce the all-reduce call holds the collective's transfer: wait is the call less the transfer (waiting for
   the peers, and the collective's time above the estimate's floor);
3. **compute**, the workers' own CPU seconds per step, up to what is left (CPU spent serialising tensors and in
   the RPC threads while they were on the wire is already transfer or wait);
4. **other**: the rest: the PS's work, waiting for a core, start-up of a step's run, evaluations, and where the
   transfer is an estimate, its queueing behind the other workers' transfers on a shared link above the floor
   (allreduce: that is wait). A part that was not measured (compute in the shared layout's one process; transfer
   without a shaped link) is in other, and named.

:func:`step_split` is the one owner of this rule: ``summary.json`` keeps its shares (``traffic.split``) and the
terminal, the report and the dashboard word them.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from ssptk.rundir import Summary, TrafficSection

__all__ = ["PARTS", "StepSplit", "blocked_share", "partition", "split_of", "step_split", "unblocked_transfer"]

#: The parts of a worker's step, in the order each takes its time.
PARTS: tuple[str, ...] = ("transfer", "wait", "compute", "other")


@dataclass(frozen=True, slots=True)
class StepSplit:
    """A worker's mean step of ``step_ms`` as shares that add up to 1 (``None``: not measured, its time in
    ``other``). ``timed_steps``: the traced steps the transfer was timed on (0: estimated, a floor); ``ring``:
    allreduce (the wait holds the collective's transfer); ``cpu``: the workers' CPU share before it was cut to
    what transfer and wait left."""

    step_ms: float
    transfer: float | None
    wait: float | None
    compute: float | None
    other: float
    timed_steps: int = 0
    ring: bool = False
    cpu: float | None = None

    def shares(self) -> dict[str, float | None]:
        """The four shares by name, in :data:`PARTS` order (what ``summary.json``'s ``traffic.split`` holds)."""
        return {part: getattr(self, part) for part in PARTS}

    @property
    def estimated(self) -> bool:
        """Whether the transfer is an estimate from bytes and rates (a floor), not timed."""
        return self.transfer is not None and not self.timed_steps

    @property
    def unmeasured(self) -> tuple[str, ...]:
        """The parts not measured, whose time is in ``other``."""
        return tuple(p for p in PARTS[:3] if getattr(self, p) is None)

    @property
    def cpu_overlap(self) -> float:
        """The workers' CPU share that fell within transfer or wait (cut from compute; 0 where none was)."""
        return 0.0 if self.cpu is None or self.compute is None else max(0.0, self.cpu - self.compute)


def _share(x: float | None) -> float | None:
    return None if x is None else min(1.0, max(0.0, float(x)))


def partition(transfer: float | None, wait: float | None, cpu: float | None,
              ring: bool) -> tuple[float | None, float | None, float | None, float]:
    """``(transfer, wait, compute, other)`` shares of a step, each second once, from what was measured as shares
    of it (each may overlap the others): transfer first, then wait (allreduce: less the transfer it holds), then
    compute, then the rest."""
    t, w, c = _share(transfer), _share(wait), _share(cpu)
    left = 1.0 - (t or 0.0)
    if w is not None:
        w = min(left, max(0.0, w - t) if ring and t is not None else w)
        left -= w
    if c is not None:
        c = min(left, c)
        left -= c
    return t, w, c, max(0.0, left)


def unblocked_transfer(steps: pd.DataFrame | None) -> float | None:
    """On the traced steps (those with ``transfer_s``), the share of their unblocked time in which their tensors
    were on the wire: sum of ``transfer_s`` over the sum of each step's time less its ``wait_s`` (a step's time:
    its ``t`` less its worker's previous ``t``; never less than its ``transfer_s``). ``None`` without a traced
    step that follows another."""
    if steps is None or steps.empty or "transfer_s" not in steps or not steps["transfer_s"].notna().any():
        return None
    df = steps.sort_values(["worker", "step"])
    dt = df.groupby("worker")["t"].diff()
    x = df["transfer_s"]
    ok = x.notna() & dt.notna() & (dt > 0)
    if not ok.any():
        return None
    unblocked = (dt[ok] - df.loc[ok, "wait_s"].fillna(0.0)).clip(lower=x[ok])
    total = float(unblocked.sum())
    return float(x[ok].sum()) / total if total > 0 else None


def blocked_share(summary: Summary, wait_fraction: float | None = None) -> float | None:
    """The share of a worker's time the mode blocked it, as every view shows it (the table's ``wait``, a run's
    summary lines, the report's cost panel): the step split's ``wait`` where the run has one (``summary.json``'s
    ``traffic.split``; it differs from the measured ``wait_fraction`` in allreduce only, whose all-reduce call holds
    the collective's transfer, which the split counts as transfer), else the measured ``wait_fraction`` (default:
    the summary's)."""
    split = summary.traffic.split if summary.traffic else None
    wait = split.get("wait") if split else None
    if wait is not None:
        return float(wait)
    return summary.wait_fraction if wait_fraction is None else wait_fraction


def split_of(traffic: TrafficSection, unblocked: float | None) -> dict[str, float | None]:
    """The shares ``summary.json`` keeps (``traffic.split``) for a ``traffic`` section with ``step_ms``, given
    :func:`unblocked_transfer` of the run's step records (``None``, a summary without its records: the timed
    transfer as its mean over the step, at most the share the mode did not block)."""
    wait = _ms_share(traffic, traffic.wait_ms)
    transfer = _ms_share(traffic, traffic.transfer_ms)
    if transfer is not None and traffic.transfer_timed_steps:
        unblocked_share = 1.0 - (_share(wait) or 0.0)
        transfer = min(transfer, unblocked_share) if unblocked is None else unblocked * unblocked_share
    t, w, c, o = partition(transfer, wait, _ms_share(traffic, traffic.compute_ms), _ring(traffic))
    return {"transfer": t, "wait": w, "compute": c, "other": o}


def _ms_share(traffic: TrafficSection, ms: float | None) -> float | None:
    return None if ms is None or not traffic.step_ms else float(ms) / float(traffic.step_ms)


def _ring(traffic: TrafficSection) -> bool:
    """Allreduce: counters of workers' links only, no PS task."""
    tasks = traffic.tasks
    return bool(tasks) and not any(str(t).startswith("ps:") for t in tasks)


def step_split(traffic: Mapping[str, Any] | None) -> StepSplit | None:
    """The step split of a summary's ``traffic`` section: its ``split`` shares, or for a run written before
    ``summary.json`` kept them, the same rule applied to its ``*_ms`` figures (a timed transfer as its mean over
    the step, at most the share the mode did not block); ``None`` for a section without ``step_ms``."""
    section = TrafficSection.maybe(traffic)
    if section is None or not section.step_ms:
        return None
    kept = section.split
    shares = kept if isinstance(kept, Mapping) and "other" in kept else split_of(section, None)
    return StepSplit(step_ms=float(section.step_ms), transfer=shares.get("transfer"), wait=shares.get("wait"),
                     compute=shares.get("compute"), other=float(shares.get("other") or 0.0),
                     timed_steps=int(section.transfer_timed_steps or 0), ring=_ring(section),
                     cpu=_ms_share(section, section.compute_ms))
