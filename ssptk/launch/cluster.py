"""The one owner of a local cluster's processes: composes a :class:`~ssptk.launch.process.TaskProcess` per task.

The cluster holds what the tasks share: their ports and cluster spec, the network namespace, the temporary
directory (the tasks' ``TMPDIR`` and the status files they write, :mod:`ssptk.rundir.task_status`), and it
answers for all of them at once: are they all ready, has one failed (the typed
:class:`~ssptk.core.errors.TaskFailure`), has every worker finished, stop them all. The life of one process
(spawn in its own process group, poll, restart, TERM -> wait -> KILL) is :class:`TaskProcess`'s. Where the
OS allows it, all tasks of a cluster share a private network namespace (:mod:`ssptk.launch.netns`), so
nothing but the cluster itself can reach their ports.
"""
from __future__ import annotations

import ipaddress
import json
import os
import shutil
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from ssptk.core.errors import TaskFailure, UsageError, raise_if_stopped
from ssptk.core.network import LINKS_ENV, MAX_TASKS, Network, task_order
from ssptk.launch import forking, netns, tracking
from ssptk.launch.fork_client import ForkServer
from ssptk.launch.links import Links, LinksRefused, link_error
from ssptk.launch.process import TaskProcess, preexec, start_helper
from ssptk.launch.tempdirs import make_temp_dir
from ssptk.rundir import RunDir
from ssptk.rundir.space import disk_full
from ssptk.rundir.task_status import READY_STATE, STATUS_DIR_ENV
from ssptk.runtime.fork_server import TASK_ENV_DEFAULTS
from ssptk.runtime.protocol import EXIT_DISK_FULL

__all__ = ["LocalCluster", "StartProgress", "TaskProcess", "free_ports"]

#: ``progress(ready, pending)``: the names of the tasks whose servers are up, and of those still starting.
StartProgress = Callable[[list[str], list[str]], None]
#: The directory that holds the ``ssptk`` package this launcher runs: put first on the tasks' PYTHONPATH.
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct ports the OS says are free now (a later bind may still lose a race: callers retry)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _is_loopback(host: str) -> bool:
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class LocalCluster:
    """One PS (unless ``with_ps`` is false) and ``workers`` worker tasks on free localhost ports.

    Use as a context manager; :meth:`stop` is idempotent and always leaves no process behind.

    The cluster's network namespace is made here, so ``isolation`` is known before :meth:`start`:
    ``"netns"`` (the tasks run in a private user + network namespace: only they can reach their
    ports) or ``"none (<why>)"`` (as before; see :mod:`ssptk.launch.netns`: not permitted by the OS,
    ``SSPTK_NO_NETNS=1``, or a ``host`` that is not a loopback address).
    """

    def __init__(self, workers: int, run_dir: str, gpu_assignment: dict[str, str], with_ps: bool = True,
                 host: str = "127.0.0.1", ps_tasks: int = 1, network: Network | None = None) -> None:
        self.run_dir = run_dir
        self.with_ps = with_ps
        shards = ps_tasks if with_ps else 0
        ports = free_ports(workers + shards, host)
        self.spec: dict[str, list[str]] = {"worker": [f"{host}:{p}" for p in ports[shards:]]}
        if with_ps:
            self.spec = {"ps": [f"{host}:{p}" for p in ports[:shards]], **self.spec}
        self.network = network
        self.links: Links | None = None  # every task's link, built in the namespace (none where it cannot be)
        self.gpu_assignment = gpu_assignment
        self.tasks: list[TaskProcess] = []
        self.serving = False  # warm: the workers serve one run after another (see submit)
        self.run_id: str | None = None
        self.runs_served = 0
        self.namespace: netns.Namespace | None = None
        self.task_tmp: str | None = None  # while the tasks run: their TMPDIR (tmp/) and status files (status/)
        self.next_snapshot = 0.0  # when the /proc way of tracking next notes what the tasks started
        self.forks: ForkServer | None = None  # while the tasks run: what forks them (ssptk.launch.forking)
        self.status_dir = ""
        if _is_loopback(host):
            self.namespace, self.isolation = netns.isolate(preexec())
        else:
            self.isolation = f"none (host {host} is not a loopback address)"
        if network is not None and self.namespace is None:
            raise UsageError(f"--network {network} shapes links inside the cluster's private network namespace, and "
                             f"this cluster has none (isolation: {self.isolation}): unset SSPTK_NO_NETNS, or leave "
                             "--network out")
        #: ``"measured"``, or ``"not measured (<why>)"``: whether the links count what each task sends and receives
        self.traffic_note = "not measured (no private network namespace: its links count the bytes)"
        if self.namespace is not None:
            try:
                self._build_links()
            except BaseException:
                self.namespace.close()
                raise

    def _build_links(self) -> None:
        """Every task's link, shaped by ``--network`` or not, and counted. A run that shapes nothing goes on without
        them (its traffic not measured); one that asked for ``--network`` is refused in one line."""
        assert self.namespace is not None
        if self.network is None and len(self.task_names) > MAX_TASKS:  # with --network refused before start
            self.traffic_note = f"not measured (links tell at most {MAX_TASKS} tasks apart, and this run has " \
                                f"{len(self.task_names)})"
            return
        links = Links(self.task_names, self.network, self.namespace.wrap([]), self.namespace.fds)
        try:
            links.build()
        except LinksRefused as e:
            if self.network is not None:
                raise UsageError(link_error(e.why, self.network)) from None
            self.traffic_note = f"not measured ({e.why})"
            return
        self.links = links
        self.traffic_note = "measured"

    def conditions(self) -> dict[str, str]:
        """What config.json's ``tasks`` records of how this cluster's tasks run: ``isolation`` (see above),
        ``traffic`` (:attr:`traffic_note`) and ``tracking`` (``"cgroup"``, or ``"none (<why>)"``: how what the tasks'
        code starts is followed, :func:`ssptk.launch.tracking.method`)."""
        return {"isolation": self.isolation, "traffic": self.traffic_note, "tracking": tracking.method()}

    @property
    def task_names(self) -> list[str]:
        return task_order(self.spec)

    @property
    def worker_names(self) -> list[str]:
        return [n for n in self.task_names if n.startswith("worker:")]

    def start(self, worker_args: list[str], run_id: str = "run", serve: bool = False) -> None:
        """Start every task with the same run options (``worker_args``).

        ``serve``: start a warm cluster instead, whose workers wait for runs given by :meth:`submit`.
        """
        base_env = self._prepare(serve)
        self.forks = self._fork_server(base_env)
        for name in self.task_names:
            env = dict(base_env, CUDA_VISIBLE_DEVICES=self.gpu_assignment.get(name, ""))
            self._launch(name, env, ["--task", name, "--run-id", run_id, *(["--serve"] if serve else worker_args)])

    def _prepare(self, serve: bool) -> dict[str, str]:
        """Before the tasks start: the logs directory, the tasks' temporary directory; their environment."""
        self.serving = serve
        os.makedirs(RunDir(self.run_dir).logs_dir, exist_ok=True)
        base_env = dict(os.environ)
        # the tasks' temporary files (TensorFlow's autograph sources, a model's own) go with the cluster
        self.task_tmp = make_temp_dir("tasks")
        self.status_dir = os.path.join(self.task_tmp, "status")
        os.makedirs(os.path.join(self.task_tmp, "tmp"))
        os.makedirs(self.status_dir)
        base_env["TMPDIR"] = os.path.join(self.task_tmp, "tmp")
        base_env[STATUS_DIR_ENV] = self.status_dir
        if self.links is not None:
            base_env[LINKS_ENV] = "1"
        for name, value in TASK_ENV_DEFAULTS.items():  # a listening fork server takes the same
            base_env.setdefault(name, value)
        base_env["SSPTK_WATCH_PARENT"] = "1"
        base_env["PYTHONUNBUFFERED"] = "1"
        # The tasks must run the same ssptk as this launcher, not whichever copy their cwd or
        # site-packages would give them.
        base_env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, base_env.get("PYTHONPATH", "")) if p)
        return base_env

    def _fork_server(self, base_env: dict[str, str]) -> ForkServer | None:
        """The server that forks this cluster's tasks after one TensorFlow import (:mod:`ssptk.launch.forking`):
        for a CPU cluster of several processes, or of one (a prediction's) where a server has made that import
        already (``SSPTK_FORK_SERVER=PATH``, or an earlier cluster's of this process), unless
        ``SSPTK_FORK_SERVER=0``."""
        env = dict(base_env, CUDA_VISIBLE_DEVICES="")
        if not forking.enabled() or \
                (len(self.task_names) < 2 and forking.address() is None and not forking.running(env)) or \
                any(self.gpu_assignment.get(n) for n in self.task_names) or self.task_tmp is None:
            return None
        log = os.path.join(self.task_tmp, "fork-server.log")  # the server keeps writing after this cluster's end

        def start(server: ForkServer) -> None:  # outside the namespace: each task enters its cluster's own
            server.start(lambda argv, fds: start_helper(argv, server.env, log, None, fds), log)
        return forking.acquire_server(sys.executable, env, start)

    def _launch(self, name: str, env: dict[str, str], args: list[str], hosts: tuple[str, ...] = ()) -> None:
        """Start the process ``name`` (``logs/<name>.log``): ``python -m ssptk.worker --cluster SPEC *args``;
        ``hosts``: the tasks it holds, if not just ``name``. A serving worker reads its runs from stdin."""
        argv = [sys.executable, "-m", "ssptk.worker", "--cluster", json.dumps(self.spec), *args]
        task = TaskProcess(name, argv, env, RunDir(self.run_dir).task_log(name), self.status_dir, hosts,
                           stdin_pipe=self.serving and not name.startswith("ps:"), namespace=self.namespace,
                           forks=self.forks)
        task.start()
        self.tasks.append(task)

    def _host(self, name: str) -> TaskProcess | None:
        """The process that holds task ``name`` (``None`` for a task this cluster does not have)."""
        return next((t for t in self.tasks if name in t.hosts), None)

    def restart(self, name: str) -> int:
        """Start worker ``name`` again after it died; it rejoins the running training (``--rejoin K``, K:
        how many times this worker has been started again, this time included). Returns K."""
        task = self._host(name)
        if task is None:
            raise KeyError(name)
        return task.restart()

    def log_path(self, name: str) -> str | None:
        """Where task ``name``'s output goes (``None`` for a task this cluster does not have)."""
        task = self._host(name)
        return None if task is None else task.log_path

    def wait_exit(self, name: str, timeout: float) -> int | None:
        """Task ``name``'s exit code, waiting up to ``timeout`` seconds (``None``: still running)."""
        task = self._host(name)
        return None if task is None else task.wait(timeout)

    def wait_ready(self, timeout: float = 120.0, cancel: threading.Event | None = None,
                   progress: StartProgress | None = None) -> TaskFailure | None:
        """Block until every task's server is up; a failure naming the task if one exits first or time runs
        out. ``progress(ready, pending)`` hears each change (task names). Setting ``cancel`` raises
        :class:`~ssptk.core.errors.RunInterrupted` (the caller stops the tasks)."""
        deadline = time.monotonic() + timeout
        pending = set(self.task_names)
        if progress is not None:
            progress([], sorted(pending))
        while pending:
            raise_if_stopped(cancel, "stopped by the user while the cluster was starting")
            came = {name for name in pending if self._ready(name)}
            pending -= came
            if came and progress is not None:
                progress(sorted(set(self.task_names) - pending), sorted(pending))
            failure = self.poll()
            if failure is not None:
                return failure
            if time.monotonic() > deadline:
                name = sorted(pending)[0]
                return self.failure(name, f"not ready after {timeout:.0f} s")
            if pending:
                time.sleep(0.05)
        return None

    def _ready(self, name: str) -> bool:
        """Task ``name``'s server is up: its status file says so."""
        task = self._host(name)
        status = None if task is None else task.status(name)
        return status is not None and status.state == READY_STATE

    def submit(self, run_dir: str, worker_args: list[str], run_id: str) -> None:
        """Warm cluster: start one run (its options ``worker_args``) on the serving workers.

        Each serving process's output for the run goes to ``run_dir/logs/<task>.log``; the PS keeps its
        log where the cluster started.
        """
        if not self.serving:
            raise RuntimeError("submit() needs a cluster started with serve=True")
        self.run_id = run_id
        self.runs_served += 1
        line = (json.dumps({"run_id": run_id, "argv": worker_args}) + "\n").encode()
        for t in self.tasks:
            if t.stdin_pipe:
                t.log_path = RunDir(run_dir).task_log(t.name)
                t.send(line)

    def poll(self) -> TaskFailure | None:
        """The first task that exited with an error (or a PS, or a serving worker, that exited at all), named
        after what its status file says failed (in the shared layout: the worker whose failure ended it).

        Also follows what each task started (:meth:`track`): what an ended task started is killed here."""
        self.track()
        for t in self.tasks:
            code = t.exit_code
            if code is None or (code == 0 and not t.name.startswith("ps:") and not self.serving):
                continue
            reported = t.failed_status() if code != 0 else None
            name = reported.task if reported is not None else t.name
            if code == EXIT_DISK_FULL:  # its own log may not have taken the message: the code says it
                return TaskFailure.of(name, str(disk_full(self._written_by(name, t))), code)
            reason = "exited unexpectedly" if code == 0 else ("was killed" if code < 0 else "failed")
            return t.failure(name, reason, code)
        return None

    def track(self, now: bool = False) -> int:
        """Kill what ended tasks started; note what live ones started (the /proc way: every
        :data:`~ssptk.launch.tracking.SNAPSHOT_S`, or ``now``). How many processes were killed."""
        table = None
        if any(t.tracker is not None and t.tracker.snapshots for t in self.tasks) and \
                (now or time.monotonic() >= self.next_snapshot):
            table = tracking.proc_table()
            self.next_snapshot = time.monotonic() + tracking.SNAPSHOT_S
        return sum(t.track(table) for t in self.tasks)

    def _written_by(self, name: str, t: TaskProcess) -> str:
        """The file task ``name`` was most likely writing when the disk filled: a worker's JSONL log."""
        run_dir = os.path.dirname(os.path.dirname(t.log_path))
        job, _, index = name.partition(":")
        return RunDir(run_dir).worker_log(int(index)) if job == "worker" else t.log_path

    def workers_finished(self) -> bool:
        """Every worker is done with the run (exited 0, or, serving, its status names the run as finished)."""
        hosts = [(w, self._host(w)) for w in self.worker_names]
        if self.serving:
            done = [None if t is None else t.status(w) for w, t in hosts]
            return all(s is not None and s.run == self.run_id for s in done)
        return all(t is not None and t.exit_code == 0 for _, t in hosts)

    def exited_workers(self) -> list[str]:
        """Workers whose process exited 0 (a run's own tasks; a serving worker never exits on its own)."""
        if self.serving:
            return []
        return [w for w in self.worker_names if (t := self._host(w)) is not None and t.exit_code == 0]

    def alive(self) -> bool:
        """Every task is still running (a warm cluster can take another run)."""
        return bool(self.tasks) and all(t.exit_code is None for t in self.tasks)

    def failure(self, name: str, reason: str, code: int | None = None) -> TaskFailure:
        """Task ``name`` failed: ``reason``, its exit ``code``, the error it reported (else its log's last
        error line) and its log's tail."""
        task = self._host(name)
        if task is None:
            raise KeyError(name)
        return task.failure(name, reason, code)

    def stopped_tasks(self) -> list[str]:
        """Tasks whose process is stopped (state T, e.g. by SIGSTOP or a debugger): alive, but doing nothing."""
        return [t.name for t in self.tasks if t.stopped()]

    def cpu_seconds(self, name: str) -> float | None:
        """CPU time (user + system) task ``name``'s process has used so far; ``None`` where /proc cannot tell."""
        task = self._host(name)
        return None if task is None else task.cpu_seconds()

    def traffic(self) -> dict[str, Any] | None:
        """What every task sent and received so far through its link (bytes, packets; the links' rates), or
        ``None`` for a cluster without links (no private namespace)."""
        if self.links is None:
            return None
        return {"network": None if self.network is None else str(self.network), "measured_at": time.time(),
                "rates": {t: None if self.network is None else self.network.rate(t) for t in self.task_names},
                "tasks": self.links.traffic()}

    def stop(self, grace: float = 3.0) -> None:
        """SIGTERM every task's process group, wait up to ``grace`` seconds, then SIGKILL what is left.

        A stopped task (SIGSTOP) is continued after the SIGTERM so that it acts on it; the wait after
        SIGKILL is bounded too, so a process stuck in the kernel cannot keep the caller forever."""
        live = [t for t in self.tasks if t.running()]
        self.track(now=True)  # the last note of what they started: killed below if their own reaping misses it
        for t in live:
            t.terminate()
        deadline = time.monotonic() + grace
        for t in live:
            t.wait(deadline - time.monotonic())
        for t in self.tasks:
            t.kill()  # and what it started (its tracker)
        if self.forks is not None:  # the next cluster's, if it is still up
            forking.release_server(self.forks)
            self.forks = None
        if self.namespace is not None:  # the namespace goes with its last task
            self.namespace.close()
            self.namespace = None
        if self.task_tmp is not None:
            shutil.rmtree(self.task_tmp, ignore_errors=True)
            self.task_tmp = None

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
