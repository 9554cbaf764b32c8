"""The listening socket of a shared fork server (``python -m ssptk.worker --fork-server --listen PATH``): made for its
owner only, checked at each connection, described beside itself, and removed with the server.

A fork server runs the code a request names (the task's model file, imported in the child) as the server's user, so
it must serve its owner and no one else (imports core):

- **The socket is its owner's only, whatever the umask, with no moment where it is not.** It is bound inside a fresh
  directory that only the owner can enter (``mkdtemp``: mode 0700), narrowed there to mode 0600, and only then
  linked at ``PATH``. Setting the umask around ``bind`` would not do: a directory with a default ACL ignores the
  umask (the ACL's mask then comes from the mode a socket is created with, 0777), and the umask is the whole
  process's. ``link`` never replaces what is at ``PATH``: a file that appeared there meanwhile is kept, and the
  start refused.
- **Each connection's peer is checked** (``SO_PEERCRED``, the credentials the kernel recorded as the peer
  connected): one whose effective uid is not the server's is closed unread, unserved, and said once per uid on
  the server's stderr. The socket's mode is the first wall (another user cannot connect); this one holds where
  the mode does not (root connects anywhere, and a launcher run as root is checked by
  :func:`ssptk.launch.fork_trust.shared_server`, the other way round).
- **What is at PATH already is never deleted but a stale socket of the owner's** (one nobody listens on): a
  regular file, a directory, another user's socket or one a server listens on is refused in one line
  (:class:`~ssptk.core.errors.UsageError`: ``ssptk worker: error: ...``, exit 2) and kept.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import stat
import struct
import sys
import tempfile

from ssptk.core.errors import UsageError

__all__ = ["DESCRIPTION", "Listening", "listen", "peer_credentials", "served"]

#: the listening server's description beside its socket (``PATH.server``)
DESCRIPTION = ".server"
_BACKLOG = 64
_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


class Listening:
    """A listening socket at ``path`` and what is needed to remove exactly what this server made there."""

    def __init__(self, path: str, sock: socket.socket, inode: tuple[int, int]) -> None:
        self.path = path
        self.sock = sock
        self.inode = inode  # (device, inode) of the socket file this server linked at path
        self.described: tuple[int, int] | None = None
        self.refused: set[int] = set()  # uids refused already (said once each)

    def describe(self, about: dict[str, object]) -> None:
        """Write ``about`` beside the socket (``PATH.server``), mode 0600, replacing a description left there."""
        folder, name = os.path.split(self.path)
        fd, tmp = tempfile.mkstemp(dir=folder or ".", prefix=f".{name}{DESCRIPTION}.")  # 0600, never an old file
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(about, f)
                st = os.fstat(f.fileno())
            os.replace(tmp, self.path + DESCRIPTION)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        self.described = (st.st_dev, st.st_ino)

    def accept(self) -> socket.socket | None:
        """The next connection, if its peer runs as this server's user; ``None`` otherwise (closed unserved)."""
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return None
        pid, uid, _ = peer_credentials(conn)
        if uid == os.geteuid():
            return conn
        conn.close()
        if uid not in self.refused:
            self.refused.add(uid)
            print(f"ssptk fork server: refused a connection from uid {uid} (pid {pid}): this server serves its owner "
                  f"(uid {os.geteuid()}) only; later ones from uid {uid} are refused without a word",
                  file=sys.stderr, flush=True)
        return None

    def close(self) -> None:
        """Close the socket; remove the socket file and the description if they are still the ones this server
        made (a later server's at the same path stays)."""
        self.sock.close()
        for path, made in ((self.path, self.inode), (self.path + DESCRIPTION, self.described)):
            with contextlib.suppress(OSError):
                st = os.lstat(path)
                if made is not None and (st.st_dev, st.st_ino) == made:
                    os.unlink(path)


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """``(pid, uid, gid)`` of the process at the other end of the connected Unix socket ``sock``, as the kernel
    recorded them when it connected (or, for the connecting side, when the server called ``listen``)."""
    return _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))


def listen(path: str) -> Listening:
    """A socket listening at ``path`` that only this user can connect to; :class:`UsageError` (one line, nothing
    removed) where ``path`` is taken: by a regular file, a directory, another user's socket, a live server."""
    _clear_stale(path)
    folder = os.path.dirname(os.path.abspath(path))
    try:
        private = tempfile.mkdtemp(dir=folder, prefix=".ssptk-fork-server-")  # 0700: only the owner enters
    except OSError as e:
        raise UsageError(f"--listen {path}: cannot make a socket in {folder}: {e.strerror or e}: give a path in a "
                         "directory you can write to") from e
    inside = os.path.join(private, "s")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        sock.bind(inside)
        os.chmod(inside, 0o600)
        os.link(inside, path)  # never replaces: what appeared at path meanwhile is kept
        st = os.lstat(path)
        sock.listen(_BACKLOG)
    except OSError as e:
        sock.close()
        why = "something appeared there meanwhile: it is kept" if e.errno == errno.EEXIST else e.strerror or str(e)
        raise UsageError(f"--listen {path}: cannot listen there ({why}): give another path") from e
    finally:
        with contextlib.suppress(OSError):
            os.unlink(inside)
        with contextlib.suppress(OSError):
            os.rmdir(private)
    return Listening(path, sock, (st.st_dev, st.st_ino))


def _clear_stale(path: str) -> None:
    """Remove what is at ``path`` only if it is a socket of this user's that nobody listens on; else refuse."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise UsageError(f"--listen {path}: {e.strerror or e}: give another path") from e
    if stat.S_ISDIR(st.st_mode):
        raise UsageError(f"--listen {path} is a directory: give the path of a socket to make, such as "
                         f"{os.path.join(path, 'fork-server')}")
    if not stat.S_ISSOCK(st.st_mode):
        raise UsageError(f"--listen {path} exists and is not a socket: it is kept; give a path where nothing is")
    if st.st_uid != os.geteuid():
        raise UsageError(f"--listen {path} is a socket of another user (uid {st.st_uid}): it is kept; give another "
                         "path")
    if served(path):
        raise UsageError(f"--listen {path}: a server listens there already: use it (SSPTK_FORK_SERVER={path}) or "
                         "give another path")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # a server that ended without removing it (killed): nobody listens


def served(path: str) -> bool:
    """Whether something listens on the Unix socket at ``path`` (only a refused connection counts as stale)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        probe.connect(path)
    except OSError as e:
        return e.errno not in (errno.ECONNREFUSED, errno.ENOENT)
    finally:
        probe.close()
    return True
