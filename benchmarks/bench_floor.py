"""The floor of the per-step cost: a bare TensorFlow 1 between-graph async loop, as in the seed script with
``--issync=0`` (placeholders fed, one ``session.run`` of train op, loss and global step per step; a PS and
two worker processes), against ssptk async on the same cluster shape, alternating. Target (issue 13):
ssptk async >= 0.9 of the floor's steps/s, with every step record, the measured staleness and the
minibatch claims that the floor does not have.

Listed in ``run.py``'s ``BENCHMARKS``; the helpers are :mod:`harness`'s.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from harness import Context, Row, at_least, best, fmt_value, median, rates, ratio

WORKERS, STEPS, BATCH = 2, 1500, 8

# One task of the bare cluster: argv = cluster JSON, job, index, steps, batch. A worker prints one JSON line.
BARE_TASK = r"""
import json, sys, time
import numpy as np
import tensorflow as tf
v1 = tf.compat.v1
v1.disable_eager_execution()
cluster, job = json.loads(sys.argv[1]), sys.argv[2]
idx, steps, batch = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
server = v1.train.Server(v1.train.ClusterSpec(cluster), job_name=job, task_index=idx)
if job == "ps":
    server.join()
with v1.device(v1.train.replica_device_setter(worker_device=f"/job:worker/task:{idx}", cluster=cluster)):
    gs = v1.train.get_or_create_global_step()
    x = v1.placeholder(tf.float32, [None])
    y = v1.placeholder(tf.float32, [None])
    w = v1.Variable(0.0, name="w")
    b = v1.Variable(0.0, name="b")
    loss = tf.reduce_mean(tf.square(w * x + b - y))
    train = v1.train.GradientDescentOptimizer(0.01).minimize(loss, global_step=gs)
    init = v1.global_variables_initializer()
    ready = v1.report_uninitialized_variables()
config = v1.ConfigProto(device_filters=["/job:ps", f"/job:worker/task:{idx}"])
sess = v1.Session(server.target, config=config)
if idx == 0:
    sess.run(init)
while len(sess.run(ready)):
    time.sleep(0.01)
rng = np.random.default_rng(idx)
t0 = time.time()
for _ in range(steps):
    xs = rng.standard_normal(batch).astype("float32")
    sess.run([train, loss, gs], {x: xs, y: 2 * xs + 10})
t1 = time.time()
print(json.dumps({"t0": t0, "t1": t1, "steps": steps}), flush=True)
sys.stdout.flush()
import os
os._exit(0)
"""


def bare_async(workers: int = WORKERS, steps: int = STEPS, batch: int = BATCH) -> dict[str, Any]:
    """One bare run: steps/s = all workers' steps / (last end - first start), as ssptk measures from the start."""
    from ssptk.launch.cluster import free_ports

    ports = free_ports(workers + 1)
    cluster = {"ps": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{p}" for p in ports[1:]]}
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    kw: dict[str, Any] = dict(env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                              start_new_session=True)
    args = [json.dumps(cluster)]
    ps = subprocess.Popen([sys.executable, "-c", BARE_TASK, *args, "ps", "0", "0", "0"], **kw)
    try:
        ws = [subprocess.Popen([sys.executable, "-c", BARE_TASK, *args, "worker", str(i), str(steps), str(batch)], **kw)
              for i in range(workers)]
        outs = [w.communicate(timeout=600)[0] for w in ws]
    finally:
        ps.kill()
        ps.wait()
    try:
        res = [json.loads(o.strip().splitlines()[-1]) for o in outs]
    except (ValueError, IndexError):
        return {"status": "failed", "reason": "a bare worker printed no result"}
    wall = max(r["t1"] for r in res) - min(r["t0"] for r in res)
    return {"status": "ok", "steps_per_s": sum(r["steps"] for r in res) / wall, "wall_s": wall}


def bench_async_floor(ctx: Context) -> list[Row]:
    """ssptk async (both layouts) against the bare TF1 async loop, alternating; target >= 0.9 (processes)."""
    steps = 300 if ctx.quick else STEPS
    common = dict(model="linear", mode="async", workers=WORKERS, steps=steps, batch=BATCH, seed=0)
    res: dict[str, list[dict[str, Any]]] = {"bare": [], "processes": [], "shared": []}
    for r in range(ctx.repeat):
        print(f"  round {r + 1}/{ctx.repeat}", flush=True)
        order = list(res) if r % 2 == 0 else list(res)[::-1]
        for label in order:
            if label == "bare":
                s = bare_async(WORKERS, steps, BATCH)
                print(f"    bare       {fmt_value(s.get('steps_per_s'), '8.1f')} steps/s", flush=True)
                res[label].append(s)
            else:
                res[label].append(ctx.run(f"ssptk {label}", layout=label, **common))
    ctx.note(f"Options: {WORKERS} workers, linear model (y = 2x + 10), batch {BATCH}, {steps} steps per worker "
             f"({WORKERS * steps} minibatches), async, `gpus none`; bare TF1 loop, ssptk processes and ssptk shared, "
             f"alternating in ABBA order, {ctx.repeat} round(s).")
    ctx.note("The floor: one PS and two worker processes with `replica_device_setter`, placeholders fed, one "
             "`session.run([train_op, loss, global_step])` per step, nothing logged (the seed script with "
             "`--issync=0`). Its steps/s = all steps / (last worker's end - first worker's start after "
             "initialisation); ssptk's is the summary's (first start to last step).")
    for k, v in res.items():
        ctx.note(f"{k} steps/s: " + ", ".join(fmt_value(s.get("steps_per_s"), ".1f") for s in v))
    n = "async_floor"
    floor = rates(res["bare"])
    rows = []
    for layout in ("processes", "shared"):
        mine = rates(res[layout])
        rows += [Row(f"{n}: ssptk {layout} / bare TF1 loop, steps/s (medians)", ratio(median(mine), median(floor)),
                     at_least(0.9) if layout == "processes" else None),
                 Row(f"{n}: ssptk {layout} / bare TF1 loop, steps/s (bests)", ratio(best(mine), best(floor)))]
    rows += [Row(f"{n}: bare TF1 loop, median steps/s", median(floor), fmt=".1f"),
             Row(f"{n}: ssptk processes, median steps/s", median(rates(res["processes"])), fmt=".1f"),
             Row(f"{n}: ssptk shared, median steps/s", median(rates(res["shared"])), fmt=".1f")]
    return rows
