"""A fork server: imports TensorFlow once, then forks each task of its launcher's clusters from that process.

``import tensorflow`` is most of a task's start-up (3.2-4.2 s of CPU on a 2-core machine, docs/tf-notes.md), and
every task paid it. The launcher (:mod:`ssptk.launch.forking`) starts one ``python -m ssptk.worker --fork-server
FD`` with the environment its clusters' tasks share, outside any cluster's namespace, and keeps it for each cluster
that comes with the same environment. It imports TensorFlow (no session, no server, no device: nothing that would
not survive a fork) and then serves requests on the socket ``FD``; each request forks a child that becomes one
task, exactly as if it had been started as ``nsenter ... python -m ssptk.worker ARGS`` in its own session: its
cluster's user and network namespaces, its environment, its log as stdout and stderr, its stdin, its cgroup, a
death signal when the server ends, and its command line in ``/proc`` (``ps`` shows the task).

Protocol (``SOCK_SEQPACKET``, one JSON object per message):

- launcher -> server: ``{"argv": [...], "env": {...}, "cwd": PATH, "cgroup": PATH|null, "stdin": bool,
  "namespace": K}`` with the log's file descriptor, the read end of the task's stdin pipe (with ``stdin``) and the K
  namespace descriptors (user, then network) attached (``SCM_RIGHTS``);
- server -> launcher: ``{"pid": N}`` (or ``{"error": TEXT}``) for each request, in order, and ``{"exit": N,
  "code": C}`` when child N ends (``C`` as :attr:`subprocess.Popen.returncode`: negative for a signal).

The server ends when the launcher closes the socket, SIGKILLing the process groups of the children still
running (the launcher has stopped them already, normally).

**One server for several processes** (``--fork-server --listen PATH``, used by every launcher whose
``SSPTK_FORK_SERVER`` is ``PATH``): the same protocol on each connection to a socket listening at ``PATH``, for
connections from the server's own user only (:mod:`ssptk.runtime.fork_listen`: the socket is its owner's, each
peer's credentials are checked, nothing at ``PATH`` but a stale socket is replaced). A launcher's tasks are
SIGKILLed when it disconnects; the server ends when idle. A child takes its launcher's working directory and
``PYTHONPATH`` (import path), whether its output is buffered (``PYTHONUNBUFFERED``) and its
``CUDA_VISIBLE_DEVICES`` (read when TensorFlow first looks for devices, after the fork); but the modules the server
imported before it forked (TensorFlow, with the settings it reads at import: ``TF_CPP_MIN_LOG_LEVEL`` among them,
measured in 2.21) are the server's. So a server sets for itself, before that import, what every launcher gives its
tasks where the environment does not say (:data:`TASK_ENV_DEFAULTS`), and hides GPUs from itself (CUDA is not
fork-safe, and it forks CPU tasks only): started in a plain shell, as the README says, it suits a launcher started
in one. The test suite runs its CLI commands so, to import TensorFlow once per test process rather than once per
command.
"""
from __future__ import annotations

import contextlib
import ctypes
import io
import json
import os
import selectors
import signal
import socket
import sys
import tempfile
import time
from typing import Any

from ssptk.core.errors import UsageError
from ssptk.runtime.fork_listen import DESCRIPTION, Listening, listen

__all__ = ["APPLIED_IN_CHILD", "AT_START", "DESCRIPTION", "FORK_SERVER_FLAG", "LISTEN_FLAG", "MAX_MESSAGE",
           "SET_BY_TF_IMPORT", "TASK_ENV_DEFAULTS", "at_start", "serve", "started_with"]

FORK_SERVER_FLAG = "--fork-server"
#: ``--fork-server --listen PATH``: a server any launcher whose ``SSPTK_FORK_SERVER`` is ``PATH`` uses
LISTEN_FLAG = "--listen"
#: prefixes of the environment variables a process reads as it starts (see :func:`at_start`)
AT_START = ("LD_", "PYTHON", "TF_", "CUDA_", "OMP_", "MKL_", "KMP_", "MALLOC_", "GLIBC_", "SSPTK_EAGER_KERAS")
#: of those, what a forked child applies from its own request: its import path, whether its output is buffered, and
#: the GPUs TensorFlow looks for when it first initializes devices (after the fork: measured in 2.21)
APPLIED_IN_CHILD = ("PYTHONPATH", "PYTHONUNBUFFERED", "CUDA_VISIBLE_DEVICES")
#: what every launcher gives its tasks where its environment does not say (``ssptk.launch.cluster``), and a server
#: takes for itself before its TensorFlow import reads it: TensorFlow's C++ log level is read once, at that import
TASK_ENV_DEFAULTS = {"TF_CPP_MIN_LOG_LEVEL": "2"}
#: what TensorFlow's import sets in ``os.environ`` where it is unset (2.21: a process that imported it has these, and
#: so, in effect, has a server that did)
SET_BY_TF_IMPORT = {"KMP_DUPLICATE_LIB_OK": "True", "KMP_INIT_AT_FORK": "FALSE"}
MAX_MESSAGE = 1 << 20
#: a server with no task and no request for this long ends (a notebook's idle kernel keeps no TensorFlow process);
#: ``SSPTK_FORK_SERVER_IDLE_S`` sets another
IDLE_EXIT_S = 300.0
_PR_SET_PDEATHSIG = 1
_CLONE_NEWUSER, _CLONE_NEWNET = 0x10000000, 0x40000000
_MODULE_ARGV = ("-m", "ssptk.worker")
#: Room the server keeps in its environment for its children's command lines. A process's title (what ps, /proc and
#: psutil show) can only grow into the memory of its own argv and environ, unless it may move that (root may): a
#: server started with a short environment, as an ordinary user's plain shell gives, cut its tasks' titles short
#: (their --out, which tools and the tests find a run's tasks by, was lost).
TITLE_ROOM = "SSPTK_TITLE_ROOM"
TITLE_ROOM_BYTES = 16384


def serve(fd: int | None = None, path: str | None = None) -> list[str] | None:
    """Serve fork requests on socket ``fd`` (one launcher's: the server ends when it closes), or on a socket listening
    at ``path`` for any number of launchers (:data:`LISTEN_FLAG`: each launcher's tasks end when it disconnects; the
    server ends when idle). Returns, in each forked child, the task's arguments (what follows ``python -m
    ssptk.worker``); in the server itself, ``None`` once it is done. A ``path`` that is taken raises
    :class:`~ssptk.core.errors.UsageError` (what is there is kept)."""
    _with_title_room()
    import setproctitle

    # its set-up finds the memory of argv and environ, which it can grow a child's title into, only where environ's
    # strings still lie one after the other: before anything here sets a variable (that string goes elsewhere)
    setproctitle.getproctitle()
    for name, value in TASK_ENV_DEFAULTS.items():  # read by TensorFlow's import, once for every task forked after it
        os.environ.setdefault(name, value)
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # CPU tasks only (CUDA is not fork-safe): each child sets its own
    # listening before the import: a launcher that comes meanwhile waits for its first reply
    listener = None if path is None else _listen(path)
    owner: dict[int, socket.socket] = {}  # child -> the launcher that asked for it
    try:
        _import_tensorflow()
        return _loop(listener, fd, owner)
    except SystemExit:  # SIGTERM to a listening server, during the import too
        return None
    finally:
        if _in_server():
            _kill(list(owner))  # normally stopped by the launcher already
            if listener is not None:
                listener.close()


def _with_title_room() -> None:
    """Start this server again (the same command line, its descriptors kept) with :data:`TITLE_ROOM` in its
    environment, unless it has it: before anything else, so that nothing is done twice."""
    if os.environ.get(TITLE_ROOM):
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]],
              dict(os.environ, **{TITLE_ROOM: "." * TITLE_ROOM_BYTES}))


def _import_tensorflow() -> None:
    from ssptk.runtime.tf_import import skip_eager_keras

    skip_eager_keras()
    import tensorflow  # noqa: F401  (the point of this process: every task forked from here has it)


def _loop(listener: Listening | None, fd: int | None, owner: dict[int, socket.socket]) -> list[str] | None:
    """:func:`serve`'s loop: requests, connections, children that end, until done (``None``) or, in a child, the
    task's arguments."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that SIGCHLD writes to the wakeup fd
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    sel = selectors.DefaultSelector()
    if listener is not None:
        sel.register(listener.sock, selectors.EVENT_READ)
    if fd is not None:
        sel.register(socket.socket(fileno=fd), selectors.EVENT_READ)
    sel.register(wake_r, selectors.EVENT_READ)
    idle_exit = float(os.environ.get("SSPTK_FORK_SERVER_IDLE_S") or IDLE_EXIT_S)
    busy = time.monotonic()  # last seen with a task running or a request
    while True:
        if not owner and time.monotonic() - busy > idle_exit:
            return None  # nothing asked of it for long: its memory back (the next cluster starts another)
        for key, _ in sel.select(idle_exit / 10):
            if listener is not None and key.fileobj is listener.sock:
                conn = listener.accept()  # None: not this server's user, closed unserved
                if conn is not None:
                    sel.register(conn, selectors.EVENT_READ)
                    busy = time.monotonic()
            elif isinstance(key.fileobj, socket.socket):
                sock = key.fileobj
                request = _receive(sock)
                if request is None:  # a launcher is done: what it started and did not stop ends with it
                    sel.unregister(sock)
                    sock.close()
                    _kill([pid for pid, s in owner.items() if s is sock])
                    if listener is None:
                        return None
                    continue
                message, fds = request
                reply = _fork(message, fds)
                if reply is None:  # in the child: become the task
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    signal.signal(signal.SIGTERM, signal.SIG_DFL)
                    for k in list(sel.get_map().values()):  # the server's sockets and wake pipe: not the task's
                        with contextlib.suppress(OSError):
                            # a socket through its object: closed by number only, the object would close that
                            # number again once freed, by then perhaps one of the task's (gRPC's epoll)
                            k.fileobj.close() if isinstance(k.fileobj, socket.socket) else os.close(k.fd)
                    sel.close()
                    os.close(wake_w)
                    _become_task(message, fds)
                    return list(message["argv"][3:])
                _reply(sock, reply)
                busy = time.monotonic()
                if "pid" in reply:
                    owner[reply["pid"]] = sock
            else:
                with contextlib.suppress(BlockingIOError, InterruptedError):
                    os.read(wake_r, 512)
        _reap(owner)
        if owner:
            busy = time.monotonic()


def _listen(path: str) -> Listening:
    """The listening socket at ``path`` (its owner's only: :func:`~ssptk.runtime.fork_listen.listen`), its
    description beside it, and SIGTERM to end the server (and its tasks)."""
    listener = listen(path)
    try:
        # what a launcher must share with it to use it: its namespaces (the files it sees) and the settings a process
        # reads as it starts (AT_START), as it started; its pid, which the launcher checks against the peer's
        listener.describe({"pid": os.getpid(), "ns": {ns: os.readlink(f"/proc/self/ns/{ns}") for ns in ("mnt", "user")},
                           "env": {k: v for k, v in os.environ.items() if at_start(k)}})
    except OSError as e:  # PATH.server is a directory, say: one line, the socket removed again
        listener.close()
        raise UsageError(f"--listen {path}: cannot write {path + DESCRIPTION} ({e.strerror or e}): give another "
                         "path") from e
    except BaseException:
        listener.close()
        raise
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # raised in serve's loop: its finally ends the tasks
    return listener


def started_with(env: dict[str, str], key: str) -> str | None:
    """What a process whose environment is ``env`` has of ``key`` once TensorFlow is imported (a server's tasks are
    forked after that import): ``env``'s value, else the one TensorFlow's import sets (:data:`SET_BY_TF_IMPORT`). A
    launcher that imported TensorFlow itself (a test process, a kernel) has those set and still suits a server
    described before its own import (measured: the test processes' commands started a server each for this)."""
    return env.get(key, SET_BY_TF_IMPORT.get(key))


def at_start(key: str) -> bool:
    """Whether environment variable ``key`` is read as a process starts (the dynamic loader, Python, TensorFlow's
    import, the Keras it skips), so that a task forked from a server has the server's, not its own."""
    return key.startswith(AT_START) and key not in APPLIED_IN_CHILD


def _kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)


_server_pid = os.getpid()


def _in_server() -> bool:
    return os.getpid() == _server_pid


def _receive(sock: socket.socket) -> tuple[dict[str, Any], list[int]] | None:
    try:
        data, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 4)
    except (ConnectionError, OSError):
        return None
    if not data:
        return None
    return json.loads(data), fds


def _reply(sock: socket.socket, message: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        sock.send(json.dumps(message).encode())


def _reap(owner: dict[int, socket.socket]) -> None:
    """Collect every child that ended and tell the launcher that asked for it how."""
    while owner:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        sock = owner.pop(pid, None)
        if sock is not None and sock.fileno() >= 0:
            _reply(sock, {"exit": pid, "code": os.waitstatus_to_exitcode(status)})


def _fork(message: dict[str, Any], fds: list[int]) -> dict[str, Any] | None:
    """Fork the task ``message`` asks for: in the server, the reply to send (``{"pid": N}`` or ``{"error": ...}``);
    in the child, ``None``."""
    argv = message.get("argv") or []
    if tuple(argv[1:3]) != _MODULE_ARGV or not fds:
        _close(fds)
        return {"error": f"not a task command: {argv[:3]}"}
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        pid = os.fork()
    except OSError as e:
        _close(fds)
        return {"error": f"fork failed: {e}"}
    if pid:
        _close(fds)
        return {"pid": pid}
    return None


def _close(fds: list[int]) -> None:
    for f in fds:
        with contextlib.suppress(OSError):
            os.close(f)


def _become_task(message: dict[str, Any], fds: list[int]) -> None:
    """In the forked child: everything the task would have had if started by ``subprocess`` in a session of its
    own, and its command line. Any failure ends the child (it must never return into the server's loop)."""
    try:
        _setup_task(message, fds)
    except BaseException as e:  # noqa: BLE001
        with contextlib.suppress(Exception):
            os.write(2, f"ssptk fork server: the task could not start: {e}\n".encode())
        os._exit(70)


def _setup_task(message: dict[str, Any], fds: list[int]) -> None:
    os.setsid()
    cgroup = message.get("cgroup")
    if cgroup:  # as the launcher's join_in_child: the child joins before it starts anything
        with contextlib.suppress(OSError):
            f = os.open(cgroup, os.O_WRONLY)
            try:
                os.write(f, b"0")
            finally:
                os.close(f)
    libc = ctypes.CDLL(None, use_errno=True)  # the C library this process already has (glibc or musl)
    spaces = int(message.get("namespace") or 0)
    if spaces:  # the cluster's user, then network namespace, as nsenter --preserve-credentials enters them
        for fd, kind in zip(fds[len(fds) - spaces:], (_CLONE_NEWUSER, _CLONE_NEWNET)):
            if libc.setns(fd, kind) != 0:
                raise OSError(ctypes.get_errno(), f"setns: {os.strerror(ctypes.get_errno())}")
            os.close(fd)
        fds = fds[:len(fds) - spaces]
    with contextlib.suppress(OSError):  # SIGTERM, not SIGKILL: the task then kills what it started
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != _server_pid:  # the server ended before the death signal was set
        os._exit(3)
    log = fds[0]
    stdin = fds[1] if message.get("stdin") and len(fds) > 1 else os.open(os.devnull, os.O_RDONLY)
    os.dup2(stdin, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    for f in {log, stdin, *fds[1:]}:
        if f > 2:
            with contextlib.suppress(OSError):
                os.close(f)
    os.environ.clear()
    os.environ.update(message.get("env") or {})
    _standard_streams(bool(os.environ.get("PYTHONUNBUFFERED")))
    _import_path(message.get("cwd"))
    tempfile.tempdir = None  # the server serves several clusters: this one's TMPDIR, not a cached earlier one
    sys.argv = [sys.argv[0], *message["argv"][3:]]  # as ``-m ssptk.worker`` had set them
    import setproctitle

    setproctitle.setproctitle(" ".join(message["argv"]))  # ps, /proc and psutil show the task, not the server


def _standard_streams(unbuffered: bool) -> None:
    """``sys.stdout`` and ``sys.stderr`` on the task's log as ``python`` would open them with the task's
    ``PYTHONUNBUFFERED`` (the server's were opened with the server's)."""
    for fd, name in ((1, "stdout"), (2, "stderr")):
        old = getattr(sys, name)
        raw = open(fd, "wb", buffering=0 if unbuffered else -1, closefd=False)
        setattr(sys, name, io.TextIOWrapper(raw, encoding=old.encoding, errors=old.errors,
                                            line_buffering=fd == 2 and not unbuffered, write_through=unbuffered))


def _import_path(cwd: str | None) -> None:
    """The task's working directory and import path as ``python -m`` in ``cwd`` with its ``PYTHONPATH`` would have
    them (a server that several launchers share was started elsewhere, with another ``PYTHONPATH``)."""
    if not cwd:
        return
    os.chdir(cwd)
    sys.path[0] = cwd
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
    sys.path[1:1] = extra
