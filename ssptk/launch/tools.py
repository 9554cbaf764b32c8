"""Where the system's own commands are: ``tc`` and ``ip`` (iproute2), ``unshare`` and ``nsenter`` (util-linux).

An ordinary user's PATH on Debian holds neither ``/usr/sbin`` nor ``/sbin``, where iproute2 puts ``tc`` and ``ip``,
though any user may run them (inside a private namespace they need no privilege). So a command is looked up on PATH
first, then in the system's own directories, and always run by the absolute path found here, never through a shell.
"""
from __future__ import annotations

import os
import shutil

from ssptk.core.errors import UsageError

__all__ = ["PACKAGES", "SYSTEM_DIRS", "find", "require"]

#: Searched after PATH, in this order.
SYSTEM_DIRS = ("/usr/sbin", "/sbin", "/usr/bin", "/bin")
#: The Debian/Ubuntu/Fedora package that ships each command (what a missing one's message names).
PACKAGES = {"tc": "iproute2", "ip": "iproute2", "unshare": "util-linux", "nsenter": "util-linux"}


def find(command: str) -> str | None:
    """The absolute path of ``command`` (a name, or a path: used as it is when it is executable), or ``None``."""
    if os.path.sep in command:
        return os.path.abspath(command) if os.path.isfile(command) and os.access(command, os.X_OK) else None
    found = shutil.which(command)
    if found is None:
        found = shutil.which(command, path=os.pathsep.join(SYSTEM_DIRS))
    return None if found is None else os.path.abspath(found)


def require(command: str, needed_for: str) -> str:
    """:func:`find`'s path, or a :class:`UsageError` in one line naming the package to install."""
    path = find(command)
    if path is None:
        package = PACKAGES.get(command, command)
        raise UsageError(f"{needed_for} needs the command {command!r}, which is neither on PATH nor in /usr/sbin or "
                         f"/sbin: install {package} (e.g. sudo apt-get install {package})")
    return path
