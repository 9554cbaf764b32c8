"""Experiment (issue 4, scale): would one process hosting the PS and every worker make larger clusters
practical? TensorFlow allows several ``tf.train.Server`` in one process (its own tests build local
clusters that way), so the whole cluster can share one TensorFlow import.

Side by side in one invocation, alternating: ssptk's normal cluster (one process per task) against one
process with N+1 servers and N worker threads running ssptk's own ``Trainer``. Prints steps/s and the
peak RSS / PSS of all processes involved. Not part of ``run.py``: a one-off whose results are in
FINDINGS.md.

    python benchmarks/exp_shared_process.py --workers 4 8 --steps 300 --rounds 2
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import psutil

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MB = 1024 * 1024

# The child: every task of the cluster in this one process.
CHILD = r"""
import json, os, sys, threading, time
import tensorflow as tf
from ssptk.launch.cluster import free_ports
from ssptk.core.models import load_model
from ssptk.core.options import resolve
from ssptk.runtime.ps_loop import Trainer

n, steps, run_dir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
ports = free_ports(n + 1)
cluster = {"ps": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{p}" for p in ports[1:]]}
spec = tf.compat.v1.train.ClusterSpec(cluster)
servers = [tf.compat.v1.train.Server(spec, job_name="ps", task_index=0, start=True)]
servers += [tf.compat.v1.train.Server(spec, job_name="worker", task_index=i, start=True) for i in range(n)]
opts = resolve(model="linear", mode="async", workers=n, steps=steps, seed=0, out=run_dir)
model = load_model("linear")
trainers = [Trainer(model, opts, cluster, i, servers[i + 1].target, run_dir, container="run") for i in range(n)]
threads = [threading.Thread(target=t.run) for t in trainers]
for t in threads: t.start()
for t in threads: t.join()
print("SHARED_DONE", flush=True)
"""


def tree_memory(root: psutil.Process) -> tuple[float, float]:
    """RSS and PSS (MB) of ``root`` and every process under it."""
    rss = pss = 0.0
    for p in [root, *root.children(recursive=True)]:
        try:
            m = p.memory_full_info()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        rss += m.rss / MB
        pss += getattr(m, "pss", m.rss) / MB
    return rss, pss


class Peak:
    """Samples the memory of a process tree every 0.5 s until stopped; keeps the peaks."""

    def __init__(self, root: psutil.Process) -> None:
        self.root, self.rss, self.pss = root, 0.0, 0.0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)
        self._t.start()

    def _loop(self) -> None:
        while not self._stop.wait(0.5):
            rss, pss = tree_memory(self.root)
            self.rss, self.pss = max(self.rss, rss), max(self.pss, pss)

    def stop(self) -> None:
        self._stop.set()
        self._t.join()


def steps_per_s(run_dir: str) -> float:
    """Step records over the time from the first to the last (PS clock)."""
    ts = []
    wdir = os.path.join(run_dir, "workers")
    for name in os.listdir(wdir):
        with open(os.path.join(wdir, name)) as f:
            ts += [r["t"] for r in map(json.loads, f) if "event" not in r]
    return (len(ts) - 1) / (max(ts) - min(ts))


def processes(n: int, steps: int) -> dict[str, float]:
    import ssptk

    out = tempfile.mkdtemp(prefix="ssptk-exp-")
    peak = Peak(psutil.Process())
    try:
        r = ssptk.run(model="linear", mode="async", workers=n, steps=steps, seed=0, out=os.path.join(out, "r"),
                      gpus="none")
    finally:
        peak.stop()
    base_rss, base_pss = tree_memory(psutil.Process())  # this launcher alone, after the run
    return {"steps_per_s": r.summary["steps_per_s"], "rss_mb": peak.rss - base_rss, "pss_mb": peak.pss - base_pss,
            "processes": n + 1}


def shared(n: int, steps: int) -> dict[str, float]:
    run_dir = tempfile.mkdtemp(prefix="ssptk-exp-")
    os.makedirs(os.path.join(run_dir, "workers"))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(n), str(steps), run_dir], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    peak = Peak(psutil.Process(child.pid))
    out, _ = child.communicate(timeout=900)
    peak.stop()
    if "SHARED_DONE" not in out:
        raise RuntimeError(out[-2000:])
    return {"steps_per_s": steps_per_s(run_dir), "rss_mb": peak.rss, "pss_mb": peak.pss, "processes": 1}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    for n in a.workers:
        for r in range(a.rounds):
            order = [("processes", processes), ("shared", shared)]
            for name, fn in (order if r % 2 == 0 else order[::-1]):
                t0 = time.perf_counter()
                res = fn(n, a.steps)
                print(json.dumps({"workers": n, "round": r, "layout": name, **{k: round(v, 1) for k, v in res.items()},
                                  "total_s": round(time.perf_counter() - t0, 1)}), flush=True)


if __name__ == "__main__":
    main()
