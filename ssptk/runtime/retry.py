"""Re-running a ``session.run`` that TensorFlow rejected as a duplicate request.

TensorFlow 2.21 gives every RunGraph RPC a request id from a per-thread ``mt19937_64`` seeded with 32 random
bits, and each task refuses an id it saw among its last 100,000 ("The same RunGraph (Worker) request was
received twice"). With fresh threads per step, ids collide by chance: about 1 run in 3 fails by 60,000
requests to one task, 2 in 3 by 100,000 (``docs/tf-notes.md``). Nothing was sent twice: the task
rejects the request before it runs anything, and the session stays usable, so the same step is run
again. That is only safe where no stateful op in the step's graph can run without every partition's
input (:mod:`ssptk.runtime.ps_graph` keeps it so: the minibatch claim follows the update).

A refusal can also hang a step: TensorFlow's master cancels a step's other parts once, when the first part
fails, and a part that has not yet registered for cancellation at that moment (this worker's own, which
waits for the parameters the PS never sends) is never cancelled; the master's own time-outs then cancel
nothing either. :class:`HangWatch` ends such a worker, so that ``--restart-failed`` can start it again.
"""
from __future__ import annotations

import functools
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

_T = TypeVar("_T")

DUPLICATE_TEXT = "request was received twice"
# A re-run is refused again with probability below 3e-5 (100,000 ids / 2**32): five attempts are plenty.
ATTEMPTS = 5


def is_duplicate_request(e: BaseException) -> bool:
    """True for TensorFlow's rejection of a request id it already saw (possibly wrapped in a
    ``CancelledError`` that lists several errors)."""
    return DUPLICATE_TEXT in str(getattr(e, "message", None) or e)


class Rerunner:
    """Runs session calls, running again those rejected as duplicate requests; counts the re-runs."""

    def __init__(self, errors: Any) -> None:
        self._errors = (errors.AbortedError, errors.CancelledError)
        self.retries = 0

    def __call__(self, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        for attempt in range(ATTEMPTS):
            try:
                return fn(*args, **kwargs)
            except self._errors as e:
                if attempt == ATTEMPTS - 1 or not is_duplicate_request(e):
                    raise
                self.retries += 1
                # one line in the task's log per re-run (rare outside the regression test's narrowed seeds)
                what = re.search(r"The same (.*?) request was received twice", str(e))
                print(f"ssptk: ran a step again: TensorFlow refused a {what.group(1) if what else ''} request id it "
                      "had seen before", file=sys.stderr, flush=True)
        raise AssertionError("unreachable")


class RetryingSession:
    """A ``tf.compat.v1.Session`` whose runs and callables are re-run when rejected as duplicates."""

    def __init__(self, session: Any, errors: Any) -> None:
        self.session = session
        self._rerun = Rerunner(errors)

    @property
    def retries(self) -> int:
        """How many runs were rejected as duplicate requests and run again."""
        return self._rerun.retries

    def call(self, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """``fn(*args, **kwargs)``, run again if rejected (for what takes the session itself, e.g. a Saver)."""
        return self._rerun(fn, *args, **kwargs)

    def run(self, *args: Any, **kwargs: Any) -> Any:
        return self._rerun(self.session.run, *args, **kwargs)

    def make_callable(self, fetches: Any, feed_list: Any = None, accept_options: bool = False) -> Callable[..., Any]:
        """``session.make_callable``; with feeds, :func:`ssptk.runtime.fastrun.feeding_callable`; ``accept_options``:
        through ``Session.run``, taking ``options`` and ``run_metadata`` (:mod:`ssptk.runtime.step_trace`)."""
        if accept_options:
            return functools.partial(self._rerun, self.session.make_callable(fetches, feed_list, accept_options=True))
        if feed_list:
            from ssptk.runtime.fastrun import feeding_callable

            return functools.partial(self._rerun, feeding_callable(self.session, fetches, feed_list))
        return functools.partial(self._rerun, self.session.make_callable(fetches))

    def close(self) -> None:
        self.session.close()


class HangWatch:
    """Calls ``on_hang(seconds)`` once, from its own thread, when a step run lasts longer than ``limit_s``
    plus that step's injected delay. :meth:`begin` and :meth:`end` bracket each step run (cheap: two stores)."""

    def __init__(self, limit_s: float, on_hang: Callable[[float], None]) -> None:
        self.limit_s = limit_s
        self._on_hang = on_hang
        self._since = 0.0  # time.monotonic() when the step run in flight began; 0 when none is
        self._allowed = limit_s
        self._closed = threading.Event()
        threading.Thread(target=self._watch, name="hang-watch", daemon=True).start()

    def close(self) -> None:
        """Stop watching (a warm worker's next run gets a new watch)."""
        self._closed.set()

    def begin(self, delay_s: float = 0.0) -> None:
        self._allowed = self.limit_s + delay_s
        self._since = time.monotonic()

    def end(self) -> None:
        self._since = 0.0

    def _watch(self) -> None:
        while not self._closed.wait(min(1.0, self.limit_s / 4)):
            since = self._since
            if since and time.monotonic() - since > self._allowed:
                self._on_hang(time.monotonic() - since)
                return
