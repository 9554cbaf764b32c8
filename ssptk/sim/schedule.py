"""A simulated run's schedule as the event loops write it: its step records, in the order they happen, and the skew.

:class:`Record` is one step record as a loop knows it (the step count and the loss are not its to say),
:class:`Finish` a worker that will do no more steps; :class:`Schedule` counts each worker's steps
(:class:`Counts`) as records arrive and turns them into the DataFrame of a run's step records once, at the end.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from ssptk.core.records import INT_STEP_COLUMNS, STEP_COLUMNS

__all__ = ["COLUMNS", "Counts", "Finish", "Record", "Schedule"]

#: The columns of a simulated schedule: those of a real run's step records.
COLUMNS = STEP_COLUMNS


class Record(NamedTuple):
    """One step record: worker ``worker``'s step landed at ``t`` as update ``global_step`` (or was dropped,
    ``applied`` False) after waiting ``wait_s``, ``staleness`` updates behind, on ``minibatch``, its injected delay
    ``delay_s``. ``local_round``, ``local_step``: local SGD's round and the local steps since its last average
    (``None`` elsewhere). Its ``step`` is counted by the :class:`Schedule`; no loss is modelled."""

    t: float
    worker: int
    global_step: int
    wait_s: float
    staleness: int
    minibatch: int
    delay_s: float
    applied: bool
    local_round: int | None = None
    local_step: int | None = None


class Finish(NamedTuple):
    """Worker ``worker`` does no more steps from ``t`` on."""

    t: float
    worker: int


class Counts:
    """Completed-step counts per worker, with the min and max over unfinished workers in O(1) amortised.

    Counts only ever grow by one, so the minimum can only move up by one when its last holder moves;
    only a worker leaving (finishing) can make the maximum go down.
    """

    def __init__(self, n: int) -> None:
        self.c = [0] * n
        self.live = [True] * n
        self.n_live = n
        self.freq: dict[int, int] = {0: n}
        self.lo = 0
        self.hi = 0

    def bump(self, i: int) -> None:
        """Worker ``i`` completed one more step."""
        c = self.c[i]
        self.c[i] = c + 1
        if not self.live[i]:
            return
        f = self.freq
        f[c] -= 1
        if f[c] == 0:
            del f[c]
            if c == self.lo:
                self.lo = c + 1
        f[c + 1] = f.get(c + 1, 0) + 1
        if c + 1 > self.hi:
            self.hi = c + 1

    def finish(self, i: int) -> None:
        """Worker ``i`` will do no more steps: it no longer holds anyone back nor counts for the skew."""
        if not self.live[i]:
            return
        self.live[i] = False
        self.n_live -= 1
        c = self.c[i]
        f = self.freq
        f[c] -= 1
        if f[c] == 0:
            del f[c]
        if self.n_live == 0:
            return
        while self.lo not in f:
            self.lo += 1
        while self.hi not in f:
            self.hi -= 1

    @property
    def skew(self) -> int:
        return self.hi - self.lo if self.n_live else 0


class Schedule:
    """The step records of ``n`` workers in the order they happen, each one's step count, and the skew after
    every change (a record or a finish). ``local``: the records carry local SGD's ``local_round``."""

    def __init__(self, n: int, local: bool = False) -> None:
        self.records: list[Record] = []
        self.step: list[int] = []  # each record's worker's completed steps, itself included
        self.counts = Counts(n)
        self.local = local
        self.tl_t: list[float] = []
        self.tl_skew: list[int] = []

    def add(self, record: Record) -> None:
        """Take the next record: its worker completed one more step."""
        cnt = self.counts
        w = record.worker
        cnt.bump(w)
        self.records.append(record)
        self.step.append(cnt.c[w])
        self.tl_t.append(record.t)
        self.tl_skew.append(cnt.hi - cnt.lo if cnt.n_live else 0)  # cnt.skew, without a call: once a record

    def finish(self, event: Finish) -> None:
        """Take a worker's finish: it no longer counts for the skew."""
        self.counts.finish(event.worker)
        self.tl_t.append(event.t)
        self.tl_skew.append(self.counts.skew)

    def max_skew(self) -> int:
        """The largest skew after any step record, peaks between records at the same time included (which
        :meth:`timeline`, one row per distinct time, does not show)."""
        return max(self.tl_skew, default=0)

    def frame(self) -> pd.DataFrame:
        """The step records as a DataFrame with :data:`COLUMNS` (then ``local_round``, ``local_step``) and fixed
        dtypes."""
        n = len(self.records)
        values: dict[str, tuple[Any, ...]] = (dict(zip(Record._fields, zip(*self.records))) if n
                                              else dict.fromkeys(Record._fields, ()))
        values["step"] = tuple(self.step)
        data = {c: np.fromiter(values[c], np.int64 if c in INT_STEP_COLUMNS else bool if c == "applied" else float, n)
                for c in COLUMNS if c != "loss"}
        data["loss"] = np.full(n, np.nan)
        df = pd.DataFrame(data, columns=list(COLUMNS))
        if self.local:  # the runtime's local SGD records carry them
            df["local_round"] = np.fromiter(values["local_round"], np.int64, n)
            df["local_step"] = np.fromiter(values["local_step"], np.int64, n)
        return df

    def timeline(self) -> pd.DataFrame:
        """Skew as a step function: one row per distinct time (the state after all changes at it), from t=0."""
        t = np.asarray(self.tl_t, dtype=float)
        s = np.asarray(self.tl_skew, dtype=np.int64)
        if len(t):
            last = np.append(t[1:] != t[:-1], True)
            t, s = t[last], s[last]
        if not len(t) or t[0] > 0:
            t, s = np.append(0.0, t), np.append(0, s).astype(np.int64)
        return pd.DataFrame({"t": t, "skew": s})
