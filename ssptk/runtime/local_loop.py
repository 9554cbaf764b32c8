"""The training loop of local SGD (``--mode local:H``), run by each worker task.

A worker takes H local steps per round on its private copy (one run each, on the worker alone), the round's last
one pushing its delta and waiting for the round's average in the same run (:mod:`ssptk.runtime.local_graph`). The
budget is sync's: ``--steps K`` local steps per worker, in ceil(K/H) rounds, the last one shorter when H does not
divide K; minibatch ``s * N + i`` for worker ``i``'s ``s``-th local step, as sync's step ``s``. A worker whose delta
came too late for its round (``--backup``) has it dropped and goes on from the newest average, skipping the rounds
the others finished meanwhile, as a late sync worker skips steps.

Step records: ``global_step`` is the round the step's delta joins (1-based: the global step once that round is
applied), ``local_step`` the local steps since the last average (0..H-1), ``staleness`` the rounds the step's
delta missed (0; a dropped late delta's: the rounds applied since its own began, as a late sync gradient's),
``wait_s`` the wait for the average (the round's last step; 0 otherwise), ``applied`` False for a dropped late
delta, ``local_round`` the round as well (``global_step`` of a dropped delta is the PS's step when it arrived, as in
sync).

``--restart-failed``: a worker that died (not worker 0, which runs the aggregator) is started again and rejoins as a
sync worker does (:func:`ssptk.runtime.rejoin.rejoin_sync`, the push fenced on the PS): it takes its slot over,
drops the tokens its dead self left, and, when its dead self's delta is in the pending round, waits for that round.
Then it pulls the global values into its private copy and anchor and trains the round the run is at from its first
local step: the rounds before are in the global values, and that round cannot be applied without its delta (no
backup workers), so none is skipped. Its dead self's local steps of a round it did not push died with its private
copy: the ``restart`` event counts them (``lost_local_steps``), and names the round it joins (``local_round``; and
``global_step``, the rounds applied then); its step records go on counting from ``after_step``.
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np

from ssptk.core.errors import UsageError, check_loss
from ssptk.core.records import StepRecord
from ssptk.runtime import local_graph, ps_graph
from ssptk.runtime.ps_loop import Trainer
from ssptk.runtime.rejoin import lost_local_steps, rejoin_sync

__all__ = ["LocalTrainer", "trainer_for"]


class LocalTrainer(Trainer):
    """One worker's session and loop for ``--mode local:H``; everything else (start barrier, recorder, held-out
    evaluation of the PS's global values, the final model, the hang watch) is :class:`Trainer`'s."""

    def _build(self, cluster: dict[str, list[str]], container: str, with_delay: bool, gpu: int | None,
               incarnation: int | None) -> ps_graph.PSGraph:
        g, self.local = local_graph.build_local_graph(self.spec, self.opts, cluster, self.index, container, with_delay,
                                                      gpu, incarnation)
        return g

    def _train(self, rejoin: int) -> int:
        g = self.g
        local_fn = self._make_step([self.local.local_loss])
        round_fn = self._make_step([self.local.round_meta, self.local.local_loss], (g.local_step,))
        first = 0
        if rejoin:
            first = self._rejoin_round(rejoin)
        else:
            self._start(self.sess.make_callable(g.aggregate) if self.index == 0 else None)
        self._reaching(self.sess.run, [self.local.pull])  # from the global values (a restarted worker: round's start)
        steps = self._rounds(local_fn, round_fn, first)
        if self._aggregator is not None:
            self._aggregator.join()
        return steps

    def _minibatch(self, r: int, j: int) -> int:
        """The minibatch of local step ``j`` of round ``r`` (0-based): sync's ``s * N + i`` for local step ``s``."""
        return (r * (self.opts.local_steps or 1) + j) * self.n + self.index

    def _round_length(self, r: int) -> int:
        """Local steps in round ``r``: H, the last round fewer when H does not divide ``--steps``."""
        h = self.opts.local_steps or 1
        return min(h, self.opts.steps - r * h)

    def _rejoin_round(self, attempt: int) -> int:
        """A restarted worker takes its slot over (sync's rejoin, in rounds); returns the round it joins."""
        if not self.opts.restart_failed:
            raise UsageError("--rejoin needs --restart-failed (give every task the same run options)")
        log = self.run_dir.worker_log(self.index)
        back = self._reaching(lambda: rejoin_sync(self.sess, self.g, log, self.n, self.index, self.opts.backup,
                                                  lambda r: self._minibatch(r, self._round_length(r) - 1)), [])
        self.step_offset = back.after_step
        self.rec.event("restart", attempt=attempt, after_step=back.after_step, unlogged=back.unlogged,
                       global_step=back.first, local_round=back.first + 1,
                       lost_local_steps=lost_local_steps(log, back.pushed))
        return back.first

    def _rounds(self, local_fn: Any, round_fn: Any, first: int = 0) -> int:
        """Local steps from round ``first`` to the end of the budget; returns the steps this worker logged (counted
        on from :attr:`step_offset`)."""
        tf = self.tf
        total, r, step = local_graph.rounds(self.opts), first, self.step_offset
        while r < total:
            length = self._round_length(r)
            for j in range(length):
                mb = self._in_flight = self._minibatch(r, j)
                inputs, delay = self._inputs(mb)
                if j < length - 1:
                    (loss,) = self._watched(local_fn, inputs, delay)
                    step += 1
                    self.rec.step(StepRecord(t=time.time(), worker=self.index, step=step, global_step=r + 1,
                                             loss=loss, wait_s=0.0, staleness=0, minibatch=mb, delay_s=delay,
                                             local_round=r + 1, local_step=j))
                    check_loss(float(loss), self.opts.allow_nan, step, self.index, r)
                    continue
                try:
                    # waits for the round's slowest delta: allow for the longest delay of any worker's step
                    meta, loss = self._watched(round_fn, [*inputs, r], self.opts.max_delay)
                except tf.errors.OutOfRangeError:  # token queues closed: the run's last round is applied
                    return step
                step += 1
                r = self._end_round(meta, loss, r, step, mb, delay, j)
        return step

    def _end_round(self, meta: Any, loss: Any, r: int, step: int, mb: int, delay: float, j: int) -> int:
        """Log the round's last step from sync's meta; returns the round this worker goes on with."""
        g_at_push, token, g_now, backlog = (int(v) for v in meta[:4])
        pushed_at, applied_at = meta[4:6].view(np.float64)
        if backlog:  # late for some rounds (backup workers): skip to the newest
            token = int(self.sess.run(self.g.drain, {self.g.drain_n: backlog})[0][-1])
        applied = g_at_push == r
        self.rec.step(StepRecord(t=applied_at if applied else pushed_at, worker=self.index, step=step,
                                 global_step=r + 1 if applied else g_at_push, loss=loss,
                                 wait_s=max(0.0, applied_at - pushed_at) if applied else 0.0,
                                 staleness=0 if applied else g_at_push - r, minibatch=mb, delay_s=delay,
                                 applied=applied, local_round=r + 1, local_step=j))
        check_loss(float(loss), self.opts.allow_nan, step, self.index, token if applied else g_at_push)
        r = max(token, g_now)
        self._maybe_evaluate(r)
        return r


def trainer_for(mode: str) -> type[Trainer]:
    """The trainer class of a PS mode: :class:`LocalTrainer` for ``local``, else :class:`Trainer`."""
    return LocalTrainer if mode == "local" else Trainer
