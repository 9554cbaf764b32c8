"""The one owner of a local cluster's processes: starts, watches and stops every task.

Each task is ``python -m ssptk.worker`` in its own session (process group) with its output in
``logs/<task>.log``. Stopping escalates SIGTERM -> wait -> SIGKILL on the whole group; the children
also die with their parent (``PR_SET_PDEATHSIG`` and a watchdog thread), so a killed kernel or CLI
leaves no TensorFlow server behind. Where the OS allows it, all tasks of a cluster share a private
network namespace (:mod:`ssptk.launch.netns`), so nothing but the cluster itself can reach their ports.
"""
from __future__ import annotations

import ctypes
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

from ssptk.core.errors import RunInterrupted, TaskFailure
from ssptk.launch import netns
from ssptk.launch.tempdirs import make_temp_dir
from ssptk.rundir import RunDir
from ssptk.rundir.space import disk_full
from ssptk.runtime import reaper
from ssptk.runtime.protocol import EXIT_DISK_FULL, READY, RUN_DONE

#: ``progress(ready, pending)``: the names of the tasks whose servers are up, and of those still starting.
StartProgress = Callable[[list[str], list[str]], None]
KILL_WAIT_S = 10.0  # the most stop() waits for a task after SIGKILL
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


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        # SIGTERM, not SIGKILL: the task then kills what its user code started (ssptk.runtime.reaper)
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _preexec() -> Any:
    # PR_SET_PDEATHSIG fires when the forking *thread* ends, so only the main thread may use it;
    # the tasks' own parent watchdog covers runs started from other threads.
    return _die_with_parent if threading.current_thread() is threading.main_thread() else None


def _is_loopback(host: str) -> bool:
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class Task:
    """One process of the cluster."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: str
    proc: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = field(default=None, repr=False)

    @property
    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()


class LocalCluster:
    """One PS (unless ``with_ps`` is false) and ``workers`` worker tasks on free localhost ports.

    Use as a context manager; :meth:`stop` is idempotent and always leaves no process behind.

    The cluster's network namespace is made here, so ``isolation`` is known before :meth:`start`:
    ``"netns"`` (the tasks run in a private user + network namespace: only they can reach their
    ports) or ``"none (<why>)"`` (as before; see :mod:`ssptk.launch.netns`: not permitted by the OS,
    ``SSPTK_NO_NETNS=1``, or a ``host`` that is not a loopback address).
    """

    def __init__(self, workers: int, run_dir: str, gpu_assignment: dict[str, str], with_ps: bool = True,
                 host: str = "127.0.0.1") -> None:
        self.run_dir = run_dir
        self.with_ps = with_ps
        ports = free_ports(workers + (1 if with_ps else 0), host)
        self.spec: dict[str, list[str]] = {"worker": [f"{host}:{p}" for p in ports[-workers:]]}
        if with_ps:
            self.spec = {"ps": [f"{host}:{ports[0]}"], **self.spec}
        self.gpu_assignment = gpu_assignment
        self.tasks: list[Task] = []
        self.restarts: dict[str, int] = {}  # worker -> times it was started again (see restart)
        self.serving = False  # warm: the workers serve one run after another (see submit)
        self.run_id: str | None = None
        self.runs_served = 0
        self.namespace: netns.Namespace | None = None
        self.task_tmp: str | None = None  # the tasks' TMPDIR while they run
        if _is_loopback(host):
            self.namespace, self.isolation = netns.isolate(_preexec())
        else:
            self.isolation = f"none (host {host} is not a loopback address)"

    @property
    def task_names(self) -> list[str]:
        return (["ps:0"] if self.with_ps else []) + [f"worker:{i}" for i in range(len(self.spec["worker"]))]

    def start(self, worker_args: list[str], run_id: str = "run", serve: bool = False) -> None:
        """Start every task with the same run options (``worker_args``).

        ``serve``: start a warm cluster instead, whose workers wait for runs given by :meth:`submit`.
        """
        base_env = self._prepare(serve)
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
        base_env["TMPDIR"] = self.task_tmp
        base_env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        base_env["SSPTK_WATCH_PARENT"] = "1"
        base_env["PYTHONUNBUFFERED"] = "1"
        # The tasks must run the same ssptk as this launcher, not whichever copy their cwd or
        # site-packages would give them.
        base_env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, base_env.get("PYTHONPATH", "")) if p)
        return base_env

    def _launch(self, name: str, env: dict[str, str], args: list[str]) -> None:
        """Start the process ``name`` (``logs/<name>.log``): ``python -m ssptk.worker --cluster SPEC *args``."""
        argv = [sys.executable, "-m", "ssptk.worker", "--cluster", json.dumps(self.spec), *args]
        task = Task(name, argv, env, RunDir(self.run_dir).task_log(name))
        task.log = open(task.log_path, "ab")
        self._spawn(task, task.argv, _preexec(), self.namespace)
        self.tasks.append(task)

    def _spawn(self, task: Task, argv: list[str], preexec: Any, ns: Any) -> None:
        # A serving worker reads its runs from stdin, and exits when the pipe closes.
        stdin = subprocess.PIPE if self.serving and task.name != "ps:0" else subprocess.DEVNULL
        # In the namespace: nsenter enters it and execs the task in place, so the task is still
        # this process's child (same pid, process group, pipes, death signal).
        task.proc = subprocess.Popen(ns.wrap(argv) if ns else argv, stdout=task.log, stderr=subprocess.STDOUT,
                                     stdin=stdin, env=task.env, start_new_session=True, preexec_fn=preexec,
                                     pass_fds=ns.fds if ns else ())

    def restart(self, name: str) -> int:
        """Start worker ``name`` again after it died; it rejoins the running training (``--rejoin K``, K:
        how many times this worker has been started again, this time included). Returns K."""
        task = self._task(name)
        if task.proc is not None:
            _signal_group(task.proc, signal.SIGKILL)  # anything the dead task left in its group
            task.proc.wait()
        attempt = self.restarts[name] = self.restarts.get(name, 0) + 1
        self._spawn(task, [*task.argv, "--rejoin", str(attempt)], _preexec(), self.namespace)
        return attempt

    def _task(self, name: str) -> Task:
        return next(t for t in self.tasks if t.name == name)

    def log_path(self, name: str) -> str | None:
        """Where task ``name``'s output goes (``None`` for a task this cluster does not have)."""
        task = next((t for t in self.tasks if t.name == name), None)
        return None if task is None else task.log_path

    def wait_exit(self, name: str, timeout: float) -> int | None:
        """Task ``name``'s exit code, waiting up to ``timeout`` seconds (``None``: still running)."""
        task = next((t for t in self.tasks if t.name == name and t.proc is not None), None)
        if task is None or task.proc is None:
            return None
        try:
            return task.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

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
            if cancel is not None and cancel.is_set():
                raise RunInterrupted("stopped by the user while the cluster was starting")
            came = pending & self._ready_tasks()
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

    def _ready_tasks(self) -> set[str]:
        """The tasks whose servers are up: each says so in its process's log (``SSPTK_READY <task>``)."""
        return {name for t in self.tasks for name in log_words(t.log_path, READY)}

    def submit(self, run_dir: str, worker_args: list[str], run_id: str) -> None:
        """Warm cluster: start one run (its options ``worker_args``) on the serving workers.

        Each worker's output for the run goes to ``run_dir/logs/worker-<i>.log``; the PS keeps its
        log where the cluster started.
        """
        if not self.serving:
            raise RuntimeError("submit() needs a cluster started with serve=True")
        self.run_id = run_id
        self.runs_served += 1
        line = (json.dumps({"run_id": run_id, "argv": worker_args}) + "\n").encode()
        for t in self.tasks:
            if t.name.startswith("worker"):
                t.log_path = RunDir(run_dir).task_log(t.name)
                t.proc.stdin.write(line)  # type: ignore[union-attr]
                t.proc.stdin.flush()  # type: ignore[union-attr]

    def poll(self) -> TaskFailure | None:
        """The first task that exited with an error (or a PS, or a serving worker, that exited at all)."""
        for t in self.tasks:
            code = t.exit_code
            if code is None or (code == 0 and t.name != "ps:0" and not self.serving):
                continue
            if code == EXIT_DISK_FULL:  # its own log may not have taken the message: the code says it
                return TaskFailure.of(t.name, str(disk_full(self._written_by(t))), code)
            reason = "exited unexpectedly" if code == 0 else ("was killed" if code < 0 else "failed")
            return self.failure(t.name, reason, code)
        return None

    @staticmethod
    def _written_by(t: Task) -> str:
        """The file a task was most likely writing when the disk filled: a worker's JSONL log."""
        run_dir = os.path.dirname(os.path.dirname(t.log_path))
        job, _, index = t.name.partition(":")
        return RunDir(run_dir).worker_log(int(index)) if job == "worker" else t.log_path

    def workers_finished(self) -> bool:
        """Every worker is done with the run (exited 0, or, serving, logged the run's end)."""
        workers = [t for t in self.tasks if t.name.startswith("worker")]
        if self.serving:
            marker = f"{RUN_DONE} {self.run_id}"
            return all(log_has(t.log_path, marker, tail=4096) for t in workers)
        return all(t.exit_code == 0 for t in workers)

    def exited_workers(self) -> list[str]:
        """Workers whose process exited 0 (a run's own tasks; a serving worker never exits on its own)."""
        if self.serving:
            return []
        return [t.name for t in self.tasks if t.name.startswith("worker") and t.exit_code == 0]

    def alive(self) -> bool:
        """Every task is still running (a warm cluster can take another run)."""
        return bool(self.tasks) and all(t.exit_code is None for t in self.tasks)

    def failure(self, name: str, reason: str, code: int | None = None) -> TaskFailure:
        """Task ``name`` failed: ``reason``, its exit ``code`` and its log's tail and last error line."""
        return TaskFailure.of(name, reason, code, self._task(name).log_path, explain=True)

    def stopped_tasks(self) -> list[str]:
        """Tasks whose process is stopped (state T, e.g. by SIGSTOP or a debugger): alive, but doing nothing."""
        out = []
        for t in self.tasks:
            if t.proc is None or t.proc.poll() is not None:
                continue
            fields = _proc_stat(t.proc.pid)
            if fields and fields[0] in ("T", "t"):
                out.append(t.name)
        return out

    def cpu_seconds(self, name: str) -> float | None:
        """CPU time (user + system) task ``name`` has used so far; ``None`` where /proc cannot tell."""
        task = next((t for t in self.tasks if t.name == name and t.proc is not None), None)
        if task is None:
            return None
        fields = _proc_stat(task.proc.pid)  # type: ignore[union-attr]
        try:
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # type: ignore[index]
        except (TypeError, IndexError, ValueError):
            return None

    def stop(self, grace: float = 3.0) -> None:
        """SIGTERM every task's process group, wait up to ``grace`` seconds, then SIGKILL what is left.

        A stopped task (SIGSTOP) is continued after the SIGTERM so that it acts on it; the wait after
        SIGKILL is bounded too, so a process stuck in the kernel cannot keep the caller forever."""
        live = [t for t in self.tasks if t.proc is not None and t.proc.poll() is None]
        # what the tasks' user code started (daemons too: tasks are subreapers): killed below if the
        # tasks' own reaping did not get to it
        seen = {p: s for t in live for p, s in reaper.descendants(t.proc.pid).items()}  # type: ignore[union-attr]
        for t in live:
            _signal_group(t.proc, signal.SIGTERM)  # type: ignore[arg-type]
            _signal_group(t.proc, signal.SIGCONT)  # type: ignore[arg-type]
        deadline = time.monotonic() + grace
        for t in live:
            try:
                t.proc.wait(max(0.0, deadline - time.monotonic()))  # type: ignore[union-attr]
            except subprocess.TimeoutExpired:
                pass
        for t in self.tasks:
            if t.proc is not None:
                _signal_group(t.proc, signal.SIGKILL)  # the group too: anything a task started
                try:
                    t.proc.wait(KILL_WAIT_S)
                except subprocess.TimeoutExpired:  # uninterruptible (D state): it dies when the kernel lets it
                    pass
                if t.proc.stdin is not None:
                    try:
                        t.proc.stdin.close()
                    except OSError:
                        pass
            if t.log is not None and not t.log.closed:
                t.log.close()
        reaper.kill_seen(seen)
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


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _proc_stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first); ``None`` if unreadable."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def log_words(path: str, marker: str) -> list[str]:
    """The word after each ``marker`` in the log, in order (``[]`` if it cannot be read)."""
    try:
        with open(path, "rb") as f:
            text = f.read().decode(errors="replace")
    except OSError:
        return []
    return re.findall(rf"{re.escape(marker)} (\S+)", text)


def log_has(path: str, marker: str, tail: int = 0) -> bool:
    """Whether ``marker`` is in the log (only its last ``tail`` bytes when given)."""
    try:
        with open(path, "rb") as f:
            if tail:
                f.seek(max(0, os.fstat(f.fileno()).st_size - tail))
            return marker.encode() in f.read()
    except OSError:
        return False
