"""One run on a local cluster: :func:`run` (the Python API's ``ssptk.run``) and :func:`shutdown`.

It resolves and checks the options, claims the run directory, starts (or borrows) a cluster, lets the
supervisor follow the run, and leaves ``summary.json`` behind. The CLI, the magics and the widgets are
thin layers over it.
"""
from __future__ import annotations

import os
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

from ssptk.core.errors import DiskFull, RunFailed, RunInterrupted, TaskFailure, UsageError
from ssptk.core.option_args import to_argv
from ssptk.core.option_checks import check_memory
from ssptk.core.options import RunOptions, resolve
from ssptk.core.resources import machine_cores
from ssptk.experiment.finish import finish_run, interruption
from ssptk.experiment.result import RunResult
from ssptk.launch.observers import ProgressFn, ProgressObserver, RunObserver, notify_starting
from ssptk.launch.supervisor import Outcome, not_restarted_in_start_up, supervise
from ssptk.launch.warm import Stopped
from ssptk.rundir import USER_MODEL_FILE, RunDir

__all__ = ["PreparedRun", "RunResult", "check_before_start", "check_model", "execute", "new_run_dir", "prepare", "run",
           "shutdown"]

PORT_RETRIES = 3


def new_run_dir(out: str | None, mode: str) -> str:
    """Create the run directory; an existing non-empty one is refused, never overwritten."""
    return RunDir.create(out, mode).path


def _source_model_check(source: str, name: Any) -> str:
    """Check that ``source`` defines a working model function ``name``; returns a model path to it."""
    if not isinstance(name, str) or not name.isidentifier():
        raise UsageError("model code needs --model NAME: the function in it that returns an ssptk.ModelSpec")
    with tempfile.TemporaryDirectory(prefix="ssptk-model-") as tmp:
        path = os.path.join(tmp, USER_MODEL_FILE)
        with open(path, "w") as f:
            f.write(source)
        from ssptk.core.models import load_model

        try:
            load_model(f"{path}:{name}")
        except SystemExit as e:  # the cell's code called sys.exit()
            raise _model_left("the cell's model", e) from None
        except UsageError as e:
            message = str(e).replace(repr(f"{path}:{name}"), "in the cell").replace(path, USER_MODEL_FILE)
            raise UsageError(message) from None
    return f"{USER_MODEL_FILE}:{name}"


def _save_source(run_dir: str, source: str, model: str) -> str:
    return f"{RunDir(run_dir).save_user_model(source)}:{model.rpartition(':')[2]}"


#: Seconds a user model may take to import and build its ModelSpec in the launcher before the run is refused.
MODEL_IMPORT_TIMEOUT_S = 60.0


def load_model_within(path: str, timeout: float) -> Any:
    """:func:`ssptk.core.models.load_model` in a daemon thread, so that a module that hangs while it is
    imported fails the run in one line instead of blocking the launcher for good (the thread is left)."""
    from ssptk.core.models import load_model

    box: dict[str, Any] = {}

    def load() -> None:
        try:
            box["spec"] = load_model(path)
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            box["error"] = e

    t = threading.Thread(target=load, name="ssptk-model-import", daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise UsageError(f"model {path!r}: importing it and calling it did not finish within {timeout:g} s; does "
                         "its module run something long (or wait for input) when imported?")
    if "error" in box:
        raise _model_left(f"model {path!r}", box["error"])
    return box["spec"]


def _model_left(model: str, e: BaseException) -> BaseException:
    """What a model's import or call raised (``model``: how to name it), as the launcher passes it on.
    ``sys.exit()`` would end ssptk with the model's exit code (0: success, nothing written), and a
    ``KeyboardInterrupt`` no signal sent (the model is loaded in a thread of its own, which signals never reach)
    would read as the user's: both fail the run in one line instead (:class:`RunFailed`, nothing started)."""
    if isinstance(e, SystemExit):
        what = f"called sys.exit({e.code!r})"
    elif isinstance(e, KeyboardInterrupt):
        what = "raised KeyboardInterrupt (no signal came)"
    else:
        return e
    return RunFailed(TaskFailure.of("ssptk", f"{model} {what} while ssptk imported it and called it: a model "
                                             "function must return an ssptk.ModelSpec; nothing was started"))


def check_model(opts: RunOptions) -> None:
    """The user model imports and returns a ModelSpec that fits ``--data-split``; raises :class:`UsageError`."""
    # builtins need no check, and importing TF here would cost seconds
    user = ":" in opts.model and not opts.model.startswith(USER_MODEL_FILE + ":")
    if user or (opts.data_split != "iid" and ":" not in opts.model):  # a %%dtrain cell's model: in its task
        from ssptk.core.models import check_split

        check_split(load_model_within(opts.model, MODEL_IMPORT_TIMEOUT_S), opts.data_split, opts.model)


def check_before_start(opts: RunOptions) -> dict[str, str]:
    """What resolving cannot check alone: the model (:func:`check_model`), ``--gpus`` fits the machine, and the
    commands ``--network`` needs are here.
    Returns :func:`ssptk.launch.gpus.assign_gpus`'s task -> GPU map; raises :class:`UsageError`."""
    check_model(opts)
    # before any process starts: what this machine cannot hold, or lacks for the links asked for, is refused in one line
    check_memory(opts, sized=not opts.model.startswith(USER_MODEL_FILE + ":"))
    if opts.network_spec is not None:
        from ssptk.launch import tools

        for command in ("tc", "ip"):
            tools.require(command, f"--network {opts.network}")
    from ssptk.launch.gpus import assign_gpus

    return assign_gpus(opts.gpus, opts.workers)


def run(*, progress: ProgressFn | None = None, observer: RunObserver | None = None, raise_on_failure: bool = True,
        warm: bool = False, model_source: str | None = None, cancel: threading.Event | None = None,
        **options: Any) -> RunResult:
    """Train one model on a local cluster and return its :class:`RunResult`.

    Options are those of ``ssptk run`` (see :data:`ssptk.core.options.OPTIONS`), e.g.
    ``ssptk.run(model="linear", mode="ssp", staleness=2, workers=3, steps=200, straggler=["2:0.02"])``.
    Bad options raise :class:`UsageError` before any process starts; a failed run raises
    :class:`RunFailed` (carrying the failing task and its log tail) unless ``raise_on_failure`` is false.
    ``progress(done, total)`` and ``observer`` (a :class:`~ssptk.launch.observers.RunObserver`) follow the
    run as it goes.
    ``warm``: run on a warm cluster kept alive for the next run with the same workers and GPUs (see
    :mod:`ssptk.launch.warm`; :func:`shutdown` ends them); allreduce always starts its own tasks.
    ``model_source``: Python code defining the function named by ``model`` (what a ``%%dtrain`` cell
    holds); it is saved as ``user_model.py`` in the run directory, so ``--model <dir>/user_model.py:NAME``
    repeats the run. ``cancel``: an event that, once set, stops the run as Ctrl-C would (it raises
    :class:`~ssptk.core.errors.RunInterrupted`).
    """
    return execute(prepare(model_source=model_source, **options), progress=progress, observer=observer,
                   raise_on_failure=raise_on_failure, warm=warm, cancel=cancel)


def run_resolved(opts: RunOptions, *, progress: ProgressFn | None = None, observer: RunObserver | None = None,
                 raise_on_failure: bool = True, warm: bool = False) -> RunResult:
    """:func:`run` of options resolved already (:func:`ssptk.core.options.resolve`: a comparison's, once per
    label)."""
    return execute(prepare_resolved(opts), progress=progress, observer=observer, raise_on_failure=raise_on_failure,
                   warm=warm)


@dataclass(frozen=True)
class PreparedRun:
    """A run whose options, model, GPUs and directory were checked and claimed, not started yet."""

    opts: RunOptions
    run_dir: str
    gpus: dict[str, str]
    launched: float


def prepare(*, model_source: str | None = None, **options: Any) -> PreparedRun:
    """Everything :func:`run` does before a process starts: resolve the options, check the model and GPUs,
    create the run directory (and save ``model_source`` in it). Raises :class:`UsageError`."""
    launched = time.time()
    if model_source is not None:
        options["model"] = _source_model_check(model_source, options.get("model"))
    return prepare_resolved(resolve(**options), model_source, launched)


def prepare_resolved(opts: RunOptions, model_source: str | None = None, launched: float | None = None) -> PreparedRun:
    """:func:`prepare` of options resolved already (:func:`ssptk.core.options.resolve`); ``launched``: when the run
    was asked for (default: now)."""
    launched = time.time() if launched is None else launched
    gpus = check_before_start(opts)
    run_dir = new_run_dir(opts.out, opts.mode)
    opts.out = run_dir
    if model_source is not None:
        opts.model = _save_source(run_dir, model_source, opts.model)
    return PreparedRun(opts, run_dir, gpus, launched)


def execute(prepared: PreparedRun, *, progress: ProgressFn | None = None, observer: RunObserver | None = None,
            raise_on_failure: bool = True, warm: bool = False, cancel: threading.Event | None = None) -> RunResult:
    """Start a :func:`prepare`-d run and follow it to its end (the arguments as :func:`run`'s)."""
    opts, run_dir, launched = prepared.opts, prepared.run_dir, prepared.launched
    observers: list[RunObserver] = [o for o in (observer, None if progress is None else ProgressObserver(progress))
                                    if o is not None]
    total = opts.workers * opts.steps
    with_ps = opts.mode != "allreduce"
    gpus = {k: v for k, v in prepared.gpus.items() if with_ps or k != "ps:0"}
    for o in observers:
        o.started(run_dir, opts, total)
    run_tasks = _run_warm if warm and with_ps and not opts.restart_failed else _run_cold
    try:
        outcome = run_tasks(opts, run_dir, gpus, observers, total, launched, cancel)
    except KeyboardInterrupt as e:  # Ctrl-C, a signal, or the cancel event: the logs and summary are kept
        stop = interruption(e)
        finish_run(run_dir, opts, stop)
        for o in observers:
            o.finished(None)
        if isinstance(e, RunInterrupted):
            raise
        raise RunInterrupted("interrupted; every task was stopped and the logs kept", signal=stop.signal) from None
    failure = outcome.failure
    if failure is None and not RunDir(run_dir).final():  # the summary and the exit code must agree
        failure = TaskFailure.of("worker:0", "finished without writing model/final.json")
    try:
        summary, failure = finish_run(run_dir, opts, failure, outcome.ps_train_cpu_s)
    except KeyboardInterrupt as e:  # a signal while the summary was made: one is kept all the same, saying so
        if not RunDir(run_dir).summary():
            finish_run(run_dir, opts, interruption(e))
        for o in observers:
            o.finished(None)
        raise
    result = RunResult(run_dir, opts, summary, failure)
    for o in observers:
        o.finished(result)
    if failure is not None and raise_on_failure:
        raise RunFailed(failure, result)
    return result


def _run_cold(opts: RunOptions, run_dir: str, gpus: dict[str, str], observers: list[RunObserver], total: int,
              launched: float, cancel: threading.Event | None) -> Outcome:
    """Start the run's own tasks, follow the run, stop them."""
    from ssptk.launch.cluster import LocalCluster
    from ssptk.launch.shared import SharedCluster

    kind = SharedCluster if opts.shared else LocalCluster
    for attempt in range(PORT_RETRIES):
        with kind(opts.workers, run_dir, gpus, with_ps=opts.mode != "allreduce", ps_tasks=opts.ps,
                  network=opts.network_spec) as cluster:
            # inside the `with`: whatever fails from here on, the cluster's namespace and tasks are let go
            RunDir(run_dir).write_config(opts, cluster.spec, dict(gpus), launched=launched,
                                         tasks={"warm": False, "layout": _layout(opts), "cores": machine_cores(),
                                                **cluster.conditions()})
            cluster.start(to_argv(opts), run_id=f"run{uuid.uuid4().hex[:12]}")
            failure = cluster.wait_ready(cancel=cancel, progress=lambda r, p: notify_starting(observers, r, p))
            if failure is None:
                before = cluster.traffic()
                outcome = supervise(cluster, run_dir, total, observers, opts, cancel)
                _record_traffic(run_dir, before, cluster.traffic())
                return outcome
            if attempt + 1 < PORT_RETRIES and _port_taken(failure):
                RunDir(run_dir).set_aside_attempt()
                continue
            return Outcome(not_restarted_in_start_up(failure) if opts.restart_failed else failure)
    raise AssertionError("unreachable")


def _run_warm(opts: RunOptions, run_dir: str, gpus: dict[str, str], observers: list[RunObserver], total: int,
              launched: float, cancel: threading.Event | None) -> Outcome:
    """Run on a warm cluster (started now if there is none), which is kept if the run succeeds."""
    from ssptk.launch import warm

    rd = RunDir(run_dir)
    os.makedirs(rd.logs_dir, exist_ok=True)
    for attempt in range(PORT_RETRIES):
        cluster, reused, failure = warm.acquire(opts.workers, gpus, cancel,
                                                lambda r, p: notify_starting(observers, r, p), shared=opts.shared,
                                                ps_tasks=opts.ps, network=opts.network_spec)
        if failure is None:
            break
        if attempt + 1 == PORT_RETRIES or not _port_taken(failure):
            rd.write_config(opts, cluster.spec, dict(gpus), launched=launched,
                            tasks={"warm": True, "reused": False, "layout": _layout(opts), "cores": machine_cores(),
                                   **cluster.conditions()})
            return Outcome(failure)
    ok = False
    try:
        rd.write_config(opts, cluster.spec, dict(gpus), launched=launched,
                        tasks={"warm": True, "reused": reused, "runs_served": cluster.runs_served + 1,
                               "layout": _layout(opts), "cores": machine_cores(), **cluster.conditions()})
        before = cluster.traffic()
        cluster.submit(run_dir, to_argv(opts), run_id=f"run{uuid.uuid4().hex[:12]}")
        outcome = supervise(cluster, run_dir, total, observers, opts, cancel)
        _record_traffic(run_dir, before, cluster.traffic())
        ok = outcome.failure is None
        return outcome
    finally:
        warm.release(cluster, ok)


def _record_traffic(run_dir: str, before: dict[str, Any] | None, after: dict[str, Any] | None) -> None:
    """``traffic.json``: what each task sent and received through its link during the run (the counters' change,
    so a warm cluster's earlier runs are not counted). Never fails the run: without it, no traffic is shown."""
    if before is None or after is None:
        return
    try:
        RunDir(run_dir).write_traffic(after, before)
    except (OSError, DiskFull):  # a full disk is reported by the summary's own write
        pass


def _layout(opts: RunOptions) -> str:
    """What config.json's ``tasks.layout`` says: the layout the run really used."""
    return "shared" if opts.shared else "processes"


def shutdown() -> Stopped:
    """Stop the warm clusters this process keeps (see ``run(warm=True)``): the idle ones now, one serving a run as
    soon as that run ends; returns how many it stopped (an ``int``; :class:`~ssptk.launch.warm.Stopped`)."""
    from ssptk.launch import warm

    return warm.shutdown_warm()


def _port_taken(failure: TaskFailure) -> bool:
    text = " ".join(failure.log_tail).lower()
    return "address already in use" in text or "failed to bind" in text or "could not start grpc server" in text
