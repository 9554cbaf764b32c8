"""What a run sent over its links (``traffic.json``, measured by the kernel's counters) as figures a table shows.

Every figure is measured, none assumed from the model's size: bytes are what crossed each task's link, IP
headers included (``docs/run-directory.md``). A link's *busy* share is the fuller of its two directions over the
run's training time, against the rate ``--network`` gave it; an unshaped link has no rate to be busy against. The
bytes of the start-up (initial values, the first pulls) are counted and its time is not, so a link kept full
reads a little over 100% (up to ~105% in short runs).
"""
from __future__ import annotations

from typing import Any

__all__ = ["traffic_summary"]


def traffic_summary(traffic: dict[str, Any], minibatches: int | None, wall_s: float | None) -> dict[str, Any]:
    """The summary's ``traffic`` section, or ``{}`` for a run that measured none.

    - ``mb_per_minibatch``: megabytes the workers sent and received per minibatch (pull + push);
    - ``ps_mb_per_minibatch``: megabytes through the PS tasks' links per minibatch (in + out, all shards);
    - ``link_busy``: each shaped link's busy share; ``busiest``: ``[task, share]`` of the fullest one;
    - ``tasks``: each task's ``sent`` and ``received`` bytes.
    """
    tasks = traffic.get("tasks") if isinstance(traffic, dict) else None
    if not isinstance(tasks, dict) or not tasks:
        return {}
    counts = {t: (int(c.get("sent", 0)), int(c.get("received", 0))) for t, c in tasks.items() if isinstance(c, dict)}
    n = minibatches or 0

    def per_minibatch(role: str) -> float | None:
        total = sum(s + r for t, (s, r) in counts.items() if t.startswith(role))
        return total / n / 1e6 if n else None

    rates = traffic.get("rates") or {}
    busy = {t: max(s, r) * 8 / (float(rates[t]) * wall_s) for t, (s, r) in counts.items()
            if rates.get(t) and wall_s}
    busiest = max(busy.items(), key=lambda kv: kv[1]) if busy else None
    return {"traffic": {"network": traffic.get("network"), "mb_per_minibatch": per_minibatch("worker:"),
                        "ps_mb_per_minibatch": per_minibatch("ps:"),
                        "link_busy": busy, "busiest": None if busiest is None else [busiest[0], busiest[1]],
                        "tasks": {t: {"sent": s, "received": r} for t, (s, r) in counts.items()}}}
