"""The launcher's directories in the system temp directory, named after the process that made them.

Each local cluster gives its tasks a private directory, ``ssptk-tasks-<pid>-*``, removed when the cluster
stops: their ``TMPDIR`` in ``tmp/`` (TensorFlow's autograph writes a ``__autograph_generated_file*.py`` there
per traced function, a user model may write more) and their status files in ``status/``; a warm cluster keeps
its logs in ``ssptk-warm-<pid>-*``, removed at shutdown. A launcher killed outright cannot remove its own, so
every new one first removes those whose process is gone.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile

__all__ = ["make_temp_dir", "sweep_stale_dirs"]

_NAME = re.compile(r"^ssptk-(tasks|warm)-(\d+)-")


def make_temp_dir(kind: str) -> str:
    """A new ``ssptk-<kind>-<pid>-*`` directory in the system temp directory (after :func:`sweep_stale_dirs`)."""
    sweep_stale_dirs()
    return tempfile.mkdtemp(prefix=f"ssptk-{kind}-{os.getpid()}-")


def sweep_stale_dirs(root: str | None = None) -> list[str]:
    """Remove this user's ``ssptk-tasks-*`` / ``ssptk-warm-*`` directories whose launcher process is gone;
    the paths removed."""
    root = root or tempfile.gettempdir()
    removed: list[str] = []
    try:
        names = os.listdir(root)
    except OSError:
        return removed
    for name in names:
        m = _NAME.match(name)
        path = os.path.join(root, name)
        if m is None or _alive(int(m.group(2))):
            continue
        try:
            if os.stat(path).st_uid != os.getuid():
                continue
        except OSError:
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
