"""What a run needs of the machine's memory, estimated from its options before anything starts; and the cores it has.

One owner for the sizes a run is bounded by: ``--workers`` (TensorFlow tasks: a process each, or a server each
in the shared layout), ``--batch`` (every worker holds its minibatch several times over while it steps) and
``--steps`` (the step records the launcher summarises at the end, and the simulator's, which keeps every step
it simulates). :func:`run_estimate` and :func:`sim_estimate` are pure; :func:`check_fits` holds an estimate to
:func:`available_bytes` (``MemAvailable``, within the cgroup's limit) and refuses in one line what cannot fit.
``--workers 500`` grew to 9.2 GB in 28 s with 200 servers up, ``--batch 1000000000`` to 6 GB, ``ssptk sim
--steps 1000000000000`` to 4 GB, before this check. The constants were measured on this project's machines
(TensorFlow 2.21 on CPU, ``benchmarks``-style runs sampled with psutil: USS per process, PSS for the libraries
they share); an estimate is a floor, not a promise: a model's own activations are not counted.
:func:`machine_cores` is the CPU a run started here gets (its CPU set, within its cgroup's quota: :func:`cgroup_cpus`).
Imports nothing above core.
"""
from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ssptk.core.errors import UsageError

__all__ = ["BATCH_COPIES", "Estimate", "RECORD_BYTES", "SHARED_TASK_BYTES", "SIM_RECORD_BYTES", "TASK_BYTES",
           "available_bytes", "cgroup_cpus", "check_fits", "check_sim", "example_bytes", "machine_cores",
           "run_estimate", "sim_estimate", "slot_part"]

MB = 2**20
#: the launcher itself (Python, NumPy, pandas, the supervisor)
LAUNCHER_BYTES = 100 * MB
#: a task in a process of its own: TensorFlow's private memory once it serves (USS 259-264 MB measured)
TASK_BYTES = 300 * MB
#: TensorFlow's libraries, loaded once however many processes map them (PSS: 350 MB)
TF_LIBRARY_BYTES = 350 * MB
#: the shared layout's one process before its servers (8 workers: 610 MB, 32: 1.66 GB; 200 servers: 9.2 GB)
SHARED_BASE_BYTES = 250 * MB
#: each TensorFlow server of the shared layout, with its worker thread and session (44-46 MB measured)
SHARED_TASK_BYTES = 45 * MB
#: how many times over a worker holds its minibatch's bytes while it steps (drawn, in float64 on the way, fed to
#: TensorFlow, forward and backward): 6.5x measured with linear at --batch 2000000, 4.6x with digits at 200000
BATCH_COPIES = 8
#: summarising a run (load_run, the summary, the ideal run simulated beside it) holds each step record: 1.3 KB
RECORD_BYTES = 1400
#: the simulator keeps every step it simulates: 490-570 bytes each measured (sync, ssp, async; 3-100 workers)
SIM_RECORD_BYTES = 600


@dataclass(frozen=True)
class Estimate:
    """Bytes a run needs, by what needs them: ``parts`` maps a description (``"3 TensorFlow processes"``) to
    ``(bytes, the option that sets it)``."""

    parts: dict[str, tuple[int, str]] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(b for b, _ in self.parts.values())

    @property
    def largest(self) -> tuple[str, int, str]:
        """The largest part: ``(what, bytes, option)``."""
        what, (b, option) = max(self.parts.items(), key=lambda kv: kv[1][0])
        return what, b, option


def _tasks(workers: int, ps: int, shared: bool, with_ps: bool) -> tuple[str, int]:
    n = workers + (ps if with_ps else 0)
    if shared:
        return f"{n} TensorFlow servers in one process", SHARED_BASE_BYTES + TF_LIBRARY_BYTES + n * SHARED_TASK_BYTES
    return f"{n} TensorFlow processes", TF_LIBRARY_BYTES + n * TASK_BYTES


def slot_part(optimizer: str, slots: int, parameters: int | None, holders: int) -> dict[str, tuple[int, str]]:
    """The memory of ``--optimizer``'s slots: ``slots`` float32 copies of the model's ``parameters`` (``None``: a
    user model, unknown before it is built) on each of ``holders`` (1: the PS's shards; N: every worker's, in local
    SGD and allreduce); nothing for sgd."""
    if not slots or not parameters:
        return {}
    on = "the PS" if holders == 1 else f"each of {holders} workers"
    return {f"--optimizer {optimizer}'s slots, {slots} x {parameters} parameters on {on}":
            (4 * slots * parameters * holders, "--model")}


def run_estimate(workers: int, batch: int, steps: int, *, ps: int = 1, shared: bool = False, with_ps: bool = True,
                 per_example: float | None = None, records: bool = True,
                 slots: dict[str, tuple[int, str]] | None = None) -> Estimate:
    """The memory of a run on this machine: the launcher, its tasks (``shared``: the shared layout; ``with_ps``:
    not allreduce), each worker's minibatch (``per_example``: the bytes of one example, ``x`` and ``y``; ``None``
    when unknown), ``slots`` (:func:`slot_part`) and, with ``records`` (not ``--no-log``), the ``workers * steps``
    step records summarised at the end."""
    what, tasks = _tasks(workers, ps, shared, with_ps)
    parts = {"the launcher": (LAUNCHER_BYTES, "--workers"), what: (tasks, "--workers"), **(slots or {})}
    if per_example:
        parts[f"{workers} minibatches of {batch} examples, {BATCH_COPIES} copies each"] = (
            int(workers * batch * per_example * BATCH_COPIES), "--batch")
    if records:
        parts[f"{workers * steps} step records summarised"] = (workers * steps * RECORD_BYTES, "--steps")
    return Estimate(parts)


def sim_estimate(workers: int, steps: int, *, batch: int = 0, per_example: float | None = None,
                 model: bool = False, slots: dict[str, tuple[int, str]] | None = None) -> Estimate:
    """The memory of ``ssptk sim``: the simulator's ``workers * steps`` records; with a ``model`` (a predicted run)
    also its predicting TensorFlow process, its one minibatch at a time, the replay's ``slots`` (:func:`slot_part`)
    and the summary of every record."""
    n = workers * steps
    parts = {"the launcher": (LAUNCHER_BYTES, "--workers"), f"{n} simulated steps": (n * SIM_RECORD_BYTES, "--steps"),
             **(slots or {})}
    if model:
        parts["the predicting TensorFlow process"] = (TF_LIBRARY_BYTES + TASK_BYTES, "--model")
        parts[f"{n} step records summarised"] = (n * RECORD_BYTES, "--steps")
        if per_example:
            parts[f"a minibatch of {batch} examples, {BATCH_COPIES} copies"] = (
                int(batch * per_example * BATCH_COPIES), "--batch")
    return Estimate(parts)


def _meminfo(key: str) -> int | None:
    """``/proc/meminfo``'s ``key`` (``MemAvailable``, ``MemTotal``) in bytes; ``None`` where it cannot be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith(f"{key}:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _meminfo_available() -> int | None:
    found = _meminfo("MemAvailable")
    if found is not None:
        return found
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return None


def _cgroup_paths() -> dict[str, str]:
    """This process's cgroup path per controller (``""`` for cgroup v2's unified hierarchy)."""
    out: dict[str, str] = {}
    with open("/proc/self/cgroup", encoding="ascii") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for c in controllers.split(",") if controllers else [""]:
                out[c] = path
    return out


def _cgroup_room() -> int | None:
    """What this process's cgroup (v2) still allows: ``memory.max`` less ``memory.current``; ``None`` if no limit."""
    try:
        path = _cgroup_paths().get("")
        if path is None:
            return None
        base = os.path.join("/sys/fs/cgroup", path.lstrip("/"))
        with open(os.path.join(base, "memory.max"), encoding="ascii") as f:
            limit = f.read().strip()
        if limit == "max":
            return None
        with open(os.path.join(base, "memory.current"), encoding="ascii") as f:
            return max(0, int(limit) - int(f.read().strip()))
    except (OSError, ValueError, IndexError):
        return None


def _quota_along(base: str, path: str, read: Callable[[str], float | None]) -> float | None:
    """The tightest ``read(directory)`` from this cgroup's directory up to the hierarchy's root."""
    limits = []
    parts = [p for p in path.split("/") if p]
    for depth in range(len(parts), -1, -1):
        try:
            q = read(os.path.join(base, *parts[:depth]))
        except (OSError, ValueError, IndexError):
            q = None
        if q is not None:
            limits.append(q)
    return min(limits) if limits else None


def _v2_quota(directory: str) -> float | None:
    with open(os.path.join(directory, "cpu.max"), encoding="ascii") as f:
        quota, period = f.read().split()[:2]
    return None if quota == "max" else int(quota) / int(period)


def _v1_quota(directory: str) -> float | None:
    with open(os.path.join(directory, "cpu.cfs_quota_us"), encoding="ascii") as f:
        quota = int(f.read())
    with open(os.path.join(directory, "cpu.cfs_period_us"), encoding="ascii") as f:
        period = int(f.read())
    return None if quota <= 0 or period <= 0 else quota / period


def cgroup_cpus(root: str = "/sys/fs/cgroup") -> float | None:
    """The CPUs this process's cgroup lets it use per second (a CPU quota: cgroup v2's ``cpu.max``, v1's
    ``cpu.cfs_quota_us / cpu.cfs_period_us``, the tightest from its cgroup up), ``None`` without a quota."""
    try:
        paths = _cgroup_paths()
    except (OSError, ValueError):
        return None
    found = []
    if "" in paths:
        found.append(_quota_along(root, paths[""], _v2_quota))
    if "cpu" in paths:  # v1: the cpu controller's hierarchy, mounted alone or with cpuacct
        for mount in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
            if os.path.isdir(os.path.join(root, mount)):
                found.append(_quota_along(os.path.join(root, mount), paths["cpu"], _v1_quota))
                break
    limits = [q for q in found if q is not None]
    return min(limits) if limits else None


def machine_cores() -> float:
    """The cores a run started here gets: the CPUs this process may run on (``os.sched_getaffinity``, which a
    cgroup's cpuset or ``taskset`` narrows; ``os.cpu_count()`` where there is no such call), fewer where its
    cgroup's CPU quota allows less (:func:`cgroup_cpus`: a container's ``--cpus 1.5`` gives 1.5); an ``int`` unless
    the quota binds (then the quota to 0.01, at least 0.01)."""
    try:
        cpus: float = max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        cpus = max(1, os.cpu_count() or 1)
    quota = cgroup_cpus()
    return cpus if quota is None or quota >= cpus else max(0.01, round(quota, 2))


def available_bytes() -> int | None:
    """The memory this machine can still give: ``MemAvailable``, or less where this process's cgroup allows less;
    ``None`` where neither can be read (then nothing is refused)."""
    found = [b for b in (_meminfo_available(), _cgroup_room()) if b is not None]
    return min(found) if found else None


#: How long a run that would fit this machine's memory, but not what is available at the moment, waits for memory to
#: come back before it is refused: a busy machine's MemAvailable dips for a moment (0.6-1.1 GB seen on a laptop
#: running another test suite, where a 3-worker run needs 1.7 GB) and a refusal then was no fault of the run's.
MEMORY_DIP_S = 5.0


def _room_for(need: int) -> int | None:
    """:func:`available_bytes`, sampled again for up to :data:`MEMORY_DIP_S` while it is below ``need`` (at once when
    ``need`` is beyond the machine's whole memory, which no wait would change); the most it saw."""
    room = available_bytes()
    total = _meminfo("MemTotal")
    if room is None or need <= room or total is None or need > total:
        return room
    deadline = time.monotonic() + MEMORY_DIP_S
    while room < need and time.monotonic() < deadline:
        time.sleep(0.25)
        room = max(room, available_bytes() or 0)
    return room


def _gb(b: float) -> str:
    """``b`` bytes in words: MB below 0.1 GB, else GB, TB or PB with one decimal."""
    for unit, size in (("PB", 2**50), ("TB", 2**40), ("GB", 2**30)):
        if b >= size or (unit == "GB" and b >= size / 10):
            return f"{b / size:.1f} {unit}"
    return f"{b / MB:.0f} MB"


def check_fits(estimate: Estimate, given: str, available: int | None = None) -> None:
    """Refuse (:class:`UsageError`, one line) an ``estimate`` over ``available`` bytes (default:
    :func:`available_bytes`). ``given``: the options as the user gave them (``--workers 500``), for the message."""
    need = estimate.total
    room = _room_for(need) if available is None else available
    if room is None or need <= room:
        return
    what, part, option = estimate.largest
    raise UsageError(f"{given} needs about {_gb(need)} of memory ({what}: {_gb(part)}), more than the {_gb(room)} "
                     f"this machine has available: lower {option}, or free memory")


def example_bytes(model: str, timeout: float = 10.0) -> float | None:
    """The bytes of one example of ``model`` (``x`` and ``y`` of a 2-example minibatch from its ``data``, halved);
    ``None`` when it cannot be loaded here, its ``data`` fails, or that takes over ``timeout`` seconds (it runs in a
    daemon thread: a user model's code must not hang the launcher)."""
    import numpy as np

    from ssptk.core.models import load_model

    box: dict[str, float] = {}

    def draw() -> None:
        try:
            x, y = load_model(model).data(np.random.default_rng([0, 0, 1]), 2)
            box["bytes"] = (np.asarray(x).nbytes + np.asarray(y).nbytes) / 2
        except BaseException:  # noqa: BLE001 - a model whose data cannot be drawn here: its size is unknown
            pass

    t = threading.Thread(target=draw, name="ssptk-example-size", daemon=True)
    t.start()
    t.join(timeout)
    size = box.get("bytes")
    return size if size is not None and math.isfinite(size) else None


def check_sim(workers: Any, steps: Any, available: int | None = None) -> None:
    """``ssptk sim`` without a model: refuse a simulation whose records cannot fit (bad values are left to the
    simulator's own checks)."""
    if isinstance(workers, int) and isinstance(steps, int) and workers > 0 and steps > 0:
        check_fits(sim_estimate(workers, steps), f"simulating --workers {workers} --steps {steps}", available)
