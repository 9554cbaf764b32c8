"""Reading a run directory's logs (see ``docs/run-directory.md``).

Three layers:

* :class:`JsonlTail` follows one growing JSONL file, returning only what was appended since the
  last call (it keeps a byte offset and never re-parses what it has already read).
* :class:`RunLogReader` follows every ``workers/worker-<i>.jsonl`` of a run directory, including
  files that appear later, and splits records into step records and event records.
* :func:`read_run` and :func:`load_run` read a (finished) run once.

Nothing here imports TensorFlow or plotting libraries.
"""
from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any

import pandas as pd

from ssptk.core.printable import printable
from ssptk.core.records import INT_STEP_COLUMNS, STEP_COLUMNS, upgraded
from ssptk.rundir.config_file import RunConfig
from ssptk.rundir.contract import MAX_LINE_BYTES, MAX_LOG_BYTES, MAX_WORKERS, NotRegular, open_regular, valid_record
from ssptk.rundir.layout import RunDir
from ssptk.rundir.summary_file import Summary

__all__ = [
    "STEP_COLUMNS",
    "EVENT_COLUMNS",
    "JsonlTail",
    "RunLogReader",
    "read_run",
    "load_run",
    "steps_to_frame",
    "events_to_frame",
]

#: The keys every event record has (events may carry more, e.g. ``steps`` or ``message``).
EVENT_COLUMNS: tuple[str, ...] = ("event", "t", "worker")

_WORKER_FILE = re.compile(r"^worker-(\d{1,9})\.jsonl$")
_CHUNK = 16 * 2**20  # bytes of a log read at once
_TEXT_KEYS = ("event", "message", "task")


class JsonlTail:
    """Incremental reader of one growing JSONL file.

    ``read_new()`` returns the records appended since the previous call. A missing file reads as
    empty; a last line without its newline yet (still being written) is left for the next call. A
    complete line that is not a JSON object is skipped and counted in :attr:`bad_lines`. If the
    file shrinks (it was replaced or truncated) reading starts again from its beginning. Only a regular
    file is read (anything else is :attr:`problem`), in chunks, up to
    :data:`~ssptk.rundir.contract.MAX_LOG_BYTES`; a line longer than
    :data:`~ssptk.rundir.contract.MAX_LINE_BYTES` is skipped.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        #: Byte offset of the first byte not consumed yet (always just after a newline).
        self.offset = 0
        #: Complete lines that were skipped because they were not a JSON object.
        self.bad_lines = 0
        #: Why the file could not be read (whole), e.g. ``a FIFO, not a regular file``; ``None``: it could.
        self.problem: str | None = None
        self._in_long_line = False  # skipping the rest of a line longer than MAX_LINE_BYTES

    def read_new(self) -> list[dict[str, Any]]:
        """Return the complete records appended since the last call (possibly none)."""
        try:
            f = open_regular(self.path)
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as e:
            self.problem = e.strerror if isinstance(e, NotRegular) else (e.strerror or type(e).__name__)
            return []
        records: list[dict[str, Any]] = []
        with f:
            size = os.fstat(f.fileno()).st_size
            if size < self.offset:
                self.offset, self._in_long_line = 0, False
            self.problem = f"larger than {MAX_LOG_BYTES // 2**20} MiB: read up to there" if size > MAX_LOG_BYTES \
                else None
            while self.offset < min(size, MAX_LOG_BYTES):
                f.seek(self.offset)
                data = f.read(min(_CHUNK, MAX_LOG_BYTES - self.offset))
                if not self._take(data, records):
                    break
        return records

    def _take(self, data: bytes, records: list[dict[str, Any]]) -> bool:
        """Parse the complete lines at the start of ``data`` (read at :attr:`offset`) into ``records`` and move
        past them; ``False`` when nothing was complete (the rest is a line still being written)."""
        end = data.rfind(b"\n")
        if end < 0:
            if len(data) < MAX_LINE_BYTES:
                return False
            if not self._in_long_line:
                self.bad_lines += 1
            self.offset, self._in_long_line = self.offset + len(data), True
            return True
        self.offset += end + 1
        lines = data[: end + 1].split(b"\n")
        if self._in_long_line:  # the end of the long line: already counted
            lines, self._in_long_line = lines[1:], False
        self._parse(lines, records)
        return True

    def _parse(self, lines: list[bytes], records: list[dict[str, Any]]) -> None:
        for line in lines:
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except (ValueError, RecursionError):  # JSONDecodeError, UnicodeDecodeError; nested too deep
                self.bad_lines += 1
                continue
            if isinstance(obj, dict) and len(line) <= MAX_LINE_BYTES:
                records.append(obj)
            else:
                self.bad_lines += 1

    def __repr__(self) -> str:
        return f"JsonlTail({str(self.path)!r}, offset={self.offset}, bad_lines={self.bad_lines})"


def _time_key(record: dict[str, Any]) -> float:
    t = record.get("t")
    if isinstance(t, (int, float)) and not isinstance(t, bool) and not math.isnan(t):
        return float(t)
    return math.inf


def steps_to_frame(records: list[dict[str, Any]]) -> pd.DataFrame:
    """Build a step DataFrame from step records: every contract column present, sorted by ``t``.

    Missing ``applied`` values default to True (the contract says it is false only for dropped
    backup gradients); integer columns are kept integer when they have no gaps.
    """
    if not records:
        frame = pd.DataFrame({c: pd.Series(dtype="float64") for c in STEP_COLUMNS})
        frame["worker"] = frame["worker"].astype("int64")
        frame["step"] = frame["step"].astype("int64")
        frame["applied"] = frame["applied"].astype(bool)
        return frame
    frame = pd.DataFrame.from_records(records)
    for col in STEP_COLUMNS:
        if col not in frame.columns:
            frame[col] = True if col == "applied" else float("nan")
    frame["applied"] = frame["applied"].fillna(True).astype(bool)
    for col in INT_STEP_COLUMNS:
        if frame[col].notna().all():
            try:
                frame[col] = frame[col].astype("int64")
            except (TypeError, ValueError):
                pass
    extra = [c for c in frame.columns if c not in STEP_COLUMNS]
    frame = frame[list(STEP_COLUMNS) + extra]
    return frame.sort_values("t", kind="mergesort").reset_index(drop=True)


def events_to_frame(records: list[dict[str, Any]]) -> pd.DataFrame:
    """Build an event DataFrame (``event``, ``t``, ``worker``, then extra keys), sorted by ``t``."""
    if not records:
        return pd.DataFrame({"event": pd.Series(dtype=object), "t": pd.Series(dtype="float64"),
                             "worker": pd.Series(dtype="int64")})
    frame = pd.DataFrame.from_records(records)
    for col in EVENT_COLUMNS:
        if col not in frame.columns:
            frame[col] = float("nan")
    extra = [c for c in frame.columns if c not in EVENT_COLUMNS]
    frame = frame[list(EVENT_COLUMNS) + extra]
    return frame.sort_values("t", kind="mergesort").reset_index(drop=True)


class RunLogReader:
    """Follows all ``workers/worker-<i>.jsonl`` files of one run directory while the run goes on.

    Each ``read_new()`` looks for new worker files, reads what was appended to every file and
    returns ``(new_step_records, new_event_records)`` (a record with an ``event`` key is an event),
    each sorted by ``t``. Everything read so far is kept as plain lists; :meth:`steps_frame` and
    :meth:`events_frame` build DataFrames from them on demand (cached until more records arrive).
    """

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.run_dir = Path(run_dir)
        self._tails: dict[int, JsonlTail] = {}
        self._steps: list[dict[str, Any]] = []
        self._events: list[dict[str, Any]] = []
        self._steps_cache: tuple[int, pd.DataFrame] | None = None
        self._events_cache: tuple[int, pd.DataFrame] | None = None
        self._invalid: dict[int, int] = {}

    @property
    def workers_dir(self) -> Path:
        """The ``workers/`` folder of the run directory."""
        return Path(RunDir(self.run_dir).workers_dir)

    @property
    def workers(self) -> list[int]:
        """Indices of the worker files discovered so far."""
        return sorted(self._tails)

    @property
    def bad_lines(self) -> int:
        """Complete lines skipped, over all worker files: invalid JSON, or a JSON object without a numeric
        ``t`` and an integer ``worker``."""
        return sum(self.skipped_lines().values())

    def skipped_lines(self) -> dict[str, int]:
        """Complete lines skipped so far, per worker file that had any (path -> count)."""
        counts = {str(tail.path): tail.bad_lines + self._invalid.get(i, 0) for i, tail in self._tails.items()}
        return {path: n for path, n in sorted(counts.items()) if n}

    def problems(self) -> dict[str, str]:
        """Worker files that could not be read (whole) so far, path -> why: not a regular file, too large."""
        return {str(tail.path): tail.problem for _, tail in sorted(self._tails.items()) if tail.problem}

    def _discover(self) -> None:
        try:
            names = os.listdir(self.workers_dir)
        except OSError:  # none yet, or not a directory (ssptk.rundir.check says so), or not readable
            return
        for name in names:
            m = _WORKER_FILE.match(name)
            if m and int(m.group(1)) < MAX_WORKERS and int(m.group(1)) not in self._tails:
                self._tails[int(m.group(1))] = JsonlTail(self.workers_dir / name)

    def read_new(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Return ``(steps, events)`` appended since the last call, each sorted by ``t``."""
        self._discover()
        steps: list[dict[str, Any]] = []
        events: list[dict[str, Any]] = []
        for index in sorted(self._tails):
            for record in self._tails[index].read_new():
                if not valid_record(record):  # not a record as the contract has it: skipped, counted
                    self._invalid[index] = self._invalid.get(index, 0) + 1
                    continue
                for key in _TEXT_KEYS:  # what an event says is shown: no control characters in it
                    if isinstance(text := record.get(key), str) and not text.isprintable():
                        record[key] = printable(text)
                (events if "event" in record else steps).append(record if "event" in record else upgraded(record))
        steps.sort(key=_time_key)
        events.sort(key=_time_key)
        self._steps.extend(steps)
        self._events.extend(events)
        return steps, events

    @property
    def n_steps(self) -> int:
        """Number of step records read so far."""
        return len(self._steps)

    def steps_frame(self) -> pd.DataFrame:
        """All step records read so far, sorted by ``t`` (see :func:`steps_to_frame`)."""
        if self._steps_cache is None or self._steps_cache[0] != len(self._steps):
            self._steps_cache = (len(self._steps), steps_to_frame(self._steps))
        return self._steps_cache[1].copy()

    def events_frame(self) -> pd.DataFrame:
        """All event records read so far as a DataFrame sorted by ``t``."""
        if self._events_cache is None or self._events_cache[0] != len(self._events):
            self._events_cache = (len(self._events), events_to_frame(self._events))
        return self._events_cache[1].copy()


def read_run(run_dir: str | os.PathLike[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Read every worker log of a run directory once: ``(steps, events)``, each sorted by ``t``."""
    reader = RunLogReader(run_dir)
    reader.read_new()
    return reader.steps_frame(), reader.events_frame()


def load_run(
    run_dir: str | os.PathLike[str],
) -> tuple[pd.DataFrame, pd.DataFrame, RunConfig, Summary]:
    """Load a run directory: ``(steps, events, config, summary)``.

    ``config`` / ``summary`` (:class:`~ssptk.rundir.config_file.RunConfig`, :class:`~ssptk.rundir.summary_file.Summary`)
    are empty when ``config.json`` / ``summary.json`` are missing (a run
    still going, or one that died before writing them).
    """
    steps, events = read_run(run_dir)
    rd = RunDir(run_dir)
    return steps, events, rd.config(), rd.summary()
