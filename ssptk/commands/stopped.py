"""What a command stopped half-way had written (:func:`left_behind`), from the directories it claimed while it went
(:func:`recording`): what the front ends name when a signal stops a command."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

__all__ = ["Left", "left_behind", "recording"]


def recording(into: list[str]) -> contextlib.AbstractContextManager[list[str]]:
    """A ``with`` during which every directory this process claims is appended to ``into``
    (:func:`ssptk.rundir.claim.recording_claims`): what a command had written when a signal stopped it."""
    from ssptk.rundir.claim import recording_claims

    return recording_claims(into)


@dataclass(frozen=True)
class Left:
    """What a command stopped half-way had written: ``run_dir``, the last run directory it claimed (``None``:
    none), whether that run had started (``config.json``), and its ``summary.json``'s status (``None``: none)."""

    run_dir: str | None = None
    started: bool = False
    status: str | None = None


def left_behind(claimed: list[str]) -> Left:
    """:class:`Left` by the directories a command claimed, in order (:func:`recording`): the last one that no
    other lies under (a comparison's last run, not the comparison)."""
    import os

    from ssptk.rundir import RunDir

    runs = [p for p in claimed if not any(q.startswith(os.path.join(p, "")) for q in claimed)]
    if not runs:
        return Left()
    rd = RunDir(runs[-1])
    status = rd.summary().status
    return Left(rd.path, os.path.exists(rd.config_path), status if isinstance(status, str) else None)
