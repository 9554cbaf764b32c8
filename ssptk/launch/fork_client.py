"""The fork server as a launching process uses it: :class:`ForkServer` (the connection to one server, its own or the
one ``SSPTK_FORK_SERVER=PATH`` names: :func:`address`) and :class:`ForkedProcess` (a task it forked, what
:class:`~ssptk.launch.process.TaskProcess` holds in place of a :class:`subprocess.Popen`). Which clusters share a
server is :mod:`ssptk.launch.forking`'s."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from typing import IO, Any

from ssptk.launch.fork_trust import NotATask, shared_server, task_start, warn_once
from ssptk.runtime.fork_server import FORK_SERVER_FLAG, MAX_MESSAGE
from ssptk.runtime.reaper import proc_stat

__all__ = ["FORK_SERVER_ENV", "FORK_SERVER_TASK", "SERVER_START_TIMEOUT_S", "ForkServer", "ForkedProcess", "address"]

FORK_SERVER_ENV = "SSPTK_FORK_SERVER"
#: how long the first task may wait for the server to have imported TensorFlow (a crowded 2-core machine: ~10 s)
SERVER_START_TIMEOUT_S = 120.0
#: the name a failure takes when a fork server's end ended the run's tasks (``failed_task`` in summary.json)
FORK_SERVER_TASK = "fork server"


def address() -> str | None:
    """The socket of a running server to use (``SSPTK_FORK_SERVER=PATH``: ``python -m ssptk.worker --fork-server
    --listen PATH``, which several processes share), or ``None``: this process starts its own."""
    value = os.environ.get(FORK_SERVER_ENV, "").strip()
    return value if os.sep in value else None


class ForkedProcess:
    """A task forked by the fork server: the part of :class:`subprocess.Popen`'s interface tasks use, and
    :meth:`signal_group` in place of ``os.killpg`` (the server, not this process, reaps the task: its pid may be
    another process's by the time the launcher signals it). ``started``: the task's start time, checked as the
    server's child of this user's (:func:`~ssptk.launch.fork_trust.task_start`); ``None`` if it had ended already,
    and then it is never signalled."""

    def __init__(self, server: ForkServer, pid: int, args: list[str], stdin: IO[bytes] | None,
                 started: bytes | None = None) -> None:
        self.server = server
        self.pid = pid
        self.args = args
        self.stdin = stdin
        self.started = started
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.server.exit_code(self.pid, self.started)
        return self.returncode

    def is_task(self, stat: tuple[int, bytes] | None) -> bool:
        """Whether ``stat`` (parent, start time: :func:`~ssptk.runtime.reaper.proc_stat`) of this pid is the task's:
        not some later process's that the kernel gave the pid to after the task ended."""
        return self.started is not None and stat is not None and stat[1] == self.started

    def signal_group(self, sig: int) -> None:
        """Send ``sig`` to the task's process group, unless its pid is another process's now. (A pid is not given
        again while a process group of that number has members, so once the task is gone this reaches only what
        it left in its group.)"""
        if self.started is None:
            return
        now = proc_stat(self.pid)
        if now is not None and now[1] != self.started:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    def ended_with_server(self) -> str | None:
        """How the fork server ended (``"the fork server (pid N) was killed by SIGKILL"``), where the task ended
        because it did (its death signal; how the task itself ended, nobody can tell); ``None`` otherwise."""
        if self.poll() is None:
            return None
        return self.server.end_words(self.pid)

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            self.server.wait_exit(left)
        return self.returncode  # type: ignore[return-value]


class ForkServer:
    """One cluster's fork server. ``start(spawn)`` runs it through ``spawn(argv, pass_fds)`` (which starts a process
    as the cluster starts a task: namespace, session, death signal); :meth:`fork` starts a task from it or returns
    ``None`` when it cannot (the caller then starts the task itself); :meth:`close` ends it."""

    def __init__(self, python: str, env: dict[str, str]) -> None:
        self.python = python
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.sock: socket.socket | None = None
        self.broken = False
        #: the server's pid: its tasks are its children (its own: spawned here; a shared one's: from SO_PEERCRED)
        self.server_pid: int | None = None
        #: ``SSPTK_FORK_SERVER``'s path, where it is a shared server
        self.address: str | None = None
        #: where an own server's output goes (:meth:`end_words` shows it in the failure)
        self.log_path: str | None = None
        self.lost = False  # it ended (or closed the connection) while this process still used it
        self._closing = False
        self._lock = threading.Lock()  # one request and its reply at a time
        self._exits: dict[int, int] = {}
        self._replies: list[dict[str, Any]] = []
        self._changed = threading.Condition()
        self._reader: threading.Thread | None = None

    def start(self, spawn: Callable[[list[str], Sequence[int]], subprocess.Popen[bytes]],
              log_path: str | None = None) -> None:
        """Use the shared server (``SSPTK_FORK_SERVER=PATH``) where it suits, else start one of this process's own
        through ``spawn``, its output going to ``log_path``."""
        path = address()
        # a server several processes share, where it answers as this user and suits: else one of our own
        found = None if path is None else shared_server(path, self.env)
        if found is not None:
            self.address = path
            sock, self.server_pid = found
            self._serve_on(sock)
            return
        try:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        except (OSError, AttributeError):  # not Linux: each task starts by itself
            self.broken = True
            return
        try:
            self.proc = spawn([self.python, "-m", "ssptk.worker", FORK_SERVER_FLAG, str(theirs.fileno())],
                              (theirs.fileno(),))
        except OSError:
            ours.close()
            self.broken = True
            return
        finally:
            theirs.close()
        self.server_pid = self.proc.pid
        self.log_path = log_path
        self._serve_on(ours)

    def _serve_on(self, sock: socket.socket) -> None:
        self.sock = sock
        self._reader = threading.Thread(target=self._read, name="ssptk-fork-server", daemon=True)
        self._reader.start()

    def fork(self, argv: list[str], env: dict[str, str], log: IO[bytes], stdin_pipe: bool,
             cgroup: str | None, namespace: Sequence[int] = ()) -> ForkedProcess | None:
        """Task ``argv`` (``python -m ssptk.worker ...``) forked with ``env``, output to ``log``, in ``namespace``
        (the user and network namespaces' descriptors: the child enters them, as ``nsenter`` would); ``None`` where
        the server cannot (the caller starts it by itself)."""
        if self.broken or self.sock is None:
            return None
        read_end = write_end = -1
        if stdin_pipe:
            read_end, write_end = os.pipe()
        fds = [log.fileno()] + ([read_end] if stdin_pipe else []) + list(namespace)
        message = json.dumps({"argv": argv, "env": env, "cwd": _cwd(), "cgroup": cgroup, "stdin": stdin_pipe,
                              "namespace": len(namespace)}).encode()
        try:
            with self._lock:
                if len(message) > MAX_MESSAGE:
                    raise OSError("request too large")
                socket.send_fds(self.sock, [message], fds)
                reply = self._next_reply(SERVER_START_TIMEOUT_S)
        except OSError:
            reply = None
        finally:
            if read_end >= 0:
                os.close(read_end)
        started: bytes | None = None
        try:
            if reply is None or "pid" not in reply:
                raise NotATask("no task")
            pid = int(reply["pid"])
            started = task_start(pid, self.server_pid)  # before anything signals it, tracks it or moves it
        except (NotATask, ValueError, TypeError) as e:
            if reply is not None and "pid" in reply:
                warn_once(f"the fork server (pid {self.server_pid}) answered with a pid that is not its task ({e}): "
                          "its clusters' tasks start by themselves")
            if write_end >= 0:
                os.close(write_end)
            self.broken = True  # the next tasks start by themselves too: one way per cluster
            return None
        stdin = os.fdopen(write_end, "wb") if stdin_pipe else None
        return ForkedProcess(self, pid, argv, stdin, started)

    def _next_reply(self, timeout: float) -> dict[str, Any] | None:
        deadline = time.monotonic() + timeout
        with self._changed:
            while not self._replies:
                left = deadline - time.monotonic()
                if left <= 0 or (self._reader is not None and not self._reader.is_alive()):
                    return None
                self._changed.wait(min(left, 0.5))
            return self._replies.pop(0)

    def _read(self) -> None:
        assert self.sock is not None
        while True:
            try:
                data = self.sock.recv(MAX_MESSAGE)
            except OSError:
                data = b""
            with self._changed:
                if not data:  # the server ended: its children got SIGTERM from their death signal
                    self.broken = True
                    self.lost = not self._closing
                    self._changed.notify_all()
                    return
                message = json.loads(data)
                if "exit" in message:
                    self._exits[int(message["exit"])] = int(message["code"])
                else:  # a new task's pid may be an old one's (pids wrap at pid_max): its old exit is not its own
                    if "pid" in message:
                        self._exits.pop(int(message["pid"]), None)
                    self._replies.append(message)
                self._changed.notify_all()

    def exit_code(self, pid: int, started: bytes | None = None) -> int | None:
        """Task ``pid``'s exit code, once it has ended (``None`` while it runs); ``started``: its start time (a
        process with its pid and another start time is not it)."""
        with self._changed:
            if pid in self._exits:
                return self._exits[pid]
            if self.broken:  # (a task gone before it could be checked, started None, has ended for sure)
                now = proc_stat(pid)
                if now is None or started is None or now[1] != started:
                    return -9  # the server went first: nobody can tell how its child ended any more
            return None

    def end_words(self, pid: int) -> str | None:
        """How this server ended, if task ``pid`` ended with it (no exit was reported for it, and the server went
        while this process used it); ``None`` otherwise."""
        with self._changed:
            if not self.lost or pid in self._exits:
                return None
        if self.proc is None:
            return f"the shared fork server at {self.address} (pid {self.server_pid}) ended"
        try:
            code = self.proc.wait(5.0)
        except subprocess.TimeoutExpired:
            return f"the fork server (pid {self.server_pid}) closed its connection"
        if code < 0:
            name = signal.Signals(-code).name if -code in signal.valid_signals() else f"signal {-code}"
            return f"the fork server (pid {self.server_pid}) was killed by {name}"
        return f"the fork server (pid {self.server_pid}) exited with code {code}"

    def wait_exit(self, timeout: float | None) -> None:
        """Wait until some task ends (or ``timeout`` seconds, at most 0.5 s, have passed)."""
        with self._changed:
            self._changed.wait(0.5 if timeout is None else min(timeout, 0.5))

    def close(self, grace: float = 5.0) -> None:
        """End the server (it SIGKILLs any task still running) and wait for it. Idempotent."""
        self._closing = True
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_RDWR)
            self.sock.close()
            self.sock = None
        self.broken = True
        if self.proc is not None:
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(OSError):
                    os.killpg(self.proc.pid, 9)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(grace)


def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # removed under us: the task starts where the server is
        return None
