"""Experiment: where does a middle staleness bound win? A numpy replay of the simulator's schedule.

Not a benchmark of ssptk's engine: a fast what-if to choose scenarios for real runs (and the prototype of
issue 15, "the simulator predicts convergence"). :func:`ssptk.simulate` decides, for every minibatch,
which worker computes it, how many updates landed between its parameter read and its own update
(``staleness``) and when it lands; this script replays that schedule on the ``digits`` MLP
(64 -> 32 tanh -> 10, plain SGD, the ``minibatch`` learning-rate convention: sync applies lr x the sum
of its N gradients, ssp and async lr x each one) and evaluates the held-out loss every ``--every``
minibatches. Each row is the mean over ``--seeds`` seeds of schedule and data.

    python benchmarks/exp_tradeoff_replay.py --workers 8 --steps 300 --lr 0.1 --jitter exp:0.01
    python benchmarks/exp_tradeoff_replay.py --split label --jitter pause:0.01:1 --lr 0.1

``--split label``: worker i trains only on the i-th of N slices of the training set sorted by label
(non-IID data, as when each site holds its own data); ``iid``: every worker samples all of it.
Findings are in FINDINGS.md ("Where the bound pays").
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np

import ssptk
from ssptk.core.models import digits_arrays

Params = list[np.ndarray]


def init(seed: int) -> Params:
    """Glorot-uniform weights, zero biases (as tf_keras' Dense)."""
    rng = np.random.default_rng(seed)

    def glorot(a: int, b: int) -> np.ndarray:
        lim = np.sqrt(6 / (a + b))
        return rng.uniform(-lim, lim, (a, b))

    return [glorot(64, 32), np.zeros(32), glorot(32, 10), np.zeros(10)]


def logits(p: Params, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    h = np.tanh(x @ p[0] + p[1])
    return h, h @ p[2] + p[3]


def xent(z: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean softmax cross-entropy and the softmax."""
    z = z - z.max(1, keepdims=True)
    s = np.exp(z)
    s /= s.sum(1, keepdims=True)
    return float(-np.log(s[np.arange(len(y)), y] + 1e-12).mean()), s


def gradient(p: Params, x: np.ndarray, y: np.ndarray) -> Params:
    h, z = logits(p, x)
    _, s = xent(z, y)
    d = s.copy()
    d[np.arange(len(y)), y] -= 1
    d /= len(y)
    dh = (d @ p[2].T) * (1 - h * h)
    return [x.T @ dh, dh.sum(0), h.T @ d, d.sum(0)]


@dataclass
class Replay:
    steps_per_s: float
    curve: np.ndarray  # rows: minibatches, simulated seconds, held-out loss, held-out accuracy


def replay(label: str, workers: int, steps: int, lr: float, jitter: str | None, straggler: list[str],
           seed: int, split: str, every: int, batch: int, overhead: float) -> Replay:
    xtr, ytr, xte, yte = digits_arrays()
    shards = np.array_split(np.argsort(ytr, kind="stable"), workers) if split == "label" \
        else [np.arange(len(xtr))] * workers
    sim = ssptk.simulate(label, workers=workers, steps=steps, jitter=jitter, straggler=straggler, seed=seed,
                         overhead=overhead)
    records = sim.steps[sim.steps["applied"]].sort_values("t", kind="stable")
    rng = np.random.default_rng(seed)
    p = init(1)
    history = [p]
    rows: list[tuple[float, float, float, float]] = []
    done = 0

    def sample(worker: int) -> tuple[np.ndarray, np.ndarray]:
        shard = shards[worker]
        idx = shard[rng.integers(0, len(shard), batch)]
        return xtr[idx], ytr[idx]

    def evaluate(t: float) -> None:
        loss, s = xent(logits(p, xte)[1], yte)
        rows.append((done, t, loss, float((s.argmax(1) == yte).mean())))

    if sim.mode == "sync":
        for _, group in records.groupby("global_step", sort=True):
            total = None
            for w in group["worker"]:
                g = gradient(p, *sample(int(w)))
                total = g if total is None else [a + b for a, b in zip(total, g, strict=True)]
            assert total is not None
            before, done = done, done + len(group)
            p = [a - lr * b for a, b in zip(p, total, strict=True)]
            if done // every != before // every:
                evaluate(float(group["t"].max()))
    else:
        for k, (w, stale, t) in enumerate(zip(records["worker"], records["staleness"], records["t"], strict=True)):
            g = gradient(history[max(k - int(stale), 0)], *sample(int(w)))
            p = [a - lr * b for a, b in zip(p, g, strict=True)]
            history.append(p)
            done += 1
            if done % every == 0:
                evaluate(float(t))
    return Replay(sim.steps_per_s, np.array(rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--labels", default="sync,ssp:1,ssp:4,ssp:16,async")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--jitter", default="exp:0.01")
    ap.add_argument("--straggler", action="append", default=[])
    ap.add_argument("--split", choices=("iid", "label"), default="iid")
    ap.add_argument("--overhead", type=float, default=0.004, help="seconds per step besides the delays")
    ap.add_argument("--every", type=int, default=50)
    ap.add_argument("--seeds", type=int, default=3)
    a = ap.parse_args()
    runs = {label: [replay(label, a.workers, a.steps, a.lr, a.jitter, a.straggler, s, a.split, a.every, a.batch,
                           a.overhead) for s in range(a.seeds)] for label in a.labels.split(",")}
    best = min(float(np.mean([r.curve[-1, 2] for r in rs])) for rs in runs.values())
    target = 1.25 * best
    print(f"{a}\ntarget: held-out loss {target:.3f} (1.25 x the best mean final)")
    print(f"{'label':8} {'steps/s':>8} {'final loss':>10} {'accuracy':>8}  {'minibatches to target':>24}  "
          f"{'seconds to target':>20}")
    for label, rs in runs.items():
        hits = [r.curve[np.argmax(r.curve[:, 2] <= target)] if (r.curve[:, 2] <= target).any() else None for r in rs]
        mbs = " ".join("-" if h is None else f"{h[0]:.0f}" for h in hits)
        secs = " ".join("-" if h is None else f"{h[1]:.2f}" for h in hits)
        print(f"{label:8} {np.mean([r.steps_per_s for r in rs]):8.1f} {np.mean([r.curve[-1, 2] for r in rs]):10.3f} "
              f"{np.mean([r.curve[-1, 3] for r in rs]):8.3f}  {mbs:>24}  {secs:>20}")


if __name__ == "__main__":
    main()
