"""The checks of a run's options, before anything starts: each refusal is one :class:`UsageError` line that says what
was wrong and what to do (used by :func:`ssptk.core.options.resolve`). Imports core only."""
from __future__ import annotations

import math
from typing import Any

from ssptk.core.delays import check_delay_bounds, parse_jitter
from ssptk.core.errors import UsageError
from ssptk.core.labels import STALE_MODES, LabelError, parse_dc
from ssptk.core.models import BUILTIN, MODEL_HINT, builtin_parameters
from ssptk.core.network import MAX_TASKS, named_roles, parse_network
from ssptk.core.optimizers import parse_optimizer
from ssptk.core.resources import check_fits, example_bytes, run_estimate, sim_estimate, slot_part

#: a :class:`ssptk.core.options.RunOptions` (not imported: options imports this module)
_RunOptions = Any

__all__ = ["LAYOUTS", "LR_STALENESS", "DATA_SPLITS", "LR_CONVENTIONS", "MAX_PS", "check_cores", "check_memory",
           "check_target", "stall_timeout_floor", "validate"]

LAYOUTS = ("auto", "processes", "shared")
LR_CONVENTIONS = ("minibatch", "mean")
LR_STALENESS = ("none", "inverse", "dc", "dca")
DATA_SPLITS = ("iid", "label")
MAX_PS = 16
#: what each local-SGD option is when not given (the mode's own options are refused elsewhere)
_LOCAL_DEFAULTS = {"local_steps": None, "outer_lr": None, "outer_momentum": 0.0}


def validate(o: _RunOptions) -> None:
    """Raise :class:`UsageError` (one line) for anything wrong in ``o``; fills in canonical forms (``dc:0.04``,
    ``dca:2.0``, ``momentum:0.9``, the network spec)."""
    if o.bound is not None:
        if o.mode != "ssp":
            raise UsageError(f"--staleness applies to ssp only, not {o.mode}: drop it or use --mode ssp")
        if isinstance(o.bound, bool) or not isinstance(o.bound, int) or o.bound < 0:
            raise UsageError(f"--staleness must be an integer >= 0, got {o.bound!r}")
    if o.workers < 1:
        raise UsageError(f"--workers must be >= 1, got {o.workers}")
    if o.steps < 1:
        raise UsageError(f"--steps must be >= 1, got {o.steps}")
    if o.batch < 1:
        raise UsageError(f"--batch must be >= 1, got {o.batch}")
    _check_local(o)
    if o.backup:
        if o.mode not in ("sync", "local"):
            raise UsageError(f"--backup applies to sync and local only, not {o.mode}")
        if not 0 <= o.backup < o.workers:
            raise UsageError(f"--backup must be >= 0 and less than --workers ({o.workers}), got {o.backup}")
    if o.lr is not None and not 0 < o.lr < math.inf:
        raise UsageError(f"--lr must be a finite number > 0, got {o.lr}")
    if not 0 <= o.seed < 2**32:
        raise UsageError(f"--seed must be an integer in [0, 2**32), got {o.seed}")
    _check_lr_staleness(o)
    o.optimizer = str(parse_optimizer(o.optimizer))  # canonical: momentum:0.9, adam
    if o.lr_staleness != "none" and o.mode not in STALE_MODES:
        raise UsageError(f"--lr-staleness applies to async and ssp, not {o.mode}: its updates have no staleness")
    if o.data_split not in DATA_SPLITS:
        raise UsageError(f"--data-split must be {' or '.join(DATA_SPLITS)}, got {o.data_split!r}")
    if o.eval_every < 0:
        raise UsageError(f"--eval-every must be >= 0 (0: evaluate only at the end), got {o.eval_every}")
    if o.data_split != "iid" and not o.eval_every:
        raise UsageError("--data-split label needs --eval-every K (e.g. 50): with non-IID data each worker's "
                         "training loss is measured on its own labels, so only a held-out loss compares runs")
    if o.lr_convention not in LR_CONVENTIONS:
        raise UsageError(f"--lr-convention must be {' or '.join(LR_CONVENTIONS)}, got {o.lr_convention!r}")
    for i, sec in o.straggler:
        if i >= o.workers:
            raise UsageError(f"--straggler index {i} is out of range: workers are 0..{o.workers - 1}")
        if not math.isfinite(sec):
            raise UsageError(f"--straggler {i}:{sec}: the seconds must be a finite number >= 0")
    jitter = parse_jitter(o.jitter)
    if jitter is not None and not (math.isfinite(jitter.a) and math.isfinite(jitter.b)):
        raise UsageError(f"bad --jitter {o.jitter!r}: the seconds must be finite numbers")
    check_delay_bounds(o.straggler, jitter)
    _check_stall_timeout(o)
    if o.restart_failed < 0:
        raise UsageError(f"--restart-failed must be >= 0, got {o.restart_failed}")
    if o.restart_failed and o.mode == "allreduce":
        raise UsageError("--restart-failed works with --mode sync, ssp, async or local, not allreduce "
                         "(its collectives cannot take a new member mid-run)")
    _check_network(o)
    if o.layout not in LAYOUTS:
        raise UsageError(f"--layout must be {', '.join(LAYOUTS)}, got {o.layout!r}")
    if o.layout == "shared" and o.mode == "allreduce":
        raise UsageError("--layout shared cannot run allreduce (MultiWorkerMirroredStrategy reads TF_CONFIG once per "
                         "process, so each of its workers needs a process): use --layout processes")
    if o.layout == "shared" and o.restart_failed:
        raise UsageError("--restart-failed needs --layout processes: in the shared layout a worker is a thread, and "
                         "a failed one takes the whole process with it")
    if ":" not in o.model and o.model not in BUILTIN:
        raise UsageError(f"unknown model {o.model!r}: {MODEL_HINT}")


def _check_lr_staleness(o: _RunOptions) -> None:
    """``--lr-staleness`` is one of :data:`LR_STALENESS` (``dc`` kept as ``dc:LAMBDA``, ``dca`` as ``dca:LAMBDA0``,
    the lambda filled in)."""
    try:
        dc = parse_dc(o.lr_staleness)
    except LabelError as e:
        raise UsageError(f"bad --lr-staleness {o.lr_staleness!r}: {e.reason}") from None
    if dc is not None:
        o.lr_staleness = dc.spec
    elif o.lr_staleness not in LR_STALENESS:
        raise UsageError(f"--lr-staleness must be none, inverse, dc[:LAMBDA] or dca[:LAMBDA0], "
                         f"got {o.lr_staleness!r}")


def _check_local(o: _RunOptions) -> None:
    """``--local-steps``, ``--outer-lr`` and ``--outer-momentum`` belong to local SGD, with values it can take."""
    if o.mode != "local":
        given = [f for f in _LOCAL_DEFAULTS if getattr(o, f) != _LOCAL_DEFAULTS[f]]
        if given:
            flag = "--" + given[0].replace("_", "-")
            raise UsageError(f"{flag} applies to local only, not {o.mode}: drop it or use --mode local:H")
        return
    if o.local_steps is not None and (isinstance(o.local_steps, bool) or o.local_steps < 1):
        raise UsageError(f"--local-steps must be an integer H >= 1 (local steps per average), got {o.local_steps!r}")
    if o.outer_lr is not None and not 0 < o.outer_lr < math.inf:
        raise UsageError(f"--outer-lr must be a finite number > 0, got {o.outer_lr}")
    if not 0 <= o.outer_momentum < 1:
        raise UsageError(f"--outer-momentum must be >= 0 and < 1, got {o.outer_momentum}")


def _check_network(o: _RunOptions) -> None:
    """``--network`` parses (and is kept in its canonical form), names only roles the mode has and at most
    :data:`~ssptk.core.network.MAX_TASKS` links; ``--ps`` is a shard count the mode has."""
    net = parse_network(o.network)
    if not 1 <= o.ps <= MAX_PS:
        raise UsageError(f"--ps must be from 1 to {MAX_PS} parameter-server tasks, got {o.ps}")
    if o.ps > 1 and o.mode == "allreduce":
        raise UsageError("--ps is for sync, ssp and async: allreduce has no parameter server")
    if net is not None and o.mode == "allreduce" and "ps" in named_roles(o.network):
        raise UsageError(f"bad --network {o.network!r}: allreduce has no parameter server, so ps= shapes no link: "
                         "give worker=RATE (or RATE) for its workers' links")
    tasks = o.workers + (o.ps if o.mode != "allreduce" else 0)
    if net is not None and tasks > MAX_TASKS:
        raise UsageError(f"--network shapes at most {MAX_TASKS} tasks' links, and this run has {tasks} ({o.workers} "
                         f"workers{'' if o.mode == 'allreduce' else f', {o.ps} PS'}): use fewer workers or leave "
                         "--network out")
    o.network = None if net is None else str(net)


def stall_timeout_floor(o: _RunOptions) -> float:
    """The shortest ``stall_timeout`` the injected delays allow (0 without delays): a worker logs a
    step only after its delay, so the watchdog must wait longer than the longest one, plus a margin."""
    d = o.max_delay
    return 1.25 * d + 1.0 if d > 0 else 0.0


def _check_stall_timeout(o: _RunOptions) -> None:
    t = o.stall_timeout
    if isinstance(t, bool) or not isinstance(t, (int, float)):
        try:
            t = o.stall_timeout = float(t)
        except (TypeError, ValueError):
            raise UsageError(f"--stall-timeout must be a number of seconds, got {o.stall_timeout!r}") from None
    if not t >= 0 or t == float("inf"):
        raise UsageError(f"--stall-timeout must be >= 0 seconds (0 turns the watchdog off), got {t!r}")
    floor = stall_timeout_floor(o)
    if t and t <= floor:
        raise UsageError(f"--stall-timeout {t:g} is too short for the injected delays (a step can take "
                         f"{o.max_delay:g} s longer): give more than {floor:g} seconds, or 0 to turn the "
                         f"stall watchdog off")


def check_memory(o: _RunOptions, predicted: bool = False, available: int | None = None, sized: bool = True) -> None:
    """Refuse before anything starts (:class:`UsageError`, one line) a run, or with ``predicted`` a predicted run,
    whose memory (:mod:`ssptk.core.resources`) exceeds what this machine has available (or ``available`` bytes).
    ``sized``: the model may be loaded here to weigh an example (not a notebook cell's, saved only later)."""
    per_example = example_bytes(o.model) if sized else None
    slots = slot_part(o.optimizer, parse_optimizer(o.optimizer).slots, builtin_parameters(o.model),
                      o.workers if o.mode in ("local", "allreduce") else 1)  # the PS's shards, or every worker's
    if predicted:
        estimate = sim_estimate(o.workers, o.steps, batch=o.batch, per_example=per_example, model=True, slots=slots)
    else:
        estimate = run_estimate(o.workers, o.batch, o.steps, ps=o.ps, shared=o.shared, with_ps=o.mode != "allreduce",
                                per_example=per_example, records=not o.no_log, slots=slots)
    check_fits(estimate, f"--workers {o.workers} --batch {o.batch} --steps {o.steps}", available)


def check_cores(cores: Any) -> float | None:
    """``--cores``'s value as a float (``None``: not given, 0: each worker its own machine), else
    :class:`UsageError`."""
    if cores is None:
        return None
    try:
        value = float(cores)
    except (TypeError, ValueError):
        value = math.nan
    if isinstance(cores, bool) or not 0 <= value < math.inf:
        raise UsageError(f"--cores must be a number of cores >= 0 (0: each worker has a machine of its own), "
                         f"not {cores!r}")
    return value


def check_target(target: Any) -> float | None:
    """``target`` as a finite float (or ``None``: chosen from the runs), else :class:`UsageError`."""
    if target is None:
        return None
    try:
        value = float(target)
    except (TypeError, ValueError):
        value = math.nan
    if isinstance(target, bool) or not math.isfinite(value):
        raise UsageError(f"--target must be a training loss (a finite number), not {target!r}")
    return value
