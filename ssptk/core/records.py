"""The step record (one line of a worker's JSONL log per minibatch, ``docs/run-directory.md``) and the one rule
that turns a record into a JSON line: NaN and infinities become ``null``.

It lives in :mod:`ssptk.core` rather than :mod:`ssptk.rundir` because the simulator, which may import ``core``
only, gives its schedules in the same columns; the runtime's recorder and predicted-run writer, and the log
reader's column list (:data:`ssptk.rundir.logs.STEP_COLUMNS`), all take them from here. Standard library only:
every task imports it.
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

__all__ = ["INT_STEP_COLUMNS", "OPTIONAL_STEP_COLUMNS", "STEP_COLUMNS", "StepRecord", "finite_or_null", "json_line",
           "upgraded"]


def finite_or_null(x: Any) -> float | None:
    """``x`` as a float JSON can hold: NaN, infinities and ``None`` are ``None`` (``null``; strict JSON has no
    token for them). Every number ssptk writes into a run directory goes through here."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def json_line(record: Mapping[str, Any]) -> str:
    """One record (step or event) as the JSONL logs hold it: compact JSON and a newline."""
    return json.dumps(record, separators=(",", ":")) + "\n"


@dataclass(frozen=True, slots=True, kw_only=True)
class StepRecord:
    """One minibatch a worker computed, as its log records it (the meaning of each field:
    ``docs/run-directory.md``). ``loss`` may be NaN or infinite here; the JSON line has ``null``."""

    t: float
    worker: int
    step: int
    global_step: int
    loss: float | None
    wait_s: float
    staleness: int
    minibatch: int
    delay_s: float
    applied: bool = True
    #: only with ``--lr-staleness inverse`` (absent from the line otherwise)
    lr_scale: float | None = None
    #: only in local SGD runs: the averaging round the step's delta joins (1-based)
    local_round: int | None = None
    #: only in local SGD runs: the local steps the worker took since the last average, before this one (0..H-1)
    local_step: int | None = None
    #: only with ``--lr-staleness dc``: the delay compensation's size relative to the gradient's
    dc_correction: float | None = None
    #: only on a sample of steps under ``--network`` (ssptk.runtime.step_trace): seconds its tensors were on the wire
    transfer_s: float | None = None
    #: only in ssp and async (PS modes): seconds from ps:0's read of the step's global step to its update's landing
    read_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The record as its JSON object: keys in :data:`STEP_COLUMNS` order (then ``lr_scale`` if set), plain
        Python numbers, the loss ``None`` when not finite, ``wait_s`` and ``delay_s`` to the microsecond."""
        record: dict[str, Any] = {
            "t": float(self.t), "worker": int(self.worker), "step": int(self.step),
            "global_step": int(self.global_step), "loss": finite_or_null(self.loss),
            "wait_s": round(float(self.wait_s), 6), "staleness": int(self.staleness),
            "minibatch": int(self.minibatch), "delay_s": round(float(self.delay_s), 6), "applied": bool(self.applied)}
        if self.lr_scale is not None:
            record["lr_scale"] = float(self.lr_scale)
        if self.local_round is not None:
            record["local_round"] = int(self.local_round)
        if self.local_step is not None:
            record["local_step"] = int(self.local_step)
        if self.dc_correction is not None:
            record["dc_correction"] = float(self.dc_correction)
        if self.transfer_s is not None:
            record["transfer_s"] = round(float(self.transfer_s), 6)
        if self.read_s is not None:
            record["read_s"] = round(float(self.read_s), 6)
        return record

    def json_line(self) -> str:
        """The record's line in ``workers/worker-<i>.jsonl`` (with its newline)."""
        return json_line(self.to_dict())


#: Step-record keys that only some runs have.
OPTIONAL_STEP_COLUMNS: tuple[str, ...] = ("lr_scale", "local_round", "local_step", "dc_correction", "transfer_s",
                                          "read_s")
#: The step-record keys every record has, in order: the columns of step DataFrames, real, predicted or simulated.
STEP_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(StepRecord) if f.name not in OPTIONAL_STEP_COLUMNS)
#: The integer ones among them.
INT_STEP_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(StepRecord) if f.type in ("int", int))


def upgraded(record: dict[str, Any]) -> dict[str, Any]:
    """A step record as the contract's version 2 has it (``ssptk.rundir.contract.CONTRACT_VERSION``). Version 1's
    local SGD records (``local_round`` and no ``local_step``) kept the local steps since the last average in
    ``staleness``: here they are ``local_step``, and ``staleness`` what it is in every mode, the updates (rounds)
    the step's delta missed: 0, or for a dropped late delta the rounds applied since its own began
    (``global_step - local_round + 1``). Other records are returned as they are."""
    if "local_round" not in record or "local_step" in record:
        return record
    applied = record.get("applied", True)
    round_, global_step = record.get("local_round"), record.get("global_step")
    missed = global_step - round_ + 1 if isinstance(round_, int) and isinstance(global_step, int) else 0
    return {**record, "local_step": record.get("staleness"), "staleness": 0 if applied else max(0, missed)}
