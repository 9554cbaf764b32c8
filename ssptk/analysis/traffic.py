"""What a run sent over its links (``traffic.json``, measured by the kernel's counters) as figures a table shows.

Every byte is measured, none assumed from the model's size: bytes are what crossed each task's link, IP
headers included (``docs/run-directory.md``). A link's *busy* share is the fuller of its two directions over the
run's training time, against the rate ``--network`` gave it; an unshaped link has no rate to be busy against. The
bytes of the start-up (initial values, the first pulls) are counted and its time is not, so a link kept full
reads a little over 100% (up to ~105% in short runs).

A worker's step is split into what was measured and what its bytes imply (each on its own, so they may overlap:
``step_ms``, ``compute_ms``, ``transfer_ms``, ``wait_ms``), and those into a partition of the step, each second
counted once (``split``: :mod:`ssptk.analysis.step_split`, the rule's one owner):

- **compute**: the workers' own CPU seconds per step (their processes' clocks from the ``start`` to the ``done``
  event: forward, backward and serialising the tensors), measured; only where each worker is its own process;
- **transfer**: in the parameter-server modes (sync, ssp, async) on CPU workers, *timed*: the mean of the step
  records' ``transfer_s``, the seconds some tensor of a step was on the wire, queueing included, from TensorFlow's
  step stats on every 10th step (:mod:`ssptk.runtime.step_trace`). Elsewhere (local SGD, allreduce, GPU workers)
  an *estimate*, the seconds a step's own bytes (pull and push, measured per minibatch) need at the rate of the
  narrowest shaped link they cross, as if that link carried nothing else: a floor (allreduce: the fuller direction
  of a worker's link, as its ring sends while it receives). Both only under ``--network``;
- **wait**: what the mode blocked (``wait_fraction``), measured.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from ssptk.analysis.step_split import split_of, unblocked_transfer
from ssptk.rundir import LinkTraffic, Summary, TaskBytes, TrafficSection

__all__ = ["link_capacity", "traffic_summary", "worker_cpu_s"]


def worker_cpu_s(events: pd.DataFrame) -> float | None:
    """CPU seconds the workers' own processes spent from their ``start`` to their ``done`` event, summed; ``None``
    where that is not measured (the shared layout's one process, a restarted worker's clock, a missing event)."""
    if events.empty or "cpu_s" not in events or "event" not in events or (events["event"] == "restart").any():
        return None
    marks = events[events["event"].isin(("start", "done"))].dropna(subset=["cpu_s"])
    by = marks.groupby(["worker", "event"])["cpu_s"].first().unstack()
    if by.empty or not {"start", "done"} <= set(by.columns) or by[["start", "done"]].isna().any().any():
        return None
    return max(0.0, float((by["done"] - by["start"]).sum()))


def traffic_summary(traffic: Mapping[str, Any], minibatches: int | None, wall_s: float | None,
                    workers: int | None = None, wait_fraction: float | None = None,
                    cpu_s: float | None = None, steps: pd.DataFrame | None = None) -> dict[str, Any]:
    """The summary's ``traffic`` section, or ``{}`` for a run that measured none.

    - ``mb_per_minibatch``: megabytes the workers sent and received per minibatch (pull + push);
    - ``ps_mb_per_minibatch``: megabytes through the PS tasks' links per minibatch (in + out, all shards);
    - ``link_busy``: each shaped link's busy share; ``busiest``: ``[task, share]`` of the fullest one;
    - ``tasks``: each task's ``sent`` and ``received`` bytes; ``rates``: each shaped link's bits per second;
    - with ``workers``: ``step_ms`` (a worker's mean step: ``workers`` x ``wall_s`` / minibatches), what was
      measured of it: ``transfer_ms`` (the step records' ``transfer_s`` in ``steps``, where any step has one: their
      mean, with ``transfer_timed_steps`` their count; else estimated; ``None`` without a shaped link on the way),
      ``compute_ms`` (``cpu_s``, the workers' CPU seconds, per minibatch), ``wait_ms``; and ``split``, those as a
      partition of the step (:func:`ssptk.analysis.step_split.split_of`).
    """
    traffic = LinkTraffic.of(traffic)
    if not traffic.tasks:
        return {}
    counts = {t: (int(TaskBytes.of(c).sent), int(TaskBytes.of(c).received)) for t, c in traffic.tasks.items()
              if isinstance(c, dict)}
    n = minibatches or 0

    def per_minibatch(role: str) -> float | None:
        total = sum(s + r for t, (s, r) in counts.items() if t.startswith(role))
        return total / n / 1e6 if n else None

    rates = traffic.rates
    busy = {t: max(s, r) * 8 / (float(rates[t]) * wall_s) for t, (s, r) in counts.items()
            if rates.get(t) and wall_s}
    busiest = max(busy.items(), key=lambda kv: kv[1]) if busy else None
    out: dict[str, Any] = {"network": traffic.network, "mb_per_minibatch": per_minibatch("worker:"),
           "ps_mb_per_minibatch": per_minibatch("ps:"),
           "link_busy": busy, "busiest": None if busiest is None else [busiest[0], busiest[1]],
           "tasks": {t: {"sent": s, "received": r} for t, (s, r) in counts.items()},
           "rates": {t: float(rates[t]) for t in counts if rates.get(t)}}
    if workers and n and wall_s:
        out.update(_step_parts(counts, rates, n, workers, wall_s, wait_fraction, cpu_s))
        timed = steps["transfer_s"].dropna() if steps is not None and "transfer_s" in steps else None
        if timed is not None and len(timed) and TrafficSection(out).transfer_ms is not None:
            out.update(transfer_ms=1000.0 * float(timed.mean()), transfer_timed_steps=int(len(timed)))
        out["split"] = split_of(TrafficSection(out), unblocked_transfer(steps))
    return {"traffic": out}


def _step_parts(counts: Mapping[str, tuple[int, int]], rates: Mapping[str, Any], n: int, workers: int,
                wall_s: float, wait_fraction: float | None, cpu_s: float | None) -> dict[str, float | None]:
    """``step_ms``, ``transfer_ms``, ``compute_ms``, ``wait_ms`` (see :func:`traffic_summary`)."""
    n_workers = sum(t.startswith("worker:") for t in counts) or workers
    # a PS step's pull and push follow one another (sent + received); allreduce's ring sends while it receives
    ring = not any(t.startswith("ps:") for t in counts)
    seconds: list[float] = []  # per shaped link the step crosses: its bytes of one step at the link's rate
    for task, (sent, received) in counts.items():
        rate = rates.get(task)
        if not rate:
            continue
        # a PS shard carries its part of every minibatch; a worker's link carries its own steps' bytes
        steps = n if task.startswith("ps:") else n / n_workers
        seconds.append((max(sent, received) if ring else sent + received) * 8 / float(rate) / steps)
    step_s = workers * wall_s / n
    return {"step_ms": 1000.0 * step_s, "transfer_ms": 1000.0 * max(seconds) if seconds else None,
            "compute_ms": None if cpu_s is None else 1000.0 * cpu_s / n,
            "wait_ms": None if wait_fraction is None else 1000.0 * wait_fraction * step_s}


def link_capacity(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """How close a run came to each shaped link's capacity, fullest first, from its summary: per link ``task``,
    ``rate`` (bits/s), ``mb_per_minibatch`` (its fuller direction), ``limit_steps_per_s`` (the most minibatches a
    second that direction can carry: rate / 8 / bytes per minibatch, the physical limit) and ``share``
    (``steps_per_s`` over that limit: 1.0 is a link full the whole run). ``[]`` without a shaped link."""
    summary = Summary.of(summary)
    traffic, n, speed = summary.traffic, summary.total_steps, summary.steps_per_s
    if traffic is None or not n or not speed:
        return []
    tasks = traffic.tasks
    rows = []
    for task, rate in traffic.rates.items():
        counts = tasks.get(task)
        if not rate or not isinstance(counts, Mapping):
            continue
        per_minibatch = max(TaskBytes.of(counts).sent, TaskBytes.of(counts).received) / n
        if per_minibatch <= 0:
            continue
        limit = float(rate) / 8 / per_minibatch
        rows.append({"task": task, "rate": float(rate), "mb_per_minibatch": per_minibatch / 1e6,
                     "limit_steps_per_s": limit, "share": float(speed) / limit})
    return sorted(rows, key=lambda r: -r["share"])
