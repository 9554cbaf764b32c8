"""One run written on several hosts: each host's ``--out`` holds the logs of the workers it ran.

:func:`gather` copies those directories into one run directory (``config.json`` and ``model/`` from the
host of worker 0, which writes them; every worker's JSONL log; the task logs and status files, the PS's too),
refusing directories that are not of one run: their tasks recorded other run identities (``tasks/<task>.json``,
``config.json``'s ``run_identity``: :mod:`ssptk.rundir.task_status`), or, where older runs recorded none, their
``config.json`` options differ. Only regular files up to :data:`~ssptk.rundir.contract.MAX_LOG_BYTES` are copied,
each checked on the descriptor it is copied from (a FIFO, a directory or a device where a file should be, even one
swapped in after a check, is left behind, said in one line). ``ssptk report
DIR DIR ...`` reads the gathered directory.
"""
from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator

from ssptk.core.errors import UsageError
from ssptk.rundir.claim import os_reason
from ssptk.rundir.contract import MAX_LOG_BYTES, file_kind
from ssptk.rundir.layout import RunDir
from ssptk.rundir.task_status import read_statuses

__all__ = ["gather"]


def gather(sources: list[str], dest: str, warn: Callable[[str], None] | None = None) -> RunDir:
    """Copy the run directories ``sources`` (one run, several hosts) into ``dest`` (new or empty); ``warn``
    hears a line for each file left behind because it is not a regular file or is too large."""
    say = warn or (lambda line: None)
    rds = [RunDir(s) for s in sources]
    for rd in rds:
        if not os.path.isdir(rd.path):
            raise UsageError(f"{rd.path} is not a directory: give the run directory of each host")
    _one_identity(rds)
    with_config = [rd for rd in rds if _copyable(rd.config_path, say)]
    if not with_config:
        raise UsageError("none of these directories has config.json: give the one of worker 0's host too")
    options = {rd.path: rd.config().options for rd in with_config}
    first = with_config[0]
    for rd in with_config[1:]:
        if options[rd.path] != options[first.path]:
            raise UsageError(f"{first.path} and {rd.path} are not one run: their config.json options differ")
    out = _destination(dest)
    _copy(first.config_path, out.config_path, say, first.path)
    for rd in rds:
        _merge(rd.workers_dir, out.workers_dir, lambda n: n.endswith(".jsonl"), rd.path, say)
        _merge(rd.logs_dir, out.logs_dir, lambda n: n.endswith(".log"), rd.path, say)
        _merge(rd.tasks_dir, out.tasks_dir, lambda n: n.endswith(".json"), rd.path, say)
    models = [rd for rd in rds if _copyable(rd.final_path, say)]
    if models:
        os.makedirs(out.model_dir, exist_ok=True)
        _merge(models[0].model_dir, out.model_dir, lambda n: True, models[0].path, say)
    return out


def _one_identity(rds: list[RunDir]) -> None:
    """Refuse directories whose tasks recorded different run identities (each directory's status files and
    ``config.json``); those of older runs, which recorded none, are left to the options check."""
    seen: dict[str, str] = {}  # identity -> the first directory that has it
    for rd in rds:
        ids = {s.identity for s in read_statuses(rd.tasks_dir).values() if s.identity}
        ids |= {i for i in [rd.config().run_identity] if isinstance(i, str)}
        if len(ids) > 1:
            a, b = sorted(ids)[:2]
            raise UsageError(f"{rd.path} holds tasks of two runs ({a} and {b}): give each host's directory of one run")
        for identity in ids:
            for theirs, other in seen.items():
                if theirs != identity:
                    raise UsageError(f"{other} and {rd.path} are not one run: their tasks recorded run {theirs} and "
                                     f"run {identity} (another cluster, job, seed or options): give the directories "
                                     "of one run")
            seen.setdefault(identity, rd.path)


def _destination(dest: str) -> RunDir:
    """``dest`` as the gathered run's directory, made with its ``workers/`` and ``logs/``: refused in one line if it
    is a file (or anything but a directory), holds anything, or cannot be made."""
    try:
        st = os.stat(dest)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise UsageError(f"cannot gather into {dest}: {os_reason(e)}: give --gather a new directory") from None
    if st is not None and not stat.S_ISDIR(st.st_mode):
        raise UsageError(f"cannot gather into {dest}: it is {file_kind(st.st_mode)}, not a directory: give --gather "
                         "a new directory")
    if st is not None and os.listdir(dest):
        raise UsageError(f"{dest} is not empty: gather into a new directory")
    out = RunDir(dest)
    try:
        for d in (out.workers_dir, out.logs_dir, out.tasks_dir):
            os.makedirs(d, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot gather into {dest}: {os_reason(e)}: give --gather a new directory") from None
    return out


def _open_regular(path: str, say: Callable[[str], None]) -> tuple[int, os.stat_result] | None:
    """An open descriptor of ``path`` and its status when it is a regular file of at most :data:`MAX_LOG_BYTES`
    (after links), checked on the descriptor itself, so a file swapped for a FIFO or a device after a check is never
    read (opened without blocking; a missing one is not said). The caller closes the descriptor."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    st = os.fstat(fd)
    if stat.S_ISREG(st.st_mode) and st.st_size <= MAX_LOG_BYTES:
        return fd, st
    os.close(fd)
    say(f"{path}: not a regular file: left behind" if not stat.S_ISREG(st.st_mode) else
        f"{path}: larger than {MAX_LOG_BYTES // 2**20} MiB: left behind")
    return None


def _copyable(path: str, say: Callable[[str], None]) -> bool:
    """``path`` is a regular file of at most :data:`MAX_LOG_BYTES` (after links); a missing one is not said."""
    opened = _open_regular(path, say)
    if opened is not None:
        os.close(opened[0])
    return opened is not None


def _chunks(fd: int) -> Iterator[bytes]:
    """The bytes of the open file ``fd``, up to :data:`MAX_LOG_BYTES` (a file that grows is cut there)."""
    left = MAX_LOG_BYTES
    while left > 0:
        chunk = os.read(fd, min(left, 2**20))
        if not chunk:
            return
        left -= len(chunk)
        yield chunk


def _same(fd: int, target: str) -> bool:
    """Whether the open file ``fd`` holds what ``target`` holds."""
    with open(target, "rb") as f:
        for chunk in _chunks(fd):
            if f.read(len(chunk)) != chunk:
                return False
        return f.read(1) == b""


def _copy(path: str, target: str, say: Callable[[str], None], origin: str) -> None:
    """Copy the regular file ``path`` to ``target`` from one open descriptor (its mode and times too); an existing
    ``target`` with other content is two runs mixed up."""
    opened = _open_regular(path, say)
    if opened is None:
        return
    fd, st = opened
    try:
        if os.path.exists(target):
            if _same(fd, target):
                return  # the same file seen twice (a file system the hosts share)
            raise UsageError(f"{os.path.basename(path)} is in two of these directories with different content (the "
                             f"second in {origin}): is each worker's log from one host only?")
        with open(target, "xb") as out:
            for chunk in _chunks(fd):
                out.write(chunk)
        os.chmod(target, stat.S_IMODE(st.st_mode))
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    finally:
        os.close(fd)


def _merge(src: str, dst: str, wanted: Callable[[str], bool], origin: str, say: Callable[[str], None]) -> None:
    """Copy ``src``'s wanted files into ``dst``; the same name with other content is two runs mixed up."""
    if not os.path.isdir(src):
        return
    for name in sorted(os.listdir(src)):
        if wanted(name):
            _copy(os.path.join(src, name), os.path.join(dst, name), say, origin)
