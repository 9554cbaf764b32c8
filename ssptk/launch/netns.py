"""A private network namespace per local cluster, so nobody else can reach its TensorFlow ports.

TensorFlow's gRPC servers listen on every interface and have no authentication: whoever reaches a
task's port can run graphs inside it. A :class:`~ssptk.launch.cluster.LocalCluster` therefore runs its tasks
in a user + network namespace of their own (made without privileges, as ``unshare --user
--map-root-user --net`` does), where they talk over a private loopback that neither other hosts nor
other users on this machine can reach (nor the launcher: it only reads the tasks' files and /proc).
The filesystem, GPUs, process tree and signals are unaffected; files the tasks write belong to the
invoking user (``--map-root-user`` maps root inside to the invoking uid outside).

How (see :func:`isolate`):

1. A short-lived helper, ``unshare --user --map-root-user --net -- python -I -S _netns_helper.py hold``,
   brings ``lo`` up (it is down in a fresh namespace) with an ``SIOCSIFFLAGS`` ioctl and prints a
   ready line.
2. The launcher opens the helper's ``/proc/<pid>/ns/user`` and ``ns/net`` and keeps those two file
   descriptors for the cluster's life; they keep the namespaces alive, so the helper then exits. No
   process has to be kept (or cleaned up) for the namespace, and a re-used pid can never point a task
   at someone else's namespace. When the launcher closes them (:meth:`Namespace.close`) or dies, the
   namespaces go away with the last task.
3. Each task is ``nsenter --user=/proc/self/fd/U --net=/proc/self/fd/N --preserve-credentials --
   python -m ssptk.worker ...`` with those descriptors passed down: ``nsenter`` enters both and execs
   the task in place (no fork without ``--pid``), so the task is still the launcher's direct child
   (process groups, ``PR_SET_PDEATHSIG``, stdin pipes and ``/proc/<pid>/stat`` work as before).
   ``--preserve-credentials`` keeps the supplementary groups (e.g. ``video`` for GPUs); without it
   nsenter calls ``setgroups``, which an unprivileged user namespace refuses. (Calling ``setns`` from
   ``preexec_fn`` would save one exec, ~1 ms, but run ctypes between fork and exec of a possibly
   multi-threaded launcher such as a notebook kernel; nsenter does it in a fresh single-threaded
   process, and works for runs started from any thread.)

Where the OS does not allow it (user namespaces disabled by a sysctl, a container's seccomp profile,
no ``unshare``/``nsenter``), the first attempt in a process says so once (a warning on the ``ssptk``
logger) and every cluster of the process runs as before, unisolated; ``config.json`` records which
(``tasks.isolation``). ``SSPTK_NO_NETNS=1`` turns isolation off on purpose (to reach local tasks from
outside, or when a user model must download data: the tasks have no network beyond their loopback).
"""
from __future__ import annotations

import logging
import os
import select
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ssptk.launch import tools
from ssptk.launch._netns_helper import NETNS_READY  # the helper's ready line: the helper, run by path, owns it

NETNS_OFF_ENV = "SSPTK_NO_NETNS"
UNSHARE = "unshare"  # the commands (looked up by ssptk.launch.tools); tests point UNSHARE at a fake one
NSENTER = "nsenter"
HELPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_netns_helper.py")
ISOLATED = "netns"
NETNS_TIMEOUT_S = 10.0

_log = logging.getLogger("ssptk")


@dataclass
class Namespace:
    """A user + network namespace, held open by two file descriptors of this process."""

    user_fd: int
    net_fd: int
    nsenter: str = NSENTER
    helper: subprocess.Popen[bytes] | None = field(default=None, repr=False)  # exiting; reaped in close()

    @property
    def fds(self) -> tuple[int, int]:
        return self.user_fd, self.net_fd

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` run inside the namespace (start it with ``pass_fds=self.fds``)."""
        return [self.nsenter, f"--user=/proc/self/fd/{self.user_fd}", f"--net=/proc/self/fd/{self.net_fd}",
                "--preserve-credentials", "--", *argv]

    def close(self) -> None:
        """Let the namespace go (it ends when its last task does). Idempotent."""
        for fd in (self.user_fd, self.net_fd):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.user_fd = self.net_fd = -1
        if self.helper is not None:
            _reap(self.helper)
            self.helper = None


@dataclass
class _State:
    refused: str | None = None  # why namespaces cannot be used in this process, once that is known
    checked: bool = False       # a task-like process has entered a namespace successfully
    opted_out_said: bool = False  # the SSPTK_NO_NETNS warning was given in this process
    lock: threading.Lock = field(default_factory=threading.Lock)


_state = _State()


def enabled_by_env() -> bool:
    return os.environ.get(NETNS_OFF_ENV, "").strip().lower() in ("", "0", "false", "no")


def isolate(preexec: Callable[[], None] | None = None) -> tuple[Namespace | None, str]:
    """A fresh namespace for one cluster: ``(namespace, "netns")``, or ``(None, "none (<why>)")``.

    Never raises. The first refusal in a process is logged once as a warning and remembered, so later
    clusters fall back at once. ``preexec`` runs in the helper before exec (``PR_SET_PDEATHSIG``).
    """
    if not enabled_by_env():
        setting = f"{NETNS_OFF_ENV}={os.environ[NETNS_OFF_ENV].strip()}"
        with _state.lock:
            said, _state.opted_out_said = _state.opted_out_said, True
        if not said:
            _log.warning("ssptk: %s: local clusters run without network isolation, as asked: every local user, "
                        "and anyone who can reach this machine, can reach their unauthenticated TensorFlow ports",
                        setting)
        return None, f"none ({setting})"
    with _state.lock:
        if _state.refused is not None:
            return None, f"none ({_state.refused})"
        try:
            ns, why = _make(preexec)
            if ns is not None and not _state.checked:
                problem = _check(ns)
                if problem is None:
                    _state.checked = True
                else:
                    why = problem
                    ns.close()
                    ns = None
        except Exception as e:  # noqa: BLE001 - any surprise means: run unisolated, and say why
            ns, why = None, f"network namespace failed: {type(e).__name__}: {e}"
        if ns is not None:
            return ns, ISOLATED
        _state.refused = why
    _log.warning("ssptk: local clusters run without network isolation (%s): anyone who can reach this machine "
                "can reach their unauthenticated TensorFlow ports; %s=1 turns isolation off on purpose",
                why, NETNS_OFF_ENV)
    return None, f"none ({why})"


def _make(preexec: Callable[[], None] | None) -> tuple[Namespace | None, str]:
    unshare, nsenter = tools.find(UNSHARE), tools.find(NSENTER)
    if unshare is None or nsenter is None:
        return None, f"{os.path.basename(UNSHARE if unshare is None else NSENTER)} not found (util-linux)"
    helper = subprocess.Popen([unshare, "--user", "--map-root-user", "--net", "--",
                               sys.executable, "-I", "-S", HELPER, "hold"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              start_new_session=True, preexec_fn=preexec)
    ns: Namespace | None = None
    try:
        line = _read_line(helper, NETNS_TIMEOUT_S)
        if line != NETNS_READY:
            _reap(helper)
            err = _last_line(helper.stderr.read())  # type: ignore[union-attr]
            err = err[len("unshare: "):] if err.startswith("unshare: ") else err
            if not line and helper.returncode is not None and helper.returncode > 0:
                return None, f"unshare not permitted: {err or f'exit code {helper.returncode}'}"
            return None, f"unshare failed: {err or line or f'no ready line in {NETNS_TIMEOUT_S:.0f} s'}"
        ns = Namespace(os.open(f"/proc/{helper.pid}/ns/user", os.O_RDONLY), -1, nsenter, helper)
        ns.net_fd = os.open(f"/proc/{helper.pid}/ns/net", os.O_RDONLY)
        if os.fstat(ns.net_fd).st_ino == os.stat("/proc/self/ns/net").st_ino:
            ns.close()
            return None, "unshare did not make a new network namespace"
        return ns, ISOLATED
    except BaseException:
        if ns is not None:
            ns.close()
        _reap(helper)
        raise
    finally:  # the open descriptors keep the namespace: EOF tells the helper to exit (not waited for)
        for pipe in (helper.stdin, helper.stdout, helper.stderr):
            if pipe is not None and not pipe.closed:
                try:
                    pipe.close()
                except OSError:
                    pass


def _reap(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        try:
            proc.wait(1.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _check(ns: Namespace) -> str | None:
    """Once per process: ``nsenter`` may enter the namespace the way tasks will (a cheap ``true``)."""
    true = shutil.which("true") or "/bin/true"
    try:
        p = subprocess.run(ns.wrap([true]), stdin=subprocess.DEVNULL, capture_output=True, pass_fds=ns.fds,
                           timeout=NETNS_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"nsenter did not finish in {NETNS_TIMEOUT_S:.0f} s"
    if p.returncode != 0:
        return f"nsenter not permitted: {_last_line(p.stderr) or f'exit code {p.returncode}'}"
    return None


def _read_line(proc: subprocess.Popen[bytes], timeout: float) -> str:
    """The helper's first stdout line ('' if it closed stdout or ``timeout`` passed first)."""
    fd = proc.stdout.fileno()  # type: ignore[union-attr]
    buf = b""
    end = time.monotonic() + timeout
    while b"\n" not in buf:
        left = end - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            break
        chunk = os.read(fd, 256)
        if not chunk:
            break
        buf += chunk
    return buf.split(b"\n", 1)[0].decode(errors="replace").strip()


def _last_line(data: bytes) -> str:
    lines = [ln.strip() for ln in data.decode(errors="replace").splitlines() if ln.strip()]
    return lines[-1][:200] if lines else ""
