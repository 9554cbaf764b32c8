"""Injected delays: stragglers and jitter, seeded so that runs (and the simulator) repeat exactly.

The same :class:`DelayModel` is used by the worker runtime (which sleeps the delay between reading
the parameters and pushing its update) and by the simulator, so both see identical delay streams.
"""
from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ssptk.core.errors import UsageError

JITTER_KINDS = ("exp", "uniform", "pause", "trace")
#: The longest delay a straggler or a jitter may inject into one step: a day. Longer ones are a typo, and
#: beyond ~1e9 s the workers' clocks overflow (``OverflowError: timestamp out of range``).
MAX_DELAY_S = 86_400.0
#: How many of its latest steps a worker replaying a trace takes its own step time from (their median).
PACE_WINDOW = 16
JITTER_HINT = ("use exp:MEAN, uniform:LO:HI or pause:P:SECONDS with seconds >= 0 (LO <= HI) and 0 <= P <= 1, "
               "e.g. exp:0.02, or trace:PATH (a run directory or a CSV of worker,seconds)")

#: Reads a step-time trace (``trace:PATH``) into each source worker's delays, in order. The run directory's
#: reader (:mod:`ssptk.rundir.trace`) sets it when imported: ``core`` may not read run directories itself.
TraceReader = Callable[[str], tuple[tuple[float, ...], ...]]
_trace_reader: TraceReader | None = None


def set_trace_reader(reader: TraceReader) -> None:
    """Install the function that turns ``trace:PATH``'s PATH into per-worker delays (see :data:`TraceReader`)."""
    global _trace_reader
    _trace_reader = reader


@dataclass(frozen=True)
class Jitter:
    """A random per-step delay: ``exp`` with mean ``a``; ``uniform`` on ``[a, b]``; ``pause``: with
    probability ``a`` a step is held ``b`` seconds longer, else not at all (a transient straggler: a GC
    pause, a preempted core, a noisy neighbour); ``trace``: the step times measured in another run
    (``source``), replayed: ``samples`` holds each source worker's step times in order, and a replaying
    worker is held until its own step has taken as long (:class:`DelayModel`)."""

    kind: str
    a: float
    b: float = 0.0
    source: str = ""
    samples: tuple[tuple[float, ...], ...] = ()

    @property
    def mean(self) -> float:
        if self.kind == "trace":
            n = sum(len(s) for s in self.samples)
            return sum(sum(s) for s in self.samples) / n if n else 0.0
        return {"exp": self.a, "uniform": (self.a + self.b) / 2.0}.get(self.kind, self.a * self.b)

    @property
    def longest(self) -> float:
        """The longest delay one step can plausibly get (exp: 20 x its mean, exceeded once in 5e8 steps)."""
        if self.kind == "trace":
            return max((max(s) for s in self.samples if s), default=0.0)
        return 20.0 * self.a if self.kind == "exp" else self.b

    def __str__(self) -> str:
        if self.kind == "trace":
            return f"trace:{self.source}"
        return f"exp:{self.a:g}" if self.kind == "exp" else f"{self.kind}:{self.a:g}:{self.b:g}"


def _trace(spec: str, path: str) -> Jitter:
    if not path:
        raise UsageError(f"bad --jitter {spec!r}: give the run directory or CSV after 'trace:', e.g. trace:runs/slurm")
    if _trace_reader is None:  # a program that imported the simulator alone
        raise UsageError(f"--jitter {spec!r}: reading a trace needs ssptk.rundir; import ssptk first")
    samples = _trace_reader(path)
    if not all(math.isfinite(x) and 0 <= x <= MAX_DELAY_S for s in samples for x in s):
        raise UsageError(f"--jitter {spec!r}: the trace's step times must be finite seconds up to {MAX_DELAY_S:g}")
    return Jitter("trace", 0.0, 0.0, path, samples)


def parse_jitter(spec: str | Jitter | None) -> Jitter | None:
    """Parse ``exp:MEAN``, ``uniform:LO:HI``, ``pause:P:SECONDS`` or ``trace:PATH`` (read at once);
    ``None``/``""``/``none``: no jitter."""
    if spec is None or spec == "" or spec == "none":
        return None
    if isinstance(spec, Jitter):
        return spec
    kind, _, rest = str(spec).partition(":")
    if kind == "trace":
        return _trace(str(spec), rest)
    parts = str(spec).split(":")
    try:
        if parts[0] == "exp" and len(parts) == 2:
            mean = float(parts[1])
            if mean >= 0:
                return Jitter("exp", mean)
        elif parts[0] == "uniform" and len(parts) == 3:
            lo, hi = float(parts[1]), float(parts[2])
            if 0 <= lo <= hi:
                return Jitter("uniform", lo, hi)
        elif parts[0] == "pause" and len(parts) == 3:
            p, seconds = float(parts[1]), float(parts[2])
            if 0 <= p <= 1 and seconds >= 0:
                return Jitter("pause", p, seconds)
    except ValueError:
        pass
    raise UsageError(f"bad --jitter {spec!r}: {JITTER_HINT}")


def parse_straggler(spec: str | tuple[int, float] | list) -> tuple[int, float]:
    """Parse ``I:SECONDS`` (worker index, extra seconds per step)."""
    if isinstance(spec, (tuple, list)) and len(spec) == 2:
        index, seconds = spec
    else:
        parts = str(spec).split(":")
        if len(parts) != 2:
            raise UsageError(f"bad --straggler {spec!r}: use I:SECONDS, e.g. 2:0.05")
        index, seconds = parts
    try:
        i, s = int(index), float(seconds)
    except (TypeError, ValueError):
        raise UsageError(f"bad --straggler {spec!r}: use I:SECONDS, e.g. 2:0.05") from None
    if i < 0 or s < 0:
        raise UsageError(f"bad --straggler {spec!r}: index and seconds must be >= 0")
    return i, s


def parse_stragglers(specs: Any) -> tuple[tuple[int, float], ...]:
    """Every ``--straggler`` given, in order: ``"I:S"`` strings, ``(I, S)`` pairs, or a ``{I: S}`` dict."""
    if specs is None or specs == ():
        return ()
    if isinstance(specs, dict):
        items: list[Any] = list(specs.items())
    elif isinstance(specs, (str, bytes)) or (isinstance(specs, tuple) and len(specs) == 2
                                               and not isinstance(specs[0], (str, tuple, list))):
        items = [specs]
    elif isinstance(specs, (list, tuple)):
        items = list(specs)
    else:
        raise UsageError(f"bad --straggler {specs!r}: use I:SECONDS strings (or (I, SECONDS) pairs), e.g. 2:0.05")
    return tuple(parse_straggler(s) for s in items)


def check_delay_bounds(stragglers: Any, jitter: Jitter | None) -> None:
    """Every worker's straggler seconds (added up) and the jitter's seconds are at most :data:`MAX_DELAY_S`,
    else :class:`UsageError` (the caller has refused non-finite ones already)."""
    day = f"a day ({MAX_DELAY_S:g} s)"
    for i, total in straggler_seconds(stragglers).items():
        if not total <= MAX_DELAY_S:
            raise UsageError(f"--straggler: worker {i} would be held {total:g} s every step, more than {day}: "
                             "give fewer or shorter --straggler delays")
    if jitter is not None and jitter.kind != "trace" \
            and not max(jitter.a if jitter.kind == "exp" else jitter.b, 0.0) <= MAX_DELAY_S:
        raise UsageError(f"bad --jitter {str(jitter)!r}: its delays run over {day}: give seconds up to {MAX_DELAY_S:g}")


def straggler_seconds(stragglers: Any) -> dict[int, float]:
    """Extra seconds per step by worker index. A worker named twice (``--straggler 2:0.01 --straggler
    2:0.02``) gets the sum: the one rule for real runs and the simulator."""
    out: dict[int, float] = {}
    for i, s in parse_stragglers(stragglers):
        out[i] = out.get(i, 0.0) + s
    return out


class DelayModel:
    """The delay worker ``worker`` sleeps at each of its steps: its straggler time plus jitter.

    The jitter stream depends only on ``(seed, worker)`` and the step number, never on timing,
    so two runs with the same seed inject identical delays.

    A trace is replayed in its order: worker ``i`` takes source worker ``i`` modulo the source's workers,
    from a seeded starting step, going round. It paces: a step is held for its source step time less this
    worker's own step time (the median of its last :data:`PACE_WINDOW` steps without their delays, from
    :meth:`observe`; ``own_s`` until then), so the replayed step takes as long as the source's did, or its own
    time where that is longer.
    """

    def __init__(self, worker: int, straggler: dict[int, float] | None, jitter: Jitter | None, seed: int,
                 own_s: float = 0.0) -> None:
        self.fixed = float((straggler or {}).get(worker, 0.0))
        self.jitter = jitter
        self._rng = np.random.default_rng([int(seed), int(worker), 0x5D1A7])
        self._trace: tuple[float, ...] = ()
        self._at = 0
        self._own: deque[float] = deque(maxlen=PACE_WINDOW)
        self._own_s = float(own_s)
        self._last_t: float | None = None
        if jitter is not None and jitter.kind == "trace":
            self._trace = next((s for s in _rotate(jitter.samples, worker) if s), ())
            self._at = int(self._rng.integers(len(self._trace))) if self._trace else 0

    def next(self) -> float:
        """The delay for this worker's next step, in seconds."""
        extra = 0.0
        if self._trace:
            extra = max(0.0, self._trace[self._at % len(self._trace)] - self._own_s)
            self._at += 1
        elif self.jitter is not None and self.jitter.kind != "trace":
            if self.jitter.kind == "exp":
                extra = float(self._rng.exponential(self.jitter.a)) if self.jitter.a > 0 else 0.0
            elif self.jitter.kind == "pause":
                extra = self.jitter.b if self._rng.random() < self.jitter.a else 0.0
            else:
                extra = float(self._rng.uniform(self.jitter.a, self.jitter.b))
        return self.fixed + extra

    def observe(self, record: Any) -> None:
        """This worker's step record (``t``, ``wait_s``, ``delay_s``): its own step time paces a trace."""
        if not self._trace:
            return
        t = float(record.t)
        if self._last_t is not None:
            own = t - self._last_t - float(record.wait_s) - float(record.delay_s)
            if math.isfinite(own) and own >= 0:
                self._own.append(own)
                self._own_s = float(np.median(self._own))
        self._last_t = t

    def take(self, n: int) -> np.ndarray:
        """The next ``n`` delays at once (same stream as calling :meth:`next` ``n`` times)."""
        return np.array([self.next() for _ in range(n)])


def _rotate(samples: tuple[tuple[float, ...], ...], worker: int) -> list[tuple[float, ...]]:
    """The source workers in the order worker ``worker`` tries them: its own (modulo), then the next ones."""
    n = len(samples)
    return [samples[(worker + k) % n] for k in range(n)]
