"""The Python API: :func:`run` (and :func:`compare`, from :mod:`ssptk.comparison`). The CLI and the notebook
magics are thin layers over it."""
from __future__ import annotations

import json
import os
import platform
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import pandas as pd

from ssptk import __version__
from ssptk.errors import RunFailed, TaskFailure, UsageError
from ssptk.options import RunOptions, resolve, to_argv
from ssptk.summary import summarize_run
from ssptk.watch import watch_run

ProgressFn = Callable[[int, int], None]


class RunObserver(Protocol):
    """Follows a run as it goes (the notebook dashboard is one). Records are read once by the run's
    watcher and handed over, so an observer never re-reads the logs.

    ``records`` is called about every ``POLL_S`` seconds, also with empty lists, from the thread that
    runs the run; ``finished`` once at the end (``result`` is ``None`` when the run was interrupted).
    """

    def started(self, run_dir: str, opts: RunOptions, total: int) -> None: ...

    def records(self, steps: list[dict[str, Any]], events: list[dict[str, Any]], done: int, total: int) -> None: ...

    def finished(self, result: RunResult | None) -> None: ...


PORT_RETRIES = 3


@dataclass
class RunResult:
    """A finished (or failed) run: its directory, options, summary and step records."""

    run_dir: str
    options: RunOptions
    summary: dict[str, Any]
    failure: TaskFailure | None = None
    _frames: tuple[pd.DataFrame, pd.DataFrame] | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        return self.summary.get("status") == "ok"

    def _load(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        if self._frames is None:
            from ssptk.logs import read_run

            self._frames = read_run(self.run_dir)
        return self._frames

    @property
    def df(self) -> pd.DataFrame:
        """The step records of every worker, sorted by time (columns as in docs/run-directory.md)."""
        return self._load()[0]

    @property
    def events(self) -> pd.DataFrame:
        return self._load()[1]

    @property
    def config(self) -> dict[str, Any]:
        with open(os.path.join(self.run_dir, "config.json")) as f:
            return json.load(f)

    def plot(self) -> Any:
        """A matplotlib Figure of loss, per-worker progress, step skew, waiting and staleness."""
        from ssptk.report import run_figure

        return run_figure(self.df, self.events, self.config, self._bound())

    def _bound(self) -> int | None:
        return self.options.staleness if self.options.mode == "ssp" else None

    def __str__(self) -> str:
        from ssptk.text import format_summary

        return format_summary(self.summary)

    def __repr__(self) -> str:
        s = self.summary
        rate, loss = s.get("steps_per_s"), s.get("final_loss")
        parts = [self.options.label, s.get("status", "?"), f"{s.get('total_steps', 0)} steps"]
        parts += [f"{rate:.1f} steps/s"] if rate else []
        parts += [f"final loss {loss:.4g}"] if loss is not None else []
        return f"<RunResult {', '.join(parts)}: {self.run_dir}>"


def new_run_dir(out: str | None, mode: str) -> str:
    """Create the run directory; an existing non-empty one is refused, never overwritten."""
    if out is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        out = os.path.join("runs", f"{stamp}-{mode}")
        base, k = out, 1
        while os.path.exists(out):
            k += 1
            out = f"{base}-{k}"
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise UsageError(f"output directory {out} exists and is not empty: choose another --out")
    os.makedirs(out, exist_ok=True)
    return out


USER_MODEL_FILE = "user_model.py"


def _source_model_check(source: str, name: Any) -> str:
    """Check that ``source`` defines a working model function ``name``; returns a model path to it."""
    import tempfile

    if not isinstance(name, str) or not name.isidentifier():
        raise UsageError("model code needs --model NAME: the function in it that returns an ssptk.ModelSpec")
    with tempfile.TemporaryDirectory(prefix="ssptk-model-") as tmp:
        path = os.path.join(tmp, USER_MODEL_FILE)
        with open(path, "w") as f:
            f.write(source)
        from ssptk.models import load_model

        try:
            load_model(f"{path}:{name}")
        except UsageError as e:
            raise UsageError(str(e).replace(repr(f"{path}:{name}"), "in the cell").replace(path, USER_MODEL_FILE)) from None
    return f"{USER_MODEL_FILE}:{name}"


def _save_source(run_dir: str, source: str, model: str) -> str:
    with open(os.path.join(run_dir, USER_MODEL_FILE), "w") as f:
        f.write(source)
    return f"{os.path.join(run_dir, USER_MODEL_FILE)}:{model.rpartition(':')[2]}"


def check_before_start(opts: RunOptions) -> dict[str, str]:
    """What resolving cannot check alone: the user model imports and returns a ModelSpec, and
    ``--gpus`` fits the machine. Returns :func:`ssptk.gpus.assign_gpus`'s task -> GPU map; raises
    :class:`UsageError`."""
    if ":" in opts.model and not opts.model.startswith(USER_MODEL_FILE + ":"):  # builtins need no check, and importing TF here would cost seconds
        from ssptk.models import load_model

        load_model(opts.model)
    from ssptk.gpus import assign_gpus

    return assign_gpus(opts.gpus, opts.workers)


def run(*, progress: ProgressFn | None = None, observer: RunObserver | None = None, raise_on_failure: bool = True,
        warm: bool = False, model_source: str | None = None, cancel: threading.Event | None = None,
        **options: Any) -> RunResult:
    """Train one model on a local cluster and return its :class:`RunResult`.

    Options are those of ``ssptk run`` (see :data:`ssptk.options.OPTIONS`), e.g.
    ``ssptk.run(model="linear", mode="ssp", staleness=2, workers=3, steps=200, straggler=["2:0.02"])``.
    Bad options raise :class:`UsageError` before any process starts; a failed run raises
    :class:`RunFailed` (carrying the failing task and its log tail) unless ``raise_on_failure`` is false.
    ``progress(done, total)`` and ``observer`` (a :class:`RunObserver`) follow the run as it goes.
    ``warm``: run on a warm cluster kept alive for the next run with the same workers and GPUs (see
    :mod:`ssptk.warm`; :func:`shutdown` ends them); allreduce always starts its own tasks.
    ``model_source``: Python code defining the function named by ``model`` (what a ``%%dtrain`` cell
    holds); it is saved as ``user_model.py`` in the run directory, so ``--model <dir>/user_model.py:NAME``
    repeats the run. ``cancel``: an event that, once set, stops the run as Ctrl-C would.
    """
    launched = time.time()
    if model_source is not None:
        options["model"] = _source_model_check(model_source, options.get("model"))
    opts = resolve(**options)
    gpus = check_before_start(opts)
    run_dir = new_run_dir(opts.out, opts.mode)
    opts.out = run_dir
    if model_source is not None:
        opts.model = _save_source(run_dir, model_source, opts.model)
    observers: list[RunObserver] = [o for o in (observer, _ProgressObserver.of(progress)) if o is not None]
    if cancel is not None:
        observers.append(_Cancel(cancel))
    return _run_in(opts, run_dir, gpus, observers, raise_on_failure, warm, launched)


class _Observer:
    """A :class:`RunObserver` that does nothing; subclasses override what they need."""

    def started(self, run_dir: str, opts: RunOptions, total: int) -> None:
        pass

    def records(self, steps: list[dict[str, Any]], events: list[dict[str, Any]], done: int, total: int) -> None:
        pass

    def finished(self, result: RunResult | None) -> None:
        pass


class _Cancel(_Observer):
    """Ends the run, as Ctrl-C would, once ``event`` is set (a background run's ``stop()``)."""

    def __init__(self, event: threading.Event) -> None:
        self.event = event

    def records(self, steps: list[dict[str, Any]], events: list[dict[str, Any]], done: int, total: int) -> None:
        if self.event.is_set():
            raise KeyboardInterrupt


class _ProgressObserver(_Observer):
    """A ``progress(done, total)`` callback as a :class:`RunObserver`."""

    def __init__(self, fn: ProgressFn) -> None:
        self.fn = fn

    @classmethod
    def of(cls, fn: ProgressFn | None) -> _ProgressObserver | None:
        return None if fn is None else cls(fn)

    def records(self, steps: list[dict[str, Any]], events: list[dict[str, Any]], done: int, total: int) -> None:
        self.fn(done, total)


def _run_in(opts: RunOptions, run_dir: str, gpus: dict[str, str], observers: list[RunObserver],
            raise_on_failure: bool, warm: bool = False, launched: float | None = None) -> RunResult:
    total = opts.workers * opts.steps
    with_ps = opts.mode != "allreduce"
    gpus = {k: v for k, v in gpus.items() if with_ps or k != "ps:0"}
    for o in observers:
        o.started(run_dir, opts, total)
    launched = time.time() if launched is None else launched
    run_tasks = _run_warm if warm and with_ps and not opts.restart_failed else _run_cold
    failure, ps_cpu, interrupted = run_tasks(opts, run_dir, gpus, observers, total, launched)
    summary = summarize_run(run_dir, opts, failure, ps_cpu_s=ps_cpu)
    if interrupted:  # the logs and summary of what ran are kept
        for o in observers:
            o.finished(None)
        raise KeyboardInterrupt
    result = RunResult(run_dir, opts, summary, failure)
    for o in observers:
        o.finished(result)
    if failure is not None and raise_on_failure:
        raise RunFailed(failure, result)
    return result


_Outcome = tuple["TaskFailure | None", "float | None", bool]  # failure, PS training CPU s, interrupted


def _run_cold(opts: RunOptions, run_dir: str, gpus: dict[str, str], observers: list[RunObserver], total: int,
              launched: float) -> _Outcome:
    """Start the run's own tasks, follow the run, stop them."""
    from ssptk.cluster import LocalCluster

    for attempt in range(PORT_RETRIES):
        cluster = LocalCluster(opts.workers, run_dir, gpus, with_ps=opts.mode != "allreduce")
        _write_config(run_dir, opts, cluster.spec, gpus, total, launched,
                      {"warm": False, "isolation": cluster.isolation})
        with cluster:  # every task is stopped on the way out, whatever happens
            try:
                cluster.start(to_argv(opts), run_id=f"run{uuid.uuid4().hex[:12]}")
                failure = cluster.wait_ready()
                if failure is None:
                    failure = watch_run(cluster, run_dir, total, observers, opts)
                elif attempt + 1 < PORT_RETRIES and _port_taken(failure):
                    _reset_attempt(run_dir)
                    continue
            except KeyboardInterrupt:
                return TaskFailure("ssptk", "interrupted by the user"), cluster.train_cpu.get("ps:0"), True
        return failure, cluster.train_cpu.get("ps:0"), False
    raise AssertionError("unreachable")


def _run_warm(opts: RunOptions, run_dir: str, gpus: dict[str, str], observers: list[RunObserver], total: int,
              launched: float) -> _Outcome:
    """Run on a warm cluster (started now if there is none), which is kept if the run succeeds."""
    from ssptk import warm

    os.makedirs(os.path.join(run_dir, "logs"), exist_ok=True)
    for attempt in range(PORT_RETRIES):
        try:
            cluster, reused, failure = warm.acquire(opts.workers, gpus)
        except KeyboardInterrupt:
            return TaskFailure("ssptk", "interrupted by the user"), None, True
        if failure is None:
            break
        if attempt + 1 == PORT_RETRIES or not _port_taken(failure):
            _write_config(run_dir, opts, cluster.spec, gpus, total, launched,
                          {"warm": True, "reused": False, "isolation": cluster.isolation})
            return failure, None, False
    info = {"warm": True, "reused": reused, "runs_served": cluster.runs_served + 1,
            "isolation": cluster.isolation}
    _write_config(run_dir, opts, cluster.spec, gpus, total, launched, info)
    ok = False
    try:
        cluster.train_cpu.pop("ps:0", None)
        cluster.submit(run_dir, to_argv(opts), run_id=f"run{uuid.uuid4().hex[:12]}")
        failure = watch_run(cluster, run_dir, total, observers, opts)
        ok = failure is None
        return failure, cluster.train_cpu.get("ps:0"), False
    except KeyboardInterrupt:
        return TaskFailure("ssptk", "interrupted by the user"), None, True
    finally:
        warm.release(cluster, ok)


def shutdown() -> int:
    """Stop the warm clusters this process keeps (see ``run(warm=True)``); returns how many."""
    from ssptk import warm

    return warm.shutdown()


def _port_taken(failure: TaskFailure) -> bool:
    text = " ".join(failure.log_tail).lower()
    return "address already in use" in text or "failed to bind" in text or "could not start grpc server" in text


def _reset_attempt(run_dir: str) -> None:
    for sub in ("workers", "logs"):
        d = os.path.join(run_dir, sub)
        for name in os.listdir(d) if os.path.isdir(d) else []:
            os.rename(os.path.join(d, name), os.path.join(d, name + ".port-retry"))


def _write_config(run_dir: str, opts: RunOptions, spec: dict[str, list[str]], gpus: dict[str, str],
                  total: int, launched: float | None = None, tasks: dict[str, Any] | None = None) -> None:
    import importlib.metadata

    try:
        tf_version = importlib.metadata.version("tensorflow")
    except importlib.metadata.PackageNotFoundError:
        tf_version = None
    sync_like = opts.mode in ("sync", "allreduce")
    config = {
        "options": opts.to_dict(), "cluster": spec, "gpu_assignment": gpus,
        "versions": {"ssptk": __version__, "tensorflow": tf_version, "python": platform.python_version()},
        "budget": {"total_minibatches": total if not opts.backup else None,
                   "per_worker": opts.steps if sync_like and not opts.backup else None,
                   "updates": opts.steps if opts.mode == "sync" else None},
        "created": time.time(), "launched": launched, "tasks": tasks or {"warm": False},
    }
    with open(os.path.join(run_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=1)


# --- comparisons: they live in ssptk.comparison; the names stay importable from here ----------------

_COMPARISON_NAMES = ("CompareResult", "compare", "label_dir", "parse_labels")


def __getattr__(name: str) -> Any:
    if name in _COMPARISON_NAMES:  # a late import: ssptk.comparison imports this module
        from ssptk import comparison

        return getattr(comparison, name)
    raise AttributeError(f"module 'ssptk.api' has no attribute {name!r}")
