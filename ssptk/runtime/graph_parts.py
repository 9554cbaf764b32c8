"""What every mode's part of a worker's graph is built on (:func:`ssptk.runtime.ps_graph.build` makes it): the
variables and their shards, the model's gradient, the counters on ``ps:0``."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ssptk.runtime.fence import Fence
from ssptk.runtime.placement import on_its_shard

__all__ = ["PS", "QUEUE_CAPACITY", "GraphParts", "received_on_shards"]

PS = "/job:ps/task:0"
QUEUE_CAPACITY = 1 << 20


@dataclass
class GraphParts:
    """What every mode's ops are built on: the parts of a worker's graph that
    :func:`ssptk.runtime.ps_graph.build` makes first."""

    tf: Any
    v1: Any
    n: int
    index: int
    backup: int
    updates: int
    global_step: Any
    g_read: Any
    grads: list[Any]
    model_vars: list[Any]
    after_compute: list[Any]      # the gradients that exist (leaving the worker after the injected delay)
    claimed: Any | None
    clock: Any
    want: Any
    opt: Any
    inverse_staleness: bool = False  # --lr-staleness inverse
    fence: Fence | None = None    # --restart-failed: claims and updates under the worker's lock on ps:0
    x: Any = None                 # the input placeholders (local SGD builds its private copy's step on them)
    y: Any = None
    dc: Any = None                # --lr-staleness dc: w_read's copies (ssptk.runtime.delay_comp.Snapshots)
    # async with shards (no fence, no dc): the global step counts an update once its part on ps:0 is in, and the
    # worker's step waits for the other shards' parts itself (see _update_and_claim); the worker's device for that
    count_on_ps0: str | None = None
    all_updates: list[Any] | None = None  # with count_on_ps0: every shard's part of the update
    read_stamp: Any = None        # ps:0's clock once it read g_read (async/ssp: a step record's read_s)



def received_on_shards(s: GraphParts, grads: list[Any]) -> list[Any]:
    """With a fence: the gradients received on their variables' shards first, so that the lock waits for them
    there (and no control edge of its own goes from the worker to the lock)."""
    if s.fence is None:
        return grads
    placed = []
    for g, var in zip(grads, s.model_vars):
        with on_its_shard(s.v1, var):
            placed.append(None if g is None else s.tf.identity(g))
    return placed
