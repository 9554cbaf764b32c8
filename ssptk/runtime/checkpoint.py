"""The run's checkpoint (``model/ckpt*``), complete or absent.

TensorFlow's savers write a checkpoint as several files (``ckpt.data-*`` through a ``.tempstate`` name,
``ckpt.index``, the ``checkpoint`` state file through ``checkpoint.tmp<hex>``), and a full disk can stop them
between any two: ``ResourceExhaustedError: Node: 'save/SaveV2'`` with a data file left alone, or a traceback and
``checkpoint.tmp<hex>`` left behind. :func:`save_whole` removes whatever the failed save had written and turns a
full disk into the one-line :class:`~ssptk.core.errors.DiskFull` naming the device and the checkpoint.
Imports core and rundir.
"""
from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable
from typing import Any

from ssptk.rundir import RunDir
from ssptk.rundir.space import disk_full, is_disk_full

__all__ = ["save_whole"]


def _names(folder: str) -> set[str]:
    try:
        return set(os.listdir(folder))
    except OSError:
        return set()


def save_whole(run_dir: RunDir, save: Callable[[], Any]) -> None:
    """Call ``save()`` (which writes the checkpoint at ``run_dir.checkpoint_prefix``); if it fails, remove every
    file it added to ``model/``, and raise a full disk as :class:`~ssptk.core.errors.DiskFull` (anything else as
    it came)."""
    folder = run_dir.model_dir
    os.makedirs(folder, exist_ok=True)
    before = _names(folder)
    try:
        save()
    except BaseException as e:
        for name in _names(folder) - before:
            path = os.path.join(folder, name)
            with contextlib.suppress(OSError):
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    os.unlink(path)
        if is_disk_full(e):
            raise disk_full(run_dir.checkpoint_prefix) from None
        raise
