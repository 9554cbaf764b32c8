"""Warm clusters: TensorFlow tasks kept alive between runs in one Python process (a notebook kernel).

The first warm run with a given worker count and GPU assignment starts a serving
:class:`~ssptk.launch.cluster.LocalCluster`; later runs with the same key reuse it, so they skip TensorFlow's
start-up in every task. Each run's state lives in its own container on the PS, reset when the run
ends (see ``ssptk.runtime.task``), so no run sees another's variables, counters or queues.

A run that fails or is interrupted discards its cluster (a task may be stuck in a barrier); the next
run starts a fresh one. :func:`shutdown_warm` (also at interpreter exit) stops the idle ones at once, and a cluster
serving a run (a background run, another thread's) as soon as that run ends, instead of pooling it: it says
which (:class:`Stopped`). The tasks also die with their parent process, and exit when their stdin pipe closes.
"""
from __future__ import annotations

import atexit
import shutil
import threading

from ssptk.core.errors import TaskFailure
from ssptk.core.network import Network
from ssptk.launch import forking
from ssptk.launch.cluster import LocalCluster, StartProgress
from ssptk.launch.shared import SharedCluster
from ssptk.launch.tempdirs import make_temp_dir

PoolKey = tuple[int, tuple[tuple[str, str], ...], bool, int, str]

_lock = threading.Lock()
_idle: dict[PoolKey, LocalCluster] = {}
_busy: set[int] = set()
_retiring: set[int] = set()  # busy clusters that shutdown_warm() asked to stop: stopped when their runs end


class Stopped(int):
    """How many idle warm clusters :func:`shutdown_warm` stopped (an ``int``), and in ``in_use`` how many that serve a
    run now, which stop as soon as their runs end; says so when a notebook shows it."""

    in_use: int

    def __new__(cls, stopped: int, in_use: int = 0) -> Stopped:
        self = super().__new__(cls, stopped)
        self.in_use = in_use
        return self

    def __repr__(self) -> str:
        n, busy = int(self), self.in_use
        stopped = f"stopped {n} warm cluster{'' if n == 1 else 's'}" if n else ""
        if not busy:
            return stopped or "no warm cluster was running"
        later = (f"{busy} warm cluster{'' if busy == 1 else 's'} in use by a run will stop as soon as "
                 f"{'that run ends' if busy == 1 else 'their runs end'}")
        return f"{stopped}; {later}" if stopped else later

    __str__ = __repr__


def _key(workers: int, gpus: dict[str, str], shared: bool, ps_tasks: int = 1,
         network: Network | None = None) -> PoolKey:
    return workers, tuple(sorted(gpus.items())), shared, ps_tasks, str(network or "")


def acquire(workers: int, gpus: dict[str, str], cancel: threading.Event | None = None,
            progress: StartProgress | None = None,
            shared: bool = False, ps_tasks: int = 1,
            network: Network | None = None) -> tuple[LocalCluster, bool, TaskFailure | None]:
    """A serving cluster for this key: ``(cluster, reused, failure)``.

    A live idle cluster is reused; otherwise a new one is started and waited for (``failure`` is
    set, and the cluster already stopped, if it could not start). A cluster in use by another run
    (a background run) is never shared: that run gets a new one. ``cancel`` and ``progress``: see
    :meth:`LocalCluster.wait_ready`. ``shared``: the shared layout (:class:`~ssptk.launch.shared.SharedCluster`);
    ``ps_tasks``, ``network``: its PS shards and links.
    """
    key = _key(workers, gpus, shared, ps_tasks, network)
    with _lock:
        cluster = _idle.pop(key, None)
        if cluster is not None and cluster.alive():
            _busy.add(id(cluster))
            return cluster, True, None
    if cluster is not None:
        _discard(cluster)
    home = make_temp_dir("warm")
    cluster = (SharedCluster if shared else LocalCluster)(workers, home, gpus, with_ps=True, ps_tasks=ps_tasks,
                                                          network=network)
    try:
        cluster.start([], run_id="warm", serve=True)
        failure = cluster.wait_ready(cancel=cancel, progress=progress)
    except BaseException:
        _discard(cluster)
        raise
    if failure is not None:
        _discard(cluster)
        return cluster, False, failure
    with _lock:
        _busy.add(id(cluster))
    return cluster, False, None


def release(cluster: LocalCluster, ok: bool) -> None:
    """Give a cluster back after a run: kept for the next run if the run went well (and :func:`shutdown_warm` was not
    called while it ran), else stopped."""
    with _lock:
        _busy.discard(id(cluster))
        retired = id(cluster) in _retiring
        _retiring.discard(id(cluster))
        key = _key(len(cluster.spec["worker"]), cluster.gpu_assignment, isinstance(cluster, SharedCluster),
                   len(cluster.spec.get("ps", [])), cluster.network)
        keep = ok and not retired and cluster.alive() and key not in _idle
        if keep:
            _idle[key] = cluster
    if not keep:
        _discard(cluster)


def idle_clusters() -> list[LocalCluster]:
    """The warm clusters waiting for a run."""
    with _lock:
        return list(_idle.values())


def shutdown_warm() -> Stopped:
    """Stop every idle warm cluster now, and every cluster serving a run as soon as that run ends (the run itself
    goes on to its end); returns how many of each (:class:`Stopped`)."""
    with _lock:
        clusters = list(_idle.values())
        _idle.clear()
        _retiring.update(_busy)
        in_use = len(_busy)
    for cluster in clusters:
        _discard(cluster)
    forking.shutdown_servers()  # and the fork servers no cluster holds
    return Stopped(len(clusters), in_use)


def _discard(cluster: LocalCluster) -> None:
    cluster.stop()
    shutil.rmtree(cluster.run_dir, ignore_errors=True)


atexit.register(shutdown_warm)
