"""Plain-text rendering for terminals: the one-screen run summary and the progress bar."""
from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import IO, Any

import numpy as np

from ssptk.analysis.verdict_facts import dc_fact
from ssptk.core.divergence import DIVERGENCE_RULE, HELD_OUT_DIVERGENCE_RULE
from ssptk.core.labels import label_of
from ssptk.core.options import skew_bound
from ssptk.render.traffic import split_text
from ssptk.render.verdict import dc_line

#: What a local SGD run's staleness is (its step records' ``staleness``): every display of it says so.
LOCAL_STALENESS = "local steps since the last average"


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


def _bound_note(s: dict[str, Any]) -> str:
    """`` (bound S+1 = 3)`` for an SSP run: the skew the logs measure may reach S+1, not S."""
    if s.get("mode") != "ssp" or not isinstance(s.get("staleness"), int):
        return ""
    return f" (SSP bound: at most S+1 = {skew_bound(s['staleness'])})"


def _network_lines(t: dict[str, Any], not_measured: str | None = None) -> list[str]:
    """The run's measured traffic in one line; for a run that measured none, why (``not_measured``), or nothing."""
    if not t:
        return [f"network   traffic not measured: {not_measured}"] if not_measured else []
    line = (f"network   {t.get('network') or 'free loopback (no --network)'}   "
            f"{_fmt(t.get('mb_per_minibatch'), '.3g')} MB per minibatch to and from the workers")
    if t.get("busiest"):
        task, share = t["busiest"]
        line += f"   busiest link {task} at {_fmt(100 * share, '.0f')}% of its rate"
    split = split_text(t)
    return [line] + ([f"          {split}"] if split else [])


def _cores_note(cores: Any, shown: bool = False) -> str:
    """Where a shaped network made the cores matter: whose CPU the simulated workers shared (``--cores``)."""
    if cores is None:
        return ", each worker on a machine of its own (--cores 0)" if shown else ""
    return f", the workers sharing {_fmt(cores, '.3g')} cores (--cores)"


def status_word(s: dict[str, Any]) -> str:
    """A run's status as its summary line shows it: ``summary.json``'s ``status`` (ok, failed, interrupted), but
    ``diverged`` for a run that finished with a diverged loss: it did what was asked, yet its model is not a
    trained one (``ssptk run`` exits 3)."""
    status = s.get("status")
    return "diverged" if status == "ok" and s.get("diverged") else str(status)


def format_summary(s: dict[str, Any]) -> str:
    """A run's summary.json as a short block of text."""
    local = s.get("mode") == "local"
    mode = f"ssp (staleness {s.get('staleness')})" if s.get("mode") == "ssp" else str(s.get("mode"))
    if local:  # local:H where the summary says H
        mode = f"{label_of('local', s.get('local_steps'))} (local SGD)"
    if s.get("backup"):
        mode += f", {s['backup']} backup worker(s)"
    if s.get("optimizer") not in (None, "sgd"):
        mode += f"   optimizer {s['optimizer']}"
    lines = [
        f"run       {s.get('run_dir')}  [{status_word(s)}{', PREDICTED' if s.get('predicted') else ''}]",
        f"model     {s.get('model')}   mode {mode}   workers {s.get('workers')}",
        f"steps     {s.get('total_steps')} minibatches in {_fmt(s.get('wall_s'), '.2f')} s "
        f"= {_fmt(s.get('steps_per_s'), '.1f')} steps/s",
        f"loss      final (eval) {_fmt(s.get('final_loss'))}   last train {_fmt(s.get('train_loss_last'))}"
        + (f"   accuracy (held out) {_fmt(s.get('final_accuracy'))}" if s.get("final_accuracy") is not None else ""),
        f"skew      max {_fmt(s.get('max_skew'))} steps{_bound_note(s)}   "
        f"waiting {_fmt(100 * (s.get('wait_fraction') or 0), '.1f')}% of worker time",
        f"staleness mean {_fmt(s.get('mean_staleness'), '.2f')}   max {_fmt(s.get('max_staleness'))}"
        + (f"   ({LOCAL_STALENESS})" if local else ""),
    ]
    compensated = dc_fact("this run", s)
    if compensated is not None:  # how large delay compensation's correction was, worded as in a comparison
        lines.append(f"dc        {dc_line(compensated)}")
    if s.get("ideal_steps_per_s"):
        lines.append(f"ideal     {_fmt(s['ideal_steps_per_s'], '.1f')} steps/s simulated with this run's "
                     f"{_fmt(s.get('overhead_ms'), '.2f')} ms/step overhead{_cores_note(s.get('ideal_cores'))}: "
                     f"measured / ideal {_fmt(s.get('measured_over_ideal'), '.2f')}")
    lines += _network_lines(s.get("traffic") or {}, s.get("traffic_not_measured"))
    if s.get("target") is not None:
        reached = (f"reached in {_fmt(s.get('time_to_target_s'), '.2f')} s, "
                   f"{_fmt(s.get('steps_to_target'))} minibatches" if s.get("steps_to_target") is not None
                   else "not reached")
        lines.append(f"target    {s.get('target_on') or 'training'} loss {_fmt(s['target'])}: {reached}")
    if s.get("predicted"):
        lines.append(f"predicted by the simulator, not trained on a cluster: its schedule replayed with the model's "
                     f"gradients; times from a {_fmt(s.get('overhead_ms'), '.2f')} ms/step overhead"
                     + (_cores_note(s["predicted"]["cores"], True) if "cores" in s["predicted"] else ""))
    if s.get("params"):
        lines.append("params    " + "  ".join(f"{k} = {_fmt(v, '.4f')}" for k, v in s["params"].items()))
    if s.get("diverged"):
        held_out = s.get("diverged_on") == "held-out"
        lines.append(f"DIVERGED  at global step {s.get('diverged_at_step')}"
                     f"{' (held-out evaluation)' if held_out else ''}: "
                     f"{HELD_OUT_DIVERGENCE_RULE if held_out else DIVERGENCE_RULE} "
                     f"(lower --lr or {'H' if local else 'the staleness'})")
    if s.get("status") != "ok":
        lines.append(f"failed    {s.get('reason')}")
    return "\n".join(lines)


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
