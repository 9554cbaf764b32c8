"""Writes a worker's JSONL log: one ``os.write`` of one whole line per record, so every line on disk is
complete or absent (line-atomic with O_APPEND) and readers can follow the file while it grows."""
from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from typing import Any

from ssptk.core.records import StepRecord, json_line
from ssptk.rundir.space import disk_full, is_disk_full


class Recorder:
    """Appends records to ``path``; ``enabled=False`` keeps only events (for overhead benchmarks). ``on_step``
    gets every step record, written or not (the delay model paces a replayed trace by them)."""

    def __init__(self, path: str, worker: int, enabled: bool = True,
                 on_step: Callable[[StepRecord], None] | None = None) -> None:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.worker = worker
        self.enabled = enabled
        self.cpu_s = 0.0  # this thread's CPU spent writing step records (the `done` event reports it)
        #: called with every step record, written or not (the delay model paces a replayed trace by them)
        self.on_step = on_step

    def _write(self, line: str) -> None:
        data = line.encode()
        done = 0
        try:
            while done < len(data):  # a full disk first takes part of a line, then refuses the rest
                done += os.write(self._fd, data[done:])
        except OSError as e:
            if done:  # take the partial line back: the file holds whole lines only
                with contextlib.suppress(OSError):
                    os.ftruncate(self._fd, os.fstat(self._fd).st_size - done)
            if is_disk_full(e):
                raise disk_full(self.path) from None
            raise

    def step(self, record: StepRecord) -> None:
        """Append one step record (nothing with ``enabled=False``); its CPU cost counts in :attr:`cpu_s`."""
        if self.on_step is not None:
            self.on_step(record)
        if not self.enabled:
            return
        c0 = time.thread_time()  # per thread: TF's own threads keep running meanwhile
        self._write(record.json_line())
        self.cpu_s += time.thread_time() - c0

    def event(self, event: str, **fields: Any) -> None:
        """Append an event record: ``{"event", "t" (now), "worker", **fields}``."""
        self._write(json_line({"event": event, "t": time.time(), "worker": self.worker, **fields}))

    def close(self) -> None:
        os.close(self._fd)

