"""The network a local cluster's tasks talk over: ``--network SPEC``, and the per-link addresses it needs.

A spec is a comma-separated list of ``RATE`` (the link of every task whose role is not named), ``ps=RATE``,
``worker=RATE`` and ``delay=TIME`` (one way, per link crossed), each at most once. Rates take the units of Linux
traffic control, in bits per second: ``bit``, ``kbit``, ``mbit``, ``gbit``, ``tbit`` (``100mbit``, ``1gbit``,
``2.5gbit``), from :data:`MIN_RATE` to :data:`MAX_RATE` (1kbit to 10tbit: what the kernel shapes as asked); times
``s``, ``ms``, ``us``. Examples: ``100mbit``, ``ps=1gbit,worker=100mbit``, ``ps=1gbit,100mbit`` (the same),
``1gbit,delay=2ms``.

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
#: The slowest rate a link takes (bits per second): htb holds a rate in whole bytes per second, and under ~470 bit/s
#: the time its 16 kB burst takes overflows tc's 32-bit field (tc then sets a burst of a few bytes without a word).
MIN_RATE = 1e3
#: The fastest (bits per second): the 2 ms burst ssptk.launch.links gives a link must fit tc's 32-bit byte count
#: (it refuses "Illegal burst" above ~17 tbit).
MAX_RATE = 10e12
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
    if what == "rate" and not MIN_RATE <= result <= MAX_RATE:
        raise UsageError(f"bad --network {spec!r}: {text!r} is outside the rates the kernel's traffic control shapes "
                         f"as asked: give a rate from {format_rate(MIN_RATE)} to {format_rate(MAX_RATE)}")
    return result


def format_rate(bits: float) -> str:
    """A rate in bits per second as a spec writes it: ``100mbit``, ``2.5gbit``."""
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
        parts = ([format_rate(ps)] if ps is not None and ps == worker else
                 [f"{role}={format_rate(r)}" for role, r in (("ps", ps), ("worker", worker)) if r is not None])
        if self.delay_s:
            parts.append(f"delay={self.delay_s * 1e3:g}ms")
        return ",".join(parts)


def parse_network(spec: str | Network | None) -> Network | None:
    """Parse ``--network`` (see the module's docstring); ``None``, ``""`` or ``none``: the free loopback. Each key
    comes once; a bare ``RATE`` is the rate of the roles not named (``ps=1gbit,100mbit``: the workers' 100mbit)."""
    if spec is None or isinstance(spec, Network):
        return spec
    text = str(spec).strip()
    if text in ("", "none"):
        return None
    given: dict[str, float] = {}
    for item in text.split(","):
        key, eq, value = item.strip().partition("=")
        name = key.strip() if eq else "RATE"
        if eq and name not in (*ROLES, "delay"):
            raise UsageError(f"bad --network {text!r}: unknown key {name!r}; {HINT}")
        if name in given:
            raise UsageError(f"bad --network {text!r}: {'a bare RATE' if name == 'RATE' else name + '='} is given "
                             "twice; give each once")
        given[name] = _number(value if eq else key, TIME_UNITS if name == "delay" else RATE_UNITS,
                              "time" if name == "delay" else "rate", text)
    if "RATE" in given and all(r in given for r in ROLES):
        raise UsageError(f"bad --network {text!r}: the bare RATE shapes no link, since "
                         f"{' and '.join(r + '=' for r in ROLES)} name every role; drop one of them")
    rates: dict[str, float | None] = {r: given.get(r, given.get("RATE")) for r in ROLES}
    return Network(rates, given.get("delay", 0.0))


def named_roles(spec: str | None) -> list[str]:
    """The roles a ``--network`` spec names by key (``ps=``, ``worker=``), in :data:`ROLES` order; a bare ``RATE``
    names none (it applies to whichever roles a mode has)."""
    keys = {item.strip().partition("=")[0].strip() for item in str(spec or "").split(",") if "=" in item}
    return [r for r in ROLES if r in keys]


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
