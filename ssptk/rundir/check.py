"""What of a run directory cannot be read: one line per file, for readers that go on with the rest.

``ssptk report`` prints these lines and builds the report from what it could read; it never repairs or
rewrites a file (the run directory is the run's record, see ``docs/run-directory.md``). The readers
themselves (:class:`~ssptk.rundir.RunDir`, :class:`~ssptk.rundir.logs.RunLogReader`) hold every file to the
contract (:mod:`ssptk.rundir.contract`) and leave out what is not as documented; each line here names a file
that lost something that way, and says what.
"""
from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

from ssptk.rundir.comparison import ComparisonDir
from ssptk.rundir.contract import MAX_WORKERS, check_config, check_final, check_summary, check_traffic, load_json
from ssptk.rundir.layout import RunDir
from ssptk.rundir.logs import RunLogReader

__all__ = ["unreadable", "unreadable_comparison"]

_INDEXED = re.compile(r"^worker-(\d+)\.jsonl$")


def _listing(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def unreadable_comparison(path: str | os.PathLike[str]) -> list[str]:
    """One line for a comparison's ``metrics.csv`` that is there but cannot be read (the runs are then ordered
    by name); the runs' own files are :func:`unreadable`'s."""
    cd = ComparisonDir(path)
    why = cd.read_listed_labels()[1]
    return [f"{cd.metrics_path}: {why}: skipped"] if why else []


def unreadable(run_dir: str | os.PathLike[str]) -> list[str]:
    """One line per file of the run directory that could not be read whole: a JSON file that is not what
    the contract says (``config.json``, ``summary.json``, ``model/final.json``, ``traffic.json``; a missing one
    is not a problem), or a worker log that is not a regular file, is too large, or has lines that were
    skipped. ``[]`` for an intact run."""
    rd = RunDir(run_dir)
    checks: tuple[tuple[str, Callable[[Any], tuple[dict[str, Any], str]]], ...] = (
        (rd.config_path, check_config), (rd.summary_path, check_summary), (rd.final_path, check_final),
        (rd.traffic_path, check_traffic))
    lines = []
    for path, check in checks:
        obj, why = load_json(path)
        if why == "missing":
            continue
        why = why or check(obj)[1]
        if why:  # a part left out or escaped says so; anything else skipped the whole file (or its options)
            lines.append(f"{path}: {why}" + ("" if why.endswith(("left out", "shown escaped")) else ": skipped"))
    if os.path.lexists(rd.workers_dir) and not os.path.isdir(rd.workers_dir):
        lines.append(f"{rd.workers_dir}: not a directory: skipped")
    lines += [f"{os.path.join(rd.workers_dir, name)}: a worker index of {MAX_WORKERS} or more: skipped"
              for name in _listing(rd.workers_dir) if (m := _INDEXED.match(name)) and
              (len(m.group(1)) > 9 or int(m.group(1)) >= MAX_WORKERS)]
    reader = RunLogReader(rd.path)
    reader.read_new()
    problems, skipped = reader.problems(), reader.skipped_lines()
    for path in sorted(set(problems) | set(skipped)):
        said = [problems[path]] if path in problems else []
        n = skipped.get(path, 0)
        said += [f"{n} line{'s' if n != 1 else ''} skipped (not a record as docs/run-directory.md describes it)"] \
            if n else []
        whole = path in problems and "read up to" not in problems[path]
        lines.append(f"{path}: {'; '.join(said)}" + (": skipped" if whole else ""))
    return lines
