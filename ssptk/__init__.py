"""ssptk: see how synchronous, stale-synchronous (SSP) and asynchronous distributed training differ.

``ssptk.run(...)`` trains one of the seed models on a local TensorFlow cluster (one parameter server,
N workers as subprocesses); ``ssptk.compare([...])`` runs several modes and writes a report;
``ssptk.simulate(...)`` predicts the same without training. See README.md.
"""
from __future__ import annotations

__version__ = "0.1.0"

from ssptk.errors import RunFailed, TaskFailure, UsageError  # noqa: E402
from ssptk.models import ModelSpec  # noqa: E402

__all__ = ["ModelSpec", "RunFailed", "TaskFailure", "UsageError", "__version__", "compare", "run", "shutdown", "simulate"]


def load_ipython_extension(ipython):  # noqa: ANN001, ANN201 - IPython's hook: %load_ext ssptk
    from ssptk.magics import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython):  # noqa: ANN001, ANN201
    from ssptk.magics import unload_ipython_extension as unload

    unload(ipython)


def __getattr__(name: str):  # late imports keep `import ssptk` light (no pandas/TF until needed)
    if name in ("run", "shutdown"):
        from ssptk import api

        return getattr(api, name)
    if name == "compare":
        from ssptk.comparison import compare

        return compare
    if name == "simulate":
        from ssptk.sim import simulate

        return simulate
    raise AttributeError(f"module 'ssptk' has no attribute {name!r}")
