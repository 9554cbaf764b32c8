"""A task's cluster and its own place in it, from the environment that cluster managers set.

``ssptk worker --cluster tf_config`` reads ``TF_CONFIG`` (what Kubernetes operators such as Kubeflow's
TFJob set in every replica) and ``--cluster slurm`` the ``SLURM_*`` variables ``srun`` sets, both through
TensorFlow's own cluster resolvers, so ssptk agrees with TensorFlow about who is who.

Slurm: the job step's tasks, in rank order, are ``ps:0`` (rank 0) and then ``worker:0 .. worker:N-2``
(allreduce: only workers), each at ``<node>:<port base + its index on the node>``. GPUs are left to
Slurm (``--gpus-per-task`` sets each task's ``CUDA_VISIBLE_DEVICES``): TensorFlow's resolver would
otherwise insist on at least one GPU per task.
"""
from __future__ import annotations

import json
import os
from typing import Any

from ssptk.core.errors import UsageError

__all__ = ["SOURCES", "from_environment", "job_port_base", "job_run_id", "PORT_SLOTS", "PORT_BLOCK", "PORT_FIRST"]

SOURCES = ("tf_config", "slurm")
#: The variables TensorFlow's SlurmClusterResolver reads (srun sets them in every task of a job step).
SLURM_VARS = ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE")
#: ``--port-base auto`` puts a job step's ports in one of :data:`PORT_SLOTS` blocks of :data:`PORT_BLOCK` ports from
#: :data:`PORT_FIRST`, below Linux's ephemeral range (32768-60999: any outgoing connection may hold a port there).
#: The block is the job id modulo the number of blocks (a step moves it on by :data:`STEP_STRIDE`): jobs whose ids
#: are fewer than :data:`PORT_SLOTS` apart never share a block, so jobs submitted together never collide. Two jobs
#: that do meet (ids 798 apart, or another program on a port) fail at once in one line: a task cannot bind its
#: port, or a worker finds another run's identity on the PS (:mod:`ssptk.runtime.identity`).
PORT_FIRST = 20000
PORT_BLOCK = 16
PORT_SLOTS = (32768 - PORT_FIRST) // PORT_BLOCK  # 798
STEP_STRIDE = 401  # prime to PORT_SLOTS: steps 0, 1, 2 ... of one job land far from the next jobs' blocks


def job_port_base() -> int:
    """``--port-base auto`` under Slurm: a port base derived from ``SLURM_JOB_ID`` and ``SLURM_STEP_ID``, the same in
    every task of the step and different between any two jobs fewer than :data:`PORT_SLOTS` ids apart."""
    job = os.environ.get("SLURM_JOB_ID", "")
    job_n = int(job) if job.isdigit() else 0  # no job (TF_CONFIG's tasks name their ports): any base will do
    step = os.environ.get("SLURM_STEP_ID", "0")
    step_n = int(step) if step.isdigit() else 0  # the batch step's id is a word ("batch"): it runs no ssptk task
    return PORT_FIRST + ((job_n + STEP_STRIDE * step_n) % PORT_SLOTS) * PORT_BLOCK


def job_run_id(default: str) -> str:
    """The name of the run's state on the PS under Slurm: the job and step (``slurm-1234.0``), so that a task
    that reached another job's PS (ports reused by chance) never reads or writes that job's variables."""
    job = os.environ.get("SLURM_JOB_ID")
    return f"slurm-{job}.{os.environ.get('SLURM_STEP_ID', '0')}" if job else default


def from_environment(source: str, mode: str, port_base: int, ps: int = 1) -> tuple[dict[str, list[str]], str]:
    """``(cluster spec, this task)`` from ``TF_CONFIG`` (``source="tf_config"``) or Slurm (``"slurm"``: the first
    ``ps`` ranks are the PS tasks)."""
    if source == "tf_config":
        return _tf_config()
    return _slurm(mode, port_base, ps)


def _tf_config() -> tuple[dict[str, list[str]], str]:
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        raise UsageError("--cluster tf_config: TF_CONFIG is not set (Kubernetes operators such as Kubeflow's TFJob "
                         "set it in every replica): set it, or give --cluster as JSON")
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as e:
        raise UsageError(f"--cluster tf_config: TF_CONFIG is not valid JSON ({e.msg})") from None
    if not isinstance(parsed, dict) or not isinstance(parsed.get("cluster"), dict):
        raise UsageError('--cluster tf_config: TF_CONFIG has no "cluster" object')
    other = sorted(set(parsed["cluster"]) - {"ps", "worker"})
    if other:
        raise UsageError(f"--cluster tf_config: TF_CONFIG has a {other[0]!r} job; ssptk's worker 0 is the chief and "
                         "the PS holds the variables, so give the TFJob only PS and Worker replicas")
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    spec: dict[str, Any] = resolver.cluster_spec().as_dict()
    task_type, task_id = resolver.task_type, resolver.task_id
    if task_type not in ("ps", "worker") or task_id is None:
        raise UsageError('--cluster tf_config: TF_CONFIG has no "task" of type ps or worker with an index')
    return _as_lists(spec), f"{task_type}:{int(task_id)}"


def _slurm(mode: str, port_base: int, ps: int = 1) -> tuple[dict[str, list[str]], str]:
    missing = [v for v in SLURM_VARS if v not in os.environ]
    if missing:
        raise UsageError(f"--cluster slurm: {missing[0]} is not set: run `ssptk worker --cluster slurm ...` as the "
                         "command of srun (every task of the job step runs it)")
    import tensorflow as tf

    n = int(os.environ["SLURM_STEP_NUM_TASKS"])
    with_ps = mode != "allreduce"
    shards = ps if with_ps else 0
    if n < shards + 1:
        raise UsageError(f"--cluster slurm: the job step has {n} task(s); {mode} needs {shards or 'no'} PS task(s) "
                         f"and at least one worker (srun --ntasks N+{shards} for N workers)")
    jobs = {"ps": shards, "worker": n - shards} if with_ps else {"worker": n}
    # no GPU bookkeeping here (see the module's docstring): as many "GPUs" as tasks keeps the resolver content
    resolver = tf.distribute.cluster_resolver.SlurmClusterResolver(
        jobs=jobs, port_base=port_base, gpus_per_node=n, gpus_per_task=1, auto_set_gpu=False)
    try:
        spec: dict[str, Any] = resolver.cluster_spec().as_dict()
    except (RuntimeError, ValueError) as e:
        raise UsageError(f"--cluster slurm: TensorFlow's SlurmClusterResolver refused the environment: {e}") from None
    task_type, task_id = resolver.get_task_info()
    return _as_lists(spec), f"{task_type}:{task_id}"


def _as_lists(spec: dict[str, Any]) -> dict[str, list[str]]:
    """A ClusterSpec's dict as ``job -> [host:port, ...]`` in task order (sparse jobs come as index maps)."""
    return {job: ([tasks[i] for i in sorted(tasks)] if isinstance(tasks, dict) else list(tasks))
            for job, tasks in spec.items()}
