"""The run directory: the contract between the tasks that write a run and everything that reads it.

Above :mod:`ssptk.core` (CONTRIBUTING.md has the layers): :class:`RunDir` knows every path
(``docs/run-directory.md``) and is the only writer of ``config.json``, ``summary.json`` and
``model/final.json``; ``summary.json`` and ``config.json`` are read as typed objects (:class:`Summary`,
:class:`RunConfig`: readers use attributes, only this package knows the keys); :class:`ComparisonDir` knows a
comparison's (its runs, ``metrics.csv``, ``report.html``);
:mod:`ssptk.rundir.logs` reads the workers' JSONL logs into pandas (the step record itself,
:class:`ssptk.core.records.StepRecord`, is in core: the simulator gives its schedules in the same columns). May
import :mod:`ssptk.core` only; every layer above may import it (the task runtime writes into it, the launcher,
analysis and front ends read it).

The log readers are imported on first use: the tasks import this package, and must not pay for pandas.
"""
from __future__ import annotations

from typing import Any

from ssptk.rundir import trace as _trace  # noqa: F401  (installs the reader of --jitter trace:PATH)
from ssptk.rundir.comparison import ComparisonDir
from ssptk.rundir.config_file import RunConfig, StoredOptions, TaskInfo
from ssptk.rundir.layout import USER_MODEL_FILE, RunDir, read_json, recorded_cores, task_log_name
from ssptk.rundir.model_files import FinalModel, LinkTraffic, TaskBytes
from ssptk.rundir.summary_file import Predicted, Summary, TrafficSection

__all__ = ["USER_MODEL_FILE", "ComparisonDir", "FinalModel", "JsonlTail", "LinkTraffic", "Predicted", "RunConfig",
           "RunDir", "RunLogReader", "StoredOptions", "Summary", "TaskBytes", "TaskInfo", "TrafficSection",
           "load_run", "read_json", "read_run", "recorded_cores", "task_log_name"]

_READERS = ("JsonlTail", "RunLogReader", "load_run", "read_run")


def __getattr__(name: str) -> Any:
    if name in _READERS:
        from ssptk.rundir import logs

        return getattr(logs, name)
    raise AttributeError(f"module 'ssptk.rundir' has no attribute {name!r}")
