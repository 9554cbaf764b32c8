"""What of a run directory cannot be read: one line per file, for readers that go on with the rest.

``ssptk report`` prints these lines and builds the report from what it could read; it never repairs or
rewrites a file (the run directory is the run's record, see ``docs/run-directory.md``).
"""
from __future__ import annotations

import json
import os
from typing import Any

from ssptk.rundir.layout import RunDir
from ssptk.rundir.logs import RunLogReader

__all__ = ["unreadable"]


def _load(path: str) -> tuple[Any, str]:
    """The JSON value in ``path`` and ``""``, or ``None`` and why it could not be read."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f), ""
    except OSError as e:
        return None, e.strerror or type(e).__name__
    except (ValueError, UnicodeDecodeError):
        return None, "not JSON (truncated, or not ssptk's)"


def _config_problem(obj: Any) -> str:
    if not isinstance(obj, dict):
        return "not a JSON object"
    options = obj.get("options")
    if not isinstance(options, dict):
        return "it has no run options"
    bad = [k for k in ("workers", "steps") if not (isinstance(options.get(k), int) and options[k] > 0)]
    if not isinstance(options.get("mode"), str):
        bad.insert(0, "mode")
    return f"its options {', '.join(bad)} cannot be read" if bad else ""


def _final_problem(obj: Any) -> str:
    if not isinstance(obj, dict):
        return "not a JSON object"
    bad = [k for k in ("params", "variables") if k in obj and not isinstance(obj[k], dict)]
    return f"its {', '.join(bad)} {'is' if len(bad) == 1 else 'are'} not a JSON object" if bad else ""


def unreadable(run_dir: str | os.PathLike[str]) -> list[str]:
    """One line per file of the run directory that could not be read whole: a JSON file that is not what
    the contract says (``config.json``, ``summary.json``, ``model/final.json``; a missing one is not a
    problem), or a worker log with lines that were skipped. ``[]`` for an intact run."""
    rd = RunDir(run_dir)
    checks = ((rd.config_path, _config_problem),
              (rd.summary_path, lambda o: "" if isinstance(o, dict) else "not a JSON object"),
              (rd.final_path, _final_problem))
    lines = []
    for path, problem in checks:
        if not os.path.exists(path):
            continue
        obj, why = _load(path)
        why = why or problem(obj)
        if why:
            lines.append(f"{path}: {why}: skipped")
    reader = RunLogReader(rd.path)
    reader.read_new()
    for path, n in reader.skipped_lines().items():
        lines.append(f"{path}: {n} line{'s' if n != 1 else ''} skipped (not a record as docs/run-directory.md "
                     "describes it)")
    return lines
