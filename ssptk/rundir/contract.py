"""The run-directory contract (``docs/run-directory.md``) as readers hold a directory to it.

A run directory may come from anywhere (a colleague's tarball, a shared file system), so what reads one
trusts nothing in it: :func:`open_regular` opens regular files only (a FIFO would block, a directory or a
device is not a file of the run) and every read is bounded (:data:`MAX_JSON_BYTES`, :data:`MAX_LOG_BYTES`,
:data:`MAX_LINE_BYTES`); :func:`load_json` reads a JSON file; :func:`check_config`, :func:`check_summary`,
:func:`check_final` and :func:`check_traffic` hold each JSON file to its documented shape and
:func:`valid_record` a JSONL line. A value that is not what the contract says is left out (never repaired),
so whatever reads on cannot crash or hang on it; :mod:`ssptk.rundir.check` names each file that lost
something, once. Imports core only.
"""
from __future__ import annotations

import errno
import json
import math
import os
import stat
from collections.abc import Callable
from typing import Any, BinaryIO, TypeGuard

from ssptk.core.delays import MAX_DELAY_S, parse_jitter, parse_stragglers
from ssptk.core.errors import UsageError
from ssptk.core.labels import parse_mode
from ssptk.core.option_types import typed
from ssptk.core.options import OPTIONS
from ssptk.core.printable import printable_json

__all__ = ["CONTRACT_VERSION", "MAX_JSON_BYTES", "MAX_LINE_BYTES", "MAX_LOG_BYTES", "MAX_WORKERS", "NotRegular",
           "check_config",
           "check_final", "check_summary", "check_traffic", "file_kind", "load_json", "open_regular", "valid_record"]

#: The version of the contract a run directory is written to (``config.json``'s ``contract``; none: version 1).
#: 2: local SGD's step records carry ``local_step`` (the local steps since the last average, which version 1 kept in
#: ``staleness``), and ``staleness`` is what it is in every mode; readers upgrade version 1's records
#: (:func:`ssptk.core.records.upgraded`). A comparison's table (``metrics.csv``) names the SSP bound ``bound``
#: (version 1: ``staleness``).
CONTRACT_VERSION = 2
#: The most a JSON file of a run directory (config.json, summary.json, ...) may hold; a larger one is skipped.
MAX_JSON_BYTES = 16 * 2**20
#: The most of one worker log that is read (its records beyond are not).
MAX_LOG_BYTES = 2**30
#: The longest line a worker log may hold (a record is a few hundred bytes); a longer one is skipped.
MAX_LINE_BYTES = 2**20
#: The most workers a run directory may say it had (``options.workers``, a record's ``worker``).
MAX_WORKERS = 10_000
_MAX_INT = 2**53  # integers readers may take as floats
_MAX_T = 1e11  # a Unix time before the year 5000


class NotRegular(OSError):
    """A path of a run directory that is there but is not a regular file (a directory, a FIFO, a device)."""


def file_kind(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` is, in words, for a message: ``a FIFO``, ``a device``, ..."""
    return ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else
            "a socket" if stat.S_ISSOCK(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "a regular file" if stat.S_ISREG(mode) else "not a regular file")


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """``path`` opened for reading in binary, if it is a regular file (after symbolic links); a FIFO is opened
    without blocking and refused like a directory or a device (:class:`NotRegular`). Missing:
    ``FileNotFoundError``; other errors as ``open`` raises them."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as e:
        if e.errno != errno.ENXIO:  # ENXIO: a socket, or a device with no driver behind it
            raise
        raise NotRegular(errno.EINVAL, f"{file_kind(os.stat(path).st_mode)}, not a regular file",
                         os.fspath(path)) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegular(errno.EINVAL, f"{file_kind(mode)}, not a regular file", os.fspath(path))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _reason(e: OSError) -> str:
    if isinstance(e, NotRegular):
        return str(e.strerror)
    if isinstance(e, IsADirectoryError):
        return "a directory, not a regular file"
    return e.strerror or type(e).__name__


def load_json(path: str | os.PathLike[str]) -> tuple[Any, str]:
    """The JSON value in the file ``path`` and ``""``; or ``None`` and why not (``"missing"`` when there is no
    such file): not a regular file, larger than :data:`MAX_JSON_BYTES`, not JSON."""
    try:
        with open_regular(path) as f:
            data = f.read(MAX_JSON_BYTES + 1)
    except FileNotFoundError:
        return None, "missing"
    except OSError as e:
        return None, _reason(e)
    if len(data) > MAX_JSON_BYTES:
        return None, f"larger than {MAX_JSON_BYTES // 2**20} MiB"
    try:
        return json.loads(data), ""
    except (ValueError, RecursionError):  # JSONDecodeError, UnicodeDecodeError; nesting too deep
        return None, "not JSON (truncated, or not ssptk's)"


# --- values -----------------------------------------------------------------------------------------

def _is_int(v: Any) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool) and abs(v) <= _MAX_INT


def _is_num(v: Any) -> bool:
    return (isinstance(v, float) or _is_int(v)) and not isinstance(v, bool)


def _finite(v: Any) -> TypeGuard[float]:
    return _is_num(v) and math.isfinite(v) and abs(v) <= 1e300


def _plotted(v: Any) -> bool:
    """A number figures can draw: NaN (a JSON ``NaN`` some writers use), or at most 1e300 across (near 1e308 the
    axes' tick arithmetic overflows); not infinite."""
    return _is_num(v) and not abs(v) > 1e300


def _opt(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or check(v)


def _is_str(v: Any) -> bool:
    return isinstance(v, str)


def _is_bool(v: Any) -> bool:
    return isinstance(v, bool)


def _dict_of(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, dict) and all(isinstance(k, str) and check(x) for k, x in v.items())


def _kept(obj: dict[str, Any], shape: dict[str, Callable[[Any], bool]]) -> tuple[dict[str, Any], list[str]]:
    """``obj`` without the keys of ``shape`` whose value fails its check; those keys."""
    bad = [k for k, check in shape.items() if k in obj and not check(obj[k])]
    return {k: v for k, v in obj.items() if k not in bad}, bad


# --- config.json ------------------------------------------------------------------------------------

_REQUIRED_OPTIONS = ("mode", "workers", "steps")
_OPTION = {o.name: o for o in OPTIONS}


def _option_ok(name: str, value: Any) -> bool:
    """Whether a stored option's value is one a run can have had (its type, and the bounds readers rely on)."""
    try:
        if name == "straggler":
            return isinstance(value, list) and all(isinstance(p, list) for p in value) and \
                all(s <= MAX_DELAY_S and i < MAX_WORKERS for i, s in parse_stragglers([tuple(p) for p in value]))
        if name == "jitter":
            if value is not None and not isinstance(value, str):
                return False
            j = parse_jitter(value)
            return j is None or max(j.a, j.b) <= MAX_DELAY_S
        if name == "mode":
            return isinstance(value, str) and parse_mode(value)[1] is None
        if name == "workers":
            return _is_int(value) and 1 <= value <= MAX_WORKERS
        if name in ("steps", "batch"):
            return _is_int(value) and value >= 1
        if name == "staleness":
            return value is None or (_is_int(value) and value >= 0)
        if name == "cores":
            return value is None or (_finite(value) and value >= 0)
        given = typed(_OPTION[name], value)
        return given is None or not isinstance(given, float) or math.isfinite(given)
    except (UsageError, TypeError, ValueError, OverflowError):
        return False


def _options(options: Any) -> tuple[dict[str, Any] | None, list[str]]:
    """The stored options without those that are not as a run writes them, and the names of those and of the
    missing ones among :data:`_REQUIRED_OPTIONS`; ``None`` (none at all) when the mode is missing or one of them
    is there but bad (readers fall back to the logs for a missing count)."""
    if not isinstance(options, dict):
        return None, []
    bad = [k for k in _REQUIRED_OPTIONS if k not in options or not _option_ok(k, options[k])]
    bad += [k for k, v in options.items() if k in _OPTION and k not in _REQUIRED_OPTIONS and not _option_ok(k, v)]
    if "mode" not in options or any(k in bad and k in options for k in _REQUIRED_OPTIONS):
        return None, bad
    return {k: v for k, v in options.items() if k not in bad}, bad


_CONFIG: dict[str, Callable[[Any], bool]] = {
    "cluster": _dict_of(lambda v: isinstance(v, list) and all(_is_str(x) for x in v)),
    "gpu_assignment": _dict_of(_opt(_is_str)), "versions": _dict_of(_opt(_is_str)),
    "budget": _dict_of(_opt(_is_int)), "created": _opt(_finite), "launched": _opt(_finite),
    "tasks": lambda v: isinstance(v, dict) and _kept(v, {"warm": _is_bool, "reused": _is_bool, "runs_served": _is_int,
                                                          "layout": _is_str, "isolation": _is_str,
                                                          "cores": lambda c: _finite(c) and c > 0})[1] == [],
    "started_by": _is_str, "run_identity": _is_str, "contract": lambda v: _is_int(v) and v >= 1,
    "predicted": lambda v: isinstance(v, dict) and _opt(lambda x: _finite(x) and x >= 0)(v.get("overhead_s"))
    and _opt(lambda c: _finite(c) and c > 0)(v.get("cores")),
}


def check_config(obj: Any) -> tuple[dict[str, Any], str]:
    """``config.json``'s value as readers may take it, and what was wrong (``""``: nothing): not an object
    (``{}``), options missing or unreadable (read without ``options``), or other values left out."""
    if not isinstance(obj, dict):
        return {}, "not a JSON object"
    kept, bad = _kept(obj, _CONFIG)
    if "options" not in obj:
        return _safe(kept, "it has no run options")
    options, bad_options = _options(obj["options"])
    if options is None:
        kept.pop("options", None)
        return _safe(kept, f"its options {', '.join(bad_options)} cannot be read" if bad_options
                     else "it has no run options")
    kept["options"] = options
    return _safe(kept, _left_out([f"options.{k}" for k in bad_options] + bad))


def _safe(kept: dict[str, Any], why: str) -> tuple[dict[str, Any], str]:
    """``kept`` with its text made printable (:func:`ssptk.core.printable.printable`), and ``why`` with that said
    first when it changed anything."""
    try:
        safe, changed = printable_json(kept)
    except RecursionError:
        return {}, "nested too deep"
    return safe, "; ".join(w for w in ("its text holds control characters: shown escaped" if changed else "", why)
                           if w)


def _left_out(bad: list[str]) -> str:
    if not bad:
        return ""
    one = len(bad) == 1
    return f"its {', '.join(bad)} {'is' if one else 'are'} not as docs/run-directory.md has " \
           f"{'it' if one else 'them'}: left out"


# --- summary.json, model/final.json, traffic.json ---------------------------------------------------

_NUMBERS = ("wall_s", "steps_per_s", "train_loss_last", "loss_smoothed_last", "wait_fraction", "mean_staleness",
            "first_step_s", "train_cpu_s", "cpu_ms_per_step", "overhead_ms", "gap_ms", "ideal_steps_per_s",
            "measured_over_ideal", "final_loss", "final_accuracy", "target", "time_to_target_s", "dc_correction_mean",
            "dc_correction_median", "dc_correction_max")
_INTS = ("backup", "steps", "total_steps", "max_skew", "max_staleness", "staleness", "local_steps", "diverged_at_step",
         "steps_to_target")
#: summary.json's ``traffic`` (ssptk.analysis.traffic)
_TRAFFIC_SUMMARY: dict[str, Callable[[Any], bool]] = {
    "network": _opt(_is_str), "mb_per_minibatch": _opt(_finite), "ps_mb_per_minibatch": _opt(_finite),
    "link_busy": _dict_of(_opt(_finite)), "tasks": _dict_of(_dict_of(_opt(_finite))), "rates": _dict_of(_finite),
    **{k: _opt(_finite) for k in ("step_ms", "transfer_ms", "compute_ms", "wait_ms")},
    "transfer_timed_steps": _opt(lambda v: _is_int(v) and v >= 0),
    "split": _dict_of(_opt(lambda v: _finite(v) and 0 <= v <= 1)),
    "busiest": _opt(lambda v: isinstance(v, list) and len(v) == 2 and _is_str(v[0]) and _finite(v[1])),
}
_SUMMARY: dict[str, Callable[[Any], bool]] = {
    **{k: _opt(_finite) for k in _NUMBERS}, **{k: _opt(_is_int) for k in _INTS},
    **{k: _opt(_is_str) for k in ("reason", "failed_task", "signal", "mode", "model", "run_dir", "target_on",
                                  "traffic_not_measured", "lr_staleness")},
    "status": lambda v: v in ("ok", "failed", "interrupted"),
    "workers": _opt(lambda v: _is_int(v) and 1 <= v <= MAX_WORKERS),
    "diverged": _is_bool, "warm_reused": _is_bool,
    "diverged_on": _opt(lambda v: v in ("training", "held-out")),
    "params": _opt(_dict_of(_opt(_finite))), "per_worker_steps": _dict_of(_is_int),
    "predicted": _opt(lambda v: isinstance(v, dict) and _opt(_finite)(v.get("overhead_s"))
                      and _opt(lambda c: _finite(c) and c > 0)(v.get("cores"))),
    "ideal_cores": _opt(lambda c: _finite(c) and c > 0),
    "traffic": _opt(lambda v: isinstance(v, dict) and not _kept(v, _TRAFFIC_SUMMARY)[1]),
}


def _check_object(obj: Any, table: dict[str, Callable[[Any], bool]]) -> tuple[dict[str, Any], str]:
    """A JSON object held to ``table`` (key -> check): what passes, and the keys left out, said in words."""
    if not isinstance(obj, dict):
        return {}, "not a JSON object"
    kept, bad = _kept(obj, table)
    return _safe(kept, _left_out(bad))


def check_summary(obj: Any) -> tuple[dict[str, Any], str]:
    """``summary.json``'s value as readers may take it (values not as documented left out), and what was wrong."""
    return _check_object(obj, _SUMMARY)


_FINAL: dict[str, Callable[[Any], bool]] = {
    "eval_loss": _opt(_finite), "eval_accuracy": _opt(_finite),
    "variables": _dict_of(lambda v: isinstance(v, list) and all(_is_int(x) and x >= 0 for x in v)),
    "params": _dict_of(_opt(_finite)),
}


def check_final(obj: Any) -> tuple[dict[str, Any], str]:
    """``model/final.json``'s value as readers may take it, and what was wrong."""
    return _check_object(obj, _FINAL)


_TRAFFIC: dict[str, Callable[[Any], bool]] = {
    "network": _opt(_is_str), "measured_at": _opt(_finite), "seconds": _opt(_finite),
    "rates": _dict_of(_opt(_finite)), "tasks": _dict_of(_dict_of(_opt(_finite))),
}


def check_traffic(obj: Any) -> tuple[dict[str, Any], str]:
    """``traffic.json``'s value as readers may take it, and what was wrong."""
    return _check_object(obj, _TRAFFIC)


# --- a worker log's records -------------------------------------------------------------------------

_RECORD_INTS = frozenset({"step", "global_step", "staleness", "local_step", "local_round", "minibatch", "steps",
                          "safety_timeouts",
                          "duplicate_reruns", "attempt", "after_step"})
# or null; what figures can draw (_plotted), and what the simulator's calibration reads (read_s)
_RECORD_NUMBERS = frozenset({"loss", "wait_s", "delay_s", "lr_scale", "read_s", "cpu_s", "process_cpu_s",
                             "record_cpu_s", "eval_loss", "eval_accuracy", "eval_s"})
_RECORD_TEXT = frozenset({"event", "message", "task", "lost"})


def valid_record(obj: Any) -> bool:
    """A record as the contract has it: a JSON object whose ``t`` is a finite time and ``worker`` a worker's
    index, and whose documented keys hold values of their type. (Every record of every log passes here: the
    checks are written out for speed.)"""
    if not isinstance(obj, dict):
        return False
    t, worker = obj.get("t"), obj.get("worker")
    if not (_finite(t) and abs(t) < _MAX_T and _is_int(worker) and 0 <= worker < MAX_WORKERS):
        return False
    for key, value in obj.items():
        if key in _RECORD_NUMBERS:
            if value is not None and ((type(value) is not float and type(value) is not int) or abs(value) > 1e300):
                return False
        elif key in _RECORD_INTS:
            if type(value) is not int or not -_MAX_INT <= value <= _MAX_INT:
                return False
        elif key in _RECORD_TEXT:
            if type(value) is not str:
                return False
        elif key == "applied" and type(value) is not bool:
            return False
    return True
