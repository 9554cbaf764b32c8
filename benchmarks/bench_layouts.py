"""The scale curve of both layouts (``--layout processes`` and ``--layout shared``), 1 to 64 workers:
start-up (``run()`` to the first step), peak memory of all the run's task processes (RSS, and PSS once
mid-training), and steps/s, for async and ssp:2. Writes ``benchmarks/scale_layouts.png``.

Listed in ``run.py``'s ``BENCHMARKS``. Targets (issue 13): 32 workers start in under 30 s and stay
under 3 GB RSS; 64 workers run.
"""
from __future__ import annotations

import os
import threading
import time
from typing import Any

from harness import HERE, Context, Row, at_most, fmt_value, median, rates, ratio

MB = 1024 * 1024
COUNTS = (1, 2, 4, 8, 16, 32, 64)
QUICK_COUNTS = (1, 4, 16)
#: The processes layout stops here: each task is a TensorFlow process of ~280 MB PSS (~640 MB RSS), so 64
#: of them (~18 GB PSS) would leave this 23 GB machine too little for anything else.
PROCESSES_MAX = 32
MINIBATCHES = 4000  # per run, whatever the worker count (at least 20 steps per worker): seconds of training
PLOT = os.path.join(HERE, "scale_layouts.png")


class TreeMemory:
    """A run observer that samples the RSS of every process of the run (its task processes, found by the
    run directory in their command line) every 0.5 s in a thread, and their PSS once, as training begins."""

    def __init__(self) -> None:
        self.run_dir = ""
        self.peak_rss = 0
        self.pss: int | None = None
        self._half = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def started(self, run_dir: str, opts: Any, total: int) -> None:
        self.run_dir, self.peak_rss, self.pss, self._half = os.path.abspath(run_dir), 0, None, False
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def records(self, steps: list[dict[str, Any]], events: list[dict[str, Any]], done: int, total: int) -> None:
        self._half = self._half or bool(steps)  # training has begun: every graph and session exists

    def finished(self, result: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _procs(self) -> list[Any]:
        import psutil

        out = []
        for p in psutil.process_iter(["cmdline"]):
            cmd = p.info.get("cmdline") or []
            if "ssptk.worker" in cmd and any(self.run_dir in a for a in cmd):
                out.append(p)
        return out

    def _loop(self) -> None:
        procs: list[Any] = []
        while not self._stop.wait(0.5):
            if not procs or self.pss is None:
                procs = self._procs() or procs
            rss = 0
            for p in procs:
                try:
                    rss += p.memory_info().rss
                except Exception:  # noqa: BLE001 - exited
                    continue
            self.peak_rss = max(self.peak_rss, rss)
            if self._half and self.pss is None and procs:
                sizes = [_pss(p.pid) for p in procs]
                if None not in sizes:  # else one exited meanwhile: the run is ending, no honest total
                    self.pss = sum(s for s in sizes if s is not None)

    def inspect(self, run_dir: str, summary: dict[str, Any]) -> dict[str, Any]:
        return {"peak_rss_mb": self.peak_rss / MB if self.peak_rss else None,
                "pss_mb": None if self.pss is None else self.pss / MB}


def _pss(pid: int) -> int | None:
    """A process's PSS in bytes from ``/proc/PID/smaps_rollup`` (one read, unlike parsing ``smaps``)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def bench_scale_layouts(ctx: Context) -> list[Row]:
    """Both layouts from 1 to 64 workers (processes to 32): start-up, memory and steps/s; the PNG plot."""
    import os

    chosen = os.environ.get("SSPTK_BENCH_LAYOUT_COUNTS")  # e.g. "4,8,16": a part of the sweep
    counts = QUICK_COUNTS if ctx.quick else tuple(int(n) for n in chosen.split(",")) if chosen else COUNTS
    modes = {"async": dict(mode="async"), "ssp:2": dict(mode="ssp", staleness=2)}
    probe = TreeMemory()
    configs: dict[str, dict[str, Any]] = {}
    for n in counts:
        for layout in ("processes", "shared"):
            if layout == "processes" and n > PROCESSES_MAX:
                continue
            for m, kw in modes.items():
                configs[f"{layout} n={n} {m}"] = dict(model="linear", workers=n, layout=layout,
                                                      steps=max(20, MINIBATCHES // n), seed=0, observer=probe,
                                                      inspect=probe.inspect, **kw)
    ctx.note(f"Options: model linear, {MINIBATCHES} minibatches per run (steps = max(20, {MINIBATCHES} / N)), "
             f"`gpus none`, modes {', '.join(modes)}; workers {', '.join(map(str, counts))} (the processes layout "
             f"to {PROCESSES_MAX}: 64 TensorFlow processes of ~280 MB PSS each would leave this machine too "
             f"little); every configuration once per round, alternating in ABBA order, {ctx.repeat} round(s).")
    ctx.note("start = `first_step_s` (the `ssptk.run()` call to the first step record: options, run directory, "
             "spawning, TensorFlow import, servers, graphs, session, start barrier). Memory = every task "
             "process of the run (psutil, found by the run directory on their command line): peak RSS sampled "
             "every 0.5 s, PSS (`/proc/PID/smaps_rollup`) once, as training begins (RSS counts TensorFlow's "
             "shared libraries once per process; PSS splits them, so it is the honest total for the processes layout).")
    res = ctx.alternate(configs)
    table = ["| workers | layout | mode | start s | peak RSS MB | PSS MB | steps/s |",
             "|---:|---|---|---:|---:|---:|---:|"]
    for n in counts:
        for layout in ("processes", "shared"):
            for m in modes:
                s = res.get(f"{layout} n={n} {m}")
                if s is None:
                    continue
                cells = [fmt_value(median(rates(s, k)), f) for k, f in
                         (("first_step_s", ".1f"), ("peak_rss_mb", ".0f"), ("pss_mb", ".0f"), ("steps_per_s", ".1f"))]
                failed = sum(1 for x in s if x.get("status") != "ok")
                table.append(f"| {n} | {layout} | {m} | " + " | ".join(cells) + " |"
                             + (f" ({failed} failed)" if failed else ""))
    ctx.note("Medians over rounds:\n\n  " + "\n  ".join(table) + "\n")
    ctx.note(f"Plot: [scale_layouts.png](scale_layouts.png) ({_plot(res, counts, modes)}).")
    name = "scale_layouts"
    rows: list[Row] = []
    big = [c for c in counts if c >= 32] or [max(counts)]
    for n in big:
        both = res.get(f"shared n={n} async", []) + res.get(f"shared n={n} ssp:2", [])
        if not both:
            continue
        rows += [Row(f"{name}: {n} workers shared, runs that finished (of {len(both)})",
                     float(sum(1 for s in both if s.get("status") == "ok")), fmt=".0f"),
                 Row(f"{name}: {n} workers shared, run() to first step (s, median)",
                     median(rates(both, "first_step_s")), at_most(30.0) if n == 32 else None, fmt=".1f"),
                 Row(f"{name}: {n} workers shared, peak RSS of the run (MB, median)",
                     median(rates(both, "peak_rss_mb")), at_most(3072.0) if n == 32 else None, fmt=".0f")]
    for n in counts:
        p = res.get(f"processes n={n} async", []) + res.get(f"processes n={n} ssp:2", [])
        s = res.get(f"shared n={n} async", []) + res.get(f"shared n={n} ssp:2", [])
        if not p or not s:
            continue
        for m in modes:
            rows.append(Row(f"{name}: {n} workers {m}, steps/s shared/processes (medians)",
                            ratio(median(rates(res[f"shared n={n} {m}"])),
                                  median(rates(res[f"processes n={n} {m}"]))), fmt=".2f"))
        rows += [Row(f"{name}: {n} workers, start shared/processes (medians)",
                     ratio(median(rates(s, "first_step_s")), median(rates(p, "first_step_s"))), fmt=".2f"),
                 Row(f"{name}: {n} workers, PSS shared/processes (medians)",
                     ratio(median(rates(s, "pss_mb")), median(rates(p, "pss_mb"))), fmt=".2f")]
    return rows


def _plot(res: dict[str, list[dict[str, Any]]], counts: tuple[int, ...], modes: dict[str, Any]) -> str:
    """Three panels against the worker count: start-up, memory, steps/s. Returns what it drew."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6), dpi=100)
    colors = {"processes": "#d62728", "shared": "#1f77b4"}
    styles = {"async": "-", "ssp:2": "--"}
    panels = (("first_step_s", "run() to first step (s)"), ("pss_mb", "memory, PSS (MB)"),
              ("steps_per_s", "steps/s"))
    for ax, (key, title) in zip(axes, panels):
        for layout in ("processes", "shared"):
            for m in modes:
                pts = [(n, median(rates(res[f"{layout} n={n} {m}"], key))) for n in counts
                       if f"{layout} n={n} {m}" in res]
                pts = [(n, v) for n, v in pts if v is not None]
                if pts:
                    ax.plot(*zip(*pts), styles[m], marker="o", ms=3, color=colors[layout], label=f"{layout}, {m}")
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(counts), [str(c) for c in counts])
        ax.set_xlabel("workers")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
    axes[1].axhline(3072, color="grey", lw=0.8, ls=":")
    axes[0].axhline(30, color="grey", lw=0.8, ls=":")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"ssptk layouts, linear model, {MINIBATCHES} minibatches per run, {time.strftime('%Y-%m-%d')}",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(PLOT)
    plt.close(fig)
    return "start-up, PSS and steps/s against workers; dotted: the 30 s and 3 GB targets"
