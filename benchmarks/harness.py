"""What every benchmark shares: the run context, result rows and their targets, and small helpers.

``run.py`` lists the benchmarks (``bench_*.py``), runs the chosen ones and writes ``RESULTS.md``; each
benchmark module imports its helpers from here, and this module imports no benchmark.

A benchmark is ``def bench_xxx(ctx: Context) -> list[Row]``. ``ctx.alternate({...}, repeat)`` runs labelled
configurations in alternation and returns their summaries; :class:`Row` is one line of the final table
(``target=None`` means "reported for information only"). ``ctx.run(label, observer=..., inspect=...,
**options)`` follows a run with a :class:`ssptk.api.RunObserver` and reads its run directory
(``inspect(run_dir, summary)`` returns extra summary keys) before the directory is deleted.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: This folder (``benchmarks/``).
HERE = os.path.dirname(os.path.abspath(__file__))
# Benchmark the checkout this file is in, not whatever ssptk is installed: a `pip install .` from
# another clone once made a whole benchmark run measure old code (the tasks import the launcher's ssptk).
sys.path.insert(0, os.path.dirname(HERE))


# --- rows and targets -----------------------------------------------------------------------------

@dataclass
class Target:
    """A target like ``>= 0.95``; ``check`` says whether a value meets it."""

    text: str
    check: Callable[[float], bool]


def at_least(x: float) -> Target:
    """Met by a value at least ``x``."""
    return Target(f">= {x:g}", lambda v: v >= x)


def at_most(x: float) -> Target:
    """Met by a value at most ``x``."""
    return Target(f"<= {x:g}", lambda v: v <= x)


def more_than(x: float) -> Target:
    """Met by a value above ``x``."""
    return Target(f"> {x:g}", lambda v: v > x)


@dataclass
class Row:
    """One line of the result table. ``value`` None means the measurement failed."""

    name: str
    value: float | None
    target: Target | None = None
    fmt: str = ".3f"
    note: str = ""

    @property
    def verdict(self) -> str:
        if self.value is None:
            return "FAILED"
        if self.target is None:
            return "info"
        return "PASS" if self.target.check(self.value) else "MISSED"

    def value_text(self) -> str:
        return "n/a" if self.value is None else format(self.value, self.fmt)


# --- running ----------------------------------------------------------------------------------------

class Context:
    """Shared by every benchmark: options, the temp directory for run dirs, and a run helper."""

    def __init__(self, args: argparse.Namespace, tmp: str) -> None:
        self.args = args
        self.quick: bool = args.quick
        self.repeat: int = args.repeat
        self.tmp = tmp
        self._n = 0
        self.detail: list[str] = []  # detail lines of the benchmark being run

    def note(self, line: str) -> None:
        self.detail.append(line)

    def run(self, label: str, *, observer: Any = None,
            inspect: Callable[[str, dict[str, Any]], dict[str, Any] | None] | None = None,
            **options: Any) -> dict[str, Any]:
        """One real run (PS + workers) with ``options``; returns its summary (status 'failed' on error).

        ``observer``: a :class:`ssptk.api.RunObserver` that follows the run (e.g. to sample memory).
        ``inspect(run_dir, summary)``: called once the run has ended and before its directory is
        deleted (also for a failed run); the keys of the dict it returns are added to the summary
        (its ``"line"``, if any, is printed under the run's own line).
        """
        from ssptk import api

        self._n += 1
        out = os.path.join(self.tmp, f"{self._n:03d}-{re.sub(r'[^A-Za-z0-9_.-]', '-', label)}")
        options.setdefault("gpus", "none")
        t0 = time.perf_counter()
        try:
            summary = dict(api.run(out=out, raise_on_failure=False, observer=observer, **options).summary)
        except Exception as e:  # noqa: BLE001 - a failed run is reported, the benchmark goes on
            summary = {"status": "failed", "reason": f"{type(e).__name__}: {e}"}
        summary["total_s"] = time.perf_counter() - t0
        if inspect is not None and os.path.isdir(out):
            try:
                summary.update(inspect(out, summary) or {})
            except Exception as e:  # noqa: BLE001 - the run's own figures still count
                summary["inspect_error"] = f"{type(e).__name__}: {e}"
                print(f"    {label:<10} inspect failed: {summary['inspect_error']}", flush=True)
        if summary.get("status") == "ok":
            print(f"    {label:<10} {fmt_value(summary.get('steps_per_s'), '8.1f')} steps/s  "
                  f"train {fmt_value(summary.get('wall_s'), '.2f')} s  (whole run {summary['total_s']:.1f} s)  "
                  f"wait {fmt_value(summary.get('wait_fraction'), '.3f')}  skew {summary.get('max_skew')}",
                  flush=True)
        else:
            print(f"    {label:<10} FAILED: {summary.get('reason')}", flush=True)
        if summary.get("line"):
            print(f"    {'':<10} {summary.pop('line')}", flush=True)
        shutil.rmtree(out, ignore_errors=True)  # keep the temp dir small as we go
        return summary

    def alternate(self, configs: dict[str, dict[str, Any]],
                  repeat: int | None = None) -> dict[str, list[dict[str, Any]]]:
        """Run every labelled configuration once per round, ``repeat`` rounds, in ABBA order (the
        order reverses every other round): whatever runs first in a round had a measurable edge here."""
        repeat = self.repeat if repeat is None else repeat
        results: dict[str, list[dict[str, Any]]] = {label: [] for label in configs}
        for r in range(repeat):
            print(f"  round {r + 1}/{repeat}", flush=True)
            order = list(configs.items())
            for label, opts in (order if r % 2 == 0 else order[::-1]):
                results[label].append(self.run(label, **opts))
        return results


def rates(summaries: list[dict[str, Any]], key: str = "steps_per_s") -> list[float]:
    """The ``key`` values of the successful runs."""
    return [float(s[key]) for s in summaries if s.get("status") == "ok" and s.get(key) is not None]


def median(xs: list[float]) -> float | None:
    """The median, or ``None`` for no values."""
    return statistics.median(xs) if xs else None


def best(xs: list[float]) -> float | None:
    """The largest value, or ``None`` for no values."""
    return max(xs) if xs else None


def ratio(a: float | None, b: float | None) -> float | None:
    """``a / b``, or ``None`` when either is missing (or ``b`` is 0)."""
    return a / b if a is not None and b else None


def fmt_value(v: Any, fmt: str) -> str:
    """``v`` formatted with ``fmt``, or ``n/a`` when it is missing."""
    return "n/a" if v is None else format(v, fmt)


def values_line(label: str, summaries: list[dict[str, Any]], key: str = "steps_per_s", fmt: str = ".1f") -> str:
    """``label: v1, v2, ...``: each run's ``key`` (``FAILED`` for a run that failed)."""
    vals = [fmt_value(s.get(key), fmt) if s.get("status") == "ok" else "FAILED" for s in summaries]
    return f"{label}: " + ", ".join(vals)


def ok_or_none(summaries: list[dict[str, Any]]) -> list[float | None]:
    """Each run's steps/s, ``None`` for a run that failed: for per-round ratios."""
    return [float(s["steps_per_s"]) if s.get("status") == "ok" and s.get("steps_per_s") else None for s in summaries]


def opts_text(opts: dict[str, Any]) -> str:
    """Options as the CLI would spell them: ``--workers 3 --steps 300 ...``."""
    return " ".join(f"--{k.replace('_', '-')} {v}" for k, v in opts.items())
