"""What the simulator simulates: :class:`SimSpec`, a run's resolved options as the simulator takes them (one typed
view of :class:`~ssptk.core.options.RunOptions`, :meth:`SimSpec.of`) and the simulated clock's own settings.

The options are validated once, where they are resolved (:func:`ssptk.core.options.resolve`, the wording of
:mod:`ssptk.core.option_checks`); a :class:`SimSpec` checks only what is the simulator's own (the clock's seconds,
the model of late gradients, the cores). :func:`shared_cores` turns ``--cores`` into the cores simulated workers
share. Imports core only.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ssptk.core.delays import Jitter
from ssptk.core.errors import UsageError
from ssptk.core.network import Network
from ssptk.core.option_checks import check_cores
from ssptk.core.options import RunOptions

__all__ = ["LATE", "SimSpec", "shared_cores"]

#: The models of sync's late gradients (with backup): the engine's ``drop``, Dutta et al.'s ``abandon``.
LATE = ("drop", "abandon")


def shared_cores(given: object, default: float | None) -> float | None:
    """The cores a prediction lets its workers share (``None``: each worker its own machine) from ``--cores``'s
    value: ``None`` (not given) takes ``default`` (the cores the run had, or
    :func:`ssptk.core.resources.machine_cores`), 0 means each its own, a number > 0 that many. Raises
    :class:`UsageError` on anything else."""
    value = check_cores(given)
    if value is None:
        if default is not None and not (isinstance(default, (int, float)) and not isinstance(default, bool)
                                        and 0 < default < math.inf):
            raise UsageError(f"the recorded cores must be a number > 0, got {default!r}")
        return None if default is None else float(default)
    return value or None


def _seconds(name: str, x: object) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x < 0:
        raise UsageError(f"{name} must be a number of seconds >= 0, got {x!r}")
    return float(x)


@dataclass(frozen=True)
class SimSpec:
    """A simulated run. From the options (:meth:`of`): ``mode`` (``sync``, ``ssp``, ``async``, ``allreduce``,
    ``local``), ``workers``, ``steps`` (the budget K), ``bound`` (ssp's staleness bound S), ``local_steps`` (local
    SGD's H), ``backup``, ``stragglers`` (seconds by worker), ``jitter``, ``seed``, ``network``, ``ps`` (shards),
    ``cores`` (those the workers share; ``None``: each its own CPU). The clock's own: ``overhead`` and ``compute``
    (fixed seconds of every step), ``late`` (:data:`LATE`), ``model_bytes`` (the model's float32 bytes, or each
    variable's: what a pull and a push carry under a shaped ``network``), ``gap`` (async and ssp: the seconds of a
    step before its read)."""

    mode: str = "async"
    workers: int = 1
    steps: int = 1
    bound: int | None = None
    local_steps: int | None = None
    backup: int = 0
    stragglers: Mapping[int, float] = field(default_factory=dict)
    jitter: Jitter | None = None
    seed: int = 0
    network: Network | None = None
    ps: int = 1
    cores: float | None = None
    overhead: float = 0.0
    compute: float = 0.0
    late: str = "drop"
    model_bytes: float | Sequence[float] | None = None
    gap: float = 0.0

    def __post_init__(self) -> None:
        base = _seconds("overhead", self.overhead) + _seconds("compute", self.compute)
        if _seconds("gap", self.gap) > base:
            raise UsageError(f"gap must be at most the step's fixed seconds (overhead + compute = {base:g}), "
                             f"got {self.gap!r}")
        if self.late not in LATE:
            raise UsageError(f"late must be 'drop' or 'abandon', got {self.late!r}")
        c = self.cores
        if c is not None and (isinstance(c, bool) or not isinstance(c, (int, float)) or not 0 < c < math.inf):
            raise UsageError(f"cores must be a number > 0 (None: each worker its own CPU), got {c!r}")

    @classmethod
    def of(cls, opts: RunOptions, *, machine_cores: float | None = None, steps: int | None = None,
           overhead: float = 0.0, compute: float = 0.0, late: str = "drop",
           model_bytes: float | Sequence[float] | None = None, gap: float = 0.0) -> SimSpec:
        """The simulation of the run ``opts`` resolved to: its budget ``steps`` unless given (a failed run's part of
        it), its workers sharing ``--cores`` cores, or where not given ``machine_cores`` (``None``: each its own)."""
        return cls(mode=opts.mode, workers=opts.workers, steps=opts.steps if steps is None else int(steps),
                   bound=opts.bound if opts.mode == "ssp" else None,
                   local_steps=opts.local_steps if opts.mode == "local" else None, backup=opts.backup,
                   stragglers=opts.stragglers, jitter=opts.jitter_spec, seed=opts.seed, network=opts.network_spec,
                   ps=opts.ps, cores=shared_cores(opts.cores, machine_cores), overhead=overhead, compute=compute,
                   late=late, model_bytes=model_bytes, gap=gap)

    @property
    def base(self) -> float:
        """The fixed seconds of every step: ``overhead + compute``."""
        return float(self.overhead) + float(self.compute)

    @property
    def shaped(self) -> bool:
        """Whether transfers take time: a ``network`` that shapes something."""
        return self.network is not None and self.network.shaped

    @property
    def shards(self) -> int:
        """The PS shards a step's pull and push cross (0: allreduce, whose ring has none)."""
        return 0 if self.mode == "allreduce" else int(self.ps)

    @property
    def read_gap(self) -> float:
        """``gap`` where a step has a read of its own (async, ssp); 0 in the other modes."""
        return float(self.gap) if self.mode in ("async", "ssp") else 0.0
