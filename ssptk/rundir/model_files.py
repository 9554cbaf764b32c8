"""The typed owners of ``model/final.json`` and ``traffic.json``, as :class:`~ssptk.rundir.Summary` is of
``summary.json``: readers take their values as attributes (``rd.final().params``, ``rd.traffic().rates``); only
``rundir/`` knows the keys. ``docs/run-directory.md`` documents both files."""
from __future__ import annotations

from ssptk.rundir.json_view import JsonView, Key

__all__ = ["FinalModel", "LinkTraffic", "TaskBytes"]


class FinalModel(JsonView):
    """``model/final.json``: worker 0's evaluation of the trained model (``{}`` where a run wrote none)."""

    #: the held-out loss of the final model (the training data's for a model without a held-out set)
    eval_loss = Key[float | None]()
    #: its held-out accuracy (``None`` for a model without one)
    eval_accuracy = Key[float | None]()
    #: each variable's name and shape
    variables = Key[dict[str, list[int]]](lambda v: v or {})
    #: the model's scalar parameters by name (the linear model's ``w`` and ``b``)
    params = Key[dict[str, float | None]](lambda v: v or {})


class TaskBytes(JsonView):
    """One task's counters in ``traffic.json``'s ``tasks`` (and ``summary.json``'s ``traffic.tasks``): the bytes it
    sent and received through its link (0 where a counter is missing)."""

    sent = Key[float](lambda v: float(v or 0))
    received = Key[float](lambda v: float(v or 0))


class LinkTraffic(JsonView):
    """``traffic.json``: what each task sent and received through its link during the run (``{}`` where the run
    measured none)."""

    #: the run's ``--network`` spec (``None`` unshaped)
    network = Key[str | None]()
    #: when the counters were read (seconds since the epoch)
    measured_at = Key[float | None]()
    #: the seconds between the counters at the run's start and at its end
    seconds = Key[float | None]()
    #: each shaped link's bits per second
    rates = Key[dict[str, float]](lambda v: v or {})
    #: each task's ``sent`` and ``received`` bytes
    tasks = Key[dict[str, dict[str, float]]](lambda v: v or {})
