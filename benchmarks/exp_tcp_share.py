#!/usr/bin/env python
"""How TCP shares an htb-shaped link here: the measurement behind ``ssptk.sim.links.SHARE_SIGMA``.

    unshare -rn python benchmarks/exp_tcp_share.py 357000 4 0     # bytes per transfer, transfers, seconds apart
    unshare -rn python benchmarks/exp_tcp_share.py 357000 64 0.01 --fit 3   # and how each sharing rule fits, 3 repeats

Inside a private network namespace (``unshare -rn``: nothing outside changes), loopback is shaped to 20 Mbit/s
with one ``htb`` class (as ``ssptk.launch.links`` shapes a task's link) and N connections each receive SIZE bytes,
the i-th sent GAP * i seconds after the first. Prints when each ended, in units of the time one transfer takes
alone: exact fair sharing of N started together gives N for all. Measured (2026-11-25, 3 repeats): 4 x 357 kB
ended at 3.5-4.3, 4 x 1.2 MB at 3.3-4.2, 4 x 4.7 MB at 2.6-4.1 (one often well before the rest); a 4.7 MB transfer
that started 0.5 s after another got an equal share at once (no first-come advantage).

Measured again (2026-11-27) at the sizes and gaps of a PS-bound run's pulls (4 x 357 kB and 4 x 1.2 MB, 0.2 and
0.5 of one transfer's time apart, 3 repeats each): the first transfer ends well before fair sharing says (357 kB,
0.2 apart: at 2.16-2.17 of one transfer's time where fair sharing ends it at 3.09; 1.2 MB, 0.5 apart: 1.16-1.24
against 1.88), the later ones near it. Weighting each transfer 1/F of the one that entered before it and fitting
the ends: F = 1.5 misses by 0.24 of one transfer's time on average and the first end by 0.20; F = 1 (fair) by
0.35 and 0.89. That is ``ssptk.sim.links.ARRIVAL_FACTOR``. The 4.7 MB case above is a long transfer, whose
newcomer has time to grow its window.

With many transfers (2026-11-28, ``--fit``, 357 kB each, nearly at once): 16 end with the first at 8.6 and the rest at
15.6-19.0 of one transfer's time (the link's own efficiency: 19 where the bytes alone say 16): the first transfer takes
about twice the share of each other one, and the rest share evenly. A head share of 2 misses by 0.65 on average, fair
sharing by 1.2, arrival order 1.5 by 5.3 (it ends them one after another). That is ``ssptk.sim.links.HEAD_SHARE``, the
simulator's default since stop 29; 64 transfers: FINDINGS.md (stop 29).
"""
from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time

RATE = 20e6


def main(size: int, n: int, gap: float) -> list[float]:
    """Shape loopback, make ``n`` transfers of ``size`` bytes ``gap`` seconds apart; their ends / one alone."""
    subprocess.run("ip link set lo up", shell=True, check=True)
    subprocess.run("tc qdisc add dev lo root handle 1: htb default 10 r2q 1000 && tc class add dev lo parent 1: "
                   "classid 1:10 htb rate 20mbit burst 16000 cburst 16000 quantum 60000", shell=True, check=True)
    server = socket.create_server(("127.0.0.1", 0))
    clients = [socket.create_connection(server.getsockname()) for _ in range(n)]
    conns = [server.accept()[0] for _ in range(n)]
    time.sleep(0.5)
    ends: dict[int, float] = {}
    t0 = time.perf_counter()

    def receive(i: int) -> None:
        got = 0
        while got < size:
            got += len(clients[i].recv(1 << 20))
        ends[i] = time.perf_counter() - t0

    def send(i: int) -> None:
        time.sleep(gap * i)
        conns[i].sendall(b"x" * size)

    threads = [threading.Thread(target=f, args=(i,)) for f in (receive, send) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    alone = size * 8 / RATE
    return [ends[i] / alone for i in range(n)]


def predicted(size: int, n: int, gap: float, factor: float, head: float = 1.0) -> list[float]:
    """The ends :class:`ssptk.sim.links.Fluid` gives the same transfers (one link, each transfer ranked by when it
    entered, weights ``factor ** -rank``; no random draw), in the same unit."""
    from ssptk.sim.fluid import Fluid

    fluid, ends, ids = Fluid([RATE], factor, head), [0.0] * n, {}
    starts = [gap * i for i in range(n)]
    i = 0
    while len(ids) or i < n:
        t_end, who = fluid.next_end()
        if i < n and starts[i] <= t_end:
            fluid.advance(starts[i])
            ids[fluid.add(size * 8, [0], order=(0, i))] = i
            i += 1
            continue
        fluid.advance(t_end)
        for fid in fluid.pop_done(who):
            ends[ids.pop(fid)] = t_end
    alone = size * 8 / RATE
    return [e / alone for e in ends]


#: (arrival factor, head share) pairs fitted: fair sharing, arrival order, the oldest transfer's head share
RULES = ((1.0, 1.0), (1.25, 1.0), (1.5, 1.0), (1.0, 1.5), (1.0, 2.0), (1.0, 2.5))


def fit(size: int, n: int, gap: float, repeats: int) -> None:
    """Measure ``repeats`` times, then print each sharing rule's mean miss (and the first and last ends')."""
    runs = []
    for _ in range(repeats):
        runs.append(main(size, n, gap) if not runs else _again(size, n, gap))
        time.sleep(0.5)
    for ends in runs:
        print("measured", [round(x, 2) for x in ends])
    for factor, head in RULES:
        want = predicted(size, n, gap, factor, head)
        # each run's predicted ends scaled to its own last end: the link carries less than its rate (headers, htb),
        # and what is compared is how the transfers share it
        scaled = [[w * max(ends) / max(want) for w in want] for ends in runs]
        miss = sum(abs(a - b) for ends, sc in zip(runs, scaled) for a, b in zip(ends, sc)) / (n * len(runs))
        first = sum(abs(ends[0] - sc[0]) for ends, sc in zip(runs, scaled)) / len(runs)
        print(f"factor {factor}, head {head}: mean miss {miss:.2f}, first end's {first:.2f} (of one transfer's time; "
              f"predicted first {scaled[0][0]:.2f}, measured {runs[0][0]:.2f})")


def _again(size: int, n: int, gap: float) -> list[float]:
    """:func:`main` on the link it shaped already."""
    subprocess.run("tc qdisc del dev lo root", shell=True, check=True)
    return main(size, n, gap)


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--fit" in args:
        k = args.index("--fit")
        fit(int(args[0]), int(args[1]), float(args[2]), int(args[k + 1]))
    else:
        print([round(x, 2) for x in main(int(args[0]), int(args[1]), float(args[2]))])
