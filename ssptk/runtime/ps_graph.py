"""The between-graph replicated training graph for the parameter-server modes (sync, ssp, async).

Every worker builds the same graph; ``replica_device_setter`` puts the variables on the PS and the
computation on the worker. One ``session.run`` per step does everything that step needs on the PS
(read the parameters, apply the update, tick the SSP clock, claim the next minibatch), so no mode
adds a round trip per step. All state lives in a per-run container so a warm cluster never leaks
variables, counters or queues from one run into the next.
"""
from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ssptk.core.models import ModelSpec
from ssptk.core.optimizers import learning_rate
from ssptk.core.options import RunOptions
from ssptk.runtime.delay_comp import Snapshots
from ssptk.runtime.fence import HELD, fetch_add, make_fence
from ssptk.runtime.graph_parts import PS, QUEUE_CAPACITY, GraphParts, received_on_shards
from ssptk.runtime.injected import delayed
from ssptk.runtime.placement import on_its_shard, shard_setter
from ssptk.runtime.ssp_ops import ssp_wait_ops, wake_satisfied
from ssptk.runtime.sync_graph import sync_ops
from ssptk.runtime.tf_optimizers import optimizer_variables, tf_optimizer

BUILD_LOCK = threading.Lock()  # one model build at a time (see model_graph)


@dataclass
class PSGraph:
    """Handles to the ops of one worker's graph (``None`` where the mode has no such op)."""

    graph: Any
    x: Any
    y: Any
    delay: Any | None
    loss: Any
    accuracy: Any | None          # the model's accuracy op, where it has one
    g_read: Any                   # global step read just before the parameters
    init: Any
    saver: Any
    model_vars: list[Any]
    # barriers
    arrive: Any
    arrivals: Any
    release: Any
    go: Any                       # dequeue the start token, then claim the first minibatch
    # a restarted worker, no barrier: without a fence (--restart-failed 0) claim its next minibatch; with one
    # (ssptk.runtime.fence) take its slot over and read its ledger row (sync: and the global step after it)
    rejoin: Any
    claim: Any                    # async/ssp: claim a minibatch (1-based)
    done: Any
    dones: Any
    run_over: Any                 # worker 0, after saving the model: tells a PS that waits (wait_for_run_end)
    # async / ssp
    # apply the update; then [global step after it, next minibatch claimed (1-based), global step read
    # before the parameters, PS time of the update as int64 bits] + (ssp) [clocks after the tick]
    step_meta: Any | None = None
    want_value: Any | None = None
    wait_for: Any | None = None   # want[i] = want_value, block until woken, then read the clocks
    clear_want: Any | None = None
    finish: Any | None = None     # clock[i] = FINISHED, then wake whoever that satisfies
    # sync
    local_step: Any | None = None
    # push this worker's gradient, then block on its token: [global step before the push, token step,
    # global step now, tokens left (backlog), PS time of the push and of the update, as int64 bits]
    sync_meta: Any | None = None
    drain_n: Any | None = None
    drain: Any | None = None
    backlog: Any | None = None    # tokens waiting in this worker's queue
    aggregate: Any | None = None  # chief: `updates` times take N-B gradients, apply, one token per worker
    close_tokens: Any | None = None
    slots: tuple[Any, ...] = ()   # --optimizer's state on the PS (saved with the model; a restart finds it there)


def model_graph(spec: ModelSpec, seed: int) -> tuple[Any, Any, Any, Any, list[Any]]:
    """In the current graph: the global step, the input placeholders and the model, built in the order every
    run builds them (``global_step, x, y, module, variables``). Initial values come from the graph's seed and
    each op's place in that order, so whatever builds the model this way starts from a run's own values
    (:mod:`ssptk.runtime.gradients` replays runs from them)."""
    import tensorflow as tf

    v1 = tf.compat.v1
    # Keras 2's initializers without a seed of their own draw one from Python's `random`, not from the graph's
    # seed: seeded here, so `--seed` fixes a Keras model's initial values too (one build at a time: the shared
    # layout's workers build theirs in threads).
    with BUILD_LOCK:
        random.seed(seed)
        v1.set_random_seed(seed)
        global_step = v1.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        x, y = _placeholders(tf, spec)
        module = spec.build()
        if not module.trainable_variables:  # Keras layers may create variables on first call
            module(x)
    return global_step, x, y, module, list(module.trainable_variables)


def _placeholders(tf: Any, spec: ModelSpec) -> tuple[Any, Any]:
    x0, y0 = spec.data(np.random.default_rng(0), 2)
    x = tf.compat.v1.placeholder(tf.as_dtype(x0.dtype), shape=(None,) + x0.shape[1:], name="x")
    y = tf.compat.v1.placeholder(tf.as_dtype(y0.dtype), shape=(None,) + y0.shape[1:], name="y")
    return x, y


@dataclass
class _Forward:
    """A step's reads and computation: the global step and ps:0's clock read first, the model's loss and gradients
    (after the injected delay, where there is one)."""

    global_step: Any
    x: Any
    y: Any
    model_vars: list[Any]
    dc: Snapshots | None
    g_read: Any
    read_stamp: Any
    loss: Any
    accuracy: Any | None
    grads: list[Any]
    delay: Any | None


def _forward(tf: Any, v1: Any, spec: ModelSpec, opts: RunOptions, index: int, shards: int,
             with_delay: bool) -> _Forward:
    """Under the worker's device setter: the model, the step's reads in their order, its loss and gradients."""
    global_step, x, y, module, model_vars = model_graph(spec, opts.seed)
    delay_comp = opts.delay_comp
    dc = None if delay_comp is None else Snapshots(v1, model_vars, index, delay_comp)
    # With one PS the step's parameters are read after the global step, so `staleness` counts every
    # update that landed between this step's read and its own update. Read on the PS: under the worker's
    # device the read's Identity would sit on the worker, and its control edge to the parameter reads
    # would cost a worker -> PS message before every step's reads (one round trip, measured).
    with v1.device(PS), tf.control_dependencies([] if dc is None else dc.taken):  # dc: w_read first
        g_read = global_step.read_value()
        with tf.control_dependencies([g_read]):  # when ps:0 read it: the step's window starts
            read_stamp = tf.timestamp()
    # With shards (and no dc, whose w_read must precede the reads), the other shards' reads are not ordered
    # after it, as in TensorFlow's own PS training: the order costs a message from ps:0 to every shard before
    # each pull, and under a shaped link that message queues behind ps:0's traffic (measured 5-170 ms per
    # step; async --ps 4 at ps=20mbit: 18 against 20 steps/s). Neither reads nor updates are atomic across
    # shards anyway; `staleness` is counted on ps:0's global step (docs/design.md, "Measured, not assumed").
    with tf.control_dependencies([g_read] if shards == 1 or dc is not None else []):
        pred = module(x)
    loss = tf.identity(spec.loss(y, pred), name="loss")
    accuracy = None if spec.accuracy is None else tf.identity(spec.accuracy(y, pred), name="accuracy")
    grads = tf.gradients(loss, model_vars)
    delay = None
    if with_delay:  # injected compute time: after the read, before the update
        delay, grads = delayed(tf, v1, grads)
    return _Forward(global_step, x, y, model_vars, dc, g_read, read_stamp, loss, accuracy, grads, delay)


@dataclass
class _Coordination:
    """What the workers coordinate through on ps:0: the minibatch claims (async, ssp), SSP's clocks and wants, the
    start and end queues, and the fence of runs that restart workers."""

    claimed: Any | None
    clock: Any
    want: Any
    arrive: Any
    go: Any
    done: Any
    over: Any
    fence: Any | None


def _coordination(tf: Any, v1: Any, mode: str, n: int, index: int, shards: int,
                  incarnation: int | None) -> _Coordination:
    """On ps:0, beside the global step: a claim on another shard would cost two messages through ps:0's link at the
    end of every step (measured: 15-60 ms each under a shaped link). Async and ssp share the budget by claims;
    sync and local index minibatches by step."""
    with v1.device(PS):
        claimed = None if mode in ("sync", "local") else v1.Variable(0, dtype=tf.int64, trainable=False,
                                                                     name="claimed")
        return _Coordination(
            claimed, v1.Variable(tf.zeros([n], tf.int64), trainable=False, name="ssp_clock"),
            v1.Variable(tf.zeros([n], tf.int64), trainable=False, name="ssp_want"),
            v1.FIFOQueue(n, tf.int32, shapes=[[]], shared_name="start_arrive", name="start_arrive"),
            v1.FIFOQueue(n, tf.int32, shapes=[[]], shared_name="start_go", name="start_go"),
            v1.FIFOQueue(n, tf.int32, shapes=[[]], shared_name="done", name="done"),
            _run_over_queue(tf, v1, shards),
            None if incarnation is None else make_fence(tf, v1, n, index, incarnation))


def build(spec: ModelSpec, opts: RunOptions, cluster: dict[str, list[str]], index: int, container: str, *,
          with_delay: bool, updates: int | None = None, gpu: int | None = None, incarnation: int | None = None,
          mode_ops: Callable[[Any], dict[str, Any]] | None = None) -> PSGraph:
    """Build worker ``index``'s graph for ``opts`` (its mode, learning rate, ``--backup``, ``--seed``,
    ``--lr-staleness``) in a fresh ``tf.Graph`` (``updates``: sync's step count, ``opts.steps`` unless given: local
    SGD's rounds; ``gpu``: the worker's computation goes on that GPU of its process, which sees several in the shared
    layout; ``incarnation``: runs that restart workers fence each start of a worker, :mod:`ssptk.runtime.fence`;
    ``opts.delay_comp``: ``--lr-staleness dc`` or ``dca``, :mod:`ssptk.runtime.delay_comp`).

    The shared part (variables, the model, its gradient, the injected delay, the barriers) is built here;
    :func:`_free_ops` adds async's and SSP's update and :func:`ssptk.runtime.sync_graph.sync_ops` sync's
    accumulators and tokens; ``mode_ops`` (local SGD, :mod:`ssptk.runtime.local_graph`) replaces the latter: it gets
    the shared part and returns its :class:`PSGraph` fields.
    """
    import tensorflow as tf

    v1 = tf.compat.v1
    mode, n, shards = opts.mode, len(cluster["worker"]), len(cluster.get("ps", [])) or 1
    lr = opts.update_lr(learning_rate(opts.lr, spec, opts.optimizer))  # applied to an update's (mean) gradient
    graph = tf.Graph()
    with graph.as_default(), v1.container(container):
        device = f"/job:worker/task:{index}" + ("" if gpu is None else f"/device:GPU:{gpu}")
        with v1.device(shard_setter(v1, device, cluster)):
            f = _forward(tf, v1, spec, opts, index, shards, with_delay)
            c = _coordination(tf, v1, mode, n, index, shards, incarnation)
            shared = GraphParts(tf, v1, n, index, opts.backup, opts.steps if updates is None else updates,
                                f.global_step, f.g_read, f.grads, f.model_vars, [g for g in f.grads if g is not None],
                                c.claimed, c.clock, c.want, tf_optimizer(v1, opts.optimizer, lr),
                                opts.lr_staleness == "inverse", c.fence, f.x, f.y, f.dc,
                                count_on_ps0=device if shards > 1 and mode == "async" and f.dc is None
                                and incarnation is None else None, read_stamp=f.read_stamp)
            extra = _free_ops(shared, ssp=mode == "ssp") if mode in ("async", "ssp") else (mode_ops or sync_ops)(shared)
            init = v1.variables_initializer(v1.global_variables())
            slots = {} if mode_ops is not None else optimizer_variables(shared.opt)  # local: inner slots, private
            saver = v1.train.Saver(var_list={**{v.name.split(":")[0]: v for v in f.model_vars}, **slots},
                                   sharded=False)
            with v1.device(PS):
                go = _claim(shared, c.go.dequeue()) if c.claimed is not None else c.go.dequeue()
            return PSGraph(
                graph=graph, x=f.x, y=f.y, loss=f.loss, accuracy=f.accuracy, g_read=f.g_read, init=init, saver=saver,
                model_vars=f.model_vars, arrive=c.arrive.enqueue(index), arrivals=c.arrive.dequeue_many(n - 1),
                release=c.go.enqueue_many([tf.zeros([n], tf.int32)]), go=go, rejoin=_rejoin(shared),
                claim=_claim(shared) if c.claimed is not None else None, done=c.done.enqueue(index),
                dones=c.done.dequeue_many(n - 1), run_over=c.over.enqueue_many([tf.ones([shards], tf.int32)]),
                slots=tuple(slots.values()), **({"delay": f.delay} | extra))


def _run_over_queue(tf: Any, v1: Any, shards: int) -> Any:
    """The queue on ``ps:0`` that worker 0 puts a token in for each PS task when the run is over (after the model
    is saved)."""
    return v1.FIFOQueue(shards, tf.int32, shapes=[[]], shared_name="run_over", name="run_over")


def wait_for_run_end(target: str, container: str, shards: int = 1) -> None:
    """On a PS task: block until worker 0 says the run is over (a PS no launcher stops then exits by itself)."""
    import tensorflow as tf

    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default(), v1.container(container), v1.device(PS):
        take = _run_over_queue(tf, v1, shards).dequeue()
    config = v1.ConfigProto(device_filters=[PS])  # the workers need not be up yet
    with v1.Session(target, graph=graph, config=config) as sess:
        sess.run(take)


def _free_ops(s: GraphParts, ssp: bool) -> dict[str, Any]:
    """async and ssp: the update applied as soon as it is computed, and what the PS sends back after it."""
    tf, v1 = s.tf, s.v1
    extra: dict[str, Any] = {}
    grads, tail = s.grads, []
    scales: list[Any] = []

    def inverse(g_after: Any) -> Any:  # lr / (staleness + 1): the updates counted since this step read the parameters
        scales.append(1.0 / tf.cast(g_after - s.g_read, tf.float64))
        return scales[-1]

    if s.dc is not None:  # g + lambda g*g*(w_now - w_read), on each variable's shard (dca: its lambda there too)
        grads, share = s.dc.corrected(tf, grads, PS)
        tail = [tf.bitcast(share, tf.int64)]  # logged as dc_correction
    g_after, claim = _update_and_claim(s, grads, inverse if s.inverse_staleness else None)
    if scales:
        tail = [tf.bitcast(scales[0], tf.int64)]  # back to the worker, to be logged (lr_scale)
    # Everything after the update runs on the PS and comes back as ONE tensor: in TF's distributed runtime
    # every fetched tensor and every cross-task control edge is an RPC of its own, and those RPCs, not the
    # tiny ops, are what a step costs here.
    with v1.device(PS):
        # `t` of a step record: the PS's clock once the update is in (not the worker's after its run
        # returns, which lags whenever the worker waits for a core).
        with tf.control_dependencies([g_after]):
            stamp = tf.timestamp()
        parts = [g_after, claim, s.g_read, tf.bitcast(stamp, tf.int64), tf.bitcast(s.read_stamp, tf.int64)]
        woke: list[Any] = []
        if ssp:
            # The tick follows the stamp, so a step that a peer's tick allowed always logs a later `t` than
            # the step that ticked: the logs show the bound as the PS enforced it.
            with tf.control_dependencies([stamp]):
                tick = s.clock.scatter_add(tf.IndexedSlices(tf.constant([1], tf.int64), [s.index]))
            with tf.control_dependencies([tick]):
                clocks_now, want_now = s.clock.read_value(), s.want.read_value()
            parts.append(clocks_now)  # the wants stay on the PS: only wake_satisfied reads them
            wake = [v1.FIFOQueue(QUEUE_CAPACITY, tf.int32, shapes=[[]], shared_name=f"ssp_wake_{j}",
                                 name=f"ssp_wake_{j}") for j in range(s.n)]
            # Waking the peers this tick satisfied is part of the step's own run: no extra round trip for
            # the waker, and none on the woken worker's critical path.
            woke = [wake_satisfied(tf, s.want, wake, s.index, clocks_now, want_now)]
        parts += tail
        with tf.control_dependencies(woke):
            extra["step_meta"] = tf.concat([tf.reshape(p, [-1]) for p in parts], 0, name="step_meta")
        if ssp:
            ssp_wait_ops(tf, v1, extra, s.clock, s.want, wake, s.index)
    if s.count_on_ps0 is not None:  # the step ends once every shard has its part of the update
        with v1.device(s.count_on_ps0), tf.control_dependencies(s.all_updates):
            extra["step_meta"] = tf.identity(extra["step_meta"])
    return extra


def _update_and_claim(s: GraphParts, grads: list[Any],
                      scale: Callable[[Any], Any] | None = None) -> tuple[Any, Any]:
    """async/ssp: apply the update, then count it (the global step after it) and claim the next minibatch (1-based).
    With a fence (:mod:`ssptk.runtime.fence`) all of it is one fact under the worker's lock, with its ledger row.

    ``scale`` (``--lr-staleness inverse``): the update is counted first, and ``scale(global step after it)`` multiplies
    its gradients. A scale read from the global step before the update, as it once was, missed any update another
    worker counted in between, so the update was scaled for less staleness than its record says (lr_scale 1.0 logged
    beside staleness 1, seen on a busy machine); counted first, the two are one number."""
    tf, v1 = s.tf, s.v1
    grads = received_on_shards(s, grads)

    def body() -> tuple[Any, Any]:
        counted = None
        scaled = grads
        if scale is not None:
            with v1.device(PS), tf.control_dependencies(s.after_compute):
                counted = fetch_add(tf, s.global_step)
                factor = scale(counted)
            scaled = []
            for g, var in zip(grads, s.model_vars):
                with on_its_shard(v1, var):
                    scaled.append(None if g is None else g * tf.cast(factor, g.dtype))
        # The gradients are its inputs; on the PS (each variable's shard), its learning rate is no message per step.
        updates = []
        for g, var in zip(scaled, s.model_vars):
            with on_its_shard(v1, var):
                updates.append(s.opt.apply_gradients([(g, var)]))
        if s.count_on_ps0 is not None:
            # Each other shard's update would send ps:0 a message before the count, and under a shaped link it queues
            # behind that shard's pulls (measured: async --ps 4 at ps=20mbit, 20 against 24 steps/s). As in
            # TensorFlow's own PS training, the count does not wait for them; the worker's step does (_free_ops).
            s.all_updates = updates
            updates = [u for u, var in zip(updates, s.model_vars) if tf.DeviceSpec.from_string(var.device).task == 0]
        with v1.device(PS):
            with tf.control_dependencies([tf.group(*updates)]):
                g_after = fetch_add(tf, s.global_step) if counted is None else tf.identity(counted)
            # The claim follows the update: then nothing on the PS changes before the worker's gradient arrives,
            # and a step TensorFlow rejected as a duplicate request can be run again (ssptk.runtime.retry).
            with tf.control_dependencies([g_after]):
                claim = fetch_add(tf, s.claimed)
            if s.fence is None:
                return g_after, claim
            trained = s.fence.held()[HELD]
            with tf.control_dependencies([s.fence.record([claim - 1, trained, g_after])]):
                return tf.identity(g_after), tf.identity(claim)

    if s.fence is None:
        return body()
    with v1.device(PS):
        g_after, claim = s.fence.guarded(body)
    return g_after, claim


def _claim(s: GraphParts, after: Any = None) -> Any:
    """async/ssp: claim a minibatch (1-based), after ``after`` (the start token); with a fence, in the ledger."""
    with s.v1.device(PS), s.tf.control_dependencies([] if after is None else [after]):
        return fetch_add(s.tf, s.claimed) if s.fence is None else s.fence.claim(s.claimed)


def _rejoin(s: GraphParts) -> Any:
    """A restarted worker's first op (see :attr:`PSGraph.rejoin`)."""
    tf, v1 = s.tf, s.v1
    with v1.device(PS):
        if s.fence is not None:  # sync: the global step too, read under the lock
            return s.fence.take_over((lambda row: [s.global_step.read_value()]) if s.claimed is None else None)
        return fetch_add(tf, s.claimed) if s.claimed is not None else tf.constant(0, tf.int64)
