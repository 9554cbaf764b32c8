"""The task entry point: ``python -m ssptk.worker --cluster JSON --task worker:0 [run options]``.

The same command runs a task of a local cluster (started by :mod:`ssptk.launch.cluster`) or of a cluster a
user starts by hand on several hosts: the cluster spec says where every task is, ``--task`` which one
this is, and the run options must be the same on every task.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from ssptk.core.errors import UsageError
from ssptk.core.labels import parse_mode
from ssptk.core.network import task_view
from ssptk.core.option_args import add_run_arguments, from_namespace
from ssptk.core.options import RunOptions
from ssptk.rundir import RunDir
from ssptk.rundir.contract import MAX_JSON_BYTES, NotRegular, open_regular
from ssptk.rundir.space import is_disk_full
from ssptk.rundir.task_status import DONE
from ssptk.runtime.failure import one_line, report_uncaught, run_guarded, task_error
from ssptk.runtime.fork_server import FORK_SERVER_FLAG, LISTEN_FLAG, serve
from ssptk.runtime.host_dir import keep_in_host_dir, run_identity
from ssptk.runtime.protocol import (
    EXIT_DISK_FULL,
    READY,
    RUN_DONE,
    report_end,
    report_failure,
    report_ready,
    report_run_done,
)
from ssptk.runtime.quiet_stderr import quiet_stderr, to_log
from ssptk.runtime.reaper import become_subreaper, exit_with_descendants, kill_descendants, reap_on_sigterm
from ssptk.runtime.tf_import import skip_eager_keras

__all__ = ["task_main", "parser", "parse_cluster", "parse_task"]


#: how long a PS that no launcher stops keeps serving after the run is over, for the workers' sessions to close
PS_LINGER_S = 1.0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ssptk worker", description="Run one task (PS or worker) of a cluster.")
    p.add_argument("--cluster", required=True,
                   help='cluster spec as JSON: {"ps": ["host:port"], "worker": ["host:port", ...]} (or @file); or '
                        "tf_config (the TF_CONFIG variable, as Kubernetes operators such as Kubeflow's TFJob set it) "
                        "or slurm (the SLURM_* variables srun sets: rank 0 is ps:0, the next ranks are the workers)")
    p.add_argument("--task", default=None,
                   help="this task: ps:0 or worker:I (shared: every task of the cluster in this process, see "
                        "--layout); with --cluster tf_config or slurm it comes from the environment")
    p.add_argument("--port-base", type=_port_base, default="auto", metavar="PORT",
                   help="--cluster slurm: the port of each node's first task; its next tasks take the next ports "
                        "(auto: from the job and step ids, so that jobs sharing nodes do not collide)")
    p.add_argument("--run-id", default=None,
                   help="name of the run's state on the PS (same on every task; default: run, or the job and step "
                        "under --cluster slurm)")
    p.add_argument("--serve", action="store_true",
                   help="keep serving: read one run per line on stdin (JSON with run_id and argv); a warm cluster")
    p.add_argument("--rejoin", type=int, default=0, metavar="K",
                   help="this worker was started again (K-th time) and joins a running training")
    p.add_argument("--worker-gpus", default="", metavar="LIST",
                   help="--task shared: each worker's GPU among those the process sees (0,1,-,...; -: CPU)")
    p.add_argument("--jobs", default=None, metavar="FILE",
                   help="--task predict: the predicted runs to make (JSON; see ssptk.runtime.predict_task)")
    add_run_arguments(p)
    return p


def _port_base(text: str) -> str | int:
    if text == "auto":
        return text
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"give auto or a port number, not {text!r}") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"give auto or a port from 1 to 65535, not {text}")
    return port


def _cluster_file(path: str) -> str:
    """``--cluster @FILE``'s text: a regular file (a FIFO would block, a device never end) of at most
    :data:`~ssptk.rundir.contract.MAX_JSON_BYTES`, counted as read."""
    try:
        with open_regular(path) as f:
            data = f.read(MAX_JSON_BYTES + 1)
    except OSError as e:
        why = e.strerror if isinstance(e, NotRegular) else (e.strerror or type(e).__name__).lower()
        raise UsageError(f"--cluster @{path}: {why}: give a JSON file of {{\"ps\": [...], \"worker\": [...]}}") \
            from None
    if len(data) > MAX_JSON_BYTES:
        raise UsageError(f"--cluster @{path}: larger than {MAX_JSON_BYTES // 2**20} MiB: is it the cluster's spec?")
    return data.decode("utf-8", errors="replace")


def parse_cluster(text: str) -> dict[str, list[str]]:
    """``--cluster``'s JSON (or ``@FILE`` holding it; a whole ``TF_CONFIG`` too) as ``{job: [host:port, ...]}``."""
    if text.startswith("@"):
        text = _cluster_file(text[1:])
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(f"--cluster is not valid JSON ({e.msg}): give {{\"ps\": [...], \"worker\": [...]}}") from None
    if isinstance(spec, dict) and "cluster" in spec:  # a whole TF_CONFIG is accepted too
        spec = spec["cluster"]
    if not isinstance(spec, dict) or not spec.get("worker"):
        raise UsageError('--cluster needs a "worker" list of host:port (and "ps" for sync, ssp and async)')
    return {k: list(v) for k, v in spec.items()}


def _cluster_and_task(args: argparse.Namespace) -> tuple[dict[str, list[str]], str, str]:
    """The cluster, this task and who started it (``hand``, ``tf_config``, ``slurm``) from the arguments."""
    from ssptk.runtime.cluster_env import SOURCES, from_environment, job_port_base, job_run_id

    if args.cluster in SOURCES:
        mode, _ = parse_mode(args.mode or "ssp")
        slurm = args.cluster == "slurm"
        base = job_port_base() if args.port_base == "auto" else int(args.port_base)
        args.run_id = args.run_id or (job_run_id("run") if slurm else "run")
        cluster, task = from_environment(args.cluster, mode, base, args.ps or 1)
        if args.task is not None and args.task != task:
            raise UsageError(f"--task {args.task} contradicts the environment, which makes this task {task}: "
                             f"drop --task")
        return cluster, task, args.cluster
    args.run_id = args.run_id or "run"
    if args.task is None:
        raise UsageError("--task is needed with a cluster spec: ps:0 or worker:I (or use --cluster tf_config / slurm)")
    return parse_cluster(args.cluster), args.task, "hand"


def parse_task(text: str, cluster: dict[str, list[str]]) -> tuple[str, int]:
    if text == "shared":
        return "shared", 0
    job, _, idx = text.partition(":")
    if job not in ("ps", "worker") or not idx.isdigit() or int(idx) >= len(cluster.get(job, [])):
        raise UsageError(f"--task {text!r} is not in the cluster: use ps:0 or worker:I "
                         f"with I < {len(cluster['worker'])}")
    return job, int(idx)


def _watch_parent() -> None:
    """Exit if the process that started this task goes away (no orphaned TensorFlow servers)."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                exit_with_descendants(3)

    if os.environ.get("SSPTK_WATCH_PARENT") == "1":
        threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _serve_forks(args: list[str]) -> list[str] | None:
    """``--fork-server --listen PATH`` (a server several launchers share) or ``--fork-server FD`` (one launcher's:
    the socket it passed): :func:`~ssptk.runtime.fork_server.serve`."""
    if args[:1] == [LISTEN_FLAG]:
        if len(args) != 2:
            raise UsageError(f"{FORK_SERVER_FLAG} {LISTEN_FLAG} takes one PATH: where to make the server's socket")
        return serve(path=args[1])
    if len(args) != 1 or not args[0].isdigit():
        raise UsageError(f"{FORK_SERVER_FLAG} takes {LISTEN_FLAG} PATH (a server several processes share)")
    return serve(int(args[0]))


def task_main(argv: list[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else argv
    if given[:1] == [FORK_SERVER_FLAG]:  # a cluster's fork server (ssptk.runtime.fork_server)
        try:
            forked = _serve_forks(given[1:])
        except UsageError as e:  # --listen PATH taken (what is there is kept)
            print(f"ssptk worker: error: {e}", file=sys.stderr)
            return 2
        if forked is None:
            exit_with_descendants(0)  # skips TF's slow teardown
        argv = forked  # this process is now one of the cluster's tasks
    become_subreaper()  # what user code starts ends with the task (ssptk.runtime.reaper)
    reap_on_sigterm()
    skip_eager_keras()  # ~1.4 s less start-up per task (ssptk.runtime.tf_import)
    args = parser().parse_args(argv)
    own = os.environ.get("SSPTK_WATCH_PARENT") != "1" and not args.serve and args.task != "predict"
    # no launcher keeps this task's log (Slurm, TF_CONFIG, by hand): its stderr without TensorFlow's start-up
    # chatter, which TF_CPP_MIN_LOG_LEVEL does not reach; SSPTK_TF_LOGS=1 shows it (ssptk.runtime.quiet_stderr)
    log = quiet_stderr() if own else None
    if args.task == "predict":  # no cluster: one process replays simulated runs (ssptk.runtime.predict_task)
        return _predict(args.jobs)
    try:
        cluster, started_by, opts, spec = _resolve(args)
    except UsageError as e:
        print(f"ssptk worker: error: {e}", file=sys.stderr)
        return 2
    job, index = parse_task(args.task, cluster)
    _watch_parent()
    run_dir = opts.out or "."
    identity = run_identity(cluster, args.run_id, opts) if own else None
    if identity is not None:  # its status and log in its host's directory (ssptk.runtime.host_dir)
        keep_in_host_dir(run_dir, args.task, identity, log)
        report_uncaught(args.task)
    if job == "worker" and index == 0 and not args.serve and not os.path.exists(RunDir(run_dir).config_path):
        # tasks started by hand (several hosts) have no launcher to write config.json: worker 0 does
        RunDir(run_dir).write_config(opts, cluster, {"worker:0": os.environ.get("CUDA_VISIBLE_DEVICES")},
                                     started_by=started_by, identity=identity)
    if job == "shared":
        return _shared(args, cluster, opts, spec)
    if opts.mode == "allreduce":
        return _allreduce(args.task, cluster, opts, spec, run_dir)
    import tensorflow as tf

    for gpu in tf.config.list_physical_devices("GPU"):
        tf.config.experimental.set_memory_growth(gpu, True)
    view = task_view(cluster, args.task, os.environ)  # with --network: the other tasks at their links' addresses
    server = tf.compat.v1.train.Server(tf.compat.v1.train.ClusterSpec(view), job_name=job, task_index=index,
                                       start=True)
    _ready(args.task)
    if job == "ps":
        _ps(server, args.run_id, identity, index, cluster)
        return 0
    _worker(args, cluster, index, server.target, opts, spec, run_dir, identity)
    return 0


def _resolve(args: argparse.Namespace) -> tuple[dict[str, list[str]], str | None, RunOptions, Any]:
    """The task's cluster (``args.task`` set to its canonical name), how it was given, the run options and the model,
    or :class:`UsageError`."""
    cluster, args.task, started_by = _cluster_and_task(args)
    job, _ = parse_task(args.task, cluster)
    if args.workers is not None and args.workers != len(cluster["worker"]):
        raise UsageError(f"--workers {args.workers} does not match the cluster's {len(cluster['worker'])} workers: "
                         "drop --workers (the cluster says how many)")
    opts = from_namespace(args, workers=len(cluster["worker"]))
    if job == "shared" and opts.mode == "allreduce":
        raise UsageError("allreduce needs a process per worker: it cannot run with --task shared")
    from ssptk.core.models import load_model

    return cluster, started_by, opts, load_model(opts.model)


def _allreduce(task: str, cluster: dict[str, list[str]], opts: RunOptions, spec: Any, run_dir: str) -> int:
    """An allreduce worker, to its end (allreduce has no PS task)."""
    job, index = parse_task(task, cluster)
    if job != "worker":
        print("ssptk worker: error: allreduce has no PS task", file=sys.stderr)
        return 2
    _ready(task)
    from ssptk.runtime import allreduce

    view = task_view(cluster, task, os.environ)
    run_guarded(lambda: allreduce.train_worker(spec, opts, view, index, run_dir), run_dir, index, cluster=cluster)
    report_end(task, DONE)
    exit_with_descendants(0)  # skips TF's slow teardown
    return 0


def _ready(task: str) -> None:
    """Say that ``task``'s server is up: on stdout (and in its own log, if it keeps one), and in its status file."""
    print(f"{READY} {task}", flush=True)
    to_log(f"{READY} {task}\n")
    report_ready(task)


def _ps(server: Any, run_id: str, identity: str | None, index: int, cluster: dict[str, list[str]]) -> None:
    """PS task ``index``: serve until the launcher stops it, or, started by hand, srun or a TFJob, until worker 0
    has saved the model (then exit 0: srun waits for every task)."""
    if os.environ.get("SSPTK_WATCH_PARENT") == "1":  # a launcher's PS: the launcher stops it
        server.join()
        return
    from ssptk.runtime.identity import publish
    from ssptk.runtime.ps_graph import wait_for_run_end

    publish(server.target, identity or run_id, index)  # workers check it when they connect (ssptk.runtime.identity)
    wait_for_run_end(server.target, run_id, len(cluster["ps"]))
    report_end(f"ps:{index}", DONE)
    # the workers close their sessions just after the run is over: a PS gone at once makes each of them log
    # "UNAVAILABLE: recvmsg:Connection reset by peer" (CleanupGraph, DeleteWorkerSession) though all went well
    time.sleep(PS_LINGER_S)
    exit_with_descendants(0)


def _worker(args: argparse.Namespace, cluster: dict[str, list[str]], index: int, target: str, opts: RunOptions,
            spec: Any, run_dir: str, identity: str | None) -> None:
    """A worker task of the processes layout: its runs (one, or one per stdin line with ``--serve``), then exit."""
    from ssptk.core.models import load_model
    from ssptk.runtime.local_loop import trainer_for

    if args.serve:
        def serve_run(opts: RunOptions, run_dir: str, run_id: str) -> None:
            def train() -> None:
                trainer_for(opts.mode)(load_model(opts.model, fresh=True), opts, cluster, index, target, run_dir,
                                       container=run_id).run(reset_container=True)

            run_guarded(train, run_dir, index)

        _serve(serve_run, f"worker:{index}")
        return

    def train() -> None:
        if os.environ.get("SSPTK_WATCH_PARENT") != "1":  # not the launcher's task (its PS publishes no identity)
            from ssptk.runtime.identity import check

            check(target, cluster, args.task, identity or args.run_id)  # never another run's PS (its identity)
        trainer_for(opts.mode)(spec, opts, cluster, index, target, run_dir, container=args.run_id,
                               incarnation=args.rejoin).run(rejoin=args.rejoin)

    run_guarded(train, run_dir, index, cluster=cluster)
    report_end(f"worker:{index}", DONE)
    exit_with_descendants(0)  # skips TF's slow teardown of the server threads


def _predict(jobs: str | None) -> int:
    """``--task predict --jobs FILE``: predicted runs; an error is one line in the log and exit code 1."""
    _watch_parent()
    try:
        if not jobs:
            raise UsageError("--task predict needs --jobs FILE")
        from ssptk.runtime.predict_task import predict_jobs

        predict_jobs(jobs)
    except BaseException as e:  # noqa: BLE001 - the launcher shows the error of the task's status file
        report_failure("predict", task_error(e, f"{type(e).__name__}: {one_line(e)}"))
        print(f"ssptk worker: error: predict: {type(e).__name__}: {one_line(e)}", file=sys.stderr, flush=True)
        if not isinstance(e, UsageError):
            import traceback

            traceback.print_exc()
        exit_with_descendants(EXIT_DISK_FULL if is_disk_full(e) else 1)
    exit_with_descendants(0)  # skips TF's slow teardown
    return 0


def _shared(args: argparse.Namespace, cluster: dict[str, list[str]], opts: RunOptions, spec: Any) -> int:
    """``--task shared``: every task's server in this process, the workers as threads
    (:mod:`ssptk.runtime.shared_layout`)."""
    from ssptk.core.models import load_model
    from ssptk.runtime.shared_layout import SharedTasks

    gpus = [None if g in ("", "-") else int(g) for g in args.worker_gpus.split(",")] if args.worker_gpus else []
    tasks = SharedTasks(cluster, gpus)

    def guard(fn: Callable[[], None], run_dir: str, index: int, on_failure: Callable[[int], None]) -> None:
        run_guarded(fn, run_dir, index, on_failure)

    if args.serve:
        def serve_run(opts: RunOptions, run_dir: str, run_id: str) -> None:
            tasks.train(lambda: load_model(opts.model, fresh=True), opts, run_dir, run_id, guard, reset_container=True)

        _serve(serve_run, "shared", [f"worker:{i}" for i in range(len(cluster["worker"]))])
        return 0
    tasks.train(lambda: spec, opts, opts.out or ".", args.run_id, guard)
    exit_with_descendants(0)
    return 0


def _serve(run: Callable[[RunOptions, str, str], None], log_task: str, tasks: list[str] | None = None) -> None:
    """A warm task: run after run on the same server(s), one per stdin line, until stdin closes.

    Each run's state lives in its own container on the PS (``run_id``), which the chief resets when
    the run is over, so nothing of one run (variables, counters, queues) is seen by the next. The
    task's output goes to the run's own ``logs/<log_task>.log``, which ends with ``RUN_DONE run_id``; the
    status file of each of ``tasks`` (default: ``log_task``) then names the run (:mod:`ssptk.runtime.protocol`).
    A run that fails ends the process: the launcher then discards the whole cluster.
    """
    run_parser = argparse.ArgumentParser(prog="ssptk worker --serve")
    add_run_arguments(run_parser)
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        opts = from_namespace(run_parser.parse_args(msg["argv"]))
        run_dir = opts.out or "."
        _redirect_output(RunDir(run_dir).task_log(log_task))
        run(opts, run_dir, msg["run_id"])
        kill_descendants()  # the task lives on; what the run's user code started does not
        print(f"{RUN_DONE} {msg['run_id']}", flush=True)
        report_run_done(tasks or [log_task], msg["run_id"])


def _redirect_output(path: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


if __name__ == "__main__":
    sys.exit(task_main())
