"""A task takes its user code's processes with it: whatever ``build()`` or ``data()`` started (a plain
``fork()``, a ``setsid()`` daemon, a ``subprocess``) ends when the task ends.

How (Linux): the task makes itself a *child subreaper* (``PR_SET_CHILD_SUBREAPER``), so a daemon that
double-forks away is re-parented to the task instead of to init and stays findable as a descendant.
Before the task exits, normally or on SIGTERM (the launcher's stop, or ``PR_SET_PDEATHSIG`` when the
launcher itself dies), it SIGKILLs every descendant. SIGTERM is handled by a thread woken through
``signal.set_wakeup_fd``, because the main thread is usually inside TensorFlow, where Python signal
handlers cannot run. Limits: a descendant that escapes to another PID namespace, or a task killed with
SIGKILL while its launcher is also gone, is not reaped (the launcher's stop also kills the descendants
it saw, see :func:`descendants`). Elsewhere than Linux nothing here has an effect.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
from collections.abc import Callable

__all__ = ["before_exit", "become_subreaper", "descendants", "exit_with_descendants", "kill_descendants", "kill_seen",
           "on_sigterm", "proc_stat", "reap_on_sigterm"]

_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants; whether the OS allowed it."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def proc_stat(pid: int | str) -> tuple[int, bytes] | None:
    """(parent pid, start time) of a process from ``/proc/<pid>/stat``; ``None`` if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return int(fields[1]), fields[19]
    except (OSError, IndexError, ValueError):
        return None


def descendants(pid: int) -> dict[int, bytes]:
    """Every live descendant of ``pid`` (children first) with its start time (which tells a process
    from a later one given the same pid), read from ``/proc``."""
    children: dict[int, list[tuple[int, bytes]]] = {}
    for name in os.listdir("/proc") if os.path.isdir("/proc") else []:
        st = proc_stat(name) if name.isdigit() else None
        if st is not None:
            children.setdefault(st[0], []).append((int(name), st[1]))
    found: dict[int, bytes] = {}
    todo = list(children.get(pid, []))
    while todo:
        p, started = todo.pop(0)
        found[p] = started
        todo.extend(children.get(p, []))
    return found


def kill_seen(seen: dict[int, bytes]) -> int:
    """SIGKILL the processes of a :func:`descendants` snapshot that still run (the same process: same
    pid and start time); returns how many."""
    n = 0
    for p, started in seen.items():
        st = proc_stat(p)
        if st is not None and st[1] == started:
            with contextlib.suppress(OSError):
                os.kill(p, signal.SIGKILL)
                n += 1
    return n


def kill_descendants(pid: int | None = None) -> int:
    """SIGKILL every descendant of ``pid`` (this process by default) and reap those that are ours;
    returns how many were signalled."""
    me = os.getpid() if pid is None else pid
    found = descendants(me)
    n = kill_seen(found)
    if me == os.getpid():  # adopted orphans are our children now: collect them, no zombies left
        for p in found:
            with contextlib.suppress(OSError):
                os.waitpid(p, os.WNOHANG)
    return n


_BEFORE_EXIT: list[Callable[[], None]] = []


def before_exit(fn: Callable[[], None]) -> None:
    """Call ``fn`` when :func:`exit_with_descendants` ends this process, after the descendants are killed (a task's
    stderr filter forwards what it still holds, :mod:`ssptk.runtime.quiet_stderr`). Errors in ``fn`` are ignored."""
    _BEFORE_EXIT.append(fn)


def exit_with_descendants(code: int) -> None:
    """End this process at once (no interpreter teardown) after killing its descendants."""
    with contextlib.suppress(Exception):
        kill_descendants()
    for fn in list(_BEFORE_EXIT):
        with contextlib.suppress(Exception):
            fn()
    os._exit(code)


_ON_SIGTERM: list[Callable[[], None]] = []
_ENDING = threading.Lock()  # the signal handler and the watching thread may both see one SIGTERM


def on_sigterm(fn: Callable[[], None]) -> None:
    """Call ``fn`` when SIGTERM ends this task, before it exits (a worker logs a ``stopped`` event: a run read
    from its logs alone, on Slurm say, then tells ``scancel`` from a crash). Errors in ``fn`` are ignored."""
    _ON_SIGTERM.append(fn)


def _terminated() -> None:
    if not _ENDING.acquire(blocking=False):
        return  # the other one is ending the process
    for fn in list(_ON_SIGTERM):
        with contextlib.suppress(Exception):
            fn()
    exit_with_descendants(128 + signal.SIGTERM)


def reap_on_sigterm() -> None:
    """On SIGTERM, kill the descendants and exit 143, even while the main thread is inside TensorFlow.
    Call from the main thread, early."""
    if threading.current_thread() is not threading.main_thread():
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    signal.signal(signal.SIGTERM, lambda *_: _terminated())
    signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)

    def watch() -> None:
        while True:
            data = os.read(read_fd, 64)
            if not data or signal.SIGTERM in data:
                _terminated()

    threading.Thread(target=watch, name="sigterm-reaper", daemon=True).start()
