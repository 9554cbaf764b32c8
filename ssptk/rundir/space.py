"""A full disk said in one line: which device, which file, what to do.

Every file ssptk writes is complete or absent (``_write_json`` writes a temporary name, then renames;
the JSONL recorder takes back a partial line), so a full disk costs the rest of the run, never the
readability of what was written. This module turns ``ENOSPC``/``EDQUOT`` into :class:`DiskFull`.
"""
from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator

from ssptk.core.errors import DiskFull

__all__ = ["disk_full", "is_disk_full", "mount_of", "write_whole", "writing"]

_FULL = (errno.ENOSPC, errno.EDQUOT)
# what TensorFlow's C++ file writers (checkpoints) put in their messages for the same errno
_FULL_TEXT = ("No space left on device", "Disk quota exceeded")


def is_disk_full(e: BaseException) -> bool:
    """``e`` (or what caused it) is a full disk or an exhausted quota."""
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, DiskFull) or (isinstance(e, OSError) and e.errno in _FULL):
            return True
        if any(t in str(e) for t in _FULL_TEXT):
            return True
        e = e.__cause__ or e.__context__  # type: ignore[assignment]
    return False


def mount_of(path: str) -> str:
    """The device holding ``path`` and where it is mounted (``/dev/sda1 mounted on /data``), from
    ``/proc/self/mountinfo``; the nearest existing directory where that cannot be read."""
    here = os.path.abspath(path)
    while not os.path.exists(here) and os.path.dirname(here) != here:
        here = os.path.dirname(here)
    real = os.path.realpath(here)
    try:
        dev = os.stat(real).st_dev
        with open("/proc/self/mountinfo", encoding="utf-8") as f:
            rows = [line.split() for line in f]
    except OSError:
        return f"the file system of {real}"
    best: tuple[str, str, str] | None = None
    for row in rows:
        if "-" not in row or len(row) < 5:
            continue
        major, _, minor = row[2].partition(":")
        point = row[4].replace("\\040", " ")
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and major.isdigit() and minor.isdigit() and os.makedev(int(major), int(minor)) == dev:
            if best is None or len(point) >= len(best[2]):
                tail = row[row.index("-") + 1:] + ["", ""]
                best = (tail[0], tail[1], point)  # file system type, source device, mount point
    if best is None:
        return f"the file system of {real}"
    fstype, source, point = best
    return f"{source} mounted on {point}" if source.startswith("/") else f"the {fstype} file system on {point}"


def disk_full(path: str) -> DiskFull:
    """The one-line error for a full disk met while writing ``path``."""
    return DiskFull(f"no space left on {mount_of(path)} while writing {path}: free space or choose --out elsewhere",
                    path)


@contextlib.contextmanager
def writing(path: str) -> Iterator[None]:
    """Turn a full disk met inside the block into :class:`DiskFull` naming ``path``."""
    try:
        yield
    except DiskFull:
        raise
    except OSError as e:
        if e.errno in _FULL:
            raise disk_full(path) from None
        raise


def write_whole(path: str, text: str) -> None:
    """Write ``text`` to a temporary name, then rename it to ``path``: the file is complete or absent,
    never half (:class:`DiskFull` on a full disk, and the temporary file removed)."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with writing(path), open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    os.replace(tmp, path)
