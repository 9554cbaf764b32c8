"""The run directory: the contract between the tasks that write a run and everything that reads it.

Layer 1 (above :mod:`ssptk.core`): :class:`RunDir` knows every path (``docs/run-directory.md``) and is
the only writer of ``config.json``, ``summary.json`` and ``model/final.json``; :mod:`ssptk.rundir.logs`
reads the workers' JSONL logs into pandas. May import :mod:`ssptk.core` only; every layer above may
import it (the task runtime writes into it, the launcher, analysis and front ends read it).

The log readers are imported on first use: the tasks import this package, and must not pay for pandas.
"""
from __future__ import annotations

from typing import Any

from ssptk.rundir.layout import USER_MODEL_FILE, RunDir, read_json, task_log_name

__all__ = ["USER_MODEL_FILE", "JsonlTail", "RunDir", "RunLogReader", "load_run", "read_json", "read_run",
           "task_log_name"]

_READERS = ("JsonlTail", "RunLogReader", "load_run", "read_run")


def __getattr__(name: str) -> Any:
    if name in _READERS:
        from ssptk.rundir import logs

        return getattr(logs, name)
    raise AttributeError(f"module 'ssptk.rundir' has no attribute {name!r}")
