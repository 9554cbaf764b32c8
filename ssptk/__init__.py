"""ssptk: see how synchronous, stale-synchronous (SSP) and asynchronous distributed training differ.

``ssptk.run(...)`` trains a model on a local TensorFlow cluster (one parameter server and N workers: a
process each, or all in one process from 8 workers on); ``ssptk.compare([...])`` runs several modes and
writes a report; ``ssptk.simulate(...)`` predicts the same without training. See README.md,
docs/design.md and CONTRIBUTING.md (layers).
"""
from __future__ import annotations

from typing import Any

from ssptk.core.errors import RunFailed, RunInterrupted, TaskFailure, UsageError
from ssptk.core.models import ModelSpec
from ssptk.core.version import __version__

__all__ = ["ModelSpec", "RunFailed", "RunInterrupted", "TaskFailure", "UsageError", "__version__", "compare",
           "implicit_momentum", "predict", "run", "shutdown", "simulate"]


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext ssptk``: register the ``%dtrain`` magics."""
    from ssptk.notebook.magics import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    from ssptk.notebook.magics import unload_ipython_extension as unload

    unload(ipython)


def __getattr__(name: str) -> Any:  # late imports keep `import ssptk` light (no pandas/TF until needed)
    if name in ("run", "shutdown", "compare", "simulate", "predict", "implicit_momentum"):
        from ssptk import api

        return getattr(api, name)
    raise AttributeError(f"module 'ssptk' has no attribute {name!r}")
