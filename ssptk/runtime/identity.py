"""Which run a cluster's PS serves, checked by every worker when it connects: a task never joins another run.

Tasks started without ssptk's launcher (``srun``, a TFJob, by hand) find each other by address alone, and TensorFlow's
gRPC servers accept whoever connects. Two Slurm jobs that meet on the same ports (``--port-base`` given by hand, or
a block shared by chance) would let a worker of one job train on the other job's PS. So each PS task keeps its run's
identity (:func:`ssptk.runtime.host_dir.run_identity`: the run id, ``--run-id``, under Slurm ``slurm-<job>.<step>``,
and a digest of the cluster spec and the run options) in a string variable, and a worker reads every PS task's right
after it connects and before it touches any state of the run: another run id, or the same one started with other
options, fails the worker in one line. The variable lives in the PS's default container, apart from the run's own
state (the run id's container).
"""
from __future__ import annotations

import time
from typing import Any

__all__ = ["ForeignCluster", "publish", "check", "IDENTITY_VARIABLE"]

#: the name of the variable on each PS task that holds the run id it serves
IDENTITY_VARIABLE = "ssptk_run_identity"


class ForeignCluster(RuntimeError):
    """A worker reached a PS that serves another run (or no ssptk run at all)."""


def _variable(tf: Any, ps: int, value: str) -> Any:
    v1 = tf.compat.v1
    with v1.device(f"/job:ps/task:{ps}"):
        return v1.Variable(tf.constant(value), trainable=False, name=f"{IDENTITY_VARIABLE}_{ps}",
                           collections=[], use_resource=True)


def publish(target: str, identity: str, ps: int) -> None:
    """On PS task ``ps``, right after its server started: keep the run's ``identity`` where workers read it."""
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        init = _variable(tf, ps, identity).initializer
    config = tf.compat.v1.ConfigProto(device_filters=[f"/job:ps/task:{ps}"])
    with tf.compat.v1.Session(target, graph=graph, config=config) as sess:
        sess.run(init)


def _run_id(identity: str) -> str:
    """The run id an identity ``<run id>:<digest>`` starts with (a bare run id: itself)."""
    rid, sep, digest = identity.rpartition(":")
    return rid if sep and len(digest) == 12 else identity


def check(target: str, cluster: dict[str, list[str]], task: str, identity: str, wait_s: float = 300.0) -> None:
    """On a worker, before it joins the run: every PS task serves this worker's run ``identity``, else
    :class:`ForeignCluster` naming what differs (the run id, or the options and cluster spec under the same id). A PS
    that has not published yet (it started a moment ago) is waited for up to ``wait_s``: on a crowded node (2 cores,
    load 27) a PS took over 60 s from listening to publishing."""
    import tensorflow as tf

    graph = tf.Graph()
    shards = len(cluster.get("ps", []))
    with graph.as_default():
        names = [_variable(tf, i, "") for i in range(shards)]
        ready = [tf.compat.v1.is_variable_initialized(v) for v in names]
        values = [v.read_value() for v in names]
    config = tf.compat.v1.ConfigProto(device_filters=["/job:ps", f"/job:{task.replace(':', '/task:')}"])
    deadline = time.monotonic() + wait_s
    run_id = _run_id(identity)
    with tf.compat.v1.Session(target, graph=graph, config=config) as sess:
        while not all(sess.run(ready)):
            if time.monotonic() > deadline:
                missing = [i for i, r in enumerate(sess.run(ready)) if not r]
                raise ForeignCluster(
                    f"ps:{missing[0]} at {cluster['ps'][missing[0]]} says no run identity after {wait_s:.0f} s: it is "
                    f"not an ssptk PS of this version serving run {run_id!r}")
            time.sleep(0.2)
        for i, got in enumerate(sess.run(values)):
            theirs = got.decode(errors="replace")
            if theirs == identity:
                continue
            where = f"this worker (run {run_id!r}) reached ps:{i} at {cluster['ps'][i]}"
            if _run_id(theirs) != run_id:
                raise ForeignCluster(
                    f"{where}, which serves run {_run_id(theirs)!r}: two runs share these ports (give each job its own "
                    "--port-base, or leave it auto under Slurm)")
            raise ForeignCluster(
                f"{where}, which serves that run started with other options or another --cluster: start every task "
                "of a run with the same command line (only --task differs)")
