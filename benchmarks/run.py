#!/usr/bin/env python
"""ssptk benchmarks: ratios measured side by side in one invocation, each against its target.

    python benchmarks/run.py                 # every benchmark, 3 alternating repeats
    python benchmarks/run.py --quick         # smoke check: fewer steps, 1 repeat, RESULTS.md untouched
    python benchmarks/run.py --only ssp_nonbinding_vs_async --repeat 5

This is a measurement, not a test: it exits 0 when a target is missed, but says MISSED. Results are
printed as a table and written to ``benchmarks/RESULTS.md`` (each benchmark's section is replaced;
sections of benchmarks not run this time are kept).

Throughput is always the run's own ``summary["steps_per_s"]``, which runs from the start barrier to
the last step, so TensorFlow start-up is not in it. Configurations compared with each other are run
in alternation (A, B, A, B, ...) so that slow phases of a noisy machine hit all of them alike.

Adding a benchmark: write ``def bench_xxx(ctx: Context) -> list[Row]`` and append it to
:data:`BENCHMARKS`. ``ctx.alternate({...}, repeat)`` runs labelled configurations in alternation and
returns their summaries; :class:`Row` is one line of the final table (``target=None`` means
"reported for information only"). ``ctx.run(label, observer=..., inspect=..., **options)`` follows a
run with a :class:`ssptk.api.RunObserver` and reads its run directory (``inspect(run_dir, summary)``
returns extra summary keys) before the directory is deleted; ``bench_start_scale.py`` (logging on/off,
cold start, scaling) uses both through its ``Probe``.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import importlib.metadata
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "RESULTS.md")
# Benchmark the checkout this file is in, not whatever ssptk is installed: a `pip install .` from
# another clone once made a whole benchmark run measure old code (the tasks import the launcher's ssptk).
sys.path.insert(0, os.path.dirname(HERE))
NOISE_NOTE = (
    "The machine is shared and noisy (another engineer's tests may run at the same time, and the "
    "2-core VM has no CPU isolation): single figures can move by 10-30% between back-to-back runs. "
    "Compare ratios from alternating repeats (median and best), not absolute steps/s across days."
)


# --- rows and targets -----------------------------------------------------------------------------

@dataclass
class Target:
    """A target like ``>= 0.95``; ``check`` says whether a value meets it."""

    text: str
    check: Callable[[float], bool]


def at_least(x: float) -> Target:
    return Target(f">= {x:g}", lambda v: v >= x)


def at_most(x: float) -> Target:
    return Target(f"<= {x:g}", lambda v: v <= x)


def more_than(x: float) -> Target:
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
            print(f"    {label:<10} {_f(summary.get('steps_per_s'), '8.1f')} steps/s  "
                  f"train {_f(summary.get('wall_s'), '.2f')} s  (whole run {summary['total_s']:.1f} s)  "
                  f"wait {_f(summary.get('wait_fraction'), '.3f')}  skew {summary.get('max_skew')}",
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
    return statistics.median(xs) if xs else None


def best(xs: list[float]) -> float | None:
    return max(xs) if xs else None


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _f(v: Any, fmt: str) -> str:
    return "n/a" if v is None else format(v, fmt)


def values_line(label: str, summaries: list[dict[str, Any]], key: str = "steps_per_s", fmt: str = ".1f") -> str:
    vals = [_f(s.get(key), fmt) if s.get("status") == "ok" else "FAILED" for s in summaries]
    return f"{label}: " + ", ".join(vals)


# --- benchmarks ---------------------------------------------------------------------------------------

def bench_ssp_nonbinding_vs_async(ctx: Context) -> list[Row]:
    """SSP whose bound never binds costs (almost) nothing over async: target >= 0.95 of async's steps/s."""
    common = dict(model="linear", workers=3, steps=300 if ctx.quick else 1500, seed=0)
    configs = {"async": dict(common, mode="async"), "ssp:1000": dict(common, mode="ssp", staleness=1000)}
    ctx.note(f"Options: {opts_text(common)}, no delays; async vs ssp staleness 1000 "
             f"(never binds), alternating, {ctx.repeat} round(s).")
    res = ctx.alternate(configs)
    a, s = rates(res["async"]), rates(res["ssp:1000"])
    ctx.note("steps/s of each run, in order: " + "; ".join(values_line(k, v) for k, v in res.items()))
    pairs = [ratio(y, x) for x, y in zip(_ok_or_none(res["async"]), _ok_or_none(res["ssp:1000"]))]
    ctx.note("per-round ratio ssp/async: " + ", ".join(_f(p, ".3f") for p in pairs))
    waits = rates(res["ssp:1000"], "wait_fraction")
    ctx.note("ssp:1000 wait_fraction (should be 0: the bound never binds): " + ", ".join(f"{w:.4f}" for w in waits))
    walls = [_f(x.get("wall_s"), ".2f") for x in res["async"] + res["ssp:1000"]]
    ctx.note("training seconds per run (async runs, then ssp runs): " + ", ".join(walls))
    n = "ssp_nonbinding_vs_async"
    return [
        Row(f"{n}: ratio of medians", ratio(median(s), median(a)), at_least(0.95)),
        Row(f"{n}: ratio of bests", ratio(best(s), best(a)), at_least(0.95)),
        Row(f"{n}: async median steps/s", median(a), fmt=".1f"),
        Row(f"{n}: ssp:1000 median steps/s", median(s), fmt=".1f"),
        Row(f"{n}: async best steps/s", best(a), fmt=".1f"),
        Row(f"{n}: ssp:1000 best steps/s", best(s), fmt=".1f"),
        # CPU per minibatch while training (all tasks): steadier than steps/s when the machine is shared,
        # and on 2 cores the tasks are CPU-bound, so steps/s goes as its inverse.
        Row(f"{n}: CPU per minibatch, async/ssp (medians)",
            ratio(median(rates(res["async"], "cpu_ms_per_step")), median(rates(res["ssp:1000"], "cpu_ms_per_step"))),
            at_least(0.95), fmt=".3f"),
        Row(f"{n}: async CPU ms per minibatch (median)", median(rates(res["async"], "cpu_ms_per_step")), fmt=".3f"),
        Row(f"{n}: ssp:1000 CPU ms per minibatch (median)", median(rates(res["ssp:1000"], "cpu_ms_per_step")),
            fmt=".3f"),
    ]


def bench_warm_rerun(ctx: Context) -> list[Row]:
    """Time from ``run()`` to the first step: a cold cluster against warm re-runs on the same tasks
    (what ``%dtrain`` does from the second run on). Target: a warm re-run reaches its first step in <= 1.5 s."""
    from ssptk.launch import warm

    common = dict(model="linear", workers=3, steps=40 if ctx.quick else 100, seed=0)
    cold, hot = [], []
    for r in range(ctx.repeat):
        print(f"  round {r + 1}/{ctx.repeat}", flush=True)
        warm.shutdown()
        cold.append(ctx.run("cold", mode="ssp", staleness=2, **common))
        hot.append(ctx.run("warm-first", mode="ssp", staleness=2, warm=True, **common))  # starts the warm cluster
        for s in (0, 4, 8):
            hot.append(ctx.run(f"warm-ssp:{s}", mode="ssp", staleness=s, warm=True, **common))
        warm.shutdown()
    cold_t = rates(cold, "first_step_s")
    warm_t = rates([h for h in hot if h.get("warm_reused")], "first_step_s")
    ctx.note(f"Options: {opts_text(common)}. Per round: one cold run, then one warm run that starts the warm "
             "cluster (not counted as warm), then staleness 0, 4, 8 on it.")
    ctx.note("cold first_step_s: " + ", ".join(f"{v:.2f}" for v in cold_t))
    ctx.note("warm re-run first_step_s: " + ", ".join(f"{v:.3f}" for v in warm_t))
    n = "warm_rerun"
    return [
        Row(f"{n}: warm re-run time to first step, median (s)", median(warm_t), at_most(1.5), fmt=".3f"),
        Row(f"{n}: warm re-run time to first step, worst (s)", max(warm_t) if warm_t else None, at_most(1.5),
            fmt=".3f"),
        Row(f"{n}: cold run time to first step, median (s)", median(cold_t), fmt=".2f"),
        Row(f"{n}: cold / warm (medians)", ratio(median(cold_t), median(warm_t)), fmt=".1f"),
    ]


# Logging on/off, cold start against bare TensorFlow imports, and scaling 1..8 workers live in
# bench_start_scale.py; the modes under jitter against the simulator in bench_sim.py. They import
# this module's helpers as ``run``, so this module is registered
# under that name first (it runs as ``__main__``) and imported only here, once they all exist.
if HERE not in sys.path:
    sys.path.insert(0, HERE)
sys.modules.setdefault("run", sys.modules[__name__])
from bench_floor import bench_async_floor  # noqa: E402
from bench_layouts import bench_scale_layouts  # noqa: E402
from bench_notebook import bench_dashboard_overhead, bench_dashboard_overhead_64  # noqa: E402
from bench_predict import bench_predict_speed, bench_predicted_vs_real  # noqa: E402
from bench_sim import bench_sim_vs_real  # noqa: E402
from bench_soak import bench_soak  # noqa: E402
from bench_start_scale import bench_cold_start, bench_logging_on_off, bench_scale_workers  # noqa: E402
from bench_tradeoff import bench_tradeoff  # noqa: E402

#: Every benchmark, in the order they run.
BENCHMARKS: list[Callable[[Context], list[Row]]] = [
    bench_ssp_nonbinding_vs_async,
    bench_sim_vs_real,
    bench_warm_rerun,
    bench_dashboard_overhead,
    bench_dashboard_overhead_64,
    bench_logging_on_off,
    bench_cold_start,
    bench_scale_workers,
    bench_scale_layouts,
    bench_async_floor,
    bench_tradeoff,
    bench_soak,
    bench_predict_speed,
    bench_predicted_vs_real,
]


def bench_name(fn: Callable[..., Any]) -> str:
    return fn.__name__.removeprefix("bench_")


def _ok_or_none(summaries: list[dict[str, Any]]) -> list[float | None]:
    return [float(s["steps_per_s"]) if s.get("status") == "ok" and s.get("steps_per_s") else None for s in summaries]


def opts_text(opts: dict[str, Any]) -> str:
    return " ".join(f"--{k.replace('_', '-')} {v}" for k, v in opts.items())


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
    print()
    if missed:
        print(f"MISSED / FAILED ({len(missed)}): " + "; ".join(missed))
    else:
        print("all targets met")


def section_markdown(s: Section, machine: str, argv: str, repeat: int) -> str:
    lines = [f"<!-- bench:{s.name} -->", f"## {s.name}", "",
             f"Measured {s.started} to {s.ended} on {machine}; `{argv}`, {repeat} alternating round(s), "
             f"{s.seconds:.0f} s in all; load average (1/5/15 min) at start / end: {s.load}.", ""]
    if s.error:
        lines += [f"**ERROR:** `{s.error}`", ""]
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
    if write:
        write_results(sections, info, cmdline, args.repeat)
        print(f"\nwrote {os.path.relpath(RESULTS)}")
    else:
        print("\n(RESULTS.md not updated: --quick or --no-write)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
