"""A run observer that hands every call on to another: the base of the notebook's observers that note something
of a run on the way (standard library only, so that ``%load_ext ssptk`` stays light)."""
from __future__ import annotations

from typing import Any

__all__ = ["Forwarding"]


class Forwarding:
    """A run observer (:class:`ssptk.api.RunObserver`) that hands every call on to ``inner`` (if any);
    subclasses note what they need first and call ``super()``."""

    def __init__(self, inner: Any = None) -> None:
        self.inner = inner

    def started(self, run_dir: str, opts: Any, total: int) -> None:
        if self.inner is not None:
            self.inner.started(run_dir, opts, total)

    def starting(self, ready: list[str], pending: list[str]) -> None:
        starting = getattr(self.inner, "starting", None)
        if callable(starting):
            starting(ready, pending)

    def records(self, steps: list[dict[str, Any]], events: list[dict[str, Any]], done: int, total: int) -> None:
        if self.inner is not None:
            self.inner.records(steps, events, done, total)

    def finished(self, result: Any) -> None:
        if self.inner is not None:
            self.inner.finished(result)
