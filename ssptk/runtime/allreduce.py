"""``allreduce`` mode: synchronous data-parallel SGD with ``tf.distribute.MultiWorkerMirroredStrategy``.

Each worker is a process configured by ``TF_CONFIG``. A step computes the local gradient, sleeps the
injected delay, then all-reduces the gradient and applies the mean with ``--optimizer`` (its slots mirrored on every
worker, each applying the same update to the same values): the collective is where workers
wait for each other, so the time spent in it is the step's ``wait_s``. (Keras' ``model.fit`` over a
distributed dataset fails under Keras 3 in TF 2.21, so this is a custom loop.)
"""
from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ssptk.core.delays import DelayModel
from ssptk.core.errors import check_loss
from ssptk.core.models import ModelSpec, data_source, eval_batch
from ssptk.core.optimizers import learning_rate
from ssptk.core.options import RunOptions
from ssptk.core.records import StepRecord
from ssptk.rundir import RunDir
from ssptk.runtime.checkpoint import save_whole
from ssptk.runtime.ps_loop import variable_names
from ssptk.runtime.reaper import on_sigterm
from ssptk.runtime.recorder import Recorder
from ssptk.runtime.tf_optimizers import eager_slots, eager_update


def tf_config(cluster: dict[str, list[str]], index: int) -> str:
    """The ``TF_CONFIG`` of worker ``index`` (allreduce uses the workers only, no PS)."""
    return json.dumps({"cluster": {"worker": cluster["worker"]}, "task": {"type": "worker", "index": index}})


def _barrier_fn() -> Any:
    import tensorflow as tf

    return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, tf.constant(1.0))


def _apply_fn(tf: Any, optimizer: str, variables: list[Any], slots: list[list[Any]], lr: float, n: int) -> Any:
    """A replica's update: all-reduce the gradients, apply their mean with ``optimizer`` (sgd: ``w -= lr * mean``)."""

    def apply_fn(grads: Any) -> Any:
        ctx = tf.distribute.get_replica_context()
        # identity places the arguments on this replica's device; all_reduce of a bare function
        # argument fails with "destinations can not be empty".
        summed = ctx.all_reduce(tf.distribute.ReduceOp.SUM, [tf.identity(g) for g in grads])
        for var, g, mine in zip(variables, summed, slots):
            if optimizer == "sgd":
                var.assign_sub(lr * (g / n))
            else:
                eager_update(tf, optimizer, var, mine, g / n, lr)
        return tf.constant(0)

    return apply_fn


@dataclass
class _Replica:
    """One worker's replica of the model under the strategy: its step's two halves (``compute``: the loss and local
    gradients; ``apply``: all-reduce them and apply the mean), a ``barrier`` collective and the held-out loss."""

    variables: list[Any]
    slots: list[list[Any]]  # --optimizer's, one list per variable (none for sgd)
    compute: Callable[[Any, Any], Any]
    apply: Callable[[Any], Any]
    barrier: Callable[[], Any]
    held_out: Callable[[], tuple[float, float | None]]


def _replica(spec: ModelSpec, opts: RunOptions, strategy: Any, n: int, x0: Any) -> _Replica:
    """The model built under ``strategy`` (its first minibatch ``x0`` builds a Keras model's variables) and its
    step's functions; the update applies ``lr`` to the mean of the N gradients."""
    import tensorflow as tf

    lr = opts.update_lr(learning_rate(opts.lr, spec, opts.optimizer))  # applied to the mean of the N gradients
    with strategy.scope():
        module = spec.build()
        if not module.trainable_variables:
            module(x0)
        variables = list(module.trainable_variables)
        slots = eager_slots(tf, opts.optimizer, variables)  # --optimizer's state, mirrored on every worker

    def compute_fn(x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            loss = spec.loss(y, module(x))
        return loss, tape.gradient(loss, variables)

    xe, ye = eval_batch(spec, opts.seed)

    def held_out() -> tuple[float, float | None]:
        predictions = module(xe)
        return float(spec.loss(ye, predictions)), (None if spec.accuracy is None else
                                                    float(spec.accuracy(ye, predictions)))

    apply_fn = _apply_fn(tf, opts.optimizer, variables, slots, lr, n)
    return _Replica(variables, slots, tf.function(lambda x, y: strategy.run(compute_fn, args=(x, y))),
                    tf.function(lambda grads: strategy.run(apply_fn, args=(grads,))),
                    tf.function(lambda: strategy.run(_barrier_fn)), held_out)


def _train(replica: _Replica, opts: RunOptions, index: int, n: int, data: Any, rec: Recorder,
           delays: DelayModel) -> None:
    """Worker ``index``'s ``opts.steps`` steps, each recorded; worker 0 evaluates every ``--eval-every``."""
    for step in range(1, opts.steps + 1):
        mb = (step - 1) * n + index
        x, y = data(mb)
        loss, grads = replica.compute(x, y)
        loss = float(loss)
        delay = delays.next()
        if delay > 0:
            time.sleep(delay)
        t0 = time.perf_counter()
        replica.apply(grads)
        wait = time.perf_counter() - t0
        rec.step(StepRecord(t=time.time(), worker=index, step=step, global_step=step, loss=loss, wait_s=wait,
                            staleness=0, minibatch=mb, delay_s=delay))
        check_loss(loss, opts.allow_nan, step, index, step)
        if index == 0 and opts.eval_every and step % opts.eval_every == 0:
            t0 = time.perf_counter()
            eval_loss, accuracy = replica.held_out()
            rec.event("eval", global_step=step, eval_loss=eval_loss, eval_accuracy=accuracy,
                      eval_s=round(time.perf_counter() - t0, 6))


def _save(replica: _Replica, rd: RunDir) -> None:
    """Worker 0's end: the checkpoint and ``model/final.json``."""
    import tensorflow as tf

    os.makedirs(rd.model_dir, exist_ok=True)
    eval_loss, accuracy = replica.held_out()
    variables = replica.variables
    saved = variables + [v for mine in replica.slots for v in mine]  # the model, and its optimizer's slots
    ckpt = tf.train.Checkpoint(**{v.name.split(":")[0].replace("/", "."): v for v in saved})
    save_whole(rd, lambda: ckpt.write(rd.checkpoint_prefix))
    rd.write_final(eval_loss, variable_names(variables), [v.numpy() for v in variables], accuracy)


def train_worker(spec: ModelSpec, opts: RunOptions, cluster: dict[str, list[str]], index: int, run_dir: str) -> None:
    """Train worker ``index`` for exactly ``opts.steps`` steps in lock-step with its peers."""
    os.environ["TF_CONFIG"] = tf_config(cluster, index)
    import tensorflow as tf

    for gpu in tf.config.list_physical_devices("GPU"):  # before the strategy touches the devices
        tf.config.experimental.set_memory_growth(gpu, True)
    tf.random.set_seed(opts.seed)
    n = len(cluster["worker"])
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    data = data_source(spec, opts.seed, opts.batch, opts.data_split, index, n)
    replica = _replica(spec, opts, strategy, n, data(0)[0])
    rd = RunDir(run_dir)
    delays = DelayModel(index, opts.stragglers, opts.jitter_spec, opts.seed)
    rec = Recorder(rd.worker_log(index), index, not opts.no_log, on_step=delays.observe)
    on_sigterm(lambda: rec.event("stopped", signal="SIGTERM"))
    replica.barrier()  # first collective: every worker is connected before step 1
    rec.event("start", cpu_s=time.process_time())
    _train(replica, opts, index, n, data, rec, delays)
    rec.event("done", steps=opts.steps, cpu_s=time.process_time())
    replica.barrier()  # nobody leaves while a peer still needs it for a collective
    if index != 0:
        # A collective's receivers pull their chunks from the senders (RecvBuf RPCs): a worker whose
        # last all-reduce has finished may still be serving a peer's pull, and exiting at once fails
        # that peer with "Collective ops is aborted by: Socket closed". A second to let them finish.
        time.sleep(1.0)
    if index == 0:
        _save(replica, rd)
    rec.close()
