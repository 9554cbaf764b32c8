"""The training loop of local SGD (``--mode local:H``), run by each worker task.

A worker takes H local steps per round on its private copy (one run each, on the worker alone), the round's last
one pushing its delta and waiting for the round's average in the same run (:mod:`ssptk.runtime.local_graph`). The
budget is sync's: ``--steps K`` local steps per worker, in ceil(K/H) rounds, the last one shorter when H does not
divide K; minibatch ``s * N + i`` for worker ``i``'s ``s``-th local step, as sync's step ``s``. A worker whose delta
came too late for its round (``--backup``) has it dropped and goes on from the newest average, skipping the rounds
the others finished meanwhile, as a late sync worker skips steps.

Step records: ``global_step`` is the round the step's delta joins (1-based: the global step once that round is
applied), ``staleness`` the local steps since the last average (0..H-1), ``wait_s`` the wait for the average (the
round's last step; 0 otherwise), ``applied`` False for a dropped late delta, ``local_round`` the round as well
(``global_step`` of a dropped delta is the PS's step when it arrived, as in sync).
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np

from ssptk.core.errors import UsageError, check_loss
from ssptk.core.records import StepRecord
from ssptk.runtime import local_graph, ps_graph
from ssptk.runtime.ps_loop import Trainer

__all__ = ["LocalTrainer", "trainer_for"]


class LocalTrainer(Trainer):
    """One worker's session and loop for ``--mode local:H``; everything else (start barrier, recorder, held-out
    evaluation of the PS's global values, the final model, the hang watch) is :class:`Trainer`'s."""

    def _build(self, cluster: dict[str, list[str]], container: str, with_delay: bool, gpu: int | None,
               incarnation: int | None) -> ps_graph.PSGraph:
        g, self.local = local_graph.build(self.spec, self.opts, cluster, self.index, container, with_delay, gpu)
        return g

    def _train(self, rejoin: int) -> int:
        if rejoin:
            raise UsageError("--mode local cannot rejoin a run: --restart-failed works with sync, ssp and async")
        g = self.g
        local_fn = self._make_step([self.local.local_loss])
        round_fn = self._make_step([self.local.round_meta, self.local.local_loss], (g.local_step,))
        self._start(self.sess.make_callable(g.aggregate) if self.index == 0 else None)
        self.sess.run(self.local.pull)  # every worker starts from the global values
        steps = self._rounds(local_fn, round_fn)
        if self._aggregator is not None:
            self._aggregator.join()
        return steps

    def _rounds(self, local_fn: Any, round_fn: Any) -> int:
        """Local steps to the end of the budget; returns the steps this worker logged."""
        k, h, n, tf = self.opts.steps, self.opts.local_steps or 1, self.n, self.tf
        total, r, step = local_graph.rounds(self.opts), 0, 0
        while r < total:
            length = min(h, k - r * h)
            for j in range(length):
                mb = self._in_flight = (r * h + j) * n + self.index
                inputs, delay = self._inputs(mb)
                if j < length - 1:
                    (loss,) = self._watched(local_fn, inputs, delay)
                    step += 1
                    self.rec.step(StepRecord(t=time.time(), worker=self.index, step=step, global_step=r + 1,
                                             loss=loss, wait_s=0.0, staleness=j, minibatch=mb, delay_s=delay,
                                             local_round=r + 1))
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
                                 wait_s=max(0.0, applied_at - pushed_at) if applied else 0.0, staleness=j,
                                 minibatch=mb, delay_s=delay, applied=applied, local_round=r + 1))
        check_loss(float(loss), self.opts.allow_nan, step, self.index, token if applied else g_at_push)
        r = max(token, g_now)
        self._maybe_evaluate(r)
        return r


def trainer_for(mode: str) -> type[Trainer]:
    """The trainer class of a PS mode: :class:`LocalTrainer` for ``local``, else :class:`Trainer`."""
    return LocalTrainer if mode == "local" else Trainer
