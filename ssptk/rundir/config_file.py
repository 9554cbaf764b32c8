"""``config.json`` as a typed object: :class:`RunConfig`, its options as stored (:class:`StoredOptions`) and its
``tasks`` section (:class:`TaskInfo`).

The meaning of every key is in ``docs/run-directory.md``; :mod:`ssptk.rundir.contract` holds a file read from disk
to it, and :meth:`ssptk.rundir.RunDir.write_config` writes it. Readers take the values as attributes
(``config.options.mode``, ``config.tasks.cores``). Imports core only.
"""
from __future__ import annotations

import math
import numbers
from typing import Any

from ssptk.core.options import RunOptions
from ssptk.rundir.json_view import JsonView, Key
from ssptk.rundir.summary_file import Predicted

__all__ = ["RunConfig", "StoredOptions", "TaskInfo"]


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, numbers.Integral) and not isinstance(v, bool) else None


class StoredOptions(JsonView):
    """The run's options as ``config.json`` keeps them (``options``): those a reader of a finished run needs, as
    attributes; all of them resolved by :meth:`resolved`. An option a run made before it existed is ``None``."""

    model = Key[str | None]()
    mode = Key[str | None]()
    #: ``--staleness``: ssp's staleness bound S as stored (see :attr:`ssp_bound`)
    bound = Key[int | None](_int, key="staleness")
    local_steps = Key[int | None](_int)
    workers = Key[int | None](lambda v: v if (_int(v) or 0) > 0 else None)
    steps = Key[int | None](_int)
    batch = Key[int | None](_int)
    eval_every = Key[int | None](_int)
    lr_staleness = Key[str | None]()
    optimizer = Key[str | None]()
    lr_convention = Key[str | None]()
    ps = Key[int | None](_int)
    network = Key[str | None]()
    jitter = Key[str | None]()
    cores = Key[float | None]()

    @property
    def ssp_bound(self) -> int | None:
        """SSP's staleness bound S (``None`` unless the mode is ``ssp`` with an integer S)."""
        return self.bound if self.mode == "ssp" else None

    def resolved(self) -> RunOptions:
        """Every option as :class:`~ssptk.core.options.RunOptions` (those not stored take their defaults)."""
        return RunOptions.from_dict(self)


class TaskInfo(JsonView):
    """``config.json``'s ``tasks``: how the run's tasks were started (runs started by ssptk)."""

    warm = Key[bool](bool)
    reused = Key[bool](bool)
    runs_served = Key[int | None]()
    layout = Key[str | None]()  # processes, shared, predicted
    isolation = Key[str | None]()
    traffic = Key[str | None]()  # measured, not measured (<why>)
    tracking = Key[str | None]()

    @property
    def cores(self) -> float | None:
        """The CPUs the run's tasks could use (``None`` where not recorded: an older run, or tasks no ssptk
        launcher started, each perhaps on a host of its own)."""
        cores = self.get("cores")
        if isinstance(cores, (int, float)) and not isinstance(cores, bool) and 0 < cores < math.inf:
            return float(cores)
        return None

    @property
    def traffic_not_measured(self) -> str | None:
        """Why the run measured no traffic (``"not measured (<why>)"``: ``<why>``); ``None`` where it did, and for a
        run that says nothing of it (before ssptk recorded it)."""
        note = self.traffic
        if not isinstance(note, str) or not note.startswith("not measured"):
            return None
        return note[len("not measured"):].strip().removeprefix("(").removesuffix(")") or "not measured"


class RunConfig(JsonView):
    """A run's ``config.json``: its options, cluster, GPU assignment, versions, budget and how it was started."""

    #: the version of the contract the run directory was written to (1: a run from before it was recorded)
    contract = Key[int](lambda v: v if isinstance(v, int) and not isinstance(v, bool) else 1)
    options = Key[StoredOptions | None](StoredOptions.maybe)
    cluster = Key[dict[str, list[str]]](lambda v: v or {})
    gpu_assignment = Key[dict[str, str | None]](lambda v: v or {})
    versions = Key[dict[str, str | None]](lambda v: v or {})
    budget = Key[dict[str, int | None]](lambda v: v or {})
    created = Key[float | None]()
    launched = Key[float | None]()
    tasks = Key[TaskInfo](TaskInfo.of)
    started_by = Key[str | None]()
    run_identity = Key[str | None]()
    predicted = Key[Predicted | None](Predicted.maybe)

    @property
    def stored(self) -> StoredOptions:
        """The options as stored (empty where the file has none)."""
        return self.options or StoredOptions()

    @property
    def mode(self) -> str | None:
        return self.stored.mode

    @property
    def workers(self) -> int | None:
        return self.stored.workers

    @property
    def bound(self) -> int | None:
        """SSP's staleness bound S (``None`` for the other modes)."""
        return self.stored.ssp_bound
