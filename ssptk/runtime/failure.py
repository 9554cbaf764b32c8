"""A task's failure: what a worker logs, reports and says when its training raises (:func:`run_guarded`), and the
one line TensorFlow's long error texts come down to (:func:`one_line`). Imports: core, rundir, runtime.
"""
from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Callable
from typing import Any

from ssptk.core.errors import DiskFull, LossNotFinite
from ssptk.rundir import RunDir
from ssptk.rundir.space import is_disk_full
from ssptk.rundir.task_status import TRACEBACK_LINES, TaskError
from ssptk.runtime.host_dir import lost_peer, lost_words
from ssptk.runtime.protocol import EXIT_DISK_FULL, report_failure
from ssptk.runtime.quiet_stderr import to_log
from ssptk.runtime.reaper import exit_with_descendants
from ssptk.runtime.retry import ATTEMPTS, DUPLICATE_TEXT

__all__ = ["one_line", "report_uncaught", "run_guarded", "task_error"]


def run_guarded(fn: Callable[[], None], run_dir: str, index: int,
                 on_failure: Callable[[int], None] = exit_with_descendants,
                 cluster: dict[str, list[str]] | None = None) -> None:
    """Run worker ``index``'s training; on any error, log an ``error`` event (the launcher reads it) and call
    ``on_failure`` with the exit code: 1, or :data:`EXIT_DISK_FULL` when the disk is full (the event may not
    fit). ``on_failure`` ends the process (in the shared layout, naming the worker first). A connection lost to
    another task of ``cluster`` (its process died) is one line naming that task, the traceback in the task's log."""
    try:
        fn()
    except BaseException as e:  # noqa: BLE001 - the message goes to the run's log, then we exit
        full = is_disk_full(e)
        from ssptk.runtime.identity import ForeignCluster

        whole = (LossNotFinite, DiskFull, ForeignCluster)  # the message says it all; a traceback would bury it
        lost = lost_peer(e, f"worker:{index}")
        msg = (lost_words(lost, cluster, one_line(e)) if lost else str(e) if isinstance(e, whole)
               else f"{type(e).__name__}: {one_line(e)}")
        # on a full disk these writes may fail too: the exit code then says it alone
        with contextlib.suppress(OSError, DiskFull):
            from ssptk.runtime.recorder import Recorder

            Recorder(RunDir(run_dir).worker_log(index), index).event("error", message=msg,
                                                                      **({"lost": lost} if lost else {}))
        report_failure(f"worker:{index}", task_error(e, msg))
        with contextlib.suppress(OSError):
            import traceback

            if isinstance(e, whole) or lost:
                print(f"ssptk worker: error: worker:{index}: {msg}", file=sys.stderr)
            if lost:  # a peer's death, said above: its traceback goes to the task's own log, where it keeps one
                if not to_log("".join(traceback.format_exception(e))):
                    traceback.print_exc()
            elif not isinstance(e, whole):
                print(f"ssptk worker: worker:{index} failed:", file=sys.stderr)
                traceback.print_exc()
            sys.stdout.flush()
            sys.stderr.flush()
        on_failure(EXIT_DISK_FULL if full else 1)
    with contextlib.suppress(OSError):
        sys.stdout.flush()
        sys.stderr.flush()


def report_uncaught(task: str) -> None:
    """An exception that ends task ``task`` uncaught (a PS whose server cannot start, say) is reported in its status
    file before Python prints it, as :func:`run_guarded` reports a worker's."""
    previous = sys.excepthook

    def hook(kind: type[BaseException], e: BaseException, tb: Any) -> None:
        with contextlib.suppress(Exception):
            report_failure(task, task_error(e, f"{kind.__name__}: {one_line(e)}"))
        previous(kind, e, tb)

    sys.excepthook = hook


def task_error(e: BaseException, message: str) -> TaskError:
    """What the task's status file says of ``e``: its type, ``message`` (one line), its traceback's last lines."""
    import traceback

    lines = "".join(traceback.format_exception(e)).splitlines()
    return TaskError(type(e).__name__, message, tuple(ln for ln in lines if ln.strip())[-TRACEBACK_LINES:])


def one_line(e: BaseException) -> str:
    """The telling part of an exception's text, in one line.

    TensorFlow wraps it in 'Graph execution error' lines, appends whole requests after
    'goo.gle/debug...', and joins several errors between '=====' lines with the cancellations they
    caused listed first."""
    text = str(getattr(e, "message", None) or e)
    if DUPLICATE_TEXT in text:
        return (f"TensorFlow refused a request it had seen before, {ATTEMPTS} times in a row (its request ids "
                "collide by chance in long runs; ssptk runs such a step again, see ssptk.runtime.retry): run again")
    # one block per joined error ("ABORTED: From /job:ps/...:\n<text>"); drop the cancellations if others remain
    blocks = re.split(r"^(?=[A-Z_]{4,}: )", text, flags=re.M)
    telling = [b for b in blocks if not b.startswith("CANCELLED: ")] or blocks
    skip = ("Graph execution error", "Detected at node", "[[{{node", "From /job:", "Traceback", "File ")
    lines = [re.sub(r"^[A-Z_]{4,}: ", "", ln.strip()).split(" goo.gle/")[0] for ln in "\n".join(telling).splitlines()]
    kept = [ln for ln in lines if ln.strip("=-") and not ln.startswith(skip)]
    return (kept[0] if kept else (lines[0] if lines else ""))[:300]
