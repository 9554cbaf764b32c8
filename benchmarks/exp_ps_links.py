#!/usr/bin/env python
"""A parameter server's link without TensorFlow: N workers pull and push through ssptk's shaped links, raw TCP.

    unshare -rn python benchmarks/exp_ps_links.py --workers 4 --ps 1 --compute 0.03
    unshare -rn python benchmarks/exp_ps_links.py --workers 4 --ps 4 --compute 0.03

Inside a private network namespace (``unshare -rn``: nothing outside changes), ``ssptk.launch.links.Links`` shapes
the tasks' links exactly as a run's (``--network``'s spec; each task its own address pair). K PS threads each hold
``--bytes / K``; each of N worker threads loops as an async worker's step does: pull every shard's piece at once
(one TCP connection per worker and shard, kept open, as gRPC keeps its channel), then ``--compute`` seconds of
sleep, then push every piece back and wait for each shard's one-byte acknowledgement. Prints the steps/s, the
PS link's busy share (steps/s x bytes per step of one direction of one shard's link / its rate) and what
``ssptk.simulate`` predicts for the same schedule under fair sharing and under arrival order, so that the
simulator's link model can be checked against the links alone, with no TensorFlow or CPU sharing in between
(the workers sleep; they do not compute).
"""
from __future__ import annotations

import argparse
import functools
import json
import socket
import subprocess
import threading
import time
from unittest import mock


def serve(server: socket.socket, piece: int, stop: threading.Event, note: socket.socket | None = None,
          noted: list[threading.Semaphore] | None = None) -> None:
    """One PS shard: per connection, ``P`` sends the piece, ``C`` answers one byte, ``U`` + worker takes a piece and
    answers one byte. With ``--notes``, shard 0 answers a push only once every other shard has sent it a note for
    that worker (``N`` + worker, counted in ``noted``), and every other shard sends one (on ``note``) for each push
    it took: as TensorFlow's control edges from each shard's update to the coordination on ``ps:0`` do."""
    payload = b"x" * piece
    lock = threading.Lock()

    def handle(conn: socket.socket) -> None:
        with conn:
            while not stop.is_set():
                cmd = conn.recv(1)
                if not cmd:
                    return
                if cmd == b"P":
                    conn.sendall(payload)
                elif cmd == b"C":
                    conn.sendall(b"c")
                elif cmd == b"N":
                    noted[conn.recv(1)[0]].release()  # type: ignore[index]
                else:
                    wid = conn.recv(1)
                    recv_exactly(conn, piece)
                    if note is not None:
                        with lock:
                            note.sendall(b"N" + wid)
                    elif noted is not None:
                        noted[wid[0]].acquire()
                    conn.sendall(b"k")

    while not stop.is_set():
        try:
            conn, _ = server.accept()
        except OSError:
            return
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


def recv_exactly(conn: socket.socket, n: int) -> None:
    got = 0
    while got < n:
        chunk = conn.recv(min(1 << 20, n - got))
        if not chunk:
            raise ConnectionError("the PS closed the connection")
        got += len(chunk)


def worker(index: int, conns: list[socket.socket], piece: int, compute: float, steps: int, ends: list[float],
           exchanges: int = 0) -> None:
    """``exchanges`` one-byte round trips with every shard, then pull all pieces at once, sleep, push all pieces at
    once; ``ends`` gets each step's end."""
    payload = b"x" * piece

    def each(fn: object) -> None:
        threads = [threading.Thread(target=fn, args=(c,)) for c in conns]  # type: ignore[arg-type]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def pull(c: socket.socket) -> None:
        for _ in range(exchanges):  # the request crosses the PS's link in, the reply its link out: behind the data
            c.sendall(b"C")
            recv_exactly(c, 1)
        c.sendall(b"P")
        recv_exactly(c, piece)

    def push(c: socket.socket) -> None:
        c.sendall(b"U" + bytes([index]) + payload)
        recv_exactly(c, 1)

    for _ in range(steps):
        each(pull)
        time.sleep(compute)
        each(push)
        ends.append(time.perf_counter())


def middle_steps_per_s(ends: list[list[float]]) -> tuple[float, float]:
    """Steps/s over the middle of a run whose workers' steps ended at ``ends`` (one list per worker): from when
    every worker had finished its 5th step to when the first finished its last; and that start."""
    start, stop = max(e[4] for e in ends), min(e[-1] for e in ends)
    return sum(sum(start < x <= stop for x in e) for e in ends) / (stop - start), start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--ps", type=int, default=1)
    ap.add_argument("--bytes", type=int, default=357_000, help="the model's bytes on the wire (pull and push each)")
    ap.add_argument("--compute", type=float, default=0.03, help="seconds each step sleeps between pull and push")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--network", default="ps=20mbit")
    ap.add_argument("--notes", action="store_true",
                    help="each shard but ps:0 tells ps:0 of every push, and ps:0 answers a push after all have")
    ap.add_argument("--exchanges", type=int, default=0,
                    help="one-byte round trips with each shard before each pull (a TensorFlow step makes several)")
    args = ap.parse_args()

    from ssptk.core.network import link_address, parse_network
    from ssptk.launch.links import Links

    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    net = parse_network(args.network)
    tasks = [f"ps:{s}" for s in range(args.ps)] + [f"worker:{w}" for w in range(args.workers)]
    links = Links(tasks, net, [], ())
    links.build()
    piece = args.bytes // args.ps
    stop = threading.Event()
    servers = [socket.create_server(("0.0.0.0", 0)) for _ in range(args.ps)]
    notes = args.notes and args.ps > 1
    noted = [threading.Semaphore(0) for _ in range(args.workers)]
    # shard s tells ps:0 through the pair (s, 0): out of its own link, into ps:0's
    lines = [socket.create_connection((link_address(s, 0), servers[0].getsockname()[1])) if notes and s else None
             for s in range(args.ps)]
    for s, server in enumerate(servers):
        threading.Thread(target=serve, args=(server, piece, stop, lines[s], noted if notes and not s else None),
                         daemon=True).start()
    conns = [[socket.create_connection((link_address(args.ps + w, s), servers[s].getsockname()[1]))
              for s in range(args.ps)] for w in range(args.workers)]
    for row in conns:
        for c in row:
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    ends: list[list[float]] = [[] for _ in range(args.workers)]
    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(w, conns[w], piece, args.compute, args.steps, ends[w],
                                                     args.exchanges)) for w in range(args.workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    steps_per_s, start = middle_steps_per_s(ends)
    rate = net.rates["ps"] if net and net.rates.get("ps") else None
    busy = steps_per_s * piece * 8 / rate if rate else None

    import ssptk.sim.simulator as simulator
    from ssptk.sim import simulate
    from ssptk.sim.links import ARRIVAL_FACTOR, PROTOCOL_OVERHEAD
    from ssptk.sim.links import Links as SimLinks

    wire = PROTOCOL_OVERHEAD  # the simulator adds TensorFlow's framing to the model's bytes; here there is none

    predicted = {}
    for name, factor in (("fair", 1.0), ("arrival", ARRIVAL_FACTOR)):
        with mock.patch.object(simulator, "Links", functools.partial(SimLinks, arrival_factor=factor)):
            predicted[name] = sum(simulate("async", args.workers, args.steps, overhead=args.compute,
                                           network=args.network, ps=args.ps, model_bytes=float(args.bytes) / wire,
                                           seed=s).steps_per_s for s in range(3)) / 3
    print(json.dumps({"workers": args.workers, "ps": args.ps, "bytes": args.bytes, "compute_s": args.compute,
                      "exchanges": args.exchanges, "notes": notes,
                      "steps_per_s": round(steps_per_s, 2), "ps_link_busy": None if busy is None else round(busy, 3),
                      "predicted_fair": round(predicted["fair"], 2),
                      "predicted_arrival": round(predicted["arrival"], 2), "started_s": round(start - t0, 2)}))


if __name__ == "__main__":
    main()
