"""The network a local cluster's tasks talk over: ``--network SPEC``, and the per-link addresses it needs.

A spec is a comma-separated list of ``RATE`` (every task's link), ``ps=RATE``, ``worker=RATE`` and
``delay=TIME`` (one way, per link crossed). Rates take the units of Linux traffic control, in bits per second:
``bit``, ``kbit``, ``mbit``, ``gbit``, ``tbit`` (``100mbit``, ``1gbit``, ``2.5gbit``); times ``s``, ``ms``,
``us``. Examples: ``100mbit``, ``ps=1gbit,worker=100mbit``, ``1gbit,delay=2ms``.

Each task has a full-duplex link of its rate: what it sends and what it receives are each held to that rate,
and a transfer between two tasks crosses both ends' links (the PS's link is what N workers share). How the
launcher builds these links from the kernel's own traffic control lives in ``ssptk.launch.links``; this module
only holds the grammar and the addressing rule both ends of a connection agree on:

Every TensorFlow server listens on all of its namespace's loopback addresses, so task ``t`` reaches task ``v``
at ``127.(t+1).H.L`` where ``H.L`` is ``v + 2`` in two bytes. Whoever sends a packet, its addresses then say
which task called (the second byte) and which was called (the last two), so a packet can be charged to both
links it crosses. Only ports tell tasks apart to TensorFlow; the address only names the link.
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from ssptk.core.errors import UsageError

RATE_UNITS = {"bit": 1.0, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}
TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
ROLES = ("ps", "worker")
MAX_TASKS = 254  # the caller's byte of the address: 1..254
#: Set in a task's environment when the launcher built the links: the task then sees the cluster through
#: :func:`addressed_spec` (tasks started by hand or by srun see the spec as given).
LINKS_ENV = "SSPTK_LINKS"
HINT = ("give RATE, ps=RATE, worker=RATE and delay=TIME, comma-separated, with RATE in bit, kbit, mbit, gbit or tbit "
        "(e.g. 100mbit or ps=1gbit,worker=100mbit) and TIME in s, ms or us")
_NUMBER = re.compile(r"^([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)([a-z]*)$")


def _number(text: str, units: dict[str, float], what: str, spec: str) -> float:
    m = _NUMBER.match(text.strip().lower())
    if not m:
        raise UsageError(f"bad --network {spec!r}: {text!r} is not a {what}; {HINT}")
    value, unit = float(m.group(1)), m.group(2)
    if unit not in units:
        if what == "rate" and unit in ("bps", "kbps", "mbps", "gbps", "tbps"):
            raise UsageError(f"bad --network {spec!r}: {unit!r} is bytes per second in tc's units and ambiguous; "
                             f"write bits per second ({unit[:-2] or ''}bit, e.g. 100mbit)")
        raise UsageError(f"bad --network {spec!r}: {text!r} has no {what} unit ({', '.join(units)}); {HINT}")
    result = value * units[unit]
    if not math.isfinite(result) or (what == "rate" and result <= 0) or result < 0:
        raise UsageError(f"bad --network {spec!r}: {text!r} must be a positive finite {what}; {HINT}")
    return result


def _format_rate(bits: float) -> str:
    for unit in ("tbit", "gbit", "mbit", "kbit"):
        if bits >= RATE_UNITS[unit]:
            return f"{bits / RATE_UNITS[unit]:g}{unit}"
    return f"{bits:g}bit"


@dataclass(frozen=True)
class Network:
    """Per-role link rates in bits per second (``None``: that role's link is not shaped) and a one-way delay."""

    rates: dict[str, float | None] = field(default_factory=lambda: {r: None for r in ROLES})
    delay_s: float = 0.0

    def rate(self, task: str) -> float | None:
        """The link rate of ``task`` (``ps:0``, ``worker:3``), bits per second, or ``None`` for unshaped."""
        return self.rates.get(task.partition(":")[0])

    @property
    def shaped(self) -> bool:
        return any(r is not None for r in self.rates.values()) or self.delay_s > 0

    def __str__(self) -> str:
        ps, worker = self.rates.get("ps"), self.rates.get("worker")
        parts = ([_format_rate(ps)] if ps is not None and ps == worker else
                 [f"{role}={_format_rate(r)}" for role, r in (("ps", ps), ("worker", worker)) if r is not None])
        if self.delay_s:
            parts.append(f"delay={self.delay_s * 1e3:g}ms")
        return ",".join(parts)


def parse_network(spec: str | Network | None) -> Network | None:
    """Parse ``--network`` (see the module's docstring); ``None``, ``""`` or ``none``: the free loopback."""
    if spec is None or isinstance(spec, Network):
        return spec
    text = str(spec).strip()
    if text in ("", "none"):
        return None
    rates: dict[str, float | None] = {r: None for r in ROLES}
    delay = 0.0
    for item in text.split(","):
        key, eq, value = item.strip().partition("=")
        if not eq:
            rates = {r: _number(key, RATE_UNITS, "rate", text) for r in ROLES}
        elif key.strip() in ROLES:
            rates[key.strip()] = _number(value, RATE_UNITS, "rate", text)
        elif key.strip() == "delay":
            delay = _number(value, TIME_UNITS, "time", text)
        else:
            raise UsageError(f"bad --network {text!r}: unknown key {key.strip()!r}; {HINT}")
    return Network(rates, delay)


def task_order(spec: dict[str, list[str]]) -> list[str]:
    """The cluster's tasks in link order (``ps:0..``, then ``worker:0..``): a task's index names its link."""
    return [f"{job}:{i}" for job in ("ps", "worker") for i in range(len(spec.get(job, [])))]


def link_address(caller: int, callee: int) -> str:
    """The loopback address at which task number ``caller`` reaches task number ``callee``."""
    if not (0 <= caller < MAX_TASKS and 0 <= callee < MAX_TASKS):
        raise UsageError(f"--network shapes at most {MAX_TASKS} tasks; use fewer workers or leave --network out")
    return f"127.{caller + 1}.{(callee + 2) >> 8}.{(callee + 2) & 0xFF}"


def addressed_spec(spec: dict[str, list[str]], me: str) -> dict[str, list[str]]:
    """``spec`` as task ``me`` sees it: every other task at its port and at the address of the link pair
    (me, it). ``me``'s own entry stays as given: its session talks to its own server in-process, on no link."""
    order = task_order(spec)
    caller = order.index(me)
    out: dict[str, list[str]] = {}
    for job, hosts in spec.items():
        out[job] = [h if f"{job}:{i}" == me else
                    f"{link_address(caller, order.index(f'{job}:{i}'))}:{h.rpartition(':')[2]}"
                    for i, h in enumerate(hosts)]
    return out


def task_view(spec: dict[str, list[str]], me: str, environ: Mapping[str, str]) -> dict[str, list[str]]:
    """The spec task ``me`` builds its server from: :func:`addressed_spec` when its launcher built links."""
    return addressed_spec(spec, me) if environ.get(LINKS_ENV) == "1" else spec
