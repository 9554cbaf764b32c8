"""Benchmarks of what a run costs besides training itself: per-step logging, cold start-up, and how
throughput, start-up and memory go with the number of workers.

Listed in ``run.py``'s ``BENCHMARKS``; the helpers (``Row``, targets, the context) are
:mod:`harness`'s. :class:`Probe` follows a run as a :class:`ssptk.api.RunObserver` and reads
its run directory before ``ctx.run`` deletes it.
"""
from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

from harness import Context, Row, at_least, at_most, best, fmt_value, median, opts_text, rates, ratio

MB = 1024 * 1024
RSS_EVERY_S = 0.5  # memory is sampled at most this often (each sample reads /proc of every task)


# --- following a run ------------------------------------------------------------------------------

class Probe:
    """A run observer (``started`` / ``records`` / ``finished``) that notes when the tasks were ready,
    the CPU time of this launcher and of the PS while training, and (``rss=True``) each task's peak
    RSS; :meth:`inspect` turns that and the run directory's events into summary keys.

    One probe serves one run after another (``started`` resets it): pass it as both ``observer`` and
    ``inspect`` (``probe.inspect``) to ``ctx.run``.
    """

    def __init__(self, rss: bool = False) -> None:
        self.rss = rss
        self._reset("", 0, 0)

    def _reset(self, run_dir: str, workers: int, total: int) -> None:
        self.run_dir, self.workers, self.total = run_dir, workers, total
        self.t_started: float | None = None  # observer started: the tasks are about to be spawned
        self.t_ready: float | None = None    # first records call: every task printed SSPTK_READY
        self.cpu0: tuple[float, float | None] | None = None  # (launcher, PS) CPU s at the start barrier
        self.cpu1: tuple[float, float | None] | None = None  # the same at the latest records call
        self.procs: dict[str, Any] = {}      # task name -> psutil.Process
        self.peak: dict[str, int] = {}       # task name -> peak RSS bytes
        self.pss: dict[str, int] = {}        # task name -> PSS bytes, once, mid-training
        self._last_sample = 0.0
        self._finds = 0

    # RunObserver
    def started(self, run_dir: str, opts: Any, total: int) -> None:
        self._reset(os.path.abspath(run_dir), opts.workers, total)
        self.t_started = time.time()

    def records(self, steps: list[dict[str, Any]], events: list[dict[str, Any]], done: int, total: int) -> None:
        now = time.time()
        if self.t_ready is None:
            self.t_ready = now
        if not self.procs and self._finds < 5:  # all are up once the watcher runs; a failed run stops trying
            self._finds += 1
            self._find_tasks()
        if self.cpu0 is None and any(e.get("event") == "start" for e in events):
            self.cpu0 = (time.process_time(), self._cpu("ps:0"))
        if self.cpu0 is not None:
            self.cpu1 = (time.process_time(), self._cpu("ps:0"))
        if self.rss and now - self._last_sample >= RSS_EVERY_S:
            self._last_sample = now
            self._sample(pss=not self.pss and self.cpu0 is not None and done >= total / 2)

    def finished(self, result: Any) -> None:
        pass

    # processes
    def _find_tasks(self) -> None:
        """The run's tasks: ``python -m ssptk.worker ... --task NAME ... --out RUN_DIR``."""
        import psutil

        found: dict[str, Any] = {}
        for p in psutil.process_iter(["cmdline"]):
            cmd = p.info.get("cmdline") or []
            if "ssptk.worker" in cmd and self.run_dir in cmd and "--task" in cmd:
                found[cmd[cmd.index("--task") + 1]] = p
        if len(found) == self.workers + 1:  # all there (they are, once the watcher runs): keep them
            self.procs = found

    def _cpu(self, name: str) -> float | None:
        p = self.procs.get(name)
        if p is None:
            return None
        try:
            t = p.cpu_times()
            return t.user + t.system
        except Exception:  # noqa: BLE001 - exited
            return None

    def _sample(self, pss: bool) -> None:
        for name, p in self.procs.items():
            try:
                rss = p.memory_info().rss
                if pss:
                    self.pss[name] = p.memory_full_info().pss
            except Exception:  # noqa: BLE001 - a task that has exited has no memory to count
                continue
            self.peak[name] = max(self.peak.get(name, 0), rss)

    # after the run
    def inspect(self, run_dir: str, summary: dict[str, Any]) -> dict[str, Any]:
        """Summary keys from the run directory's start/done events (written also with ``no_log``)
        and from what the probe saw while the run went on."""
        ev = read_events(run_dir)
        starts = [e for e in ev if e.get("event") == "start"]
        dones = [e for e in ev if e.get("event") == "done"]
        out: dict[str, Any] = {}
        n = self.workers
        if len(starts) == n and len(dones) == n:
            mb = sum(int(e.get("steps", 0)) for e in dones)
            wall = max(e["t"] for e in dones) - min(e["t"] for e in starts)
            out.update(ev_minibatches=mb, ev_wall_s=wall, ev_steps_per_s=mb / wall if wall > 0 else None)
            cpu_by = {e["worker"]: e.get("cpu_s") for e in starts}
            worker_cpu = [d.get("cpu_s") - cpu_by[d["worker"]] for d in dones
                          if d.get("cpu_s") is not None and cpu_by.get(d["worker"]) is not None]
            if mb and all("record_cpu_s" in d for d in dones):
                out["record_us_per_mb"] = 1e6 * sum(d["record_cpu_s"] for d in dones) / mb
            if self.cpu0 and self.cpu1 and len(worker_cpu) == n and mb:
                launcher = self.cpu1[0] - self.cpu0[0]
                ps = None if self.cpu0[1] is None or self.cpu1[1] is None else self.cpu1[1] - self.cpu0[1]
                if ps is not None:
                    tasks = sum(worker_cpu) + ps
                    out.update(task_cpu_s=tasks, cpu_ms_per_mb=1000 * tasks / mb,
                               cpu_ms_per_mb_all=1000 * (tasks + launcher) / mb)
                out.update(launcher_cpu_s=launcher, launcher_cpu_ms_per_mb=1000 * launcher / mb)
            launched = _launched(run_dir)
            first_step = summary.get("first_step_s")
            t_start = min(e["t"] for e in starts)
            if launched is not None and self.t_started is not None and self.t_ready is not None:
                out.update(to_spawn_s=self.t_started - launched, spawn_to_ready_s=self.t_ready - self.t_started,
                           ready_to_barrier_s=t_start - self.t_ready,
                           barrier_s=t_start - launched)
                if first_step is not None:
                    out["barrier_to_first_step_s"] = launched + first_step - t_start
        if self.peak:
            ps = self.peak.get("ps:0")
            ws = [v for k, v in self.peak.items() if k.startswith("worker")]
            out.update(rss_ps_mb=None if ps is None else ps / MB,
                       rss_worker_mb=statistics.mean(ws) / MB if ws else None,
                       rss_worker_max_mb=max(ws) / MB if ws else None,
                       rss_total_mb=sum(self.peak.values()) / MB,
                       rss_tasks_seen=len(self.peak))
        if len(self.pss) == self.workers + 1:
            out["pss_total_mb"] = sum(self.pss.values()) / MB
        shown = [("events", "ev_steps_per_s", ".1f", " steps/s"), ("CPU", "cpu_ms_per_mb", ".2f", " ms/minibatch"),
                 ("ready after", "spawn_to_ready_s", ".2f", " s"), ("RSS total", "rss_total_mb", ".0f", " MB"),
                 ("PSS total", "pss_total_mb", ".0f", " MB")]
        out["line"] = "  ".join(f"{text} {out[key]:{fmt}}{unit}" for text, key, fmt, unit in shown
                                if out.get(key) is not None)
        return out


def read_events(run_dir: str) -> list[dict[str, Any]]:
    """Every event record (``start``, ``done``, ...) of a run directory's worker logs."""
    out: list[dict[str, Any]] = []
    d = os.path.join(run_dir, "workers")
    for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        if not name.endswith(".jsonl"):
            continue
        with open(os.path.join(d, name), "rb") as f:
            for line in f:
                if b'"event"' in line:
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(rec, dict) and "event" in rec:
                        out.append(rec)
    return out


def _launched(run_dir: str) -> float | None:
    try:
        with open(os.path.join(run_dir, "config.json")) as f:
            v = json.load(f).get("launched")
        return float(v) if v is not None else None
    except (OSError, ValueError, TypeError):
        return None


# --- bare TensorFlow, for reference ----------------------------------------------------------------

def _tf_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # as the cluster's tasks get it
    env["CUDA_VISIBLE_DEVICES"] = ""               # as gpus="none"
    return env


def bare_imports(n: int, concurrent: bool) -> float | None:
    """Seconds for ``n`` bare ``python -c "import tensorflow"`` processes: started together and
    waited for (``concurrent``), or one after another. None if one failed.

    Each gets its own session, as the cluster's tasks do: with the kernel's autogroup scheduling a
    session is one scheduling group, so on a busy machine imports sharing this process's session
    would get one group's share of the cores where the tasks get one each.
    """
    argv = [sys.executable, "-c", "import tensorflow"]
    kw = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_tf_env(), start_new_session=True)
    t0 = time.perf_counter()
    if concurrent:
        procs = [subprocess.Popen(argv, **kw) for _ in range(n)]  # type: ignore[call-overload]
        codes = [p.wait() for p in procs]
    else:
        codes = [subprocess.run(argv, **kw).returncode for _ in range(n)]  # type: ignore[call-overload]
    return time.perf_counter() - t0 if not any(codes) else None


def bare_tf_memory() -> dict[str, float]:
    """RSS (peak, sampled every 0.1 s) and PSS of ``python -c "import tensorflow; ...; time.sleep(2)"``."""
    import psutil

    code = "import tensorflow, time; print('imported', flush=True); time.sleep(2)"
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         env=_tf_env(), text=True)
    proc, peak, pss = psutil.Process(p.pid), 0, None
    try:
        p.stdout.readline()  # type: ignore[union-attr]  # the import is done
        while p.poll() is None:
            try:
                peak = max(peak, proc.memory_info().rss)
                if pss is None:
                    pss = proc.memory_full_info().pss
            except Exception:  # noqa: BLE001 - it exited between poll and read
                break
            time.sleep(0.1)
    finally:
        p.wait()
    return {"rss_mb": peak / MB, "pss_mb": (pss or 0) / MB}


def _vals(summaries: list[dict[str, Any]], key: str, fmt: str) -> str:
    return ", ".join(fmt_value(s.get(key), fmt) if s.get("status") == "ok" else "FAILED" for s in summaries)


# --- benchmarks -----------------------------------------------------------------------------------------

def bench_logging_on_off(ctx: Context) -> list[Row]:
    """Per-step JSONL logging against ``no_log``: target >= 0.97 of the no-logging steps/s.

    Without step records the summary has no steps/s, so both sides are measured from the workers'
    ``start`` and ``done`` events (written either way): minibatches = sum of ``done.steps``, wall =
    last ``done`` minus first ``start``. CPU per minibatch: workers from their events' ``cpu_s``, the
    PS and this launcher (which reads the logs as they grow) sampled at the start barrier and the end.
    The ``direct`` row adds up what the logging path itself costs (``done.record_cpu_s`` plus the
    launcher's extra reading): a few percent of noise between runs here hides a 0.3% cost in steps/s.
    """
    common = dict(model="linear", workers=3, steps=300 if ctx.quick else 1500, seed=0)
    modes = {"async": dict(mode="async"), "ssp:2": dict(mode="ssp", staleness=2)}
    probe = Probe()
    hooks = dict(observer=probe, inspect=probe.inspect)
    configs: dict[str, dict[str, Any]] = {}
    for m, kw in modes.items():
        configs[f"{m} log"] = dict(common, **kw, **hooks)
        configs[f"{m} nolog"] = dict(common, **kw, no_log=True, **hooks)
    ctx.note(f"Options: {opts_text(common)}, no delays; per mode with and without `--no-log`, all four "
             f"alternating in ABBA order, {ctx.repeat} round(s).")
    ctx.note("steps/s here = sum of the workers' `done.steps` / (last `done` - first `start`), the same "
             "measure both ways (no-log runs have no step records, so no summary steps/s).")
    res = ctx.alternate(configs)
    ctx.note("event steps/s of each run, in order: "
             + "; ".join(f"{k}: {_vals(v, 'ev_steps_per_s', '.1f')}" for k, v in res.items()))
    for m in modes:
        ctx.note(f"{m} with logging, summary steps/s (first start to last step record) for comparison: "
                 + _vals(res[f"{m} log"], "steps_per_s", ".1f"))
    ctx.note("CPU ms per minibatch, tasks (all workers + PS) / tasks + launcher, each run: "
             + "; ".join(f"{k}: " + ", ".join(f"{fmt_value(s.get('cpu_ms_per_mb'), '.2f')}/"
                                              f"{fmt_value(s.get('cpu_ms_per_mb_all'), '.2f')}" for s in v)
                         for k, v in res.items()))
    rows: list[Row] = []
    n = "logging_on_off"
    for m in modes:
        on, off = res[f"{m} log"], res[f"{m} nolog"]
        r_on, r_off = rates(on, "ev_steps_per_s"), rates(off, "ev_steps_per_s")
        pairs = [ratio(a.get("ev_steps_per_s"), b.get("ev_steps_per_s")) for a, b in zip(on, off)]
        ctx.note(f"{m}: per-round ratio logging/no-logging: " + ", ".join(fmt_value(p, ".3f") for p in pairs))
        c_on, c_off = rates(on, "cpu_ms_per_mb"), rates(off, "cpu_ms_per_mb")
        a_on, a_off = rates(on, "cpu_ms_per_mb_all"), rates(off, "cpu_ms_per_mb_all")
        l_on, l_off = rates(on, "launcher_cpu_ms_per_mb"), rates(off, "launcher_cpu_ms_per_mb")
        # Direct accounting, immune to the machine's noise: the CPU the workers spent writing records
        # (measured around each write on the writing thread) plus the launcher's extra CPU for reading
        # them, against all the tasks' CPU per minibatch without logging.
        rec = median(rates(on, "record_us_per_mb"))
        extra = None if rec is None or median(l_on) is None or median(l_off) is None else \
            rec / 1000 + max(0.0, median(l_on) - median(l_off))
        rows += [
            Row(f"{n}: {m} CPU per minibatch without / with the logging path's own CPU (direct)",
                None if extra is None or not median(c_off) else median(c_off) / (median(c_off) + extra),
                at_least(0.97)),
            Row(f"{n}: {m} record writing, worker CPU us per minibatch (median)", rec, fmt=".1f"),
            Row(f"{n}: {m} steps/s logging/no-logging (medians)", ratio(median(r_on), median(r_off)), at_least(0.97)),
            Row(f"{n}: {m} steps/s logging/no-logging (bests)", ratio(best(r_on), best(r_off))),
            Row(f"{n}: {m} logging median steps/s", median(r_on), fmt=".1f"),
            Row(f"{n}: {m} no-logging median steps/s", median(r_off), fmt=".1f"),
            # CPU per minibatch is the steadier measure on a shared 2-core machine (see FINDINGS.md).
            Row(f"{n}: {m} CPU per minibatch, tasks, no-logging/logging (medians)",
                ratio(median(c_off), median(c_on)), at_least(0.97)),
            Row(f"{n}: {m} CPU per minibatch, tasks + launcher, no-logging/logging (medians)",
                ratio(median(a_off), median(a_on))),
            Row(f"{n}: {m} logging CPU ms per minibatch, tasks (median)", median(c_on)),
            Row(f"{n}: {m} no-logging CPU ms per minibatch, tasks (median)", median(c_off)),
            Row(f"{n}: {m} launcher CPU ms per minibatch, logging (median)", median(l_on)),
            Row(f"{n}: {m} launcher CPU ms per minibatch, no-logging (median)", median(l_off)),
        ]
    return rows


def bench_cold_start(ctx: Context) -> list[Row]:
    """Time from ``ssptk.run()`` to the first step of a cold 1 PS + 3 worker cluster against three bare
    ``python -c "import tensorflow"`` started together: target <= 1.5 (ssptk adds at most 50%)."""
    common = dict(model="linear", mode="ssp", staleness=2, workers=3, steps=40 if ctx.quick else 100, seed=0)
    probe = Probe()
    runs: list[dict[str, Any]] = []
    eager: list[dict[str, Any]] = []  # the same run with TensorFlow's own eager import of Keras 3
    separate: list[dict[str, Any]] = []  # the same run without the fork server: every task imports TensorFlow
    cpu: dict[str, list[float]] = {"ssptk": [], "separate": []}  # CPU seconds of the run's processes
    imports: dict[str, list[float | None]] = {"3 together": [], "3 in a row": [], "4 together": []}
    for r in range(ctx.repeat):
        print(f"  round {r + 1}/{ctx.repeat}", flush=True)
        steps = ["ssptk", "separate", "eager", "imports"]
        for what in steps if r % 2 == 0 else steps[::-1]:
            if what == "ssptk":
                before = _children_cpu()
                runs.append(ctx.run("cold", observer=probe, inspect=probe.inspect, **common))
                cpu["ssptk"].append(_children_cpu() - before)
                continue
            if what == "separate":
                os.environ["SSPTK_FORK_SERVER"] = "0"
                try:
                    before = _children_cpu()
                    separate.append(ctx.run("cold, no fork server", observer=probe, inspect=probe.inspect,
                                            **common))
                    cpu["separate"].append(_children_cpu() - before)
                finally:
                    del os.environ["SSPTK_FORK_SERVER"]
                continue
            if what == "eager":
                os.environ["SSPTK_EAGER_KERAS"] = "1"
                try:
                    eager.append(ctx.run("cold, eager Keras", observer=probe, inspect=probe.inspect, **common))
                finally:
                    del os.environ["SSPTK_EAGER_KERAS"]
                continue
            for label, (k, conc) in (("3 together", (3, True)), ("3 in a row", (3, False)),
                                     ("4 together", (4, True)))[:: 1 if r % 2 == 0 else -1]:
                imports[label].append(bare_imports(k, conc))
                print(f"    import tensorflow x{label:<11} {fmt_value(imports[label][-1], '.2f')} s", flush=True)
    first = rates(runs, "first_step_s")
    imp = {k: [v for v in vs if v is not None] for k, vs in imports.items()}
    conc3, seq3, conc4 = median(imp["3 together"]), median(imp["3 in a row"]), median(imp["4 together"])
    ctx.note(f"Options: {opts_text(common)}, `gpus none`; {ctx.repeat} round(s), each one cold ssptk run and "
             "the bare imports, in ABBA order. Bare import: `python -c \"import tensorflow\"` with the tasks' "
             "environment (TF_CPP_MIN_LOG_LEVEL=2, no GPU) and, like them, each in its own session (with "
             "autogroup scheduling, on when /proc/sys/kernel/sched_autogroup_enabled is 1, a session is one "
             "scheduling group: imports sharing one session would get one share of a busy machine's cores).")
    ctx.note("The target compares with three imports started together: ssptk starts its tasks together too, "
             "and on this 2-core machine they share the cores, so three in a row would flatter ssptk and "
             "hide the contention. ssptk actually starts four TensorFlow processes (the PS too): the row "
             "against four imports together says what the start-up adds beyond TensorFlow itself.")
    ctx.note("ssptk first_step_s of each run: " + _vals(runs, "first_step_s", ".2f"))
    ctx.note("The same run with `SSPTK_EAGER_KERAS=1` (the tasks' `import tensorflow` loads Keras 3 as "
             "TensorFlow does by default; ssptk skips it, `ssptk/runtime/tf_import.py`), first_step_s: "
             + _vals(eager, "first_step_s", ".2f"))
    ctx.note("The same run with `SSPTK_FORK_SERVER=0` (each task a process of its own that imports TensorFlow; "
             "by default a CPU cluster's tasks are forked from one process that imported it once, "
             "`ssptk/launch/forking.py`), first_step_s: " + _vals(separate, "first_step_s", ".2f"))
    ctx.note("CPU seconds of the run's processes (all tasks, the fork server, the run to its end), with the fork "
             "server: " + ", ".join(f"{v:.1f}" for v in cpu["ssptk"]) + "; without: "
             + ", ".join(f"{v:.1f}" for v in cpu["separate"]))
    for k, vs in imports.items():
        ctx.note(f"bare imports, {k}, seconds: " + ", ".join(fmt_value(v, ".2f") for v in vs))
    parts = [("to_spawn_s", "run() call to spawning the tasks (options, run dir)"),
             ("spawn_to_ready_s", "spawn to every task's SSPTK_READY (Python, ssptk, TensorFlow import, "
                                  "gRPC server; seen by the launcher's 50 ms poll)"),
             ("ready_to_barrier_s", "ready to the start barrier (graph, session, variable init, barrier)"),
             ("barrier_to_first_step_s", "start barrier to the first step record")]
    ctx.note("Breakdown (medians, s): " + "; ".join(f"{text}: {fmt_value(median(rates(runs, key)), '.2f')}"
                                                      for key, text in parts))
    n = "cold_start"
    return [
        Row(f"{n}: ssptk to first step / 3 bare TF imports together (medians)", ratio(median(first), conc3),
            at_most(1.5)),
        Row(f"{n}: ssptk to first step / 4 bare TF imports together (medians)", ratio(median(first), conc4)),
        Row(f"{n}: ssptk to first step / 3 bare TF imports in a row (medians)", ratio(median(first), seq3)),
        Row(f"{n}: ssptk run() to first step, median (s)", median(first), fmt=".2f"),
        Row(f"{n}: ssptk to first step, fork server / each task its own import (medians)",
            ratio(median(first), median(rates(separate, "first_step_s")))),
        Row(f"{n}: CPU seconds of a run's processes, fork server / each task its own import (medians)",
            ratio(median(cpu["ssptk"]), median(cpu["separate"])), at_most(0.6)),
        Row(f"{n}: ssptk run() to first step without the fork server, median (s)",
            median(rates(separate, "first_step_s")), fmt=".2f"),
        Row(f"{n}: ssptk to first step, Keras 3 skipped / loaded as TensorFlow does (medians)",
            ratio(median(first), median(rates(eager, "first_step_s")))),
        Row(f"{n}: ssptk run() to first step with SSPTK_EAGER_KERAS=1, median (s)",
            median(rates(eager, "first_step_s")), fmt=".2f"),
        Row(f"{n}: 3 bare TF imports together, median (s)", conc3, fmt=".2f"),
        Row(f"{n}: 4 bare TF imports together, median (s)", conc4, fmt=".2f"),
        Row(f"{n}: 3 bare TF imports in a row, median (s)", seq3, fmt=".2f"),
    ] + [Row(f"{n}: {key.removesuffix('_s').replace('_', ' ')}, median (s)", median(rates(runs, key)), fmt=".2f")
         for key, _ in parts]


def _children_cpu() -> float:
    """User + system CPU seconds of this process's ended children (and theirs, once reaped)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def bench_scale_workers(ctx: Context) -> list[Row]:
    """Throughput, start-up and memory (peak RSS per task) for 1..8 workers, async and ssp:2; for information."""
    counts = (1, 2, 4) if ctx.quick else (1, 2, 3, 4, 6, 8)
    per_worker = 100 if ctx.quick else 200
    modes = {"async": dict(mode="async"), "ssp:2": dict(mode="ssp", staleness=2)}
    probe = Probe(rss=True)
    common = dict(model="linear", steps=per_worker, seed=0, layout="processes")  # the shared one: bench_layouts
    configs = {f"{m} n={k}": dict(common, workers=k, observer=probe, inspect=probe.inspect, **kw)
               for k in counts for m, kw in modes.items()}
    cores = os.cpu_count() or 1
    bare = bare_tf_memory()
    print(f"    bare TensorFlow process: RSS {bare['rss_mb']:.0f} MB, PSS {bare['pss_mb']:.0f} MB", flush=True)
    ctx.note(f"Options: {opts_text(common)} (steps per worker), workers {', '.join(map(str, counts))}, modes "
             f"{', '.join(modes)}; all {len(configs)} configurations alternating in ABBA order, {ctx.repeat} "
             "round(s). Table figures are medians over rounds; start-up and memory pool both modes.")
    ctx.note("Why async and ssp:2: async is the engine's own ceiling (no waiting), and ssp:2 against it shows "
             "what the bound costs as workers are added; sync's barrier is measured in sim_vs_real.")
    ctx.note(f"This machine has {cores} cores (os.cpu_count()): with N workers there are N + 1 TensorFlow "
             f"tasks (and this launcher), so from N = {max(1, cores)} on the cores are oversubscribed and "
             "steps/s measures the sharing of the cores, not a cluster's scaling.")
    ctx.note(f"Memory: peak RSS of each task, sampled at most every {RSS_EVERY_S} s while the run goes on "
             "(psutil). RSS counts shared pages (TensorFlow's libraries) in every process, so the total "
             "overstates what the machine gives: PSS (shared pages split between the processes sharing "
             "them), taken once mid-training, is the honest total; but it also splits pages with any other "
             "TensorFlow process on the machine (another engineer's tests), so it reads low while those run. "
             "A bare `python -c \"import tensorflow; "
             f"import time; time.sleep(2)\"` has RSS {bare['rss_mb']:.0f} MB (PSS alone {bare['pss_mb']:.0f} MB).")
    res = ctx.alternate(configs)
    table = ["| workers | mode | steps/s | wait fraction | first_step_s | PS RSS MB | worker RSS MB (mean) | "
             "total RSS MB | total PSS MB |", "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for k in counts:
        for m in modes:
            s = res[f"{m} n={k}"]
            cells = [fmt_value(median(rates(s, key)), fmt) for key, fmt in
                     (("steps_per_s", ".1f"), ("wait_fraction", ".3f"), ("first_step_s", ".2f"),
                      ("rss_ps_mb", ".0f"), ("rss_worker_mb", ".0f"), ("rss_total_mb", ".0f"),
                      ("pss_total_mb", ".0f"))]
            table.append(f"| {k} | {m} | " + " | ".join(cells) + " |")
    ctx.note("Per mode (medians):\n\n  " + "\n  ".join(table) + "\n")
    ctx.note("steps/s of each run, in order: " + "; ".join(f"{k}: {_vals(v, 'steps_per_s', '.1f')}"
                                                         for k, v in res.items()))
    n = "scale_workers"
    rows = [Row(f"{n}: bare TensorFlow process RSS (MB)", bare["rss_mb"], fmt=".0f"),
            Row(f"{n}: bare TensorFlow process PSS (MB)", bare["pss_mb"], fmt=".0f")]
    for k in counts:
        both = res[f"async n={k}"] + res[f"ssp:2 n={k}"]
        for m in modes:
            rows.append(Row(f"{n}: {k} workers, {m} steps/s", median(rates(res[f"{m} n={k}"])), fmt=".1f"))
        rows += [
            Row(f"{n}: {k} workers, first_step_s", median(rates(both, "first_step_s")), fmt=".2f"),
            Row(f"{n}: {k} workers, PS RSS (MB)", median(rates(both, "rss_ps_mb")), fmt=".0f"),
            Row(f"{n}: {k} workers, worker RSS, mean (MB)", median(rates(both, "rss_worker_mb")), fmt=".0f"),
            Row(f"{n}: {k} workers, total RSS (MB)", median(rates(both, "rss_total_mb")), fmt=".0f"),
            Row(f"{n}: {k} workers, total PSS (MB)", median(rates(both, "pss_total_mb")), fmt=".0f"),
        ]
    return rows
