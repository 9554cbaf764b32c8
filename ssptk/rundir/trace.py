"""Step-time traces: the per-worker step times of a finished run (any ssptk run directory, a Slurm or
``TF_CONFIG`` run's gathered one included) or of a CSV, as delays that ``--jitter trace:PATH`` replays.

A worker's step time here is the time between its consecutive updates (``t``) less the time the mode made it
wait (``wait_s``): what its own compute, communication and injected delays took. Replayed, each step is held
until it has taken its source step's time (:class:`ssptk.core.delays.DelayModel` paces by the replaying
worker's own step time), so the replay has the source's step-time distribution wherever this machine's own
steps are faster than the source's. ``docs/run-directory.md`` ("Step-time traces") documents the CSV.

Importing this module installs :func:`read_step_trace` as :mod:`ssptk.core.delays`' trace reader.
"""
from __future__ import annotations

import contextlib
import csv
import functools
import io
import math
import os
import re
import stat

from ssptk.core import delays
from ssptk.core.errors import UsageError
from ssptk.rundir.contract import MAX_WORKERS, NotRegular, file_kind, open_regular
from ssptk.rundir.layout import RunDir

__all__ = ["MAX_TRACE_STEPS", "read_step_trace", "step_times"]

#: The most step times kept per worker (the latest ones): a trace is a distribution, not an archive.
MAX_TRACE_STEPS = 100_000
#: The largest CSV read (bytes, counted as read).
MAX_CSV_BYTES = 64 * 1024 * 1024


def step_times(run_dir: str) -> dict[int, list[float]]:
    """Each worker's step times in a run directory, in step order (seconds, see the module's docstring)."""
    from ssptk.rundir.logs import read_run  # pandas: only where a trace is read

    steps, _ = read_run(run_dir)
    out: dict[int, list[float]] = {}
    if steps.empty:
        return out
    for w, df in steps.sort_values(["worker", "step"]).groupby("worker"):
        t, wait = df["t"].to_numpy(float), df["wait_s"].to_numpy(float)
        own = [float(b - a - max(wt, 0.0)) for a, b, wt in zip(t[:-1], t[1:], wait[1:])]
        out[int(w)] = [x for x in own if math.isfinite(x) and x >= 0]
    return out


_WORKER = re.compile(r"[0-9]{1,5}")  # an index in digits only (int() also takes "+1", "1_0", "١")


def _csv_text(path: str) -> str:
    """The CSV's text: a regular file (checked on the opened descriptor, which a FIFO opens without blocking, so
    a path swapped after a look is caught too) of at most :data:`MAX_CSV_BYTES`, counted as it is read (a
    device's size says nothing)."""
    try:
        with open_regular(path) as f:
            data = f.read(MAX_CSV_BYTES + 1)
    except OSError as e:
        why = e.strerror if isinstance(e, NotRegular) else (e.strerror or type(e).__name__).lower()
        raise UsageError(f"--jitter trace:{path}: {why}; give a run directory or a CSV of worker,seconds") from None
    if len(data) > MAX_CSV_BYTES:
        raise UsageError(f"--jitter trace:{path}: the CSV is over {MAX_CSV_BYTES // 2**20} MiB; give fewer steps")
    return data.decode("utf-8-sig", errors="replace")  # a BOM (a spreadsheet's export) is no column name


def _csv_step_times(path: str) -> dict[int, list[float]]:
    out: dict[int, list[float]] = {}
    reader = csv.reader(io.StringIO(_csv_text(path), newline=""))
    header = [c.strip() for c in next(reader, [])]
    if sorted(header) != ["seconds", "worker"]:
        raise UsageError(f"--jitter trace:{path}: the CSV needs a header with columns worker,seconds and no others "
                         f"(one row per step, in order), not {','.join(header)[:80]!r}")
    iw, js = header.index("worker"), header.index("seconds")
    for row in reader:
        n = reader.line_num
        if not row:
            continue
        if len(row) != 2:
            raise UsageError(f"--jitter trace:{path}: line {n}: {len(row)} columns; give two, worker and seconds")
        if not _WORKER.fullmatch(row[iw].strip()) or int(row[iw]) >= MAX_WORKERS:
            raise UsageError(f"--jitter trace:{path}: line {n}: the worker must be an index from 0 to "
                             f"{MAX_WORKERS - 1} in digits, not {row[iw][:30]!r}")
        w = int(row[iw])
        try:
            s = float(row[js])
        except ValueError:
            s = math.nan
        if not math.isfinite(s) or s < 0:
            raise UsageError(f"--jitter trace:{path}: line {n}: seconds must be a finite number >= 0, not "
                             f"{row[js][:30]!r}")
        out.setdefault(w, []).append(s)
    return out


@functools.lru_cache(maxsize=8)
def _read(path: str, mtime_ns: int, directory: bool) -> tuple[tuple[float, ...], ...]:
    if directory:
        if not os.path.isdir(RunDir(path).workers_dir):
            raise UsageError(_not_a_run(path))
        times = step_times(path)
    else:
        times = _csv_step_times(path)
    times = {w: s[-MAX_TRACE_STEPS:] for w, s in times.items() if s}
    if not times:
        raise UsageError(f"--jitter trace:{path}: no step times in it (a run needs two steps of a worker)")
    return tuple(tuple(round(x, 6) for x in times[w]) for w in sorted(times))


def _not_a_run(path: str) -> str:
    """Why the directory ``path`` gives no trace, in one line; a job's directory (the hosts' directories of a run
    started by Slurm or a TFJob, and perhaps the run ``ssptk report`` gathered from them) points to ``gathered``."""
    gathered = os.path.join(path, "gathered")
    if os.path.isdir(RunDir(gathered).workers_dir):
        return (f"--jitter trace:{path}: not a run directory but it holds one, gathered from its hosts: give "
                f"trace:{gathered}")
    with contextlib.suppress(OSError):
        if any(RunDir(e.path).is_run() for e in os.scandir(path) if e.is_dir(follow_symlinks=False)):
            return (f"--jitter trace:{path}: not a run directory but the hosts' directories of one: gather them "
                    f"first (ssptk report {path}/*), then give trace:{gathered}")
    return f"--jitter trace:{path}: not a run directory (no workers/ step logs) and not a CSV"


def read_step_trace(path: str) -> tuple[tuple[float, ...], ...]:
    """Each source worker's step times in order (workers by index), in seconds: what
    ``--jitter trace:PATH`` replays. ``path``: a run directory or a CSV with columns ``worker,seconds``."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise UsageError(f"--jitter trace:{path}: {e.strerror.lower() if e.strerror else e}; give a run "
                         "directory or a CSV of worker,seconds") from None
    if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):  # a FIFO would block, /dev/zero never end
        raise UsageError(f"--jitter trace:{path}: {file_kind(st.st_mode)}, not a regular file; give a run "
                         "directory or a CSV of worker,seconds")
    return _read(os.path.realpath(path), st.st_mtime_ns, stat.S_ISDIR(st.st_mode))


delays.set_trace_reader(read_step_trace)
