"""Fencing a restarted worker's dead self out of the PS (``--restart-failed``): each minibatch applied once.

A worker that dies (killed, or ended because a step hung, say while the PS was stopped) can leave a step in
flight on the PS: its gradients arrived, and its update lands whenever the PS gets to it, even after the
worker was started again. A restart must therefore know, from the PS, whether the step it replaces was
applied, and nothing of its dead self may land after it looked. So, on ``ps:0``, for each worker:

- ``owner[i]``: which start of worker ``i`` may update (0, then the ``--rejoin`` number of each restart);
- ``ledger[i]``: ``[held, last, last_global_step]``; async and ssp: the minibatch it holds claimed and has not
  applied, then the minibatch and global step of its last applied update; sync: the global step its last
  pushed gradient was for;
- a lock (``tf.CriticalSection``) per worker.

Every step takes its worker's lock once its gradients are on the PS, checks ``owner[i]`` against its own
start number, then updates, counts and writes the ledger, and lets go: claim and update are one fact. A
restart takes the same lock, sets ``owner[i]`` to its own number and reads the ledger: a step of its dead
self that got the lock first is in the ledger; one that comes later fails its check and changes nothing.
Built only for runs that restart workers (``--restart-failed``): each step takes a lock on ``ps:0``, and with
``--ps K`` each other shard sends one more message per step to ``ps:0`` (its gradients arrived) and gets one back.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: ``ledger`` columns
HELD, LAST, LAST_GLOBAL_STEP = 0, 1, 2
#: what a fenced-out step's error says (the step of a worker's dead self, after a restart took over)
FENCED = "replaced by a restart"


@dataclass
class Fence:
    """Worker ``index``'s lock, start number (``incarnation``) and the PS variables it guards."""

    tf: Any
    index: int
    incarnation: int
    lock: Any
    owner: Any
    ledger: Any

    def guarded(self, body: Callable[[], Any]) -> Any:
        """``body()``'s ops (built on the PS) run under this worker's lock, and only if this start of the
        worker still owns its slot: else the run fails and nothing of ``body`` runs. Everything ``body``'s ops
        take from outside (gradients: give them as tensors already on the PS) is there before the lock."""
        tf = self.tf

        def checked() -> Any:
            ok = tf.debugging.assert_equal(
                self.owner[self.index], tf.constant(self.incarnation, tf.int64),
                message=f"worker {self.index} (start {self.incarnation}) was {FENCED}: its step is not applied")
            with tf.control_dependencies([ok]):
                return body()

        return self.lock.execute(checked)

    def record(self, row: list[Any]) -> Any:
        """Write this worker's ledger row (int64 scalars; call inside :meth:`guarded`)."""
        tf = self.tf
        values = tf.reshape(tf.stack([tf.cast(v, tf.int64) for v in row]), [1, 3])
        return self.ledger.scatter_update(tf.IndexedSlices(values, tf.constant([self.index], tf.int64)))

    def held(self) -> Any:
        """This worker's ledger row, read (inside :meth:`guarded`)."""
        return self.ledger.read_value()[self.index]

    def claim(self, counter: Any) -> Any:
        """Claim the next minibatch from ``counter`` (1-based) under the lock, as the one this worker holds."""
        tf = self.tf

        def body() -> Any:
            row = self.held()
            claim = fetch_add(tf, counter)
            with tf.control_dependencies([self.record([claim - 1, row[LAST], row[LAST_GLOBAL_STEP]])]):
                return tf.identity(claim)

        return self.guarded(body)

    def take_over(self, then: Callable[[Any], list[Any]] | None = None) -> Any:
        """The op a restarted worker runs first: under the lock, ``owner[i]`` = its start number; returns its
        ledger row as it was then (plus ``then(row)``'s values, int64 scalars computed under the lock)."""
        tf = self.tf

        def claim_slot() -> Any:
            mine = self.owner.scatter_update(tf.IndexedSlices(tf.constant([self.incarnation], tf.int64),
                                                              tf.constant([self.index], tf.int64)))
            with tf.control_dependencies([mine]):
                row = tf.identity(self.held())
                extra = then(row) if then is not None else []
                return tf.concat([row] + [tf.reshape(tf.cast(v, tf.int64), [1]) for v in extra], 0)

        return self.lock.execute(claim_slot)


def fetch_add(tf: Any, var: Any) -> Any:
    """Atomically add 1 to an int64 resource variable and return the new value.

    ``var.assign_add(1)`` is not enough: its returned value is a separate read, so two concurrent
    increments can both see the later value. ``ResourceCountUpTo`` returns the old value under the
    variable's lock.
    """
    return tf.raw_ops.ResourceCountUpTo(resource=var.handle, limit=2**62, T=tf.int64) + 1


def make_fence(tf: Any, v1: Any, n: int, index: int, incarnation: int) -> Fence:
    """Worker ``index``'s fence, in the current graph, container and device (``ps:0``)."""
    owner = v1.Variable(tf.zeros([n], tf.int64), trainable=False, name="fence_owner")
    ledger = v1.Variable(tf.fill([n, 3], tf.constant(-1, tf.int64)), trainable=False, name="fence_ledger")
    lock = tf.CriticalSection(shared_name=f"fence_lock_{index}", name=f"fence_lock_{index}")
    return Fence(tf, index, incarnation, lock, owner, ledger)
