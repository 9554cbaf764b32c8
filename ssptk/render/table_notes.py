"""The sentences under a comparison's table (the report, the terminal, the notebook): what differs between the
runs (:func:`takeaway_line`), the loss target and who reached it (:func:`target_lines`), the learning-rate
convention (:func:`lr_lines`)."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from ssptk.analysis.comparison_table import TARGET_FACTOR
from ssptk.analysis.verdict import Verdict, verdict_of
from ssptk.render.cells import cell, missing, percent
from ssptk.render.text import evaluated_every
from ssptk.render.verdict_words import diverged_line, first_phrase
from ssptk.rundir import StoredOptions

__all__ = ["cores_phrase", "lr_lines", "takeaway_line", "target_lines"]


def takeaway_line(table: pd.DataFrame) -> str | None:
    """One line on what differs between the runs: steps/s (against sync's, where there is one), the share
    of worker time spent waiting and the mean staleness, per label; ``None`` for fewer than two runs."""
    rows = [r for r in table.to_dict("records") if r.get("status") == "ok"]
    if len(rows) < 2 or "steps_per_s" not in table.columns:
        return None
    base = next((r for r in rows if r.get("mode") == "sync"), rows[0])

    def speed(r: Mapping[Any, Any]) -> str:
        v, b = r.get("steps_per_s"), base.get("steps_per_s")
        shown = f"{r['label']} {cell(v)}"
        return shown if r is base or not (v and b) else f"{shown} ({v / b:.3g}x {base['label']})"

    def num(v: Any) -> str:
        return "-" if missing(v) else f"{v:.2g}"

    return ("What differs: steps/s " + ", ".join(speed(r) for r in rows)
            + "; time spent waiting " + ", ".join(f"{r['label']} {percent(r.get('wait_fraction'))}" for r in rows)
            + "; mean staleness " + ", ".join(f"{r['label']} {num(r.get('mean_staleness'))}" for r in rows) + ".")


def cores_phrase(cores: Any) -> str:
    """``; the workers sharing 2 cores (--cores)``: the cores the predictions' workers shared under a shaped network
    (``None``: each its own machine); nothing where no prediction's network made them matter."""
    said = ["each worker on a machine of its own" if c is None else f"the workers sharing {float(c):g} cores"
            for c in cores or ()]
    return f"; {' or '.join(said)} (--cores)" if said else ""


def target_lines(table: pd.DataFrame, verdict: Verdict | None = None) -> list[str]:
    """One line on the loss target (which, how it was chosen, who reached it first: the comparison's ``verdict``, else
    the one ``table`` carries) and, when some runs diverged, one naming them and the rule each broke: what the
    report and the CLI print under the table."""
    verdict = verdict_of(table) if verdict is None else verdict
    lines = []
    if table.attrs.get("predicted"):
        lines.append("PREDICTED: no cluster ran; every run is the simulator's schedule replayed with the model's real "
                     "gradients, its steps/s and seconds from a simulated clock (see each summary's overhead_ms)"
                     f"{cores_phrase(table.attrs.get('predicted_cores'))}.")
    target = verdict.target
    held_out = verdict.target_on == "held-out"
    what = "held-out loss" if held_out else "training loss"
    if target is None:
        lines.append(f"Target {what}: none (no run converged), so no time or minibatches to target.")
    else:
        best = "held-out loss at the end" if held_out else "smoothed training loss"
        how = (f"{TARGET_FACTOR:g} x the best final {best} among the runs that converged"
               if verdict.target_auto else "given with --target")
        measured = (f"worker 0's held-out evaluations {evaluated_every(table.attrs.get('eval_every'))}" if held_out
                    else "smoothed over 5 x workers step records")
        lines.append(f"Target {what} {target:.4g} ({how}; {measured}, times from the start barrier); "
                     f"{first_phrase(verdict)}.")
    diverged = diverged_line(verdict)
    return lines + ([diverged] if diverged else [])


def lr_lines(options: Iterable[Mapping[str, Any]]) -> list[str]:
    """One line saying which learning-rate convention the runs (their ``options``) used, and one more where
    some of them scaled it by staleness (``--lr-staleness inverse``)."""
    stored = [StoredOptions.of(o) for o in options if o]
    inverse = ["Runs with --lr-staleness inverse (labels ending in +inverse) apply each gradient with lr / (its "
               "staleness + 1) (Zhang et al. 2016): compare them with the plain mode to see whether it helps."] \
        if any(o.lr_staleness == "inverse" for o in stored) else []
    return _convention_lines(stored) + inverse


def _convention_lines(options: list[StoredOptions]) -> list[str]:
    used = {o.lr_convention or "mean" for o in options}  # runs made before the option: the mean
    if used == {"minibatch"}:
        return ["Learning rate per minibatch (--lr-convention minibatch): every gradient moves the parameters by "
                "lr x gradient in every mode; sync and allreduce apply lr x the sum of the gradients they "
                "aggregate, so differences between modes come from staleness and waiting, not from the step size."]
    if used == {"mean"}:
        return ["Learning rate as TensorFlow's SyncReplicasOptimizer (--lr-convention mean): sync and allreduce "
                "apply lr x the mean of the N gradients they aggregate, N times less per minibatch than ssp and "
                "async: compare loss against updates, not minibatches."]
    return ["The runs used different learning-rate conventions (--lr-convention): their losses do not compare."] \
        if len(used) > 1 else []
