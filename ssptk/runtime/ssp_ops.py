"""SSP's coordination ops on the PS: waking the workers a clock tick satisfies, and a worker's blocking wait.

Built into each worker's graph by :mod:`ssptk.runtime.ps_graph` (the step's own run wakes the peers its tick
satisfied; a worker more than ``staleness`` steps ahead blocks in one run of ``wait_for``).
"""
from __future__ import annotations

from typing import Any

# A finished worker's SSP clock: far ahead, so it never holds the others back.
FINISHED_CLOCK = 2**40


def wake_satisfied(tf: Any, want: Any, wake: list[Any], index: int, clocks: Any, wanted: Any) -> Any:
    """Wake every other worker whose wanted minimum clock ``clocks`` (read after this task's tick)
    reaches, in the PS graph. ``wanted`` must be read after the tick too: then a worker that registers
    later reads the ticked clocks itself, so no wake-up is lost.

    The want is cleared strictly before the token: a woken worker that re-registers in between has its
    registration wiped, but it also gets the token, wakes, and registers again. ``scatter_mul`` by 1
    leaves the others' slots alone atomically (writing back a value read earlier would not).
    """
    n = len(wake)
    ready = (wanted > 0) & (wanted <= tf.reduce_min(clocks)) & tf.not_equal(tf.range(n), index)
    cleared = want.scatter_mul(tf.IndexedSlices(1 - tf.cast(ready, tf.int64), tf.range(n, dtype=tf.int64)))
    with tf.control_dependencies([cleared]):
        tokens = tf.cast(ready, tf.int32)
        # One split hands each peer a vector of 0 or 1 tokens: one op per peer (its enqueue) instead of five.
        # Every worker's graph holds this for every peer, twice, and building those graphs, one after another
        # under the GIL in the shared layout, was most of SSP's start-up with dozens of workers.
        parts = tf.split(tf.ones(tf.reshape(tf.reduce_sum(tokens), [1]), tf.int32), tokens, num=n)
        return tf.group(*[wake[j].enqueue_many(parts[j]) for j in range(n) if j != index])


def ssp_wait_ops(tf: Any, v1: Any, extra: dict[str, Any], clock: Any, want: Any, wake: list[Any],
                  index: int) -> None:
    """SSP's blocking and finishing runs for worker ``index``, into ``extra``."""
    need = v1.placeholder(tf.int64, shape=(), name="want_value")
    extra["want_value"] = need
    # One run per wait: register the clock this worker needs, re-read the clocks (a tick that landed
    # before the registration is seen here) and put its own token in when they already satisfy it, then
    # block on the token. A token left over from an earlier wake-up can end the block early, so the
    # caller checks the returned clocks and waits again if they are short.
    registered = want.scatter_update(tf.IndexedSlices(tf.reshape(need, [1]), [index]))
    with tf.control_dependencies([registered]):
        now = clock.read_value()
    own = tf.cast(tf.reduce_min(now) >= need, tf.int32)
    with tf.control_dependencies([wake[index].enqueue_many(tf.ones(tf.reshape(own, [1]), tf.int32))]):
        woken = wake[index].dequeue()
    with tf.control_dependencies([woken]):
        done_waiting = want.scatter_update(tf.IndexedSlices(tf.constant([0], tf.int64), [index]))
    with tf.control_dependencies([done_waiting]):
        extra["wait_for"] = clock.read_value()
    extra["clear_want"] = want.scatter_update(tf.IndexedSlices(tf.constant([0], tf.int64), [index])).op
    fin = clock.scatter_update(tf.IndexedSlices(tf.constant([FINISHED_CLOCK], tf.int64), [index]))
    with tf.control_dependencies([fin]):
        clocks, wanted = clock.read_value(), want.read_value()
    extra["finish"] = wake_satisfied(tf, want, wake, index, clocks, wanted)
