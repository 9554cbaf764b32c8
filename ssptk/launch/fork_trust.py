"""Whom a launcher trusts with its tasks: the shared fork server it may use, and the pids it may signal.

A fork server runs a launcher's tasks as the server's user, and the launcher hands it its logs and its clusters'
namespace descriptors, then signals and kills the pids it answers with. So (imports runtime):

- A launcher given ``SSPTK_FORK_SERVER=PATH`` uses the server there only if it suits its tasks
  (:func:`unsuitable`: its description, ``PATH.server``, is this user's, the server sees the same files and started
  with the same settings of what a process reads as it starts) and, once connected, the kernel says the process at the
  other end runs as this user and is the one described (``SO_PEERCRED``), before anything is sent
  (:func:`shared_server`). Otherwise it says why, once per process and reason, as a warning on the ``ssptk`` logger,
  and starts a server of its own, as it would without ``SSPTK_FORK_SERVER``: the variable only saves TensorFlow
  imports, and a run must not fail, nor wait, because of what another user put at a path.
- A pid a server answers with is a task only if it is that server's child and runs as this user
  (:func:`task_start`); its start time is kept, so that a pid the kernel gave to another process since is never
  signalled (:class:`~ssptk.launch.fork_client.ForkedProcess`).
"""
from __future__ import annotations

import json
import logging
import os
import socket
import stat
import threading
from typing import Any

from ssptk.runtime.fork_listen import DESCRIPTION, peer_credentials
from ssptk.runtime.fork_server import at_start, started_with
from ssptk.runtime.reaper import proc_stat

__all__ = ["CONNECT_TIMEOUT_S", "NotATask", "shared_server", "suits", "task_start", "unsuitable", "warn_once"]

#: how long connecting to a shared server may take
CONNECT_TIMEOUT_S = 10.0
_log = logging.getLogger("ssptk")
_said: set[str] = set()
_said_lock = threading.Lock()
_SHOWN = 60  # characters of a setting's value a warning shows
_MAX_DESCRIPTION = 1 << 20


class NotATask(Exception):
    """A fork server answered with a pid that is not a task it forked for this user."""


def warn_once(text: str) -> None:
    """``text`` as a warning on the ``ssptk`` logger, the first time this process has it to say."""
    with _said_lock:
        if text in _said:
            return
        _said.add(text)
    _log.warning("ssptk: %s", text)


def unsuitable(path: str, env: dict[str, str]) -> str | None:
    """Why the shared fork server listening at ``path`` cannot fork tasks whose environment is ``env``, or ``None``
    where it can: its description (``PATH.server``) must be this user's; the server must see the files this process
    sees (the same mount and user namespaces: ``unshare -rm`` makes others) and have started with the same settings
    of what a process reads as it starts (``LD_PRELOAD``, ``PYTHON*``, ``TF_*``, ...), those TensorFlow's import sets
    counted as set (:func:`~ssptk.runtime.fork_server.started_with`)."""
    about = _description(path)
    if isinstance(about, str):
        return about
    try:
        if any(about["ns"][ns] != os.readlink(f"/proc/self/ns/{ns}") for ns in ("mnt", "user")):
            return "the server there sees other files (another mount or user namespace)"
    except (OSError, KeyError, TypeError):
        return f"{path + DESCRIPTION} does not say which files the server sees"
    given = about.get("env")
    theirs: dict[str, str] = given if isinstance(given, dict) else {}
    differ = sorted(k for k in {*theirs, *env} if at_start(k) and started_with(theirs, k) != started_with(env, k))
    if not differ:
        return None
    return (f"the server there started with {_settings(theirs, differ)}, these tasks have {_settings(env, differ)}: "
            "start it with the same settings")


def suits(path: str, env: dict[str, str]) -> bool:
    """Whether the shared fork server listening at ``path`` can fork tasks whose environment is ``env``
    (:func:`unsuitable` says why not)."""
    return unsuitable(path, env) is None


def shared_server(path: str, env: dict[str, str]) -> tuple[socket.socket, int] | None:
    """A connection to the fork server listening at ``path`` and its pid, where it suits tasks whose environment is
    ``env`` and the kernel says it runs as this user and is the server described there; else ``None``, having said
    why (once). Nothing is sent on the connection here."""
    why = unsuitable(path, env)
    if why is None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            sock.settimeout(CONNECT_TIMEOUT_S)  # a listener whose backlog is full, and that never accepts, is no server
            sock.connect(path)
            sock.settimeout(None)
            pid, uid, _ = peer_credentials(sock)
            described = _description(path)
            if uid != os.geteuid():
                why = (f"the server there runs as uid {uid}, not as this user (uid {os.geteuid()}): nothing was sent "
                       "to it")
            elif isinstance(described, str) or described.get("pid") != pid:
                why = f"the server there (pid {pid}) is not the one {path + DESCRIPTION} describes"
            else:
                return sock, pid
        except OSError as e:
            why = f"nothing answers there ({e.strerror or e})"
        sock.close()
    warn_once(f"SSPTK_FORK_SERVER={path}: {why}; this process starts a fork server of its own")
    return None


def task_start(pid: int, parent: int | None) -> bytes | None:
    """The start time of task ``pid``, which fork server ``parent`` says it forked: it must be that server's child
    and run as this user (:class:`NotATask` otherwise). ``None`` where it is gone already (ended and reaped): there is
    nothing to signal then."""
    stat = proc_stat(pid)
    if stat is None:
        return None
    if parent is None or stat[0] != parent:
        raise NotATask(f"pid {pid} is not a child of the fork server (pid {parent}) but of pid {stat[0]}")
    uid = _uid(pid)
    if uid is None:
        return None
    if uid != os.geteuid():
        raise NotATask(f"pid {pid} runs as uid {uid}, not as this user (uid {os.geteuid()})")
    return stat[1]


def _uid(pid: int) -> int | None:
    """The effective uid of process ``pid`` (from ``/proc/<pid>/status``, which holds whatever the process's
    dumpable flag, unlike the owner of ``/proc/<pid>``); ``None`` if it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            line = next(ln for ln in f if ln.startswith("Uid:"))
        return int(line.split()[2])
    except (OSError, StopIteration, IndexError, ValueError):
        return None


def _description(path: str) -> dict[str, Any] | str:
    """What the server at ``path`` wrote about itself (``PATH.server``), if this user wrote it; else why not."""
    where = path + DESCRIPTION
    try:  # not followed if a link, not waited on if a FIFO: whoever made it, it is looked at before it is read
        fd = os.open(where, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        return f"no fork server has described itself there ({where}: {e.strerror or e})"
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            return f"{where} belongs to uid {st.st_uid}, not to this user (uid {os.geteuid()})"
        about = json.loads(os.read(fd, _MAX_DESCRIPTION)) if stat.S_ISREG(st.st_mode) else None
    except (OSError, ValueError):
        about = None
    finally:
        os.close(fd)
    return about if isinstance(about, dict) else f"{where} is not a fork server's description"


def _settings(env: dict[str, str], keys: list[str]) -> str:
    shown = []
    for k in keys:
        value = started_with(env, k)
        text = "unset" if value is None else repr(value if len(value) <= _SHOWN else value[:_SHOWN] + "...")
        shown.append(f"{k} {text}")
    return ", ".join(shown)
