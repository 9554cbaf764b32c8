"""One run per directory: a run claims its directory by creating ``.ssptk-run`` there, exclusively.

Creating it with ``link()``, which fails when the name exists, is atomic on local file systems and NFS,
so of two runs started at once with the same ``--out`` exactly one gets the directory; the other is
refused with a message naming the run that holds it. The file stays when the run ends: it records which
process made the directory (``docs/run-directory.md``). Errors creating the directory become one-line
:class:`UsageError` messages (exit 2), a full disk :class:`~ssptk.core.errors.DiskFull` (exit 1).
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import threading
import time
from collections.abc import Iterator

from ssptk.core.errors import UsageError
from ssptk.rundir.contract import load_json
from ssptk.rundir.space import writing

__all__ = ["CLAIM_FILE", "claim", "make_directory", "recording_claims", "refusal"]

#: The claim file in every run directory (a JSON object: pid, host, started, mode).
CLAIM_FILE = ".ssptk-run"

#: The lists :func:`recording_claims` fills, while their ``with`` lasts.
_RECORDERS: list[list[str]] = []
_RECORDERS_LOCK = threading.Lock()


@contextlib.contextmanager
def recording_claims(into: list[str]) -> Iterator[list[str]]:
    """Inside the ``with``, append to ``into`` every directory this process claims (runs, comparisons,
    predictions), in order: what a command stopped half-way has written is in them, and nowhere else."""
    with _RECORDERS_LOCK:
        _RECORDERS.append(into)
    try:
        yield into
    finally:
        with _RECORDERS_LOCK:
            _RECORDERS.remove(into)


def make_directory(path: str) -> None:
    """``os.makedirs(path, exist_ok=True)``, with what went wrong said in one line a user can act on."""
    try:
        with writing(path):
            os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot create output directory {path}: {os_reason(e)}: choose another --out") from None


def os_reason(e: OSError) -> str:
    """What an :class:`OSError` from creating or writing a file means, in a few words."""
    if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return "permission denied (read-only or not yours)"
    if e.errno == errno.ENOTDIR:
        return "a part of the path is a file, not a directory"
    if e.errno == errno.EEXIST:
        return "a file of that name exists"
    if e.errno == errno.ENAMETOOLONG:
        return "the name is too long for the file system"
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return "no space left on the device"
    return e.strerror or type(e).__name__


def claim(path: str, mode: str) -> None:
    """Claim the (existing) directory ``path`` for a run of ``mode``; :class:`UsageError` if another run
    has it or it holds anything else."""
    target = os.path.join(path, CLAIM_FILE)
    body = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "mode": mode,
                       "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    # Written under a private name, then hard-linked into place: link() fails if the name exists, so the
    # claim is exclusive, and whoever sees it sees it whole.
    draft = os.path.join(path, f".ssptk-run.{os.getpid()}.{threading.get_ident()}")
    try:
        with writing(target), open(draft, "w", encoding="utf-8") as f:
            f.write(body + "\n")
        os.link(draft, target)
    except FileExistsError:
        raise UsageError(refusal(path)) from None
    except OSError as e:
        raise UsageError(f"cannot use output directory {path}: {os_reason(e)}: choose another --out") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(draft)
    others = [n for n in os.listdir(path) if not n.startswith(CLAIM_FILE)]
    if others:  # it filled between the caller's look and the claim: not ours after all
        os.unlink(target)
        raise UsageError(refusal(path))
    with _RECORDERS_LOCK:
        for into in _RECORDERS:
            into.append(path)


def refusal(path: str) -> str:
    """Why ``path`` cannot take a new run: a live run holds it, a run that is gone left only its claim (stale:
    how to reuse it), or it is simply not empty."""
    holder = _holder(path)
    finished = any(os.path.exists(os.path.join(path, n)) for n in ("summary.json", "report.html"))
    if holder is not None and not finished:
        pid, mode, started = holder.get("pid"), holder.get("mode", "?"), holder.get("started", "?")
        return f"{path} is in use by run {mode} (pid {pid}, started {started}): choose another --out"
    return (_only_a_claim(path) if holder is None else None) or \
        f"output directory {path} exists and is not empty: choose another --out"


def _only_a_claim(path: str) -> str | None:
    """Why ``path`` is refused when all it holds is the claim of a run that is gone (stale), or of one on
    another host, which cannot be checked from here; ``None`` when it holds more."""
    try:
        if [n for n in os.listdir(path) if not n.startswith(CLAIM_FILE)]:
            return None
    except OSError:
        return None
    info, remove = _claim_of(path), f"remove {os.path.join(path, CLAIM_FILE)}"
    if info is None:
        return f"{path} holds only an unreadable run claim: {remove} to reuse it, or choose another --out"
    pid, mode, started, host = info.get("pid"), info.get("mode", "?"), info.get("started", "?"), info.get("host")
    if host != socket.gethostname():
        return (f"{path} holds only the claim of run {mode} on host {host} (pid {pid}, started {started}), which "
                f"cannot be checked from here: if that run is over, {remove} to reuse it, or choose another --out")
    return (f"{path} holds only the stale claim of run {mode} (pid {pid}, started {started}), which is no longer "
            f"running: {remove} to reuse it, or choose another --out")


def _claim_of(path: str) -> dict[str, object] | None:
    """The claim in ``path``, read (a JSON object), or ``None`` (a FIFO or a device there is not read)."""
    info, _ = load_json(os.path.join(path, CLAIM_FILE))
    return info if isinstance(info, dict) else None


def _holder(path: str) -> dict[str, object] | None:
    """The claim of a run still alive on this host, else ``None``."""
    info = _claim_of(path)
    if info is None or info.get("host") != socket.gethostname():
        return None
    pid = info.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:  # alive, someone else's
        return info
    return info
