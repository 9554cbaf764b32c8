"""The life of one task process: :class:`TaskProcess` spawns, polls, restarts, signals and stops it.

Each task is ``python -m ssptk.worker`` in its own session (process group) with its output in
``logs/<task>.log``. Stopping escalates SIGTERM -> wait -> SIGKILL on the whole group; the child also dies
with its parent (``PR_SET_PDEATHSIG`` and the task's own watchdog thread), so a killed kernel or CLI leaves
no TensorFlow server behind. What the task starts outside its group (a ``setsid()`` daemon, a child in a
group of its own) is followed while it lives and killed when it ends, however it ends
(:mod:`ssptk.launch.tracking`: a cgroup per task, else /proc). The process says how it is through its
status file(s) (written by the task, format in :mod:`ssptk.rundir.task_status`): ready, or failed and why.
:class:`~ssptk.launch.cluster.LocalCluster` composes these objects into a cluster.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from ssptk.core.errors import TaskFailure
from ssptk.launch import netns, tracking
from ssptk.launch.fork_client import FORK_SERVER_TASK, ForkedProcess, ForkServer
from ssptk.rundir.task_status import FAILED_STATE, TaskStatus, read_status, status_path

__all__ = ["KILL_WAIT_S", "TaskProcess", "preexec", "start_helper"]

KILL_WAIT_S = 10.0  # the most kill() waits for a task after SIGKILL


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        # SIGTERM, not SIGKILL: the task then kills what its user code started (ssptk.runtime.reaper)
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def preexec() -> Any:
    """What runs in the child before exec: the parent-death signal, where it is safe to ask for."""
    # PR_SET_PDEATHSIG fires when the forking *thread* ends, so only the main thread may use it;
    # the tasks' own parent watchdog covers runs started from other threads.
    return _die_with_parent if threading.current_thread() is threading.main_thread() else None


def _both(*fns: Callable[[], None] | None) -> Callable[[], None] | None:
    """One ``preexec_fn`` running each of ``fns`` that is not ``None`` (``None`` if none is)."""
    todo = [f for f in fns if f is not None]
    if not todo:
        return None

    def run() -> None:
        for f in todo:
            f()
    return run


def start_helper(argv: list[str], env: dict[str, str], log_path: str, namespace: netns.Namespace | None,
                 pass_fds: Sequence[int] = ()) -> subprocess.Popen[bytes]:
    """A process of the cluster that is not a task (its fork server), started as a task is: in the cluster's
    namespace and a session of its own, dying with its parent, its output appended to ``log_path``."""
    with open(log_path, "ab") as log:
        return subprocess.Popen(namespace.wrap(argv) if namespace else argv, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True, preexec_fn=preexec(),
                                pass_fds=(*pass_fds, *(namespace.fds if namespace else ())))


@dataclass
class TaskProcess:
    """One process of a cluster, holding task ``name`` (or, in the shared layout, every task in ``hosts``).

    ``argv``: the command; ``env``: its environment (with ``SSPTK_STATUS_DIR`` = ``status_dir``);
    ``stdin_pipe``: a serving task reads its runs from stdin (see :meth:`send`); ``namespace``: the
    cluster's network namespace, entered by ``nsenter``, which execs the task in place (same pid, process
    group, pipes, death signal)."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: str
    status_dir: str
    hosts: tuple[str, ...] = ()
    stdin_pipe: bool = False
    namespace: netns.Namespace | None = field(default=None, repr=False)
    proc: subprocess.Popen[bytes] | ForkedProcess | None = None
    log: IO[bytes] | None = field(default=None, repr=False)
    #: times this task was started again (see :meth:`restart`)
    restarts: int = 0
    #: what the task's process started, followed while it lives and killed when it ends (:meth:`track`)
    tracker: tracking.Tracker | None = field(default=None, repr=False)
    collected: bool = field(default=False, repr=False)
    #: the cluster's fork server, which starts this task without a TensorFlow import of its own where it can
    forks: ForkServer | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.hosts = self.hosts or (self.name,)

    def start(self) -> None:
        """Spawn the process, its output appended to ``log_path``."""
        if self.log is None or self.log.closed:
            self.log = open(self.log_path, "ab")
        self._spawn(self.argv)

    def _spawn(self, argv: list[str]) -> None:
        for task in self.hosts:  # a status left by an earlier process is not this one's
            with contextlib.suppress(OSError):
                os.unlink(status_path(self.status_dir, task))
        ns = self.namespace
        if self.tracker is None:
            self.tracker = tracking.tracker(self.name)
        env = {**self.env, tracking.TAG_ENV: self.tracker.tag}
        forked = None
        if self.forks is not None and self.log is not None:  # no TensorFlow import of its own
            forked = self.forks.fork(argv, env, self.log, self.stdin_pipe, self.tracker.procs_file(),
                                     ns.fds if ns else ())
        self.proc = forked or subprocess.Popen(ns.wrap(argv) if ns else argv, stdout=self.log,
                                               stderr=subprocess.STDOUT,
                                               stdin=subprocess.PIPE if self.stdin_pipe else subprocess.DEVNULL,
                                               env=env, start_new_session=True,
                                               preexec_fn=_both(self.tracker.join_in_child(), preexec()),
                                               pass_fds=ns.fds if ns else ())
        # the child joined its cgroup before exec; from outside too, where that failed (then: the /proc way); a
        # forked task only as the process checked as its server's child (one that ended already is none to move)
        if not isinstance(self.proc, ForkedProcess) or self.proc.started is not None:
            self.tracker = self.tracker.add(self.proc.pid)
        self.collected = False

    def restart(self) -> int:
        """Start the task again after it died; it rejoins the running training (``--rejoin K``, K: how many
        times it has been started again, this time included). Returns K."""
        if self.proc is not None:
            self.signal(signal.SIGKILL)  # anything the dead task left in its group
            self.proc.wait()
            self.collect()  # and what it started elsewhere (a daemon, a child in a group of its own)
        self.restarts += 1
        self._spawn([*self.argv, "--rejoin", str(self.restarts)])
        return self.restarts

    @property
    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def wait(self, timeout: float) -> int | None:
        """The exit code, waiting up to ``timeout`` seconds (``None``: still running)."""
        if self.proc is None:
            return None
        try:
            return self.proc.wait(max(0.0, timeout))
        except subprocess.TimeoutExpired:
            return None

    def status(self, task: str | None = None) -> TaskStatus | None:
        """The status file of ``task`` (default: this process's task), if this very process wrote it."""
        found = read_status(self.status_dir, task or self.name)
        return found if found is not None and self.proc is not None and found.pid == self.proc.pid else None

    def failed_status(self) -> TaskStatus | None:
        """The failure this process reported (in the shared layout: the task whose failure ended it)."""
        return next((s for s in map(self.status, self.hosts) if s is not None and s.state == FAILED_STATE), None)

    def failure(self, task: str, reason: str, code: int | None = None) -> TaskFailure:
        """Task ``task`` of this process failed: ``reason`` and exit ``code``; the error its status file gives
        (else the last error line of its log), and its log's tail. A task that ended because its fork server did
        is the fork server's failure (:data:`~ssptk.launch.fork_client.FORK_SERVER_TASK`), saying how it ended."""
        ended = self.proc.ended_with_server() if isinstance(self.proc, ForkedProcess) else None
        if ended is not None and self.forks is not None:
            return TaskFailure.of(FORK_SERVER_TASK, f"{ended}: it had forked {task}, which ended with it, as did the "
                                  "other tasks it had forked", None, self.forks.log_path or self.log_path)
        status = self.status(task)
        error = status.error if status is not None and status.state == FAILED_STATE else None
        if error is not None:
            return TaskFailure.of(task, f"{reason}: {error.message}", code, self.log_path)
        return TaskFailure.of(task, reason, code, self.log_path, explain=True)

    def send(self, line: bytes) -> None:
        """A line on the task's stdin (a serving task's next run)."""
        if self.proc is None or self.proc.stdin is None:
            raise RuntimeError("send() needs a process started with stdin_pipe")
        self.proc.stdin.write(line)
        self.proc.stdin.flush()

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the task's whole process group (what it started, too)."""
        if isinstance(self.proc, ForkedProcess):  # its server reaps it: signalled only while its pid is its own
            self.proc.signal_group(sig)
        elif self.proc is not None:
            try:
                os.killpg(self.proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def track(self, table: tracking.ProcTable | None = None) -> int:
        """While the process lives: note what it started (``table``: a :func:`~ssptk.launch.tracking.proc_table`,
        which the /proc way needs); once it has ended: :meth:`collect`. How many processes were killed."""
        if self.proc is None or self.tracker is None:
            return 0
        if self.proc.poll() is not None:
            return self.collect()
        forked = isinstance(self.proc, ForkedProcess)
        if table is not None and (not forked or self.proc.is_task(table.get(self.proc.pid))):  # type: ignore[union-attr]
            self.tracker.watch(self.proc.pid, table)
        return 0

    def collect(self) -> int:
        """Once the process has ended: SIGKILL whatever it started that still runs (a child that left its
        process group, a ``setsid()`` daemon), once; how many."""
        if self.collected or self.tracker is None or self.proc is None or self.proc.poll() is None:
            return 0
        self.collected = True
        return self.tracker.kill()

    def terminate(self) -> None:
        """SIGTERM the group, then SIGCONT: a stopped task (SIGSTOP) then acts on the SIGTERM."""
        if self.running():
            self.signal(signal.SIGTERM)
            self.signal(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL the group and wait for the process (at most :data:`KILL_WAIT_S`: a process stuck in the
        kernel cannot keep the caller forever); close its stdin and log. Idempotent."""
        if self.proc is not None:
            self.signal(signal.SIGKILL)
            self.wait(KILL_WAIT_S)  # uninterruptible (D state): it dies when the kernel lets it
            if self.tracker is not None:  # what it started outside its group (the task too, if still there)
                self.tracker.close()
                self.tracker = None
            if self.proc.stdin is not None:
                with contextlib.suppress(OSError):
                    self.proc.stdin.close()
        if self.log is not None and not self.log.closed:
            self.log.close()

    def stopped(self) -> bool:
        """The process is stopped (state T, e.g. by SIGSTOP or a debugger): alive, but doing nothing."""
        fields = self._stat() if self.running() else None
        return bool(fields) and fields[0] in ("T", "t")  # type: ignore[index]

    def cpu_seconds(self) -> float | None:
        """CPU time (user + system) the process has used so far; ``None`` where /proc cannot tell."""
        fields = self._stat()
        try:
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # type: ignore[index]
        except (TypeError, IndexError, ValueError):
            return None

    def _stat(self) -> list[str] | None:
        """The fields of the task's ``/proc/<pid>/stat`` (see :func:`_proc_stat`), while its pid is its own."""
        fields = _proc_stat(self.proc.pid) if self.proc is not None else None
        if fields and isinstance(self.proc, ForkedProcess) and \
                not self.proc.is_task((0, fields[19].encode()) if len(fields) > 19 else None):
            return None
        return fields


def _proc_stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first); ``None`` if unreadable."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
