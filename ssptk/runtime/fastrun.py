"""A step callable without ``Session.run``'s per-call Python: feeds converted once per call, nothing else.

``Session.make_callable`` has a fast path only for callables *without* feeds; with a ``feed_list`` it
builds a feed dict and goes through ``Session.run`` on every call (fetch handler, feed checks, nest
flattening), a large share of a small model's step (measured: ``benchmarks/FINDINGS.md``). Every
ssptk step feeds its minibatch, so :func:`feeding_callable` does once what ``Session.run`` repeats: the
fetch handler, the fetch and target lists and the feeds' graph outputs, and on each call only converts
the values and calls TensorFlow's C session run.

It uses ``BaseSession`` internals (``_FetchHandler``, ``_call_tf_sessionrun``, ``_as_tf_output``), stable
since TF 1.x; where they are missing it falls back to ``make_callable``. Shapes and dtypes are checked
once, on the first call, by the generic path.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["feeding_callable"]


def feeding_callable(session: Any, fetches: Any, feed_list: Sequence[Any]) -> Callable[..., Any]:
    """``f(*values)`` = ``session.run(fetches, dict(zip(feed_list, values)))``, with less Python per call."""
    generic = session.make_callable(fetches, feed_list=list(feed_list))
    try:
        from tensorflow.python.client import session as session_lib

        session._extend_graph()
        handler = session_lib._FetchHandler(session.graph, fetches, {})
        fetch_list = [t._as_tf_output() for t in handler.fetches()]
        target_list = [op._c_op for op in handler.targets()]
        outputs = [t._as_tf_output() for t in feed_list]
        dtypes = [t.dtype.as_numpy_dtype for t in feed_list]
        raw_run = session._call_tf_sessionrun
    except (AttributeError, ImportError, TypeError):
        return generic
    checked = False

    def run(*values: Any) -> Any:
        nonlocal checked
        if not checked:  # the first call through the generic path: its checks and error messages
            checked = True
            return generic(*values)
        feeds = {o: np.asarray(v, dtype=d) for o, v, d in zip(outputs, values, dtypes)}
        # TensorFlow's errors (tf.errors.OpError) come through as they are, without the graph context that
        # Session.run adds to their text
        return handler.build_results(session, raw_run(None, feeds, fetch_list, target_list, None))

    return run
