"""Error types. Adapters (CLI, magics) turn these into one-line messages; nothing else prints them."""
from __future__ import annotations

from dataclasses import dataclass, field


class UsageError(ValueError):
    """A user mistake in options or inputs: one line saying what was wrong and what to do."""


@dataclass
class TaskFailure:
    """Which task failed, how, and the last lines of its log."""

    task: str
    reason: str
    exit_code: int | None = None
    log_tail: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        code = f" (exit code {self.exit_code})" if self.exit_code is not None else ""
        return f"{self.task}{code}: {self.reason}"


class RunFailed(RuntimeError):
    """A run ended with status ``failed``. ``failure`` names the task; ``result`` holds what ran."""

    def __init__(self, failure: TaskFailure, result: object | None = None) -> None:
        super().__init__(str(failure))
        self.failure = failure
        self.result = result
