"""The training loops of the parameter-server modes, run by each worker task.

- ``async``: every step's update is applied as soon as it is computed.
- ``ssp``: after each step the worker knows every worker's clock (read in the same run as its own
  tick, so no extra round trip). Only when it is more than ``bound`` S steps ahead does it block,
  in one run: it registers the clock it needs in ``want[i]``, re-reads the clocks (so a wake-up cannot
  be lost) and blocks on its own wake queue. Whichever worker's step run ticks the clock that satisfies
  it enqueues the token, inside that same run.
- ``sync``: each worker pushes its gradient to conditional accumulators and blocks on its own token
  queue; the chief's aggregator thread applies the mean of the first N-B gradients of the step and
  puts exactly one token in every worker's queue, so no worker can take two tokens in one step.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from typing import Any

import numpy as np

from ssptk.core.delays import DelayModel
from ssptk.core.errors import DiskFull, UsageError, check_loss
from ssptk.core.models import ModelSpec, data_source, eval_batch
from ssptk.core.options import RunOptions
from ssptk.core.records import StepRecord
from ssptk.rundir import RunDir
from ssptk.runtime import ps_graph
from ssptk.runtime.checkpoint import save_whole
from ssptk.runtime.reaper import exit_with_descendants, on_sigterm
from ssptk.runtime.recorder import Recorder
from ssptk.runtime.rejoin import UNREACHED_ATTEMPTS, Rejoined, rejoin_free, rejoin_sync, unreached
from ssptk.runtime.retry import HangWatch, RetryingSession
from ssptk.runtime.step_trace import TracedStep

# A lost wake-up cannot happen by construction; this bound only turns a bug into a logged re-check
# instead of a hang.
SAFETY_TIMEOUT_MS = 20_000


class Trainer:
    """One worker's session and loop for ``sync``, ``ssp`` or ``async``."""

    def __init__(self, spec: ModelSpec, opts: RunOptions, cluster: dict[str, list[str]], index: int,
                 target: str, run_dir: str, container: str, gpu: int | None = None, incarnation: int = 0) -> None:
        import tensorflow as tf

        self.tf = tf
        self.spec, self.opts, self.index = spec, opts, index
        self.target, self.container = target, container
        self.n = len(cluster["worker"])
        self.run_dir = RunDir(run_dir)
        self.delays = DelayModel(index, opts.stragglers, opts.jitter_spec, opts.seed)
        with_delay = self.delays.fixed > 0 or opts.jitter_spec is not None
        self.g = self._build(cluster, container, with_delay, gpu, incarnation if opts.restart_failed else None)
        self.traces = opts.network is not None and gpu is None  # time a sample of steps' transfers (step_trace)
        self.address = cluster["worker"][index]
        config = tf.compat.v1.ConfigProto(device_filters=["/job:ps", f"/job:worker/task:{index}"])
        config.gpu_options.allow_growth = True
        config.allow_soft_placement = True  # a worker's GPU that its process cannot see: its ops go to the CPU
        # every run is re-run if TensorFlow rejects it as a duplicate request (ssptk.runtime.retry)
        self.sess = RetryingSession(tf.compat.v1.Session(target, graph=self.g.graph, config=config), tf.errors)
        # a replayed trace (--jitter trace:PATH) is paced by this worker's own step times
        self.rec = Recorder(self.run_dir.worker_log(index), index, not opts.no_log, on_step=self.delays.observe)
        on_sigterm(lambda: self.rec.event("stopped", signal="SIGTERM"))  # scancel told apart from a crash
        self.data = data_source(spec, opts.seed, opts.batch, opts.data_split, index, self.n)
        self.evaluated = 0  # the global step of worker 0's last held-out evaluation (--eval-every)
        self.safety_timeouts = 0
        self.step_offset = 0  # steps this worker logged before it was restarted
        stall = opts.stall_timeout
        self.hung_after_s = max(5.0, stall / 2) if stall else 60.0  # a step run this long has hung
        self._hang_watch: HangWatch | None = None
        self._in_flight = -1  # the minibatch of the step run in flight
        self._aggregator: threading.Thread | None = None
        #: ends this worker after a fatal error it logged itself (a hung step, the aggregator's failure): its
        #: process (a thread of the shared layout: the whole shared process, naming this worker)
        self.exit: Any = exit_with_descendants
        #: the process runs this worker alone, so its CPU time is this worker's (the shared layout: the events
        #: carry the whole process's CPU time as ``process_cpu_s`` instead of ``cpu_s``)
        self.own_process = True

    def _build(self, cluster: dict[str, list[str]], container: str, with_delay: bool, gpu: int | None,
               incarnation: int | None) -> ps_graph.PSGraph:
        """This worker's graph (a subclass for another mode builds its own)."""
        return ps_graph.build(self.spec, self.opts, cluster, self.index, container, with_delay=with_delay, gpu=gpu,
                              incarnation=incarnation)

    # -- shared pieces -------------------------------------------------------------------------
    def _make_step(self, fetches: list[Any], extra_feeds: tuple[Any, ...] = (), traced: bool = False) -> Any:
        """A callable for one step's run. Making it registers the graph partitions on the PS now, so a
        worker's first step is not slower than the others' (and each call costs less than a feed_dict).
        ``traced``: under ``--network``, on a CPU worker, a sample of its calls time their transfers
        (:class:`~ssptk.runtime.step_trace.TracedStep`)."""
        g = self.g
        feeds = [g.x, g.y] + ([g.delay] if g.delay is not None else []) + list(extra_feeds)
        fast = self.sess.make_callable(fetches, feed_list=feeds)
        if not (traced and self.traces):
            return fast
        return TracedStep(fast, self.sess.make_callable(fetches, feed_list=feeds, accept_options=True), self.tf,
                          self.index)

    def _inputs(self, mb: int) -> tuple[list[Any], float]:
        """Minibatch ``mb`` and this step's injected delay, in the order of :meth:`_make_step`'s feeds."""
        x, y = self.data(mb)
        delay = self.delays.next()
        return ([x, y, delay] if self.g.delay is not None else [x, y]), delay

    def _start(self, aggregate: Any = None) -> int:
        """Start barrier: the chief initialises, waits for every worker, then releases all at once.

        ``aggregate`` (sync): the chief's aggregator, started before the release so that it already
        waits in ``take_grad`` when the first gradients arrive (``take_grad`` averages everything
        accumulated, so a late start would let more than N-B gradients into the first update).
        """
        g, s = self.g, self.sess
        self.rec.event("barrier")  # the graph is built: the launcher can tell who holds the start up
        if self.index == 0:
            s.run(g.init)
            if aggregate is not None:
                self._aggregator = threading.Thread(target=self._aggregate, args=(aggregate,),
                                                    name="sync-aggregator", daemon=True)
                self._aggregator.start()
            if self.n > 1:
                s.run(g.arrivals)
            s.run(g.release)
        else:
            s.run(g.arrive)
        first = int(s.run(g.go))
        self.rec.event("start", **self._cpu())
        return first

    def _cpu(self) -> dict[str, float]:
        return {"cpu_s" if self.own_process else "process_cpu_s": time.process_time()}

    def run(self, reset_container: bool = False, rejoin: int = 0) -> None:
        """Train to the end of the work budget. ``reset_container``: the chief clears the run's
        state from the PS afterwards (a warm cluster serves the next run on the same servers).
        ``rejoin``: this worker died and was started again (the ``rejoin``-th time): it skips the
        initialisation and the start barrier and goes on from the parameters and counters on the PS."""
        steps = self._train(rejoin)
        if self._hang_watch is not None:
            self._hang_watch.close()
        self.rec.event("done", steps=steps, safety_timeouts=self.safety_timeouts, **self._cpu(),
                       record_cpu_s=round(self.rec.cpu_s, 6), duplicate_reruns=self.sess.retries)
        if self.index == 0:
            if self.n > 1:
                self.sess.run(self.g.dones)
            self._finalize()
            self.sess.run(self.g.run_over)  # a PS that no launcher stops exits now
        else:
            self.sess.run(self.g.done)
        self.sess.close()
        if reset_container and self.index == 0:
            self.tf.compat.v1.Session.reset(self.target, [self.container])
        self.rec.close()

    def _train(self, rejoin: int) -> int:
        """Start (or rejoin) and train to the end of the budget; returns the steps this worker logged."""
        g, sync = self.g, self.opts.mode == "sync"
        if sync:
            steps_fn = [self._make_step([g.sync_meta, g.loss], (g.local_step,), traced=True)]
        else:
            steps_fn = [self._make_step([g.step_meta, g.loss], traced=True)]
            if self.opts.mode == "ssp":
                steps_fn.append(self._make_step([g.step_meta, g.loss, g.clear_want]))
        aggregate = self.sess.make_callable(g.aggregate) if sync and self.index == 0 else None
        if rejoin:
            first = self._rejoin(rejoin).first
        else:
            first = self._start(aggregate)
        return (self._sync_loop(first if rejoin else 0, *steps_fn) if sync
                else self._ps_loop(first, steps_fn[0], steps_fn[1] if len(steps_fn) > 1 else None,
                                   rejoined=bool(rejoin)))

    def _held_out(self) -> tuple[float, float | None]:
        """The held-out loss (and accuracy) of the parameters on the PS now."""
        x, y = eval_batch(self.spec, self.opts.seed)
        fetches = [self.g.loss] + ([self.g.accuracy] if self.g.accuracy is not None else [])
        measured = self.sess.run(fetches, {self.g.x: x, self.g.y: y})
        return float(measured[0]), (float(measured[1]) if len(measured) > 1 else None)

    def _maybe_evaluate(self, global_step: int) -> None:
        """Worker 0, with ``--eval-every K``: an ``eval`` event each time the global step passes a multiple of K
        (:attr:`~ssptk.core.options.RunOptions.eval_period`; its own extra run, between two of its steps; the time it
        takes is logged as ``eval_s``)."""
        every = self.opts.eval_period
        if not every or self.index != 0 or global_step // every <= self.evaluated // every:
            return
        t0 = time.perf_counter()
        loss, accuracy = self._held_out()
        self.evaluated = global_step
        self.rec.event("eval", global_step=global_step, eval_loss=loss, eval_accuracy=accuracy,
                       eval_s=round(time.perf_counter() - t0, 6))

    def _finalize(self) -> None:
        """Chief, after every worker is done: evaluate the final model and save it."""
        os.makedirs(self.run_dir.model_dir, exist_ok=True)
        eval_loss, accuracy = self._held_out()
        values = self.sess.run(self.g.model_vars)
        with self.g.graph.as_default():  # complete or absent; a full disk said in one line
            save_whole(self.run_dir, lambda: self.sess.call(self.g.saver.save, self.sess.session,
                                                            self.run_dir.checkpoint_prefix, write_meta_graph=False))
        self.run_dir.write_final(float(eval_loss), variable_names(self.g.model_vars), values, accuracy)

    def _rejoin(self, attempt: int) -> Rejoined:
        """A restarted worker takes its place over from its dead self, from what the PS says (ssptk.runtime.rejoin)."""
        if not self.opts.restart_failed:
            raise UsageError("--rejoin needs --restart-failed (give every task the same run options)")
        log = self.run_dir.worker_log(self.index)
        opts = self.opts
        back = self._reaching((lambda: rejoin_sync(self.sess, self.g, log, self.n, self.index, opts.backup))
                              if opts.mode == "sync" else (lambda: rejoin_free(self.sess, self.g, log)), [])
        self.step_offset = back.after_step
        where: dict[str, Any] = {"global_step": back.first} if opts.mode == "sync" else {"minibatch": back.first - 1}
        if self.g.slots:  # --optimizer's state, as the PS kept it through the death: not zeros again
            kept = self.sess.run(list(self.g.slots))
            where["optimizer_slots_norm"] = float(np.sqrt(sum(np.sum(np.square(v)) for v in kept)))
        self.rec.event("restart", attempt=attempt, after_step=back.after_step, unlogged=back.unlogged, **where)
        return back

    # -- async and ssp -------------------------------------------------------------------------
    def _ps_loop(self, claim: int, step_fn: Any, step_clear_fn: Any = None, rejoined: bool = False) -> int:
        """async/ssp: ``step_fn`` runs one step; ``step_clear_fn`` also clears this worker's SSP want."""
        g, s = self.g, self.sess
        budget = self.n * self.opts.steps
        ssp = self.opts.mode == "ssp"
        # A restarted worker goes on counting its steps, and first clears the SSP want it may have
        # registered before it died.
        step, wait_s, clear, n = self.step_offset, 0.0, ssp and rejoined, self.n
        bound = self.opts.bound or 0
        while claim <= budget:
            mb = self._in_flight = claim - 1
            inputs, delay = self._inputs(mb)
            meta, loss = self._watched(step_clear_fn if clear else step_fn, inputs, delay)[:2]
            step += 1
            g_after, claim, g_read = int(meta[0]), int(meta[1]), int(meta[2])
            t, t_read = (float(v) for v in meta[3:5].view(np.float64))
            tail = float(meta[-1:].view(np.float64)[0])  # --lr-staleness inverse: lr_scale; dc: dc_correction
            lr_scale = tail if self.opts.lr_staleness == "inverse" else None
            dc = tail if self.opts.delay_comp is not None else None
            self.rec.step(StepRecord(t=t, worker=self.index, step=step, global_step=g_after, loss=loss, wait_s=wait_s,
                                     staleness=g_after - g_read - 1, minibatch=mb, delay_s=delay, lr_scale=lr_scale,
                                     dc_correction=dc, transfer_s=getattr(step_fn, "transfer_s", None),
                                     read_s=max(0.0, t - t_read)))
            check_loss(float(loss), self.opts.allow_nan, step, self.index, g_after)
            self._maybe_evaluate(g_after)
            wait_s, clear = 0.0, False
            # The step's own run woke the peers its tick satisfied; this worker blocks only when it is
            # more than `bound` steps ahead of the slowest.
            if ssp and claim <= budget:
                clocks = meta[5:5 + n]
                if clocks[self.index] - clocks.min() > bound:
                    wait_s = self._ssp_wait(int(clocks[self.index]) - bound)
        if ssp:
            s.run(g.finish)
        return step

    def _watched(self, step_fn: Any, inputs: list[Any], delay: float) -> Any:
        """One step run, watched for a hang inside TensorFlow (:class:`~ssptk.runtime.retry.HangWatch`)."""
        if self._hang_watch is None:  # from the second step on: the first may build and compile for long
            out = self._reaching(step_fn, inputs)
            self._hang_watch = HangWatch(self.hung_after_s, self._hung)
            return out
        self._hang_watch.begin(delay)
        try:
            return self._reaching(step_fn, inputs)
        finally:  # also when it raises: sync's last step ends with OutOfRangeError, then the aggregator is joined
            self._hang_watch.end()

    def _reaching(self, step_fn: Any, inputs: list[Any]) -> Any:
        """``step_fn(*inputs)``, run again while a connection to this worker's port fails (a restarted worker, while
        the PS's connection to its dead self's port still fails): nothing of such a run happened on the PS."""
        for attempt in range(UNREACHED_ATTEMPTS):
            try:
                return step_fn(*inputs)
            except self.tf.errors.OpError as e:
                if attempt == UNREACHED_ATTEMPTS - 1 or not unreached(e, self.address):
                    raise
                print(f"ssptk: ran a step again: the PS could not reach this worker ({self.address}) yet",
                      file=sys.stderr, flush=True)
                time.sleep(0.5)
        raise AssertionError("unreachable")

    def _hung(self, seconds: float) -> None:
        """A step run has hung: end this worker (the launcher names it; ``--restart-failed`` restarts it)."""
        msg = (f"a step of worker {self.index} hung in TensorFlow for {seconds:.0f} s (TensorFlow can lose the "
               "cancellation of a step it refused as a duplicate): --restart-failed N starts the worker again; "
               f"a model this slow needs --stall-timeout above {2 * seconds:.0f}")
        with contextlib.suppress(OSError, DiskFull):  # not an `error`: the launcher may restart this worker
            self.rec.event("hung", message=msg, minibatch=self._in_flight)
        print(f"ssptk worker: error: {msg}", file=sys.stderr, flush=True)
        self.exit(1)

    def _ssp_wait(self, need: int) -> float:
        """Block until every worker's clock is >= ``need``; returns the seconds spent."""
        g, s = self.g, self.sess
        t0 = time.perf_counter()
        opts = self.tf.compat.v1.RunOptions(timeout_in_ms=SAFETY_TIMEOUT_MS)
        while True:
            try:
                # a token left from an earlier wake-up can return early: then wait again
                if s.run(g.wait_for, {g.want_value: need}, options=opts).min() >= need:
                    break
            except self.tf.errors.DeadlineExceededError:
                self.safety_timeouts += 1
        return time.perf_counter() - t0

    # -- sync ----------------------------------------------------------------------------------
    def _sync_loop(self, local: int, step_fn: Any) -> int:
        """sync from global step ``local`` (0, or the PS's step for a restarted worker)."""
        g, s, tf = self.g, self.sess, self.tf
        k = self.opts.steps
        step = self.step_offset
        while local < k:
            mb = self._in_flight = local * self.n + self.index
            inputs, delay = self._inputs(mb)
            try:
                # a sync step waits for the slowest worker: allow for the longest delay of any worker's step
                meta, loss = self._watched(step_fn, [*inputs, local], self.opts.max_delay)
            except tf.errors.OutOfRangeError:  # token queues closed: the run's last update is done
                break
            step += 1
            g_at_push, token, g_now, backlog = (int(v) for v in meta[:4])
            pushed_at, applied_at = meta[4:6].view(np.float64)
            if backlog:  # late for some steps (backup workers): skip to the newest
                token = int(s.run(g.drain, {g.drain_n: backlog})[0][-1])
            applied = g_at_push == local
            if applied:
                self.rec.step(StepRecord(t=applied_at, worker=self.index, step=step, global_step=token, loss=loss,
                                         wait_s=max(0.0, applied_at - pushed_at), staleness=0, minibatch=mb,
                                         delay_s=delay, transfer_s=getattr(step_fn, "transfer_s", None)))
            else:  # a late backup gradient, dropped
                self.rec.step(StepRecord(t=pushed_at, worker=self.index, step=step, global_step=g_at_push, loss=loss,
                                         wait_s=0.0, staleness=g_at_push - local, minibatch=mb, delay_s=delay,
                                         applied=False, transfer_s=getattr(step_fn, "transfer_s", None)))
            check_loss(float(loss), self.opts.allow_nan, step, self.index, token if applied else g_at_push)
            local = max(token, g_now)
            self._maybe_evaluate(local)
        if self._aggregator is not None:
            self._aggregator.join()
        return step

    def _aggregate(self, aggregate: Any) -> None:
        """Chief's aggregator: one update per step from the first N-B gradients, then one token per worker."""
        try:
            aggregate()
            self.sess.run(self.g.close_tokens)
        except Exception as e:  # noqa: BLE001 - reported through the log; the launcher ends the run
            self.rec.event("error", message=f"sync aggregator: {type(e).__name__}: {e}")
            self.exit(1)


def variable_names(variables: list[Any]) -> list[str]:
    """TensorFlow variables' names without the output index (``dense/kernel:0`` -> ``dense/kernel``)."""
    return [v.name.split(":")[0] for v in variables]
