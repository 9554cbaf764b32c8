"""Following a run from outside: the :class:`RunObserver` protocol and the small observers ssptk ships."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["ProgressFn", "ProgressObserver", "RunObserver", "NullObserver"]

ProgressFn = Callable[[int, int], None]


class RunObserver(Protocol):
    """Follows a run as it goes (the notebook dashboard is one). Records are read once by the run's
    supervisor and handed over, so an observer never re-reads the logs.

    ``records`` is called about every ``POLL_S`` seconds, also with empty lists, from the thread that
    runs the run; ``finished`` once at the end (``result``, a :class:`ssptk.api.RunResult`, is ``None``
    when the run was interrupted). An observer must not end the run: a run is stopped through its
    ``cancel`` event (see :func:`ssptk.api.run`).
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


class ProgressObserver(NullObserver):
    """A ``progress(done, total)`` callback as a :class:`RunObserver`."""

    def __init__(self, fn: ProgressFn) -> None:
        self.fn = fn

    def records(self, steps: list[dict[str, Any]], events: list[dict[str, Any]], done: int, total: int) -> None:
        self.fn(done, total)
