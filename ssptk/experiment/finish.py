"""What a run leaves when it ends: ``summary.json`` and TensorBoard event files, from its logs."""
from __future__ import annotations

from typing import Any

from ssptk.analysis.compare import RunTuple
from ssptk.analysis.summary import run_summary
from ssptk.core.errors import TaskFailure
from ssptk.core.options import RunOptions
from ssptk.rundir import RunDir

__all__ = ["finish_run", "write_tensorboard"]


def finish_run(run_dir: str, opts: RunOptions, failure: TaskFailure | None,
               ps_cpu_s: float | None = None) -> dict[str, Any]:
    """Summarise the run from its logs, write ``summary.json`` and the TensorBoard files; the summary."""
    summary, loaded = run_summary(run_dir, opts, failure, ps_cpu_s)
    RunDir(run_dir).write_summary(summary)
    write_tensorboard(run_dir, loaded)
    return summary


def write_tensorboard(run_dir: str, loaded: RunTuple | None = None) -> None:
    """TensorBoard event files in ``run_dir/tensorboard/`` (:mod:`ssptk.render.tensorboard`); never
    fails the run."""
    from ssptk.render import tensorboard

    try:
        tensorboard.write_events(run_dir, loaded)
    except Exception:  # noqa: BLE001 - a broken event file must not fail a run (nothing recorded)
        pass
