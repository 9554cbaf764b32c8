"""Starting clusters' tasks from a fork server, so that TensorFlow is imported once per process, not per task: which
clusters share which server (:func:`acquire_server`, :func:`release_server`, :func:`shutdown_servers`); the server as
this process talks to it is :mod:`ssptk.launch.fork_client`'s.

:class:`ForkServer` starts ``python -m ssptk.worker --fork-server FD`` (:mod:`ssptk.runtime.fork_server`) the way
a task is started (its own session, the tasks' shared environment, a death signal) and asks it for each task,
which enters its cluster's network namespace as ``nsenter`` would; :class:`ForkedProcess` is what
:class:`~ssptk.launch.process.TaskProcess` then holds in place of a :class:`subprocess.Popen`: the same ``pid``,
``stdin``, ``poll()``, ``wait()`` and ``returncode``. A process's clusters share one server as long as their tasks'
environment (but for :data:`PER_CLUSTER_ENV`) and working directory are the same (:func:`acquire_server`): a cluster's
start then costs no TensorFlow import at all (3-4 s of CPU here). It stays up between clusters, ends with
``ssptk.shutdown()`` (at once if no cluster holds it, else as soon as the last one that does ends) or the process
(it reads its end from the socket), and is replaced when it broke. ``SSPTK_FORK_SERVER=PATH`` uses a server several
processes share instead (``python -m ssptk.worker --fork-server --listen PATH``; :func:`address`), where it answers
as this user and suits the tasks (:mod:`ssptk.launch.fork_trust`; where not, a warning says why, once): the test
suite starts one per test process for the CLI commands it runs. A pid a server answers with is signalled only as the
process it was when checked as that server's child (:class:`ForkedProcess`); a task that ended because its server
did is reported as the fork server's failure, with how the server ended (:meth:`ForkedProcess.ended_with_server`).

Where the server cannot be used, a task is started as before, by ``subprocess`` (the caller's fallback): the
server did not start or died, ``SSPTK_FORK_SERVER=0`` asks for it, or the tasks do not share one environment
(GPUs: each task's ``CUDA_VISIBLE_DEVICES`` must be read by a TensorFlow that has not started yet, and CUDA is not
fork-safe; only CPU clusters fork).
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from ssptk.core.network import LINKS_ENV
from ssptk.launch.fork_client import FORK_SERVER_ENV, ForkServer, address
from ssptk.launch.fork_trust import suits
from ssptk.rundir.task_status import STATUS_DIR_ENV

__all__ = ["FORK_SERVER_ENV", "ForkServer", "acquire_server", "address", "enabled", "release_server", "running",
           "shutdown_servers", "suits"]

#: what a cluster's environment holds for itself alone, which its tasks get with each fork request: clusters that
#: differ only in these share a server
PER_CLUSTER_ENV = ("TMPDIR", STATUS_DIR_ENV, LINKS_ENV)


def enabled() -> bool:
    """Whether clusters start their tasks from a fork server (``SSPTK_FORK_SERVER=0``: one process each)."""
    return os.environ.get(FORK_SERVER_ENV, "").strip().lower() not in ("0", "false", "no")


class _Shared:
    """The process's fork servers, one per environment and working directory its clusters have, each used by the
    clusters that hold it (:func:`acquire_server`, :func:`release_server`)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.servers: dict[tuple[str, ...], tuple[ForkServer, int]] = {}  # key -> (server, clusters using it)
        #: servers :func:`shutdown_servers` found in use: id -> (server, clusters using it); each ends with its last
        #: cluster
        self.retiring: dict[int, tuple[ForkServer, int]] = {}


_SHARED = _Shared()


def _key(env: dict[str, str]) -> tuple[str, ...]:
    """What clusters sharing a server must have in common: the working directory (``-m`` puts it on ``sys.path``)
    and the environment (``PYTHONPATH``, TensorFlow's settings: read at its import)."""
    try:
        cwd = os.getcwd()
    except OSError:  # removed under us: no server of an earlier cluster can match
        cwd = f"<gone {time.monotonic()}>"
    return (cwd, *sorted(f"{k}={v}" for k, v in env.items() if k not in PER_CLUSTER_ENV))


def acquire_server(python: str, env: dict[str, str],
            start: Callable[[ForkServer], None]) -> ForkServer:
    """The fork server for a cluster whose tasks share ``env``: the process's server for that environment and
    working directory if one is up, else a new one, ``start``-ed here. Hold it until :func:`release_server`. A server no
    cluster holds stays up for the next cluster (its TensorFlow import is what it saves) until one with another
    environment comes, :func:`shutdown_servers`, or the process ends."""
    key = _key(env)
    with _SHARED.lock:
        stale = [k for k, (server, users) in _SHARED.servers.items()
                 if users == 0 and (k != key or server.broken)]
        for k in stale:
            _SHARED.servers.pop(k)[0].close()
        held = _SHARED.servers.get(key)
        if held is None or held[0].broken:
            server = ForkServer(python, env)
            start(server)
            held = (server, 0)
        _SHARED.servers[key] = (held[0], held[1] + 1)
        return held[0]


def running(env: dict[str, str]) -> bool:
    """Whether this process has a server up for clusters whose tasks share ``env`` (an earlier cluster's, kept for
    the next): a single task forks from it at no cost, where starting one for it would save nothing."""
    with _SHARED.lock:
        held = _SHARED.servers.get(_key(env))
        return held is not None and not held[0].broken


def release_server(server: ForkServer) -> None:
    """A cluster is done with ``server`` (its tasks have ended); a broken one no cluster holds ends now, and so does
    one :func:`shutdown_servers` asked to end."""
    with _SHARED.lock:
        for key, (held, users) in list(_SHARED.servers.items()):
            if held is server:
                if users <= 1 and held.broken:
                    _SHARED.servers.pop(key)
                    held.close()
                else:
                    _SHARED.servers[key] = (held, max(0, users - 1))
                return
        retiring = _SHARED.retiring.pop(id(server), None)
        if retiring is not None and retiring[1] > 1:
            _SHARED.retiring[id(server)] = (server, retiring[1] - 1)
            return
    server.close()  # retiring, or replaced after it broke while this cluster held it: no other cluster has it


def shutdown_servers() -> None:
    """End the fork servers no cluster holds now, and each one in use as soon as the last cluster holding it ends
    (``ssptk.shutdown()``, which lets a run in progress go on to its end; at exit, the servers end with the
    process). A cluster that starts meanwhile gets a new server."""
    with _SHARED.lock:
        for key, (server, users) in list(_SHARED.servers.items()):
            _SHARED.servers.pop(key)
            if users == 0:
                server.close()
            else:
                _SHARED.retiring[id(server)] = (server, users)

