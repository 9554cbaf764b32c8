"""Error types. Adapters (CLI, magics) turn these into one-line messages; nothing else prints them."""
from __future__ import annotations

import math
import re
import signal
import threading
from dataclasses import dataclass, field


class UsageError(ValueError):
    """A user mistake in options or inputs: one line saying what was wrong and what to do."""

    def _render_traceback_(self) -> list[str]:
        # IPython/Jupyter show this instead of a traceback; the cell still fails, so Run All stops.
        return [f"UsageError: {self}"]


LOG_TAIL_LINES = 20
#: TensorFlow's start-up chatter that says nothing about the run: left out of the log tails shown to users and of
#: the stderr of a task no launcher started (ssptk.runtime.quiet_stderr). Most of it comes through absl before
#: absl::InitializeLog, which TF_CPP_MIN_LOG_LEVEL does not reach.
TF_NOISE = ("absl::InitializeLog", "oneDNN", "TF_ENABLE_ONEDNN_OPTS", "rebuild TensorFlow", "cpu_feature_guard",
            "This TensorFlow binary", "Unable to register cuDNN factory", "Unable to register cuFFT factory",
            "Unable to register cuBLAS factory")
#: ... and what says "no GPU here": noise on a host without one, news where GPUs are expected
NO_GPU_NOISE = ("failed call to cuInit", "cudart_stub", "Could not find cuda drivers")
_FATAL = re.compile(r"^F\d{4} |Check failed")


def is_tf_noise(line: str, gpu_lines: bool = True) -> bool:
    """Whether ``line`` is TensorFlow's start-up chatter (``gpu_lines``: counting :data:`NO_GPU_NOISE`); a fatal
    C++ log line never is."""
    if not any(n in line for n in TF_NOISE) and not (gpu_lines and any(n in line for n in NO_GPU_NOISE)):
        return False
    return not _FATAL.search(line)


def log_tail(path: str | None, lines: int = LOG_TAIL_LINES) -> list[str]:
    """The last ``lines`` meaningful lines of a task log (``[]`` if there is none)."""
    if not path:
        return []
    try:
        with open(path, errors="replace") as f:
            text = f.read()[-64_000:]
    except OSError:
        return []
    kept = [ln for ln in text.splitlines() if ln.strip() and not is_tf_noise(ln)]
    return kept[-lines:]


def _error_line(tail: list[str]) -> str:
    """The most telling line of a failed task's log: its last exception line, if any."""
    for line in reversed(tail):
        s = line.strip()
        if "Error" in s or "error:" in s or "Exception" in s:
            return s[:300]
    return ""


@dataclass
class TaskFailure:
    """Which task failed, how, and the last lines of its log. Build one with :meth:`of`."""

    task: str
    reason: str
    exit_code: int | None = None
    log_tail: list[str] = field(default_factory=list)
    #: ``failed``, or ``interrupted`` when the user (Ctrl-C, the stop button) or a signal ended the run
    status: str = "failed"
    #: the signal that ended an interrupted run (``SIGINT``, ``SIGTERM``, ``SIGHUP``), where one did
    signal: str | None = None

    @classmethod
    def of(cls, task: str, reason: str, exit_code: int | None = None, log_path: str | None = None, *,
           explain: bool = False) -> TaskFailure:
        """The one constructor: the tail of the task's log at ``log_path``; a negative ``exit_code``
        names its signal (``was killed by SIGKILL``); ``explain`` appends the log's last error line."""
        tail = log_tail(log_path)
        if exit_code is not None and exit_code < 0:
            try:
                reason = f"was killed by {signal.Signals(-exit_code).name}"
            except ValueError:
                reason = f"was killed by signal {-exit_code}"
        detail = _error_line(tail) if explain else ""
        return cls(task, f"{reason}: {detail}" if detail else reason, exit_code, tail)

    def __str__(self) -> str:
        code = f" (exit code {self.exit_code})" if self.exit_code is not None else ""
        return f"{self.task}{code}: {self.reason}"


class RunFailed(RuntimeError):
    """A run ended with status ``failed``. ``failure`` names the task; ``result`` holds what ran."""

    def __init__(self, failure: TaskFailure, result: object | None = None) -> None:
        super().__init__(str(failure))
        self.failure = failure
        self.result = result

    def _render_traceback_(self) -> list[str]:
        lines = [f"RunFailed: {self.failure}"]
        if self.failure.log_tail:
            lines += [f"last lines of {self.failure.task}'s log:"] + [f"  {ln}" for ln in self.failure.log_tail[-10:]]
        run_dir = getattr(self.result, "run_dir", None)
        return lines + ([f"logs kept in {run_dir}"] if run_dir else [])


def loss_not_finite(loss: float, step: int, worker: int, global_step: int) -> str:
    """The one line that says a run stopped on a non-finite ``loss`` (``nan``, ``inf`` or ``-inf``, as it was), a
    real run's (:class:`LossNotFinite`) or a predicted one's alike."""
    what = "nan" if loss != loss else ("inf" if loss > 0 else "-inf")
    return (f"loss became {what} at step {step} (worker {worker}, global step {global_step}): "
            "lower --lr, check the model, or pass --allow-nan")


class LossNotFinite(RuntimeError):
    """Raised inside a worker when a step's loss is NaN or infinite (unless ``--allow-nan``); its
    message is the one line the user sees (:func:`loss_not_finite`)."""

    def __init__(self, loss: float, step: int, worker: int, global_step: int) -> None:
        super().__init__(loss_not_finite(loss, step, worker, global_step))


def check_loss(loss: float, allow_nan: bool, step: int, worker: int, global_step: int) -> None:
    """Raise :class:`LossNotFinite` for a NaN or infinite ``loss`` unless ``allow_nan``."""
    if not allow_nan and not math.isfinite(loss):
        raise LossNotFinite(loss, step, worker, global_step)


class DiskFull(RuntimeError):
    """The disk (or quota) holding the run directory is full: one line naming the device, the file and
    what to do. Build it with :func:`ssptk.rundir.space.disk_full`."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.path = path

    def _render_traceback_(self) -> list[str]:
        return [f"DiskFull: {self}"]


class RunInterrupted(KeyboardInterrupt):
    """A run stopped by the user (the notebook's stop button) or a signal to the launcher (``signal``
    names it: ``SIGINT``, ``SIGTERM``, ``SIGHUP``): every task is stopped, the logs kept."""

    def __init__(self, message: str = "", signal: str | None = None) -> None:
        super().__init__(message)
        self.signal = signal

    def _render_traceback_(self) -> list[str]:
        return [f"RunInterrupted: {self}"]


_signalled: list[str] = []


def signal_arrived(name: str | None) -> None:
    """Record the signal a front end's handler turned into :class:`RunInterrupted` (``None`` forgets it).

    A handler's raise is lost where Python cannot propagate it (an at-fork hook run while ``subprocess``
    starts a task, a ``__del__``): the loops that follow tasks raise it again when they see it recorded."""
    _signalled.clear()
    if name is not None:
        _signalled.append(name)


def raise_if_stopped(cancel: threading.Event | None, message: str) -> None:
    """Raise :class:`RunInterrupted` once ``cancel`` is set (``message``) or a signal was recorded."""
    if cancel is not None and cancel.is_set():
        raise RunInterrupted(message)
    if _signalled:
        raise RunInterrupted(f"stopped by {_signalled[0]}", signal=_signalled[0])
