"""A restarted worker rejoins the running training (``--restart-failed``), from what the PS says.

Its first run takes its slot over on the PS (:mod:`ssptk.runtime.fence`): from then on nothing of its dead
self can land, and the ledger tells what its dead self left:

- async and ssp: the minibatch it held claimed and never applied (trained first now, so none is lost
  whether it died killed, crashed or hung), and the last update it applied; if its log lacks that one (it
  died between the update and the record), the ``restart`` event names it as ``unlogged``;
- sync: the step its last gradient was pushed for; if that update is still pending, its gradient is in it,
  so the restarted worker waits for that update and starts after it; if its log lacks that minibatch, the
  ``restart`` event names it as ``unlogged`` (without backup workers, where every pushed gradient is applied);
- local SGD: as sync, with rounds for steps: the round its last delta was pushed for, and the minibatch of that
  round's last local step (the one whose run pushed it); the local steps its log holds of a round it did not push
  are lost with its private copy (:func:`lost_local_steps`).

A restarted worker can also find the PS unable to reach it for a moment (the PS's connection to its dead
self's port is still failing, ``UNAVAILABLE ... Connection refused``); :func:`unreached` tells such an error,
and the step is run again: nothing of it ran on the PS, whose every stateful op waits for its gradients.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ssptk.runtime.fence import HELD, LAST, LAST_GLOBAL_STEP

#: how many times a step the PS could not reach this worker for is run (half a second apart)
UNREACHED_ATTEMPTS = 20


@dataclass(frozen=True)
class Rejoined:
    """Where a restarted worker goes on: ``first`` (async/ssp: the 1-based claim of the minibatch it trains
    first; sync: the global step it starts from), the step count its log ends with (``after_step``, the
    unlogged step included), and ``unlogged``: the update its dead self made that its log lacks, if any."""

    first: int
    after_step: int
    unlogged: dict[str, int] | None
    pushed: int = -1  # sync and local SGD: the global step (round) its dead self's last gradient was pushed for


def rejoin_free(sess: Any, g: Any, log_path: str) -> Rejoined:
    """async/ssp: take the slot over, then train the minibatch the dead self held (claim one if it held none)."""
    row = [int(v) for v in sess.run(g.rejoin)]
    first = int(sess.run(g.claim)) if row[HELD] < 0 else row[HELD] + 1
    steps, last_mb = logged_tail(log_path)
    unlogged = None
    if row[LAST] >= 0 and row[LAST] != last_mb:
        unlogged = {"minibatch": row[LAST], "global_step": row[LAST_GLOBAL_STEP]}
    return Rejoined(first, steps + (unlogged is not None), unlogged)


def rejoin_sync(sess: Any, g: Any, log_path: str, n: int, index: int, backup: int,
                pushed_minibatch: Callable[[int], int] | None = None) -> Rejoined:
    """sync: take the slot over, drop the tokens of the updates the dead self did not wait for, and start from the
    PS's global step, or after it when the dead self's gradient is in its pending update. ``pushed_minibatch(s)``:
    the minibatch of the step whose run pushed for global step ``s`` (sync's ``s * n + index``; local SGD's: the
    round's last local step)."""
    row = [int(v) for v in sess.run(g.rejoin)]
    pushed, g_now = row[HELD], row[-1]
    newest = -1
    backlog = int(sess.run(g.backlog))
    if backlog:
        newest = int(sess.run(g.drain, {g.drain_n: backlog})[0][-1])
    steps, logged = logged_minibatches(log_path)
    unlogged = None
    if pushed >= 0 and pushed == g_now:
        while newest < g_now + 1:  # the update with its dead self's gradient in it
            newest = int(sess.run(g.drain, {g.drain_n: 1})[0][-1])
        g_now += 1
    # Without backup workers every pushed gradient is in its update; with them, one may have come too late.
    mb = pushed * n + index if pushed_minibatch is None else pushed_minibatch(pushed)
    if pushed >= 0 and not backup and mb not in logged:  # local SGD: local steps may follow it in the log
        unlogged = {"minibatch": mb, "global_step": pushed + 1}
    return Rejoined(max(g_now, newest), steps + (unlogged is not None), unlogged, pushed)


def logged_tail(path: str) -> tuple[int, int | None]:
    """The last ``step`` in a worker's log (0 if none), where a restarted worker goes on counting, and the
    minibatch of its last step record, or of the ``unlogged`` update an earlier restart named after it (``None``
    if none)."""
    last, minibatches = _read_log(path)
    return last, (minibatches[-1] if minibatches else None)


def logged_minibatches(path: str) -> tuple[int, set[int]]:
    """As :func:`logged_tail`, with every minibatch its log accounts for (step records, earlier ``unlogged``)."""
    last, minibatches = _read_log(path)
    return last, set(minibatches)


def _read_log(path: str) -> tuple[int, list[int]]:
    last, minibatches = 0, []
    try:
        with open(path, "rb") as f:
            for line in f:
                try:
                    r = json.loads(line)
                    if "step" in r:
                        last = max(last, int(r.get("step") or 0))
                        minibatches.append(int(r["minibatch"]))
                    elif r.get("event") == "restart":  # an earlier restart's count, and the update it named
                        last = max(last, int(r.get("after_step") or 0))
                        if isinstance(r.get("unlogged"), dict):
                            minibatches.append(int(r["unlogged"]["minibatch"]))
                except (ValueError, AttributeError, TypeError, KeyError):
                    continue
    except OSError:
        pass
    return last, minibatches


def lost_local_steps(path: str, pushed_round: int) -> int:
    """local SGD: the local steps a worker's log holds, since its last start, of rounds after ``pushed_round``
    (0-based; -1: none pushed): trained on its private copy, which died with it, and in no delta."""
    lost = 0
    try:
        with open(path, "rb") as f:
            for line in f:
                try:
                    r = json.loads(line)
                    if r.get("event") == "restart":
                        lost = 0
                    elif "step" in r and int(r.get("local_round") or 0) > pushed_round + 1:
                        lost += 1
                except (ValueError, AttributeError, TypeError):
                    continue
    except OSError:
        pass
    return lost


def unreached(error: BaseException, address: str) -> bool:
    """``error`` says the PS could not connect to this worker (``address``, ``host:port``)."""
    text = str(getattr(error, "message", None) or error)
    port = address.rpartition(":")[2]
    return "failed to connect" in text and f":{port}" in text
