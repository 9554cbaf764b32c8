"""Plain-text rendering for terminals: the one-screen run summary and the progress bar."""
from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from typing import IO, Any

import numpy as np

from ssptk.analysis.step_split import blocked_share
from ssptk.analysis.verdict_facts import dc_fact
from ssptk.core.divergence import DIVERGENCE_RULE, HELD_OUT_DIVERGENCE_RULE
from ssptk.core.labels import label_of
from ssptk.core.options import skew_bound
from ssptk.render.traffic_words import split_text
from ssptk.render.verdict_words import dc_line
from ssptk.rundir import Summary, TrafficSection


def _fmt(v: Any, spec: str = ".4g") -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return format(v, spec)
    return str(v)


def evaluated_every(values: Iterable[Any] | None) -> str:
    """How often runs evaluated the held-out loss, in words, from their ``eval_every`` options: ``every 50
    updates`` (``every 50 or 100 updates`` where they differ; ``every --eval-every updates`` where none is known)."""
    ks = sorted({int(v) for v in values or ()
                 if isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v > 0})
    return f"every {' or '.join(str(k) for k in ks) if ks else '--eval-every'} update{'' if ks == [1] else 's'}"


def _bound_note(s: Summary) -> str:
    """`` (bound S+1 = 3)`` for an SSP run: the skew the logs measure may reach S+1, not S."""
    if s.mode != "ssp" or not isinstance(s.bound, int):
        return ""
    return f" (SSP bound: at most S+1 = {skew_bound(s.bound)})"


def _network_lines(t: TrafficSection | None, not_measured: str | None = None) -> list[str]:
    """The run's measured traffic in one line; for a run that measured none, why (``not_measured``), or nothing."""
    if not t:
        return [f"network   traffic not measured: {not_measured}"] if not_measured else []
    line = (f"network   {t.network or 'free loopback (no --network)'}   "
            f"{_fmt(t.mb_per_minibatch, '.3g')} MB per minibatch to and from the workers")
    if t.busiest:
        task, share = t.busiest
        line += f"   busiest link {task} at {_fmt(100 * share, '.0f')}% of its rate"
    split = split_text(t)
    return [line] + ([f"          {split}"] if split else [])


def _cores_note(cores: Any, shown: bool = False) -> str:
    """Where a shaped network made the cores matter: whose CPU the simulated workers shared (``--cores``)."""
    if cores is None:
        return ", each worker on a machine of its own (--cores 0)" if shown else ""
    return f", the workers sharing {_fmt(cores, '.3g')} cores (--cores)"


def status_word(summary: Mapping[str, Any]) -> str:
    """A run's status as its summary line shows it: ``summary.json``'s ``status`` (ok, failed, interrupted), but
    ``diverged`` for a run that finished with a diverged loss: it did what was asked, yet its model is not a
    trained one (``ssptk run`` exits 3)."""
    s = Summary.of(summary)
    return "diverged" if s.ok and s.diverged else str(s.status)


def _mode_words(s: Summary) -> str:
    """The run's mode as the summary's first lines say it: ``ssp (staleness 2)``, ``local:4 (local SGD)``."""
    if s.mode == "local":  # local:H where the summary says H
        mode = f"{label_of('local', s.local_steps)} (local SGD)"
    else:
        mode = f"ssp (staleness {s.bound})" if s.mode == "ssp" else str(s.mode)
    mode += f", {s.backup} backup worker(s)" if s.backup else ""
    return mode + (f"   optimizer {s.optimizer}" if s.optimizer not in (None, "sgd") else "")


def _outcome_lines(s: Summary) -> list[str]:
    """What the run's loss reached and how it ended: the target, a prediction's clock, params, divergence, failure."""
    lines = []
    if s.target is not None:
        reached = (f"reached in {_fmt(s.time_to_target_s, '.2f')} s, {_fmt(s.steps_to_target)} minibatches"
                   if s.steps_to_target is not None else "not reached")
        lines.append(f"target    {s.target_on or 'training'} loss {_fmt(s.target)}: {reached}")
    if s.predicted:
        lines.append(f"predicted by the simulator, not trained on a cluster: its schedule replayed with the model's "
                     f"gradients; times from a {_fmt(s.overhead_ms, '.2f')} ms/step overhead"
                     + (_cores_note(s.predicted.cores, True) if s.predicted.shows_cores else ""))
    if s.params:
        lines.append("params    " + "  ".join(f"{k} = {_fmt(v, '.4f')}" for k, v in s.params.items()))
    if s.diverged:
        held_out = s.diverged_on == "held-out"
        lines.append(f"DIVERGED  at global step {s.diverged_at_step}"
                     f"{' (held-out evaluation)' if held_out else ''}: "
                     f"{HELD_OUT_DIVERGENCE_RULE if held_out else DIVERGENCE_RULE} "
                     f"(lower --lr or {'H' if s.mode == 'local' else 'the staleness'})")
    if not s.ok:
        lines.append(f"failed    {s.reason}")
    return lines


def format_summary(summary: Mapping[str, Any]) -> str:
    """A run's summary.json as a short block of text."""
    s = Summary.of(summary)
    lines = [
        f"run       {s.run_dir}  [{status_word(s)}{', PREDICTED' if s.predicted else ''}]",
        f"model     {s.model}   mode {_mode_words(s)}   workers {s.workers}",
        f"steps     {s.total_steps} minibatches in {_fmt(s.wall_s, '.2f')} s = {_fmt(s.steps_per_s, '.1f')} steps/s",
        f"loss      final (eval) {_fmt(s.final_loss)}   last train {_fmt(s.train_loss_last)}"
        + (f"   accuracy (held out) {_fmt(s.final_accuracy)}" if s.final_accuracy is not None else ""),
        f"skew      max {_fmt(s.max_skew)} steps{_bound_note(s)}   "
        f"waiting {_fmt(100 * (blocked_share(s) or 0), '.1f')}% of worker time",
        f"staleness mean {_fmt(s.mean_staleness, '.2f')}   max {_fmt(s.max_staleness)}",
    ]
    compensated = dc_fact("this run", s)
    if compensated is not None:  # how large delay compensation's correction was, worded as in a comparison
        lines.append(f"dc        {dc_line(compensated)}")
    if s.ideal_steps_per_s:
        lines.append(f"ideal     {_fmt(s.ideal_steps_per_s, '.1f')} steps/s simulated with this run's "
                     f"{_fmt(s.overhead_ms, '.2f')} ms/step overhead{_cores_note(s.ideal_cores)}: "
                     f"measured / ideal {_fmt(s.measured_over_ideal, '.2f')}")
    lines += _network_lines(s.traffic, s.traffic_not_measured)
    return "\n".join(lines + _outcome_lines(s))


class ProgressBar:
    """A one-line ``[#####.....] 120/600`` bar on a terminal (nothing when not a tty, unless forced)."""

    def __init__(self, label: str = "", stream: IO[str] | None = None, width: int = 30) -> None:
        self.stream = stream or sys.stderr
        self.label, self.width = label, width
        self.enabled = self.stream.isatty()
        self._last = -1

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or done == self._last:
            return
        self._last = done
        filled = int(self.width * min(done, total) / max(total, 1))
        self.stream.write(f"\r{self.label}[{'#' * filled}{'.' * (self.width - filled)}] {done}/{total}\033[K")
        self.stream.flush()

    def starting(self, ready: list[str], pending: list[str]) -> None:
        """While the cluster starts: ``starting: 2/3 tasks ready (waiting for worker:1)``."""
        if not self.enabled:
            return
        total = len(ready) + len(pending)
        waiting = f" (waiting for {', '.join(pending[:3])}{', ...' if len(pending) > 3 else ''})" if pending else ""
        self.stream.write(f"\r{self.label}starting: {len(ready)}/{total} tasks ready{waiting}\033[K")
        self.stream.flush()
        self._last = -2  # something is on the line: close() ends it

    def close(self) -> None:
        if self.enabled and self._last != -1:
            self.stream.write("\n")
            self.stream.flush()
            self._last = -1  # closing again adds no blank line
