"""The one definition of a run's options, shared by the CLI, the Python API, the worker command and
the notebook magics. Help text, defaults and validation all come from :data:`OPTIONS`; modes and labels
(``--mode ssp:4``) from :mod:`ssptk.core.labels`."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ssptk.core.delays import Jitter, parse_jitter, parse_stragglers, straggler_seconds
from ssptk.core.divergence import DIVERGENCE_RULE
from ssptk.core.errors import UsageError
from ssptk.core.labels import (
    DCA_DECAY,
    DEFAULT_DC_LAMBDA,
    DEFAULT_DCA_LAMBDA,
    DelayComp,
    label_of,
    parse_dc,
    parse_mode,
)
from ssptk.core.models import BUILTIN
from ssptk.core.network import Network, parse_network
from ssptk.core.optimizers import suffix
from ssptk.core.option_checks import check_cores, validate
from ssptk.core.option_types import typed
from ssptk.core.resources import BATCH_COPIES, RECORD_BYTES, SHARED_TASK_BYTES, SIM_RECORD_BYTES, TASK_BYTES

#: ``--layout auto`` runs this many workers or more in the shared layout (see README, "Layouts").
AUTO_SHARED_FROM = 8
BUILTIN_MODELS = tuple(BUILTIN)
DEFAULT_STALENESS = 2
#: ``--mode local`` without ``:H``: average every this many local steps.
DEFAULT_LOCAL_STEPS = 4


@dataclass(frozen=True)
class Option:
    """One option: its flag, type, default and help; ``repeat`` options may be given several times."""

    name: str
    type: Any
    default: Any
    help: str
    metavar: str | None = None
    repeat: bool = False
    flag: bool = False
    #: the :class:`RunOptions` field that holds it, where that is not ``name`` (``--staleness``: ``bound``)
    attr: str | None = None

    @property
    def field(self) -> str:
        """The :class:`RunOptions` field that holds the option."""
        return self.attr or self.name


OPTIONS: tuple[Option, ...] = (
    Option("model", str, "linear", "linear (y = 2x + 10), keras (Dense(2) on 5 features), digits (an MLP on 8x8 "
           "handwritten digits, held-out accuracy), mlp[:WIDTH] (the digits with two hidden layers of WIDTH "
           "units, default 1024: 1.1 M parameters, 4.5 MB through the PS per pull and per push), "
           "package.module:function or file.py:function", "M"),
    Option("mode", str, "ssp", "consistency mode: sync, ssp, async, allreduce or local (local SGD: each worker trains "
           "its own copy for H steps, then the copies' deltas are averaged through the PS; local:H, see "
           "--local-steps)", "MODE"),
    Option("staleness", int, None,
           f"SSP bound S >= 0: a worker starts a step only while at most S completed steps ahead of the slowest, "
           f"so the completed-step skew the logs show is at most S+1 (ssp only; default {DEFAULT_STALENESS})",
           "S", attr="bound"),
    Option("local_steps", int, None,
           f"local SGD's H >= 1: each worker takes H steps on its own copy of the parameters, then the round's "
           f"deltas are averaged on the PS and every worker goes on from the average (local:1 is sync; local only; "
           f"default {DEFAULT_LOCAL_STEPS})", "H"),
    Option("outer_lr", float, None,
           "local only: the outer learning rate, applied to the MEAN of a round's deltas, as torch's model averaging "
           "and DiLoCo apply it: 1 is plain periodic averaging; DiLoCo uses 0.7 with --outer-momentum 0.9 (label "
           "local:H+outer). Default: what --lr-convention means, so that local:1 equals sync: N-B under minibatch "
           "(the deltas summed, as sync sums gradients: every minibatch moves the parameters by LR x its gradient), "
           "1 under mean", "LR"),
    Option("outer_momentum", float, 0.0,
           "local only: Nesterov momentum of the outer step (0: none; DiLoCo: 0.9); kept on the PS, one copy of the "
           "parameters", "M"),
    Option("workers", int, 3, "number of worker tasks; a run is refused before it starts when its memory, "
           f"estimated from --workers, --batch and --steps, exceeds what the machine has available (each task "
           f"{TASK_BYTES >> 20} MB as a process, {SHARED_TASK_BYTES >> 20} MB in the shared layout)", "N"),
    Option("steps", int, 200,
           "work budget K: N*K minibatches in all (sync/allreduce/local: K steps per worker; ssp/async: shared); the "
           f"launcher summarises N*K step records at the end ({RECORD_BYTES / 1000:g} KB each of memory), the "
           f"simulator every step it simulates ({SIM_RECORD_BYTES} bytes each)", "K"),
    Option("batch", int, 16, f"minibatch size (each worker holds its minibatch about {BATCH_COPIES} times over)",
           "B"),
    Option("lr", float, None, "learning rate (default: the model's own)", "LR"),
    Option("lr_convention", str, "minibatch",
           "minibatch: every minibatch's gradient moves the parameters by LR x gradient in every mode (sync and "
           "allreduce apply LR x the sum of the gradients they aggregate); mean: TensorFlow's SyncReplicasOptimizer "
           "convention, LR x their mean (N times less per minibatch)", "minibatch|mean"),
    Option("seed", int, 0, "seed for data, model initialisation and injected delays", "N"),
    Option("data_split", str, "iid",
           "iid: every worker samples the whole training set; label: worker I trains only on the I-th of N slices "
           "of it sorted by label (non-IID data, as when each site keeps its own; needs a model with train_set, "
           "e.g. digits, and --eval-every)", "iid|label"),
    Option("eval_every", int, 0,
           "worker 0 logs the held-out loss (and accuracy) every K updates (local: every K steps per worker, K/H "
           "rounds), so runs can be compared on held-out loss (0: only at the end)", "K"),
    Option("lr_staleness", str, "none",
           "async and ssp: inverse applies each gradient with LR / (staleness + 1), its staleness as known on the PS "
           "when it is applied (Zhang et al. 2016, staleness-aware async-SGD); dc[:LAMBDA] applies the "
           "delay-compensated gradient g + LAMBDA * g * g * (w_now - w_read) (DC-ASGD, Zheng et al. 2017; default "
           f"LAMBDA {DEFAULT_DC_LAMBDA}; w_read: a copy of the model per worker on the PS, no byte more on the wire); "
           "dca[:LAMBDA0] its adaptive form, DC-ASGD-a: LAMBDA = LAMBDA0 / sqrt(mean square of g), per coordinate, "
           f"the mean square a running average (decay {DCA_DECAY}) kept beside each variable on the PS (default "
           f"LAMBDA0 {DEFAULT_DCA_LAMBDA}); none: plain LR", "none|inverse|dc[:LAMBDA]|dca[:LAMBDA0]"),
    Option("optimizer", str, "sgd",
           "what an update applies, where the mode applies it (sync, ssp, async: on the PS, each shard keeping its "
           "variables' slots; local: each worker's inner steps; allreduce: each worker): sgd, momentum:BETA or "
           "nesterov:BETA (BETA in [0, 1), default 0.9), adam or adam:B1,B2,EPS (default 0.9,0.999,1e-8); labels "
           "say it (async\u00b7adam; a comparison label takes it as async\u00b7adam or async@adam)", "SPEC"),
    Option("backup", int, 0, "sync and local: aggregate the first N-B gradients (local: deltas) of each step "
           "(round), drop the late ones", "B"),
    Option("straggler", str, (), "make worker I take SECONDS longer every step (repeatable)", "I:SECONDS",
           repeat=True),
    Option("jitter", str, None,
           "random extra delay every step (seconds): exp:MEAN, uniform:LO:HI, or pause:P:SECONDS (with "
           "probability P a step is held SECONDS longer: a transient straggler), or trace:PATH (replay the step "
           "times of another run, a run directory or a CSV of worker,seconds: a cluster's stragglers on a laptop)",
           "SPEC"),
    Option("layout", str, "auto",
           "processes: every task (the PS, each worker) is a process of its own; shared: one process holds the PS "
           "and every worker, each task still with its own TensorFlow server, the workers as threads (far less "
           f"memory, faster start); auto: shared from {AUTO_SHARED_FROM} workers up, except with allreduce or "
           "--restart-failed, which need processes", "auto|processes|shared"),
    Option("network", str, None,
           "each task's link, shaped by the kernel inside the cluster's private network namespace: RATE (every "
           "task whose role is not named), ps=RATE, worker=RATE, delay=TIME, comma-separated, each once, e.g. "
           "ps=100mbit (rates from 1kbit to 10tbit, in bit, kbit, mbit, gbit, tbit; a transfer crosses both ends' "
           "links, so N workers share their PS's)", "SPEC"),
    Option("ps", int, 1, "parameter-server tasks: the model's variables are spread over K shards by bytes; the "
           "mode's coordination stays on ps:0 (sync, ssp, async)", "K"),
    Option("cores", float, None,
           "the CPU cores the workers share in a prediction (ssptk sim, compare --predict, a run's ideal steps/s): "
           "a step's fixed cost, as a free run of these workers measured it, is CPU work they share, each at most "
           "one core, while an injected delay sleeps; so under a shaped --network, which keeps workers apart, each "
           "step computes faster than in a free run. Default: the cores a run here gets (os.sched_getaffinity, or "
           "a cgroup's CPU quota where it allows fewer; a run "
           "records them in config.json and its predictions use them); 0: each worker has a machine of its own (a "
           "cluster's), a step's overhead then its CPU work (a run here with N workers on C < N cores: its "
           "overhead x C / N). Without a shaped --network a step takes its measured time and this changes nothing",
           "C"),
    Option("gpus", str, "auto", "auto (GPUs that nvidia-smi lists, else CPU), none, or ids like 0,2", "SPEC"),
    Option("out", str, None, "run directory (default runs/<timestamp>-<mode>); must not exist or be empty", "DIR"),
    Option("no_log", bool, False, "do not write per-step records (benchmarks only: summary stays)", flag=True),
    Option("allow_nan", bool, False, "keep training when the loss is NaN or infinite (default: stop the run)",
           flag=True),
    Option("stop_on_divergence", bool, False,
           f"end the run (failed) once it has diverged ({DIVERGENCE_RULE}; default: keep training, and mark "
           "the run diverged)", flag=True),
    Option("restart_failed", int, 0,
           "sync, ssp, async and local: start a worker that dies again, up to N times in all, and finish the run "
           "(sync and local: not worker 0, which runs the aggregator)", "N"),
    Option("stall_timeout", float, 60,
           "end the run if no worker logs a step for this long, in seconds; 0 turns the watchdog off", "SECONDS"),
)


_DEFAULT: dict[str, Any] = {o.name: o.default for o in OPTIONS}
#: option name -> RunOptions field, and back, where they differ (the CLI's and config.json's ``staleness`` is the bound)
_FIELD = {o.name: o.field for o in OPTIONS if o.attr}
_NAME = {field: name for name, field in _FIELD.items()}


@dataclass
class RunOptions:
    """A run's resolved options (see :data:`OPTIONS` for meanings; the defaults come from there)."""

    model: str = _DEFAULT["model"]
    mode: str = _DEFAULT["mode"]
    #: SSP's staleness bound S (``--staleness``; ``None`` in the other modes). The staleness a step record measures
    #: is what the bound holds to it, not this.
    bound: int | None = _DEFAULT["staleness"]
    local_steps: int | None = _DEFAULT["local_steps"]
    outer_lr: float | None = _DEFAULT["outer_lr"]
    outer_momentum: float = _DEFAULT["outer_momentum"]
    workers: int = _DEFAULT["workers"]
    steps: int = _DEFAULT["steps"]
    batch: int = _DEFAULT["batch"]
    lr: float | None = _DEFAULT["lr"]
    lr_convention: str = _DEFAULT["lr_convention"]
    seed: int = _DEFAULT["seed"]
    data_split: str = _DEFAULT["data_split"]
    eval_every: int = _DEFAULT["eval_every"]
    lr_staleness: str = _DEFAULT["lr_staleness"]
    optimizer: str = _DEFAULT["optimizer"]
    backup: int = _DEFAULT["backup"]
    straggler: tuple[tuple[int, float], ...] = field(default_factory=tuple)
    jitter: str | None = _DEFAULT["jitter"]
    layout: str = _DEFAULT["layout"]
    network: str | None = _DEFAULT["network"]
    ps: int = _DEFAULT["ps"]
    cores: float | None = _DEFAULT["cores"]
    gpus: str = _DEFAULT["gpus"]
    out: str | None = _DEFAULT["out"]
    no_log: bool = _DEFAULT["no_log"]
    allow_nan: bool = _DEFAULT["allow_nan"]
    stop_on_divergence: bool = _DEFAULT["stop_on_divergence"]
    stall_timeout: float = _DEFAULT["stall_timeout"]
    restart_failed: int = _DEFAULT["restart_failed"]

    @property
    def stragglers(self) -> dict[int, float]:
        """Straggler seconds by worker index (repeated indices add up: :func:`~ssptk.core.delays.straggler_seconds`)."""
        return straggler_seconds(self.straggler)

    @property
    def jitter_spec(self) -> Jitter | None:
        return parse_jitter(self.jitter)

    @property
    def max_delay(self) -> float:
        """The longest injected delay one step can plausibly take: the largest straggler time plus
        jitter (uniform: its upper end; exp: 20 times its mean, exceeded once in 5e8 steps)."""
        j = self.jitter_spec
        return max(self.stragglers.values(), default=0.0) + (0.0 if j is None else j.longest)

    @property
    def network_spec(self) -> Network | None:
        return parse_network(self.network)

    @property
    def shared(self) -> bool:
        """Whether the run's tasks share one process (``--layout``; ``auto`` decides by the worker count)."""
        if self.layout == "auto":
            return self.workers >= AUTO_SHARED_FROM and self.mode != "allreduce" and not self.restart_failed
        return self.layout == "shared"

    @property
    def aggregated(self) -> int:
        """How many gradients one update averages: N - B in sync, N in allreduce, 1 in ssp and async; local: how
        many deltas one round averages, N - B."""
        if self.mode in ("sync", "local"):
            return self.workers - self.backup
        return self.workers if self.mode == "allreduce" else 1

    @property
    def eval_period(self) -> int:
        """The global steps between worker 0's held-out evaluations: ``eval_every`` (0: only at the end); local
        SGD's global step is a round of H steps per worker, so there ``eval_every / H`` rounds (at least 1): every
        K steps per worker, as in sync, not K rounds."""
        if self.mode == "local" and self.eval_every:
            return max(1, round(self.eval_every / (self.local_steps or 1)))
        return self.eval_every

    @property
    def delay_comp(self) -> DelayComp | None:
        """``--lr-staleness dc[:LAMBDA]`` or ``dca[:LAMBDA0]``: the delay compensation (``None`` without)."""
        return parse_dc(self.lr_staleness)

    @property
    def outer_scale(self) -> float:
        """local: what a round applies to the *mean* of its deltas: ``--outer-lr``, or by default what
        ``--lr-convention`` means, so that local:1 equals sync: :attr:`aggregated` (N - B: the deltas summed, as sync
        sums its gradients) under ``minibatch``, 1 (plain averaging) under ``mean``."""
        return self.outer_lr if self.outer_lr is not None else self.update_lr(1.0)

    def update_lr(self, lr: float) -> float:
        """The learning rate an update applies to the *mean* of the gradients it aggregates, so that ``lr``
        means the same step per minibatch in every mode (``--lr-convention minibatch``): ``lr`` times
        :attr:`aggregated`; with ``--lr-convention mean``, ``lr`` itself."""
        return lr * self.aggregated if self.lr_convention == "minibatch" else lr

    @property
    def label(self) -> str:
        """``ssp:S``, ``local:H`` or the mode's name (see :func:`label_of`), then its optimizer unless sgd
        (``async\u00b7adam``)."""
        number = self.local_steps if self.mode == "local" else self.bound
        return label_of(self.mode, number) + suffix(self.optimizer)

    def to_dict(self) -> dict[str, Any]:
        """The options by their names (``config.json``'s ``options``: ``staleness`` for :attr:`bound`)."""
        d = {_NAME.get(k, k): v for k, v in dataclasses.asdict(self).items()}
        d["straggler"] = [list(x) for x in self.straggler]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunOptions:
        """The options of a dict by their names (:meth:`to_dict`'s); names it does not know are left out."""
        known = {f.name for f in dataclasses.fields(cls)}
        kw = {_FIELD.get(k, k): v for k, v in d.items() if _FIELD.get(k, k) in known}
        kw["straggler"] = tuple(tuple(x) for x in kw.get("straggler", ()))
        return cls(**kw)


def resolve(**kwargs: Any) -> RunOptions:
    """Build and validate :class:`RunOptions` from keyword arguments (the Python API's entry).

    Raises :class:`UsageError` with a one-line message for anything a user got wrong, before any
    process starts. Model import problems are checked separately (:func:`ssptk.core.models.load_model`).
    """
    known = {o.name for o in OPTIONS}
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise UsageError(f"unknown option {unknown[0]!r}: options are {', '.join(sorted(known))}")
    kw = {k: v for k, v in kwargs.items()
          if v is not None or k in ("staleness", "local_steps", "outer_lr", "lr", "jitter", "out", "network", "cores")}
    table = {o.name: o for o in OPTIONS}  # every value held to its option's type, as the CLI's argparse does
    kw = {k: v if k == "staleness" else typed(table[k], v) for k, v in kw.items()}  # staleness: _validate's
    given_mode = kw.get("mode", _DEFAULT["mode"])
    kw["mode"], number = parse_mode(given_mode)  # "ssp:4", "local:8" are shorthands
    if number is not None:
        key = "staleness" if kw["mode"] == "ssp" else "local_steps"
        if kw.get(key) is not None and kw[key] != number:
            raise UsageError(f"--mode {given_mode} conflicts with --{key.replace('_', '-')} {kw[key]!r}: "
                             "give the number once")
        kw[key] = number
    kw["straggler"] = parse_stragglers(kw.get("straggler"))
    opts = RunOptions(**{_FIELD.get(k, k): v for k, v in kw.items()})
    validate(opts)
    opts.cores = check_cores(opts.cores)
    if opts.mode == "ssp" and opts.bound is None:
        opts.bound = DEFAULT_STALENESS
    if opts.mode == "local" and opts.local_steps is None:
        opts.local_steps = DEFAULT_LOCAL_STEPS
    return opts


def skew_bound(staleness: int) -> int:
    """The largest step skew the logs can show under SSP with bound S: S + 1 (a worker that may start a
    step while S ahead is S + 1 ahead once it completes it; see docs/run-directory.md)."""
    return int(staleness) + 1
