#!/usr/bin/env python
"""A bare TensorFlow parameter server through ssptk's shaped links: does TensorFlow itself fill a sharded PS link?

    unshare -rn python benchmarks/exp_tf_ps_links.py --ps 4
    unshare -rn python benchmarks/exp_tf_ps_links.py --ps 1

Inside a private network namespace, ``ssptk.launch.links.Links`` shapes the links as a run's (``--network``'s
spec), and one process starts a TensorFlow server per task, each reaching the others at its link addresses (as
ssptk's shared layout does). The model is ``--bytes`` of float32 in 32 kB variables placed round-robin on the
shards; each of N worker threads runs async steps in one ``session.run``: read every variable (the pull), a
little math on the worker, ``assign_sub`` of a gradient-shaped tensor on each variable's shard (the push). None of
ssptk's own coordination (global step, claims, clocks) is in the graph. Prints steps/s and the PS link's busy share,
so the raw-TCP model (``exp_ps_links.py``) and ssptk's runs can be compared with TensorFlow alone.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import threading
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--ps", type=int, default=4)
    ap.add_argument("--bytes", type=int, default=340_000)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--var-bytes", type=int, default=32_000, help="each variable's bytes (4 per float32)")
    ap.add_argument("--network", default="ps=20mbit")
    ap.add_argument("--count", action="store_true",
                    help="after every shard's update, add 1 to a step count on ps:0 and fetch it (as ssptk's global "
                         "step follows the update)")
    ap.add_argument("--gread", action="store_true",
                    help="read the step count on ps:0 first and make every variable's read wait for it (as ssptk's "
                         "g_read orders a step's parameter reads)")
    args = ap.parse_args()

    import os

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    from exp_ps_links import middle_steps_per_s

    from ssptk.core.network import addressed_spec, parse_network
    from ssptk.launch.cluster import free_ports
    from ssptk.launch.links import Links

    v1 = tf.compat.v1
    v1.disable_eager_execution()
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    tasks = [f"ps:{s}" for s in range(args.ps)] + [f"worker:{w}" for w in range(args.workers)]
    net = parse_network(args.network)
    Links(tasks, net, [], ()).build()
    ports = free_ports(len(tasks))
    spec = {"ps": [f"127.0.0.1:{p}" for p in ports[:args.ps]], "worker": [f"127.0.0.1:{p}" for p in ports[args.ps:]]}
    servers = {}
    for t in tasks:
        job, i = t.split(":")
        cluster = tf.train.ClusterSpec(addressed_spec(spec, t))
        servers[t] = tf.distribute.Server(cluster, job_name=job, task_index=int(i), protocol="grpc",
                                          config=v1.ConfigProto(device_count={"GPU": 0}), start=True)
    n_vars = max(1, args.bytes // args.var_bytes)
    graph = tf.Graph()
    with graph.as_default():
        with tf.device("/job:ps/task:0"):
            count = v1.get_variable("count", shape=[], dtype=tf.int64, initializer=v1.zeros_initializer(),
                                    trainable=False)
        variables = []
        for k in range(n_vars):
            with tf.device(f"/job:ps/task:{k % args.ps}"):
                variables.append(v1.get_variable(f"v{k}", shape=[args.var_bytes // 4],
                                                  initializer=v1.zeros_initializer()))
        steps = []
        for w in range(args.workers):
            first = []
            if args.gread:
                with tf.device("/job:ps/task:0"):
                    first = [count.read_value()]
            with tf.device(f"/job:worker/task:{w}"), tf.control_dependencies(first):
                grads = [tf.tanh(v.read_value() + 1.0) * 1e-3 for v in variables]  # the pull, some math
            updates = []
            for k, (v, g) in enumerate(zip(variables, grads)):
                with tf.device(f"/job:ps/task:{k % args.ps}"):
                    updates.append(v1.assign_sub(v, g).op)  # the push
            if args.count:
                with tf.device("/job:ps/task:0"), tf.control_dependencies(updates):
                    steps.append(v1.assign_add(count, 1))
            else:
                steps.append(tf.group(*updates))
        init = v1.global_variables_initializer()
    sessions = [v1.Session(servers[f"worker:{w}"].target, graph=graph) for w in range(args.workers)]
    sessions[0].run(init)
    ends: list[list[float]] = [[] for _ in range(args.workers)]

    def loop(w: int) -> None:
        for _ in range(args.steps):
            sessions[w].run(steps[w])
            ends[w].append(time.perf_counter())

    threads = [threading.Thread(target=loop, args=(w,)) for w in range(args.workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    steps_per_s, _ = middle_steps_per_s(ends)
    rate = net.rates.get("ps") if net else None
    piece = -(-n_vars // args.ps) * args.var_bytes  # the busiest shard's bytes: the most variables any shard holds
    print(json.dumps({"workers": args.workers, "ps": args.ps, "variables": n_vars, "count": args.count,
                      "gread": args.gread, "steps_per_s": round(steps_per_s, 2),
                      "ps_link_busy_payload": round(steps_per_s * piece * 8 / rate, 3) if rate else None}))
    os._exit(0)  # the servers have no clean stop


if __name__ == "__main__":
    main()
