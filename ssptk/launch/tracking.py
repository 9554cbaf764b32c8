"""What a task's code starts ends with the task, however the task ends: killed (SIGKILL), ``os._exit()``, a
crash, a restart or the launcher's stop. Each :class:`~ssptk.launch.process.TaskProcess` has a
:class:`Tracker` that follows every process the task starts while it lives and kills them when it ends.
(A task also kills its own descendants when it can, see :mod:`ssptk.runtime.reaper`; this is what holds
when it cannot: a task SIGKILLed or gone through ``os._exit`` leaves its children to pid 1.)

Two ways, the first this machine allows:

1. **A cgroup per task** (cgroup v2). The launcher makes ``ssptk-<pid>-<start>-<n>`` below its own cgroup
   and moves the task into it right after spawning it, before the task can run any user code. Every process
   the task starts stays in that cgroup, whatever its parent and session (a ``setsid()`` daemon, a child in
   its own process group), so when the task ends ``cgroup.kill`` (or SIGKILL to each member) ends them all.
   It needs write access to the launcher's own cgroup in a writable cgroup2 mount: root, or a cgroup
   delegated to the user (systemd's ``user@UID.service``). The cluster's user namespace changes nothing (the
   launcher moves the task, from outside it). A launcher killed outright cannot remove its cgroups: the next
   one kills what is left in them and removes them.
2. **Otherwise /proc** (an ordinary user outside a delegated cgroup; ``SSPTK_NO_CGROUP=1`` asks for it). It is
   no fault of the run, so it is not a warning: each run's config.json says which way it used (``tasks.tracking``,
   :func:`method`), and the ``ssptk`` logger notes it once per process at INFO. The task's environment carries a
   tag (``SSPTK_TASK_TAG``) that what it starts inherits, and its descendants are noted every :data:`SNAPSHOT_S`
   while it lives. When it ends, every process that carries its tag or was noted (same pid and start time) is
   killed, with its descendants. A process that both replaced its environment and was started within the last
   interval escapes.

The launcher is not made a child subreaper (``PR_SET_CHILD_SUBREAPER``, which would bring a killed task's
orphans to it): the launcher may be a notebook kernel, whose other children's orphans would then become its
zombies, and it would still need the tag to tell the task's orphans from theirs.
"""
from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ssptk.runtime.reaper import proc_stat  # one reader of /proc/<pid>/stat for the task and its launcher

__all__ = ["CGROUP_OFF_ENV", "SNAPSHOT_S", "TAG_ENV", "CgroupTracker", "ProcTable", "TreeTracker", "Tracker",
           "method", "proc_table", "sweep_stale_cgroups", "tracker"]

CGROUP_OFF_ENV = "SSPTK_NO_CGROUP"
TAG_ENV = "SSPTK_TASK_TAG"
#: Seconds between two snapshots of a task's descendants (the /proc way only).
SNAPSHOT_S = 0.5
#: The longest a kill waits for a cgroup to empty (processes stuck in the kernel die when it lets them).
EMPTY_WAIT_S = 2.0
_NAME = re.compile(r"^ssptk-(\d+)-(\d+)-\d+$")

_log = logging.getLogger("ssptk")
#: pid -> (parent pid, start time): every process, read from /proc at one moment.
ProcTable = dict[int, tuple[int, bytes]]


def proc_table() -> ProcTable:
    """Every process's parent and start time (the start time tells a process from a later one with its pid)."""
    names = os.listdir("/proc") if os.path.isdir("/proc") else []
    return {int(n): st for n in names if n.isdigit() and (st := proc_stat(n)) is not None}


def _descendants(table: ProcTable, roots: set[int]) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    todo = [c for r in roots for c in children.get(r, [])]
    while todo:
        p = todo.pop()
        if p not in found:
            found.add(p)
            todo.extend(children.get(p, []))
    return found


def _kill(pids: set[int], table: ProcTable) -> int:
    """SIGKILL each process of ``pids`` that is still the one ``table`` saw; how many."""
    n = 0
    for p in pids - {os.getpid()}:
        if p in table and proc_stat(p) == table[p]:
            with contextlib.suppress(OSError):
                os.kill(p, signal.SIGKILL)
                n += 1
    return n


@dataclass
class Tracker:
    """What one task's process started: followed while it lives (:meth:`watch`), killed when it ends
    (:meth:`kill`). ``tag``: the value of ``SSPTK_TASK_TAG`` in the task's environment; ``how``: ``"cgroup"``
    or ``"none (<why>)"``."""

    tag: str
    how: str = "cgroup"
    #: whether :meth:`watch` needs a :func:`proc_table` (the /proc way)
    snapshots: bool = False

    def add(self, pid: int) -> Tracker:
        """Follow the task ``pid`` (just spawned) and what it starts; the tracker to keep (this one, or the
        /proc way if the cgroup refused the task)."""
        return self

    def join_in_child(self) -> Callable[[], None] | None:
        """What the spawned child runs before it execs to join the tracking (``None``: nothing), so that not even
        what it forks at once escapes; :meth:`add` moves it again from outside, in case that failed."""
        return None

    def procs_file(self) -> str | None:
        """The file a process writes ``0`` to, to join the tracking by itself (a forked task; ``None``: none)."""
        return None

    def watch(self, pid: int, table: ProcTable) -> None:
        """The task ``pid`` lives: note what it started."""

    def kill(self) -> int:
        """SIGKILL what the task started that still runs (the task too); how many. Can be called again."""
        return 0

    def close(self) -> None:
        """Kill what is left and let go of what the tracking holds. Idempotent."""
        self.kill()


@dataclass
class CgroupTracker(Tracker):
    """The task and all it starts in the cgroup directory ``path``."""

    path: str = ""

    def add(self, pid: int) -> Tracker:
        try:
            with open(os.path.join(self.path, "cgroup.procs"), "w") as f:
                f.write(str(pid))
        except OSError as e:
            if not os.path.exists(f"/proc/{pid}"):  # it died at once: nothing to follow
                return self
            self.close()
            return _refused(self.tag, f"cannot move a task into a cgroup: {e.strerror or e}")
        return self

    def procs_file(self) -> str | None:
        return os.path.join(self.path, "cgroup.procs")

    def join_in_child(self) -> Callable[[], None] | None:
        procs = os.path.join(self.path, "cgroup.procs")

        def join() -> None:  # in the child between fork and exec: plain system calls only
            try:
                fd = os.open(procs, os.O_WRONLY)
                try:
                    os.write(fd, b"0")  # "0": the writing process itself
                finally:
                    os.close(fd)
            except OSError:
                pass  # the parent's add() says why, and falls back to the /proc way
        return join

    def members(self) -> list[int]:
        """The processes in the cgroup now."""
        try:
            with open(os.path.join(self.path, "cgroup.procs")) as f:
                return [int(p) for p in f.read().split()]
        except (OSError, ValueError):
            return []

    def kill(self) -> int:
        members = self.members()
        if not members:
            return 0
        try:
            with open(os.path.join(self.path, "cgroup.kill"), "w") as f:  # Linux 5.14+
                f.write("1")
        except OSError:
            for p in members:
                with contextlib.suppress(OSError):
                    os.kill(p, signal.SIGKILL)
        deadline = time.monotonic() + EMPTY_WAIT_S
        while (left := self.members()) and time.monotonic() < deadline:
            for p in left:  # started while the kill went on (cgroup.kill has no such gap)
                with contextlib.suppress(OSError):
                    os.kill(p, signal.SIGKILL)
            time.sleep(0.005)
        return len(members)

    def close(self) -> None:
        if not self.path:
            return
        self.kill()
        for _ in range(50):  # an exiting member keeps it busy a moment
            try:
                os.rmdir(self.path)
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.01)
        self.path = ""


@dataclass
class TreeTracker(Tracker):
    """The /proc way: the tag in the environment, and snapshots of the descendants."""

    snapshots: bool = True
    seen: dict[int, bytes] = field(default_factory=dict)

    def watch(self, pid: int, table: ProcTable) -> None:
        for p in _descendants(table, {pid}):
            self.seen[p] = table[p][1]

    def kill(self) -> int:
        table = proc_table()
        needle = f"{TAG_ENV}={self.tag}\0".encode()
        roots = {p for p, started in self.seen.items() if p in table and table[p][1] == started}
        roots |= {p for p in table if p not in roots and _has_in_environ(p, needle)}
        self.seen.clear()
        return _kill(roots | _descendants(table, roots), table)


def _has_in_environ(pid: int, needle: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return b"\0" + needle in b"\0" + f.read()
    except OSError:
        return False


@dataclass
class _State:
    base: str | None = None       # the launcher's own cgroup directory, once found
    refused: str | None = None    # why cgroups cannot be used in this process, once known
    said: bool = False            # the /proc way was noted on the logger
    probed: bool = False          # method() made and removed a task cgroup
    seq: int = 0
    me: str = ""                  # this process's pid and start time
    lock: threading.Lock = field(default_factory=threading.Lock)


_state = _State()


def _why_not() -> str:
    """Under the lock: why cgroups cannot follow the tasks (``""``: they can, below ``_state.base``)."""
    off = os.environ.get(CGROUP_OFF_ENV, "").strip()
    if off.lower() not in ("", "0", "false", "no"):
        return f"{CGROUP_OFF_ENV}={off}"
    if _state.refused is None and _state.base is None:
        try:
            _state.base = _own_cgroup()
            sweep_stale_cgroups(_state.base)
        except OSError as e:
            _state.refused = _why(e)
    return _state.refused or ""


def _tag() -> str:
    """Under the lock: a tag no other task of any launcher has (this process's pid and start time, a count)."""
    if not _state.me.startswith(f"{os.getpid()}-"):  # also in a child forked from a launcher
        _state.me = f"{os.getpid()}-{(proc_stat(os.getpid()) or (0, b'0'))[1].decode()}"
    _state.seq += 1
    return f"{_state.me}-{_state.seq}"


def tracker(task: str) -> Tracker:
    """A tracker for one task's process (a cgroup where this machine allows it, else the /proc way, noted once on the
    ``ssptk`` logger at INFO: a run's config.json says which, :func:`method`). Never raises."""
    with _state.lock:
        tag = _tag()
        why = _why_not()
        if not why:
            assert _state.base is not None
            path = os.path.join(_state.base, f"ssptk-{tag}")
            try:
                os.mkdir(path)
                return CgroupTracker(tag, path=path)
            except OSError as e:
                why = _state.refused = f"cannot make a cgroup in {_state.base}: {e.strerror or e}"
    return _refused(tag, why)


def method() -> str:
    """How what the tasks started from now on start is followed: ``"cgroup"``, or ``"none (<why>)"`` (the /proc way;
    config.json's ``tasks.tracking``). Tries once per process whether a task cgroup can be made. Never raises."""
    with _state.lock:
        why = _why_not()
        if not why and not _state.probed:
            assert _state.base is not None
            path = os.path.join(_state.base, f"ssptk-{_tag()}")
            try:
                os.mkdir(path)
                os.rmdir(path)
                _state.probed = True
            except OSError as e:
                why = _state.refused = f"cannot make a cgroup in {_state.base}: {e.strerror or e}"
    return "cgroup" if not why else f"none ({why})"


def _refused(tag: str, why: str) -> TreeTracker:
    with _state.lock:
        if not why.startswith(CGROUP_OFF_ENV):
            _state.refused = _state.refused or why
        said, _state.said = _state.said, True
    if not said:  # not a warning: it is no fault of the run, and config.json's tasks.tracking says it in every run
        _log.info("ssptk: no cgroup for the tasks (%s): what their code starts is followed through /proc instead, and "
                 "a process that replaced its environment within %g s of its task's end can outlive it", why,
                 SNAPSHOT_S)
    return TreeTracker(tag, how=f"none ({why})")


def _why(e: OSError) -> str:
    if e.filename is None:
        return str(e)
    return f"{e.filename}: {e.strerror or e}"


def _own_cgroup() -> str:
    """This process's cgroup v2 directory (``OSError`` saying why there is none)."""
    with open("/proc/self/cgroup") as f:
        path = next((ln.strip()[3:] for ln in f if ln.startswith("0::")), None)
    if path is None:
        raise OSError("no cgroup v2 hierarchy (cgroup v1 only)")
    with open("/proc/self/mountinfo") as f:
        mounts = [ln.split() for ln in f]
    found = next(((m[4], m[3]) for m in mounts if "-" in m and m[m.index("-") + 1:][:1] == ["cgroup2"]), None)
    if found is None:
        raise OSError("cgroup2 is not mounted")
    mountpoint, root = found
    rel = path[len(root):] if root != "/" and path.startswith(root) else path
    base = os.path.normpath(mountpoint + "/" + rel.lstrip("/"))
    if not os.path.isdir(base):
        raise OSError(f"this process's cgroup {path} is not visible under {mountpoint}")
    return base


def sweep_stale_cgroups(base: str) -> list[str]:
    """Kill what is left in the task cgroups of launchers that are gone, and remove them; their paths."""
    removed: list[str] = []
    with contextlib.suppress(OSError):
        for name in os.listdir(base):
            m = _NAME.match(name)
            st = proc_stat(m.group(1)) if m is not None else None
            if m is None or (st is not None and st[1].decode() == m.group(2)):
                continue
            path = os.path.join(base, name)
            stale = CgroupTracker(name, path=path)
            if not all(os.path.exists(f"/proc/{p}") for p in stale.members()):
                continue  # a process this pid namespace cannot see: some other launcher's, perhaps alive
            stale.close()
            if not os.path.exists(path):
                removed.append(path)
    return removed
