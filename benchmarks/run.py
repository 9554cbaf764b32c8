#!/usr/bin/env python
"""ssptk benchmarks: ratios measured side by side in one invocation, each against its target.

    python benchmarks/run.py                 # every benchmark, 3 alternating repeats
    python benchmarks/run.py --quick         # smoke check: fewer steps, 1 repeat, RESULTS.md untouched
    python benchmarks/run.py --only ssp_nonbinding_vs_async --repeat 5

This is a measurement, not a test: it exits 0 when a target is missed, but says MISSED; it exits 1 when a
benchmark raised (that benchmark's section of RESULTS.md is then left as it was). Results are
printed as a table and written to ``benchmarks/RESULTS.md`` (each benchmark's section is replaced;
sections of benchmarks not run this time are kept).

Throughput is always the run's own ``summary["steps_per_s"]``, which runs from the start barrier to
the last step, so TensorFlow start-up is not in it. Configurations compared with each other are run
in alternation (A, B, A, B, ...) so that slow phases of a noisy machine hit all of them alike.

This file only lists the benchmarks, runs the chosen ones and writes the results. Adding a benchmark:
write ``def bench_xxx(ctx: Context) -> list[Row]`` in a ``bench_*.py`` module, with its helpers (the
context, rows, targets) from ``harness.py``, and append it to :data:`BENCHMARKS` here.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import importlib.metadata
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench_engine import bench_ssp_nonbinding_vs_async, bench_warm_rerun
from bench_floor import bench_async_floor
from bench_fork_server_soak import bench_fork_server_soak
from bench_implicit_momentum import bench_implicit_momentum
from bench_layouts import bench_scale_layouts
from bench_network import bench_network, bench_network_predicted
from bench_network_sweep import bench_network_sweep
from bench_notebook import bench_dashboard_overhead, bench_dashboard_overhead_64
from bench_predict import bench_predict_speed, bench_predicted_vs_real, bench_predicted_vs_real_semi_sync
from bench_ps_pause import bench_ps_pause
from bench_semi_sync import bench_semi_sync
from bench_sim import bench_sim_speed, bench_sim_vs_real
from bench_soak import bench_soak
from bench_start_scale import bench_cold_start, bench_logging_on_off, bench_scale_workers
from bench_suite_loaded import bench_suite_loaded
from bench_trace import bench_trace
from bench_tradeoff import bench_tradeoff
from harness import HERE, Context, Row

RESULTS = os.path.join(HERE, "RESULTS.md")
NOISE_NOTE = (
    "The machine is shared and noisy (another engineer's tests may run at the same time, and the "
    "2-core VM has no CPU isolation): single figures can move by 10-30% between back-to-back runs. "
    "Compare ratios from alternating repeats (median and best), not absolute steps/s across days."
)

#: Every benchmark, in the order they run.
BENCHMARKS: list[Callable[[Context], list[Row]]] = [
    bench_ssp_nonbinding_vs_async,
    bench_sim_vs_real,
    bench_sim_speed,
    bench_warm_rerun,
    bench_dashboard_overhead,
    bench_dashboard_overhead_64,
    bench_logging_on_off,
    bench_cold_start,
    bench_scale_workers,
    bench_scale_layouts,
    bench_async_floor,
    bench_tradeoff,
    bench_semi_sync,
    bench_soak,
    bench_fork_server_soak,
    bench_ps_pause,
    bench_predict_speed,
    bench_predicted_vs_real,
    bench_predicted_vs_real_semi_sync,
    bench_network,
    bench_network_predicted,
    bench_network_sweep,
    bench_trace,
    bench_suite_loaded,
    bench_implicit_momentum,
]


def bench_name(fn: Callable[..., Any]) -> str:
    """A benchmark's name, as ``--only`` and RESULTS.md spell it: ``bench_xxx`` -> ``xxx``."""
    return fn.__name__.removeprefix("bench_")


@dataclass
class Section:
    """What one benchmark produced: its rows and free-form detail lines (markdown) for RESULTS.md."""

    name: str
    rows: list[Row]
    detail: list[str] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None
    started: str = ""
    ended: str = ""
    load: str = ""  # load average (1, 5, 15 min) at start / at end



# --- machine ------------------------------------------------------------------------------------------

def machine_info() -> dict[str, str]:
    info: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            cpuinfo = f.read()
        models = re.findall(r"^model name\s*:\s*(.+)$", cpuinfo, re.M)
        info["cpu"] = models[0].strip() if models else platform.processor() or "unknown"
        info["logical cores"] = str(len(re.findall(r"^processor\s*:", cpuinfo, re.M)))
    except OSError:
        info["cpu"] = platform.processor() or "unknown"
        info["logical cores"] = str(os.cpu_count())
    try:
        info["nproc"] = subprocess.run(["nproc"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        info["nproc"] = str(len(os.sched_getaffinity(0)))
    try:
        with open("/proc/meminfo") as f:
            kb = int(re.search(r"^MemTotal:\s+(\d+)", f.read(), re.M).group(1))  # type: ignore[union-attr]
        info["RAM"] = f"{kb / 1024 / 1024:.1f} GiB"
    except (OSError, AttributeError):
        info["RAM"] = "unknown"
    info["python"] = platform.python_version()
    for pkg in ("tensorflow", "ssptk"):
        try:
            info[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            info[pkg] = "not installed"
    info["os"] = f"{platform.system()} {platform.release()}"
    try:
        commit = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", os.path.dirname(HERE), "status", "--porcelain", "--", ".",
                                ":(exclude)benchmarks"],
                               capture_output=True, text=True, timeout=10).stdout
        changed = [line[3:] for line in dirty.splitlines() if not line.startswith("??")]
        info["commit"] = (commit or "unknown") + (f" + uncommitted changes to {', '.join(changed)}" if changed else "")
    except (OSError, subprocess.SubprocessError):
        info["commit"] = "unknown"
    return info


def now() -> str:
    return _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")


def loadavg() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "n/a"


# --- output -------------------------------------------------------------------------------------------

def print_table(sections: list[Section]) -> None:
    rows = [r for s in sections for r in s.rows]
    w = max([len(r.name) for r in rows] + [4])
    print()
    print(f"{'name':<{w}}  {'value':>10}  {'target':<8}  result")
    print(f"{'-' * w}  {'-' * 10}  {'-' * 8}  ------")
    for r in rows:
        print(f"{r.name:<{w}}  {r.value_text():>10}  {(r.target.text if r.target else '-'):<8}  {r.verdict}")
    for s in sections:
        if s.error:
            print(f"\n{s.name}: ERROR {s.error}")
    missed = [r.name for r in rows if r.verdict in ("MISSED", "FAILED")]
    broken = [s.name for s in sections if s.error]
    print()
    if missed:
        print(f"MISSED / FAILED ({len(missed)}): " + "; ".join(missed))
    if broken:
        print(f"RAISED ({len(broken)}, not measured; their RESULTS.md sections kept as they were): "
              + "; ".join(broken))
    if not missed and not broken:
        print("all targets met")


def section_markdown(s: Section, machine: str, argv: str, repeat: int) -> str:
    lines = [f"<!-- bench:{s.name} -->", f"## {s.name}", "",
             f"Measured {s.started} to {s.ended} on {machine}; `{argv}`, {repeat} alternating round(s), "
             f"{s.seconds:.0f} s in all; load average (1/5/15 min) at start / end: {s.load}.", ""]
    lines += ["| name | value | target | result |", "|---|---:|---|---|"]
    for r in s.rows:
        verdict = f"**{r.verdict}**" if r.verdict in ("MISSED", "FAILED") else r.verdict
        lines.append(f"| {r.name} | {r.value_text()} | {r.target.text if r.target else '-'} | {verdict} |")
    if s.detail:
        # a detail line is a bullet, unless it is part of a markdown table (or a blank line around one)
        lines += [""] + [d if d.startswith("|") or not d else f"- {d}" for d in s.detail]
    lines += ["", f"<!-- /bench:{s.name} -->"]
    return "\n".join(lines)


def write_results(sections: list[Section], info: dict[str, str], argv: str, repeat: int) -> None:
    old = ""
    if os.path.exists(RESULTS):
        with open(RESULTS) as f:
            old = f.read()
    kept = {name: text for text, name in re.findall(r"(<!-- bench:(\w+) -->.*?<!-- /bench:\2 -->)", old, re.S)}
    when = now()
    machine_short = f"{info['cpu']}, nproc {info['nproc']}, {info['RAM']}"
    new = {s.name: section_markdown(s, machine_short, argv, repeat) for s in sections}
    order = [bench_name(fn) for fn in BENCHMARKS]
    order += [n for n in kept if n not in order]
    head = ["# ssptk benchmarks", "",
            "Written by `python benchmarks/run.py` (see its docstring); each benchmark's section is replaced "
            "when it runs, so sections may date from different runs.", "",
            f"> **Note:** {NOISE_NOTE}", "",
            "One-off measurements (A/B of engine changes, simulator against real runs) and what they led to "
            "are in [FINDINGS.md](FINDINGS.md).", "",
            f"## Machine (last run: {when})", "",
            "| | |", "|---|---|"]
    head += [f"| {k} | {v} |" for k, v in info.items()]
    body = [new.get(n) or kept.get(n) for n in order]
    text = "\n".join(head) + "\n\n" + "\n\n".join(b for b in body if b) + "\n"
    with open(RESULTS, "w") as f:
        f.write(text)


# --- main ---------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    names = [bench_name(fn) for fn in BENCHMARKS]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=None, metavar="R",
                   help="alternating rounds per benchmark (default 3, or 1 with --quick)")
    p.add_argument("--quick", action="store_true", help="fewer steps and 1 round: a smoke check (RESULTS.md untouched)")
    p.add_argument("--only", action="append", choices=names, metavar="NAME",
                   help=f"run only this benchmark (repeatable): {', '.join(names)}")
    p.add_argument("--no-write", action="store_true", help="do not update RESULTS.md")
    args = p.parse_args(argv)
    if args.repeat is None:
        args.repeat = 1 if args.quick else 3
    if args.repeat < 1:
        p.error("--repeat must be >= 1")
    write = not (args.no_write or args.quick)
    chosen = [fn for fn in BENCHMARKS if not args.only or bench_name(fn) in args.only]
    cmdline = " ".join(["python benchmarks/run.py"] + (sys.argv[1:] if argv is None else argv))

    info = machine_info()
    print("machine: " + ", ".join(f"{k} {v}" for k, v in info.items()), flush=True)
    print(f"note: {NOISE_NOTE}", flush=True)
    tmp = tempfile.mkdtemp(prefix="ssptk-bench-")
    sections: list[Section] = []
    try:
        ctx = Context(args, tmp)
        for fn in chosen:
            name = bench_name(fn)
            print(f"\n== {name} ==", flush=True)
            ctx.detail = []
            started, load0, t0 = now(), loadavg(), time.perf_counter()
            try:
                rows, error = fn(ctx), None
            except Exception as e:  # noqa: BLE001 - one broken benchmark must not lose the others
                traceback.print_exc()
                rows, error = [], f"{type(e).__name__}: {e}"
            sections.append(Section(name, rows, list(ctx.detail), time.perf_counter() - t0, error,
                                    started, now(), f"{load0} / {loadavg()}"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print_table(sections)
    measured = [s for s in sections if not s.error]  # a benchmark that raised measured nothing: keep what was there
    if write and measured:
        write_results(measured, info, cmdline, args.repeat)
        print(f"\nwrote {os.path.relpath(RESULTS)}")
    elif not write:
        print("\n(RESULTS.md not updated: --quick or --no-write)")
    return 1 if len(measured) < len(sections) else 0


if __name__ == "__main__":
    sys.exit(main())
