"""Delay-compensated async and SSP (``--lr-staleness dc[:LAMBDA]``): the corrected gradient against NumPy on a
quadratic, lambda 0 as plain async, and real 3-worker ``async+dc`` and ``ssp:2+dc`` runs."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import records

import ssptk

pytestmark = pytest.mark.usefixtures("module_warm_clusters")


@pytest.mark.parametrize("lam", [0.0, 0.04, 2.0])
def test_the_corrected_gradient_of_a_quadratic_matches_numpy(lam: float) -> None:
    """f(w) = 1/2 w'Aw - b'w: a worker reads w_read, computes g = A w_read - b; meanwhile the PS moved to w_now.
    The graph's copy of w_read, taken in the step's run, and the correction on the PS give
    g + lambda g*g*(w_now - w_read); lambda 0 gives g exactly."""
    import tensorflow as tf

    from ssptk.runtime.delay_comp import Snapshots

    v1 = tf.compat.v1
    rng = np.random.default_rng(0)
    m = rng.normal(size=(4, 4))
    a, b = m @ m.T + np.eye(4), rng.normal(size=4)
    w_read, w_now = rng.normal(size=4), rng.normal(size=4)
    graph = tf.Graph()
    with graph.as_default():  # one run, in the order a step's run and a peer's update take on the PS
        w = v1.Variable(w_read, name="w")
        snaps = Snapshots(v1, [w], 0, lam)
        with tf.control_dependencies(snaps.taken):  # the step's read: after the copy
            read = w.read_value()
        with tf.control_dependencies([read]):  # another worker's update lands while this step computes
            moved = w.assign(w_now)
        with tf.control_dependencies([moved]):
            g = tf.linalg.matvec(tf.constant(a), read) - b
        (corrected,), share = snaps.corrected(tf, [g])
        with tf.control_dependencies(snaps.taken):
            copied = snaps.copies[0].read_value()
        with v1.Session(graph=graph) as sess:
            sess.run(v1.global_variables_initializer())
            g_val, got, copy, share_val = sess.run([g, corrected, copied, share])
    expected = (a @ w_read - b) + lam * (a @ w_read - b) ** 2 * (w_now - w_read)
    np.testing.assert_allclose(g_val, a @ w_read - b, rtol=1e-6)
    np.testing.assert_array_equal(copy, w_read)
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    # what a step record logs as dc_correction: the correction's size relative to the gradient's
    assert share_val == pytest.approx(np.linalg.norm(expected - g_val) / np.linalg.norm(g_val), rel=1e-6, abs=1e-12)
    if lam == 0.0:
        assert (got == g_val).all()
    else:  # w_now != w_read: the correction is really there
        assert np.abs(got - g_val).max() > 1e-3


@pytest.mark.slow
def test_dc_with_lambda_0_is_plain_async(run_dir: Path) -> None:
    """One worker, same seed: async+dc:0 takes async's graph path with a zero correction, step for step."""
    plain = ssptk.run(model="linear", mode="async", workers=1, steps=15, seed=2, out=str(run_dir / "a"),
                      layout="shared", warm=True)
    dc = ssptk.run(model="linear", mode="async", lr_staleness="dc:0", workers=1, steps=15, seed=2,
                   out=str(run_dir / "dc"), layout="shared", warm=True)
    np.testing.assert_array_equal(dc.df.sort_values("step")["loss"].to_numpy(),
                                  plain.df.sort_values("step")["loss"].to_numpy())
    assert dc.summary["params"] == plain.summary["params"]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["async", "ssp:2"])
def test_three_workers_with_delay_compensation_finish(mode: str, run_dir: Path) -> None:
    r = ssptk.run(model="linear", mode=mode, lr_staleness="dc", workers=3, steps=40, straggler=["2:0.01"],
                  out=str(run_dir), warm=True)
    df, _ = records(run_dir)
    assert r.summary["status"] == "ok" and len(df) == 120
    assert np.isfinite(df["loss"].to_numpy(dtype=float)).all() and np.isfinite(r.summary["final_loss"])
    assert df["staleness"].max() >= 1  # stale gradients were there to compensate
    assert (df["dc_correction"] >= 0).all() and df["dc_correction"].max() > 0  # ...and were corrected
    assert r.summary["params"]["w"] == pytest.approx(2.0, abs=0.5)
