"""TensorBoard event files for a finished run, written from its logs into ``DIR/tensorboard/``.

``tensorboard --logdir runs`` (or ``%tensorboard --logdir runs`` in Jupyter) then shows every run.
Layout (see ``docs/run-directory.md``); each point carries the wall time ``t`` of its step record:

* ``tensorboard/``: ``loss/all`` (overall training loss, rolling mean over the run's smoothing window
  in time order) against the PS's ``global_step``; ``skew/steps`` (most minus least advanced unfinished
  worker) against minibatches completed by all workers so far; texts ``config`` and ``summary``.
* ``tensorboard/worker_<i>/``: ``loss/worker``, ``wait/worker`` (cumulative ``wait_s``) and
  ``staleness/worker`` against the worker's own step (a local SGD run's chart says its staleness counts local steps
  since the last average); ``progress/worker`` (its completed steps) against
  minibatches completed by all workers so far. One tag in N folders: TensorBoard overlays the workers
  (and the runs) in one chart, one line per folder.

The records are framed here (TFRecord with masked CRC-32C, vectorised with NumPy) from
tensorboard's protos: its ``EventFileWriter`` imports TensorFlow (seconds) when it is constructed.
Nothing here imports TensorFlow.
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import time
from pathlib import Path
from typing import Any

import numpy as np

from ssptk.analysis import (
    finish_times,
    n_workers,
    prepare_steps,
    run_options,
    skew_timeline,
    smoothing_window,
    start_time,
)
from ssptk.rundir import RunConfig, RunDir, load_run
from ssptk.rundir.space import writing

__all__ = ["write_events"]

_PREFIX = "events.out.tfevents."


def _crc_table() -> np.ndarray:
    table = np.zeros(256, np.uint32)
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table[byte] = crc
    return table


_CRC_TABLE = _crc_table()


def masked_crc32c(chunks: list[bytes]) -> np.ndarray:
    """TFRecord's masked CRC-32C of every chunk (uint32), one NumPy pass per distinct length."""
    out = np.empty(len(chunks), np.uint32)
    lengths = np.fromiter(map(len, chunks), np.int64, len(chunks))
    for length in np.unique(lengths).tolist():
        idx = np.flatnonzero(lengths == length)
        data = np.frombuffer(b"".join([chunks[i] for i in idx]), np.uint8).reshape(len(idx), length)
        crc = np.full(len(idx), 0xFFFFFFFF, np.uint32)
        for j in range(length):
            crc = _CRC_TABLE[(crc ^ data[:, j]) & 0xFF] ^ (crc >> 8)
        crc ^= np.uint32(0xFFFFFFFF)
        out[idx] = ((crc >> 15) | (crc << 17)) + np.uint32(0xA282EAD8)
    return out


def _frame(payloads: list[bytes]) -> bytes:
    """TFRecord framing: length, masked CRC of the length, data, masked CRC of the data."""
    heads = [struct.pack("<Q", len(p)) for p in payloads]
    head_crc = masked_crc32c(heads).astype("<u4").tobytes()
    data_crc = masked_crc32c(payloads).astype("<u4").tobytes()
    parts: list[bytes] = []
    for i, (head, payload) in enumerate(zip(heads, payloads)):
        parts += (head, head_crc[4 * i:4 * i + 4], payload, data_crc[4 * i:4 * i + 4])
    return b"".join(parts)


def _scalars(pb: Any, steps: Any, walls: Any, series: dict[str, Any],
             descriptions: dict[str, str] | None = None) -> list[tuple[int, bytes]]:
    """One Event per step holding a scalar (``simple_value``) per tag of ``series``; ``descriptions`` (tag ->
    text) go into the first event's metadata, which TensorBoard shows on the tag's chart."""
    event = pb.Event()
    values = [(event.summary.value.add(tag=tag), np.asarray(col, "float64").tolist())
              for tag, col in series.items()]
    for value, _ in values:
        described = (descriptions or {}).get(value.tag)
        if described:
            value.metadata.summary_description = described
            value.metadata.plugin_data.plugin_name = "scalars"
    out: list[tuple[int, bytes]] = []
    for i, (step, wall) in enumerate(zip(np.asarray(steps).tolist(), np.asarray(walls).tolist())):
        event.step = int(step)
        event.wall_time = float(wall)
        for value, col in values:
            value.simple_value = col[i]
        out.append((int(step), event.SerializeToString()))
        if i == 0:
            for value, _ in values:
                value.ClearField("metadata")
    return out


def _text(tag: str, obj: Any, wall: float) -> tuple[int, bytes]:
    """A text-plugin summary (step 0) showing ``obj`` as indented JSON (a Markdown code block)."""
    from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2

    body = "\n".join("    " + line for line in json.dumps(obj, indent=1, default=str).splitlines())
    meta = summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="text"),
        data_class=summary_pb2.DATA_CLASS_TENSOR)
    tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, string_val=[body.encode()],
                                    tensor_shape=tensor_shape_pb2.TensorShapeProto())
    value = summary_pb2.Summary.Value(tag=tag, metadata=meta, tensor=tensor)
    return 0, event_pb2.Event(wall_time=wall, summary=summary_pb2.Summary(value=[value])).SerializeToString()


def _write_file(folder: Path, items: list[tuple[int, bytes]], wall0: float, pb: Any, written: list[Path]) -> None:
    """One event file: the version record, then ``items`` in step order (so no reader purges). Written whole
    under a hidden temporary name, then renamed (:class:`~ssptk.core.errors.DiskFull` on a full disk, the
    temporary file removed); ``written`` gets what was made, folders included, so a later failure can take it
    back."""
    for made in reversed([folder, *folder.parents]):
        if not made.exists():
            with writing(str(made)):
                made.mkdir()
            written.append(made)
    head = pb.Event(wall_time=wall0, file_version="brain.Event:2").SerializeToString()
    items = sorted(items, key=lambda item: item[0])  # stable: equal steps keep their order
    blob = _frame([head] + [payload for _, payload in items])
    name = f"{_PREFIX}{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.ssptk"
    tmp = folder / ("." + name + ".tmp")
    try:
        with writing(str(folder / name)):
            tmp.write_bytes(blob)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    os.replace(tmp, folder / name)
    written.append(folder / name)


def _take_back(written: list[Path]) -> None:
    """Remove what a failed :func:`write_events` made (files, then the folders it created, newest first)."""
    for path in reversed(written):
        with contextlib.suppress(OSError):
            path.rmdir() if path.is_dir() else path.unlink()


def write_events(run_dir: str, loaded: tuple[Any, Any, Any, Any] | None = None) -> str | None:
    """Write TensorBoard event files for the run in ``run_dir`` into ``run_dir/tensorboard/``.

    Reads the logs with :func:`ssptk.rundir.logs.load_run` (call it when the run has ended). Event files
    from an earlier call are replaced, so calling it again does not duplicate points. A run without
    step records gets only the ``config``/``summary`` texts. Returns the folder, or None (nothing
    written) when the ``tensorboard`` package is not installed. Raises ``FileNotFoundError`` if
    ``run_dir`` is not a directory, and :class:`~ssptk.core.errors.DiskFull` on a full disk: every event file is
    then taken back (all or none are written). ``loaded``: what ``load_run(run_dir)`` returns, when the caller
    has it already (the launcher, which has just summarised the run).
    """
    try:
        from tensorboard.compat.proto import event_pb2 as pb
    except ImportError:
        return None
    root = Path(run_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"no run directory {run_dir!r}")
    steps, events, config, summary = loaded if loaded is not None else load_run(root)
    t0 = start_time(events)
    steps = steps.dropna(subset=["t", "worker", "step"])
    df = prepare_steps(steps, t0)
    if t0 is None:
        t0 = float(df["t"].min()) if len(df) else float(RunConfig.of(config).created or time.time())
    top: list[tuple[int, bytes]] = []
    if config:
        top.append(_text("config", dict(run_options(config)), t0))
    if summary:
        top.append(_text("summary", summary, float(df["t"].max()) if len(df) else t0))
    workers: dict[int, list[tuple[int, bytes]]] = {}
    described = None
    if len(df):
        window = smoothing_window(n_workers(config, df))
        smooth = df["loss"].astype("float64").rolling(window, min_periods=1).mean()
        gs = df["global_step"] if df["global_step"].notna().all() else df["samples"]
        last = (df.assign(_gs=gs.astype("int64"), _smooth=smooth)
                .drop_duplicates("_gs", keep="last").sort_values("_gs", kind="mergesort"))
        top += _scalars(pb, last["_gs"], last["t"], {"loss/all": last["_smooth"]})
        skew = skew_timeline(df, finish_times(df, events))["skew"]
        top += _scalars(pb, df["samples"], df["t"], {"skew/steps": skew})
        for _worker, w in df.groupby("worker", sort=True):
            wait = w["wait_s"].astype("float64").fillna(0.0).cumsum()
            items = _scalars(pb, w["step"], w["t"], {"loss/worker": w["loss"], "wait/worker": wait,
                                                     "staleness/worker": w["staleness"]}, described)
            items += _scalars(pb, w["samples"], w["t"], {"progress/worker": w["completed"]})
            workers[int(w["worker"].iloc[0])] = items
    rd = RunDir(root)
    folder = Path(rd.tensorboard_dir)
    for old in folder.glob(f"**/{_PREFIX}*"):  # an earlier call's files: replace, never add to them
        old.unlink()
    written: list[Path] = []
    try:
        _write_file(folder, top, t0, pb, written)
        for worker, items in workers.items():
            _write_file(Path(rd.tensorboard_worker_dir(worker)), items, t0, pb, written)
    except BaseException:  # all the event files or none: a run's charts never stop half-way
        _take_back(written)
        raise
    return str(folder)
