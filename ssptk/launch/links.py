"""Every task's network link, built from the kernel's traffic control inside the cluster's private namespace.

Tasks reach each other at addresses that name both ends (``ssptk.core.network.link_address``), and every
packet crosses the namespace's loopback twice: out of ``lo`` (its egress qdisc) and into it (its ingress,
redirected to an ``ifb`` device with a qdisc of its own). The first pass charges a packet to the link of the
task that was *called* (requests go into it, replies come out of it), the second to the link of the task that
*called* (requests go out of it, replies come in). Each pass is an ``htb`` tree with two classes per task (in
and out) at that task's rate, picked by ``u32`` filters on the address bytes: so each task has a full-duplex
link, a transfer is held to the slower of the two links it crosses, and N workers share their PS's link.

The same classes count what crossed them (``tc -s class show``): every run measures each task's bytes sent
and received, shaped or not (an unshaped link is a class at 100 Gbit/s). Nothing here touches the host's own
loopback: every command runs through ``nsenter`` inside the cluster's namespace, by the absolute path
:mod:`ssptk.launch.tools` finds (an ordinary user's PATH lacks ``/usr/sbin``), never through a shell. Where the
links cannot be built (no iproute2, no ``ifb`` module), :meth:`Links.build` raises :class:`LinksRefused`: a run that
shapes nothing then goes on with its traffic not measured (:class:`~ssptk.launch.cluster.LocalCluster`).
"""
from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass

from ssptk.core.network import Network
from ssptk.launch import tools

UNSHAPED_BIT_S = 100e9
IFB = "ssptk-ifb0"
_CLASS = re.compile(r"class htb (\d+):([0-9a-f]+) .*?Sent (\d+) bytes (\d+) pkt", re.S)


def _minor(task: int, outgoing: bool) -> str:
    return format(0x10 + 2 * task + (1 if outgoing else 0), "x")


def _htb_class(dev: str, major: int, minor: str, bits: float) -> str:
    burst = max(16_000, int(bits / 8 * 0.002))  # 2 ms of the rate: htb cannot keep a fast link busy with less
    return (f"class add dev {dev} parent {major}: classid {major}:{minor} htb rate {int(bits)}bit "
            f"burst {burst} cburst {burst} quantum 60000")


def tc_batch(tasks: list[str], network: Network | None) -> str:
    """The ``tc -batch`` lines that build every task's link (``tasks`` in link order)."""
    lines = ["qdisc add dev lo root handle 1: htb default ffff r2q 1000",
             f"qdisc add dev {IFB} root handle 2: htb default ffff r2q 1000",
             _htb_class("lo", 1, "ffff", UNSHAPED_BIT_S), _htb_class(IFB, 2, "ffff", UNSHAPED_BIT_S),
             "qdisc add dev lo handle ffff: ingress",
             f"filter add dev lo parent ffff: protocol ip prio 1 u32 match u32 0 0 action mirred egress redirect "
             f"dev {IFB}"]
    delay_ms = network.delay_s * 1e3 if network else 0.0
    for v, task in enumerate(tasks):
        bits = (network.rate(task) if network else None) or UNSHAPED_BIT_S
        callee, caller = f"0x{v + 2:08x} 0x0000ffff", f"0x{(v + 1) << 16:08x} 0x00ff0000"
        for major, dev in ((1, "lo"), (2, IFB)):
            for outgoing in (False, True):
                minor = _minor(v, outgoing)
                lines.append(_htb_class(dev, major, minor, bits))
                if delay_ms and major == 1:
                    lines.append(f"qdisc add dev {dev} parent {major}:{minor} netem delay {delay_ms:g}ms limit 100000")
        # pass 1 (lo): the called task's link; a request's destination, a reply's source names it
        lines.append(f"filter add dev lo parent 1: protocol ip prio 2 u32 match u32 {callee} at 16 "
                     f"classid 1:{_minor(v, False)}")
        lines.append(f"filter add dev lo parent 1: protocol ip prio 2 u32 match u32 {callee} at 12 "
                     f"classid 1:{_minor(v, True)}")
        # pass 2 (ifb): the calling task's link; its byte in a request's destination, a reply's source
        lines.append(f"filter add dev {IFB} parent 2: protocol ip prio 2 u32 match u32 {caller} at 16 "
                     f"classid 2:{_minor(v, True)}")
        lines.append(f"filter add dev {IFB} parent 2: protocol ip prio 2 u32 match u32 {caller} at 12 "
                     f"classid 2:{_minor(v, False)}")
    return "\n".join(lines) + "\n"


class LinksRefused(Exception):
    """The links could not be built here; ``why``: one line (a missing command, what the kernel said)."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def _run(wrap: list[str], argv: list[str], fds: tuple[int, ...],
         timeout: float = 20.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*wrap, *argv], pass_fds=fds, capture_output=True, text=True, timeout=timeout, check=False)


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "no message")


@dataclass
class Links:
    """The links of one cluster: built once by :meth:`build`, read by :meth:`traffic` (any time, cheaply)."""

    tasks: list[str]
    network: Network | None
    wrap: list[str]  # the namespace's nsenter prefix
    fds: tuple[int, ...]

    tc: str = ""  # the commands' absolute paths, found by build()
    ip: str = ""

    def build(self) -> None:
        """Add the ifb device and both passes' qdiscs, classes and filters. Raises :class:`LinksRefused` where a
        command is missing or the kernel refuses (a device or qdisc it lacks, as netem without ``sch_netem``)."""
        for name in ("tc", "ip"):
            found = tools.find(name)
            if found is None:
                raise LinksRefused(f"{name} is not on PATH, in /usr/sbin or /sbin; package {tools.PACKAGES[name]} "
                                   "has it")
            setattr(self, name, found)
        for argv in ([self.ip, "link", "add", IFB, "type", "ifb"], [self.ip, "link", "set", IFB, "up"]):
            out = _run(self.wrap, argv, self.fds)
            if out.returncode != 0:
                raise LinksRefused(f"no ifb device: {_first_line(out.stderr)}")
        fd, path = tempfile.mkstemp(prefix="ssptk-tc-", suffix=".batch")
        with os.fdopen(fd, "w") as f:
            f.write(tc_batch(self.tasks, self.network))
        try:
            out = _run(self.wrap, [self.tc, "-batch", path], self.fds)
        finally:
            os.unlink(path)
        if out.returncode != 0:
            why = _first_line(out.stderr)
            for dev in ("lo", IFB):  # nothing half-built may slow the tasks: the run goes on unshaped
                _run(self.wrap, [self.tc, "qdisc", "del", "dev", dev, "root"], self.fds)
            _run(self.wrap, [self.tc, "qdisc", "del", "dev", "lo", "ingress"], self.fds)
            raise LinksRefused(f"tc: {why}")

    def traffic(self) -> dict[str, dict[str, int]]:
        """Bytes and packets each task sent and received so far: ``{task: {"sent": B, "received": B,
        "sent_packets": P, "received_packets": P}}``."""
        text = "".join(_run(self.wrap, [self.tc, "-s", "class", "show", "dev", dev], self.fds).stdout
                       for dev in ("lo", IFB))
        counts: dict[tuple[int, str], tuple[int, int]] = {
            (int(m.group(1)), m.group(2)): (int(m.group(3)), int(m.group(4))) for m in _CLASS.finditer(text)}
        result: dict[str, dict[str, int]] = {}
        for v, task in enumerate(self.tasks):
            row = {"sent": 0, "received": 0, "sent_packets": 0, "received_packets": 0}
            for major in (1, 2):
                for outgoing, key in ((True, "sent"), (False, "received")):
                    b, p = counts.get((major, _minor(v, outgoing)), (0, 0))
                    row[key] += b
                    row[f"{key}_packets"] += p
            result[task] = row
        return result


def link_error(why: str, network: Network) -> str:
    """One line for links that ``--network`` asked for and could not have (``why``: :class:`LinksRefused`'s)."""
    if "netem" in why or ("unknown" in why.lower() and network.delay_s):
        return ("--network delay= needs the kernel's netem qdisc (sch_netem), which this kernel does not have: "
                "leave delay= out, or run on a kernel that ships sch_netem (stock distribution kernels do)")
    if why.startswith("no ifb device"):
        return (f"--network needs the kernel's ifb device to shape what tasks receive ({why}): load it (sudo modprobe "
                "ifb), or leave --network out")
    return f"--network: the cluster's links could not be built ({why}); leave --network out"


def kernel_has_netem(unshare: str = "unshare") -> bool:
    """Whether a private namespace here can add a netem qdisc (checked in a throwaway namespace)."""
    tc = tools.find("tc")
    if tc is None:
        return False
    try:
        out = subprocess.run([unshare, "-rn", tc, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"],
                             capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0
