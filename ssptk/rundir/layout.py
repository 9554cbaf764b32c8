"""The run directory: one object that knows every path of it, and its only JSON writers.

The layout is a documented contract (``docs/run-directory.md``): reports, the notebook layer and
users' own tools read it. Every module that touches a run directory asks a :class:`RunDir` for the
path; ``config.json``, ``summary.json`` and ``model/final.json`` are written only here.
"""
from __future__ import annotations

import json
import os
import time
from typing import Any

import numpy as np

from ssptk.core.options import RunOptions
from ssptk.core.records import finite_or_null
from ssptk.rundir.config_file import RunConfig
from ssptk.rundir.contract import (
    CONTRACT_VERSION,
    check_config,
    check_final,
    check_summary,
    check_traffic,
    load_json,
)
from ssptk.rundir.model_files import FinalModel, LinkTraffic
from ssptk.rundir.space import write_whole
from ssptk.rundir.summary_file import Summary

__all__ = ["RunDir", "USER_MODEL_FILE", "read_json", "recorded_cores", "task_log_name"]

#: The code of a ``%%dtrain`` cell, saved in its run directory (``--model <dir>/user_model.py:NAME``).
USER_MODEL_FILE = "user_model.py"


def task_log_name(task: str) -> str:
    """``ps:0`` -> ``ps-0.log`` (a task's output file under ``logs/``)."""
    return task.replace(":", "-") + ".log"


def read_json(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a JSON object file; a missing, unreadable or invalid one (or a non-object) is ``{}``. Only a regular
    file is read, and only up to :data:`~ssptk.rundir.contract.MAX_JSON_BYTES` (a FIFO cannot block it)."""
    obj, _ = load_json(path)
    return obj if isinstance(obj, dict) else {}


def recorded_cores(config: object) -> float | None:
    """The cores a run had, as its ``config.json`` recorded them (``tasks.cores``; ``None`` where it did not: a run
    made before they were recorded, or one whose tasks no ssptk launcher started, each perhaps on its own host)."""
    return RunConfig.of(config if isinstance(config, dict) else None).tasks.cores


def _write_json(path: str, obj: dict[str, Any]) -> None:
    """Write ``obj`` whole or not at all: a reader never sees half a file (:class:`DiskFull` on a full disk)."""
    write_whole(path, json.dumps(obj, indent=1))


class RunDir:
    """The paths of one run directory (which need not exist yet), and its readers and writers."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = str(path)

    def __fspath__(self) -> str:
        return self.path

    def __str__(self) -> str:
        return self.path

    def __repr__(self) -> str:
        return f"RunDir({self.path!r})"

    # --- paths ----------------------------------------------------------------------------------
    def _join(self, *parts: str) -> str:
        return os.path.join(self.path, *parts)

    @property
    def config_path(self) -> str:
        return self._join("config.json")

    @property
    def summary_path(self) -> str:
        return self._join("summary.json")

    @property
    def traffic_path(self) -> str:
        return self._join("traffic.json")

    @property
    def report_path(self) -> str:
        """``report.html``: a gathered run's report (``ssptk report HOSTDIR HOSTDIR ...``)."""
        return self._join("report.html")

    @property
    def metrics_path(self) -> str:
        """``metrics.csv``: a gathered run's one-row table, as a comparison's ``metrics.csv``."""
        return self._join("metrics.csv")

    @property
    def gathered_path(self) -> str:
        """``gathered.json``: the host directories a gathered run was merged from (``{"sources": [...]}``)."""
        return self._join("gathered.json")

    def write_gathered(self, sources: list[str]) -> None:
        """Record the host directories this run was merged from (whole or not at all)."""
        _write_json(self.gathered_path, {"sources": [str(x) for x in sources]})

    def gathered_from(self) -> list[str]:
        """The host directories this run was merged from; ``[]`` if it was not gathered."""
        sources = read_json(self.gathered_path).get("sources")
        return [x for x in sources if isinstance(x, str)] if isinstance(sources, list) else []

    @property
    def workers_dir(self) -> str:
        return self._join("workers")

    @property
    def logs_dir(self) -> str:
        return self._join("logs")

    @property
    def tasks_dir(self) -> str:
        """``tasks/``: the status file of each task no launcher started that ran on this host (``tasks/ps-0.json``:
        :mod:`ssptk.rundir.task_status`)."""
        return self._join("tasks")

    @property
    def model_dir(self) -> str:
        return self._join("model")

    @property
    def final_path(self) -> str:
        return self._join("model", "final.json")

    @property
    def checkpoint_prefix(self) -> str:
        return self._join("model", "ckpt")

    @property
    def tensorboard_dir(self) -> str:
        return self._join("tensorboard")

    def tensorboard_worker_dir(self, worker: int) -> str:
        """``tensorboard/worker_<i>/``: worker ``i``'s TensorBoard run (its per-worker tags)."""
        return self._join("tensorboard", f"worker_{worker}")

    @property
    def user_model_path(self) -> str:
        return self._join(USER_MODEL_FILE)

    @property
    def predict_jobs_path(self) -> str:
        """``logs/predict-jobs.json``: the jobs given to the predicting process whose log is in this ``logs/``."""
        return self._join("logs", "predict-jobs.json")

    def worker_log(self, worker: int) -> str:
        """``workers/worker-<i>.jsonl``: worker ``i``'s step and event records."""
        return self._join("workers", f"worker-{worker}.jsonl")

    def task_log(self, task: str) -> str:
        """``logs/<task>.log``: a task's output (``ps:0`` -> ``logs/ps-0.log``)."""
        return self._join("logs", task_log_name(task))

    def is_run(self) -> bool:
        """Whether this looks like a run directory (config, summary, worker logs or task status files present: a
        host's directory that ran only a PS has the latter)."""
        return os.path.isdir(self.path) and any(os.path.exists(p) for p in
                                                 (self.config_path, self.summary_path, self.workers_dir,
                                                  self.tasks_dir))

    def from_hosts(self) -> bool:
        """Whether this is a host's directory of a run whose tasks no ssptk launcher started (worker 0's, with its
        ``config.json`` saying ``started_by``, or any other, the PS's too, with ``tasks/``), not yet gathered into a
        run of its own (it has no ``summary.json``)."""
        return bool(self.config().started_by or os.path.isdir(self.tasks_dir)) \
            and not os.path.exists(self.summary_path)

    def set_aside_attempt(self) -> None:
        """Rename every file in ``workers/`` and ``logs/`` to ``<name>.port-retry``: a start that failed (its port
        was taken) and is tried again keeps its logs for reading, out of the next attempt's way."""
        for d in (self.workers_dir, self.logs_dir):
            for name in os.listdir(d) if os.path.isdir(d) else []:
                os.rename(os.path.join(d, name), os.path.join(d, name + ".port-retry"))

    # --- readers --------------------------------------------------------------------------------
    # Each holds its file to the contract (ssptk.rundir.contract): a value that is not as documented is left
    # out, so no reader trips on it; ssptk.rundir.check says which file lost what.
    def config(self) -> RunConfig:
        """``config.json`` (:class:`~ssptk.rundir.config_file.RunConfig`; empty where it is missing)."""
        return RunConfig(check_config(read_json(self.config_path))[0])

    def summary(self) -> Summary:
        """``summary.json`` (:class:`~ssptk.rundir.summary_file.Summary`; empty where it is missing)."""
        return Summary(check_summary(read_json(self.summary_path))[0])

    def final(self) -> FinalModel:
        """``model/final.json`` (empty where the run wrote none)."""
        return FinalModel.of(check_final(read_json(self.final_path))[0])

    # --- writers --------------------------------------------------------------------------------
    def write_config(self, opts: RunOptions, cluster: dict[str, list[str]], gpus: dict[str, str | None],
                     *, launched: float | None = None, tasks: dict[str, Any] | None = None,
                     started_by: str | None = None, predicted: dict[str, Any] | None = None,
                     identity: str | None = None) -> None:
        """``config.json``: every resolved option, the cluster, the GPU assignment, versions and the budget.

        ``started_by``: written by worker 0 of a cluster no ssptk launcher started: ``hand`` (``--cluster`` JSON),
        ``tf_config`` or ``slurm`` (the cluster came from that environment), with ``identity``, the run identity every
        task of that cluster records (``run_identity``). ``predicted``: a predicted run (no cluster: the simulator's
        schedule replayed with the model's gradients), with how it was simulated."""
        total = opts.workers * opts.steps
        sync_like = opts.mode in ("sync", "allreduce", "local")
        rounds = -(-opts.steps // (opts.local_steps or 1))  # local: ceil(K / H) averages
        config: dict[str, Any] = {
            "contract": CONTRACT_VERSION, "options": opts.to_dict(), "cluster": cluster, "gpu_assignment": gpus,
            "versions": _versions(),
            "budget": {"total_minibatches": total if not opts.backup else None,
                       "per_worker": opts.steps if sync_like and not opts.backup else None,
                       "updates": opts.steps if opts.mode == "sync" else rounds if opts.mode == "local" else None},
            "created": time.time(), "launched": launched, "tasks": tasks or {"warm": False},
        }
        if started_by is not None:
            config["started_by"] = started_by
        if identity is not None:
            config["run_identity"] = identity
        if predicted is not None:
            config["predicted"] = predicted
        os.makedirs(self.path, exist_ok=True)
        _write_json(self.config_path, config)

    def write_summary(self, summary: Summary | dict[str, Any]) -> None:
        _write_json(self.summary_path, summary)

    def traffic(self) -> LinkTraffic:
        """``traffic.json`` (empty where the run measured none: no private namespace, or an older run)."""
        return LinkTraffic.of(check_traffic(read_json(self.traffic_path))[0] if os.path.exists(self.traffic_path)
                              else {})

    def write_traffic(self, traffic: dict[str, Any], before: dict[str, Any] | None = None) -> None:
        """What each task sent and received through its link during the run (``docs/run-directory.md``): the
        links' counters ``traffic`` at its end, less ``before``, the counters at its start where given (so a warm
        cluster's earlier runs are not counted), and ``seconds`` between the two."""
        if before is not None:
            was = before.get("tasks") or {}
            tasks = {t: {k: v - was.get(t, {}).get(k, 0) for k, v in c.items()} for t, c in traffic["tasks"].items()}
            traffic = {**traffic, "tasks": tasks, "seconds": traffic["measured_at"] - before["measured_at"]}
        _write_json(self.traffic_path, traffic)

    def write_final(self, loss: float, names: list[str], values: list[Any], accuracy: float | None = None) -> None:
        """``model/final.json``: eval loss and accuracy (``null`` for a model without one), variable names and
        shapes, and scalar parameters by short name. NaN and infinite numbers (a run with ``--allow-nan``)
        are written as ``null``: the file stays JSON."""
        info: dict[str, Any] = {"eval_loss": finite_or_null(loss), "eval_accuracy": finite_or_null(accuracy),
                                "variables": {}, "params": {}}
        for name, value in zip(names, values):
            arr = np.asarray(value)
            info["variables"][name] = list(arr.shape)
            if arr.size == 1:
                info["params"][name.split("/")[-1]] = finite_or_null(float(arr.reshape(())))
        os.makedirs(self.model_dir, exist_ok=True)
        _write_json(self.final_path, info)

    def save_user_model(self, source: str) -> str:
        """Save a cell's model code as ``user_model.py``; returns its path."""
        write_whole(self.user_model_path, source)
        return self.user_model_path

    # --- creating one ---------------------------------------------------------------------------
    @classmethod
    def create(cls, out: str | os.PathLike[str] | None, mode: str) -> RunDir:
        """Create and claim the run directory (default ``runs/<timestamp>-<mode>``): one run per directory
        (:mod:`ssptk.rundir.claim`). A non-empty one, or one another run holds, is refused with
        :class:`~ssptk.core.errors.UsageError`, never overwritten."""
        from ssptk.core.errors import UsageError
        from ssptk.rundir.claim import CLAIM_FILE, claim, make_directory, refusal

        if out is not None:
            if not isinstance(out, (str, os.PathLike)):
                raise UsageError(f"--out must be a string, got {out!r}")
            path = os.fspath(out)
            if os.path.exists(path) and not os.path.isdir(path):
                raise UsageError(f"{path} exists and is a file: choose another --out")
            # a claim (or one being written) is for claim() to judge: it knows who holds the directory
            if os.path.isdir(path) and [n for n in os.listdir(path) if not n.startswith(CLAIM_FILE)]:
                raise UsageError(refusal(path))
            make_directory(path)
            claim(path, mode)
            return cls(path)
        base = os.path.join("runs", f"{time.strftime('%Y%m%d-%H%M%S')}-{mode}")
        for k in range(1, 1000):  # two runs in one second: the second takes the next free name
            path = base if k == 1 else f"{base}-{k}"
            if os.path.exists(path):
                continue
            make_directory(path)
            try:
                claim(path, mode)
            except UsageError:
                continue
            return cls(path)
        raise UsageError(f"no free run directory name like {base}: pass --out")


def _versions() -> dict[str, str | None]:
    """ssptk's, TensorFlow's (as installed; not imported) and Python's versions."""
    import importlib.metadata
    import platform

    from ssptk.core.version import __version__

    try:
        tensorflow: str | None = importlib.metadata.version("tensorflow")
    except importlib.metadata.PackageNotFoundError:
        tensorflow = None
    return {"ssptk": __version__, "tensorflow": tensorflow, "python": platform.python_version()}
