"""``summary.json`` as a typed object: :class:`Summary`, its ``traffic`` section (:class:`TrafficSection`) and a
predicted run's ``predicted`` (:class:`Predicted`, as ``config.json`` has it too).

The meaning of every key is in ``docs/run-directory.md``; :mod:`ssptk.rundir.contract` holds a file read from disk
to it. Readers take the values as attributes (``summary.steps_per_s``, ``summary.traffic.split``); the object is
the JSON object itself, so it is written back as it was read. Imports core only.
"""
from __future__ import annotations

from typing import Any

from ssptk.rundir.json_view import JsonView, Key

__all__ = ["Predicted", "Summary", "TrafficSection"]


class Predicted(JsonView):
    """How a predicted run was simulated (``config.json``'s and ``summary.json``'s ``predicted``)."""

    #: the per-step cost the simulated clock used, seconds
    overhead_s = Key[float | None]()
    #: the calibrated gap between a worker's steps, seconds (absent: none)
    gap_s = Key[float | None]()
    #: the cores the simulated workers shared (``None``: each its own; absent without a shaped network: see
    #: :meth:`shows_cores`)
    cores = Key[float | None]()

    @property
    def shows_cores(self) -> bool:
        """Whether the cores were recorded (only under a shaped ``--network``, where they change anything)."""
        return self.has(Predicted.cores)


class TrafficSection(JsonView):
    """``summary.json``'s ``traffic``: what the run's links carried (``ssptk.analysis.traffic``)."""

    network = Key[str | None]()
    mb_per_minibatch = Key[float | None]()
    ps_mb_per_minibatch = Key[float | None]()
    #: each shaped link's busy share
    link_busy = Key[dict[str, float]](lambda v: v or {})
    #: ``[task, share]`` of the fullest shaped link
    busiest = Key[list[Any] | None]()
    #: each task's ``sent`` and ``received`` bytes
    tasks = Key[dict[str, dict[str, float]]](lambda v: v or {})
    #: each shaped link's bits per second
    rates = Key[dict[str, float]](lambda v: v or {})
    step_ms = Key[float | None]()
    transfer_ms = Key[float | None]()
    compute_ms = Key[float | None]()
    wait_ms = Key[float | None]()
    transfer_timed_steps = Key[int | None]()
    #: the step's partition: ``transfer``, ``wait``, ``compute``, ``other`` (absent before ssptk kept it)
    split = Key[dict[str, float | None] | None]()

    @property
    def busiest_share(self) -> float | None:
        """The fullest shaped link's busy share (``None`` without one)."""
        b = self.busiest
        return b[1] if isinstance(b, list) and len(b) == 2 else None


class Summary(JsonView):
    """A run's ``summary.json``: how it ended and what its logs add up to."""

    status = Key[str | None]()  # ok, failed, interrupted
    reason = Key[str | None]()
    failed_task = Key[str | None]()
    signal = Key[str | None]()
    mode = Key[str | None]()
    model = Key[str | None]()
    workers = Key[int | None]()
    #: ssp's staleness bound S (``staleness`` in the file: ``--staleness``); what the steps measured is
    #: ``mean_staleness``, ``max_staleness``
    bound = Key[int | None](key="staleness")
    local_steps = Key[int | None]()
    backup = Key[int | None]()
    steps = Key[int | None]()
    lr_staleness = Key[str | None]()
    optimizer = Key[str | None]()  # --optimizer (sgd, momentum:0.9, adam, ...); None in runs made before it
    total_steps = Key[int | None]()
    wall_s = Key[float | None]()
    steps_per_s = Key[float | None]()
    train_loss_last = Key[float | None]()
    loss_smoothed_last = Key[float | None]()
    max_skew = Key[int | None]()
    wait_fraction = Key[float | None]()
    mean_staleness = Key[float | None]()
    max_staleness = Key[int | None]()
    #: worker index -> its step records (``int`` keys in memory, ``str`` once read back from JSON)
    per_worker_steps = Key[dict[Any, int]](lambda v: v or {})
    diverged = Key[bool | None]()
    diverged_at_step = Key[int | None]()
    diverged_on = Key[str | None]()  # training, held-out
    first_step_s = Key[float | None]()
    warm_reused = Key[bool](bool)
    dc_correction_mean = Key[float | None]()
    dc_correction_median = Key[float | None]()
    dc_correction_max = Key[float | None]()
    traffic = Key[TrafficSection | None](TrafficSection.maybe)
    traffic_not_measured = Key[str | None]()
    train_cpu_s = Key[float | None]()
    cpu_ms_per_step = Key[float | None]()
    overhead_ms = Key[float | None]()
    ideal_steps_per_s = Key[float | None]()
    ideal_cores = Key[float | None]()
    gap_ms = Key[float | None]()
    measured_over_ideal = Key[float | None]()
    predicted = Key[Predicted | None](Predicted.maybe)
    final_loss = Key[float | None]()
    final_accuracy = Key[float | None]()
    params = Key[dict[str, float | None] | None]()
    run_dir = Key[str | None]()
    target = Key[float | None]()
    target_on = Key[str | None]()
    time_to_target_s = Key[float | None]()
    steps_to_target = Key[int | None]()

    @property
    def ok(self) -> bool:
        """The run finished (a diverged one too)."""
        return self.status == "ok"

    @property
    def has_dc_correction(self) -> bool:
        """Whether the summary kept delay compensation's correction (written since ssptk measured it)."""
        return self.has(Summary.dc_correction_mean)

    def with_target(self, target: float, on: str | None, time_s: float | None, steps: int | None) -> None:
        """Add the loss target a comparison measured this run against, and when the run reached it."""
        self.update(target=target, target_on=on, time_to_target_s=time_s, steps_to_target=steps)
