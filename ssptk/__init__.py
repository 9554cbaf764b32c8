"""ssptk: see how synchronous, stale-synchronous (SSP) and asynchronous distributed training differ.

``ssptk.run(...)`` trains one of the seed models on a local TensorFlow cluster (one parameter server,
N workers as subprocesses); ``ssptk.compare([...])`` runs several modes and writes a report;
``ssptk.simulate(...)`` predicts the same without training. See README.md.
"""
from __future__ import annotations

__version__ = "0.1.0"

from ssptk.errors import RunFailed, TaskFailure, UsageError  # noqa: E402
from ssptk.models import ModelSpec  # noqa: E402

__all__ = ["ModelSpec", "RunFailed", "TaskFailure", "UsageError", "__version__", "compare", "run", "simulate"]


def __getattr__(name: str):  # late imports keep `import ssptk` light (no pandas/TF until needed)
    if name in ("run", "compare"):
        from ssptk import api

        return getattr(api, name)
    if name == "simulate":
        from ssptk.sim import simulate

        return simulate
    raise AttributeError(f"module 'ssptk' has no attribute {name!r}")
