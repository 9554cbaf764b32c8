"""Following a run from outside: the :class:`RunObserver` protocol and the small observers ssptk ships."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["ProgressFn", "ProgressObserver", "RunObserver", "NullObserver", "notify_starting"]

ProgressFn = Callable[[int, int], None]


class RunObserver(Protocol):
    """Follows a run as it goes (the notebook dashboard is one). Records are read once by the run's
    supervisor and handed over, so an observer never re-reads the logs.

    ``records`` is called about every ``POLL_S`` seconds, also with empty lists, from the thread that
    runs the run; ``finished`` once at the end (``result``, a :class:`ssptk.api.RunResult`, is ``None``
    when the run was interrupted). An observer must not end the run: a run is stopped through its
    ``cancel`` event (see :func:`ssptk.api.run`). An observer may also define ``starting(ready,
    pending)``: called while the cluster starts, with the names of the tasks whose servers are up and of
    those still starting (see :func:`notify_starting`).
    """

    def started(self, run_dir: str, opts: Any, total: int) -> None: ...

    def records(self, steps: list[dict[str, Any]], events: list[dict[str, Any]], done: int, total: int) -> None: ...

    def finished(self, result: Any) -> None: ...


class NullObserver:
    """A :class:`RunObserver` that does nothing; subclasses override what they need."""

    def started(self, run_dir: str, opts: Any, total: int) -> None:
        pass

    def records(self, steps: list[dict[str, Any]], events: list[dict[str, Any]], done: int, total: int) -> None:
        pass

    def finished(self, result: Any) -> None:
        pass


def notify_starting(observers: list[RunObserver], ready: list[str], pending: list[str]) -> None:
    """Tell the observers that have a ``starting`` method how far the cluster's start has come."""
    for o in observers:
        starting = getattr(o, "starting", None)
        if callable(starting):
            starting(ready, pending)


class ProgressObserver(NullObserver):
    """A ``progress(done, total)`` callback as a :class:`RunObserver`; if the callback has a ``starting``
    method (as :class:`ssptk.render.ProgressBar` does), it also hears the cluster's start."""

    def __init__(self, fn: ProgressFn) -> None:
        self.fn = fn

    def starting(self, ready: list[str], pending: list[str]) -> None:
        starting = getattr(self.fn, "starting", None)
        if callable(starting):
            starting(ready, pending)

    def records(self, steps: list[dict[str, Any]], events: list[dict[str, Any]], done: int, total: int) -> None:
        self.fn(done, total)
