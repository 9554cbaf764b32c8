"""What the notebook's run widgets share: the runner that does a run, its options, the cache key of a run,
and ipywidgets imported late (with an install hint)."""
from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ssptk.core.errors import UsageError
from ssptk.core.options import resolve
from ssptk.experiment.compare import Runner
from ssptk.experiment.sweep import ssp_only

if TYPE_CHECKING:
    from ssptk.experiment.result import RunResult

__all__ = ["RUNNER_OPTIONS", "CacheKey", "ObserverFactory", "Runner", "cache_key", "default_runner", "ipywidgets",
           "split_runner_options"]

CacheKey = tuple[tuple[str, Any], ...]
ObserverFactory = Callable[[str], Any]
RUNNER_OPTIONS = ("warm", "model_source")  # passed to the runner as given; not in the cache key


def ipywidgets() -> Any:
    """The ``ipywidgets`` module; :class:`UsageError` with the install line where it is missing."""
    try:
        import ipywidgets as w
    except ImportError:
        raise UsageError("the staleness widgets need ipywidgets: pip install 'ssptk[notebook]'") from None
    return w


def cache_key(options: Mapping[str, Any]) -> CacheKey:
    """A run's cache key: ``resolve(**options).to_dict()`` without ``out``, as a hashable sorted tuple
    (raises :class:`UsageError` for bad options, like :func:`ssptk.core.options.resolve`)."""
    d = resolve(**{k: v for k, v in options.items() if k != "out"}).to_dict()
    return tuple(sorted((k, tuple(map(tuple, v)) if k == "straggler" else v) for k, v in d.items() if k != "out"))


def default_runner(**kwargs: Any) -> RunResult:
    """:func:`ssptk.api.run` with ``out=None`` (a new directory each time); ``warm=True`` where run has it."""
    from ssptk import api

    if "warm" not in kwargs and "warm" in inspect.signature(api.run).parameters:
        kwargs["warm"] = True
    return api.run(**{"out": None, **kwargs})


def split_runner_options(run_options: dict[str, Any], what: str,
                         names: tuple[str, ...] = RUNNER_OPTIONS) -> dict[str, Any]:
    """Check ``mode`` (:func:`ssptk.experiment.sweep.ssp_only`) and take ``names`` (the runner's own options)
    out of ``run_options``."""
    ssp_only(run_options, what)
    return {k: run_options.pop(k) for k in names if k in run_options}


