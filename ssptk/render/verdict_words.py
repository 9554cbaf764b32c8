"""A comparison's verdict (:class:`ssptk.analysis.verdict.Verdict`) in words: the sentences under a table, the
``best:`` line, the figure's markers and its no-winner box. Everything here words what the verdict decided; nothing
here compares a number with another or with a threshold."""
from __future__ import annotations

from collections.abc import Iterable

from ssptk.analysis.outcomes import DIVERGED, EARLY_PER_WORKER, FAILED, NEVER, SOME, SettingOutcome
from ssptk.analysis.verdict import Noise, Verdict
from ssptk.analysis.verdict_facts import DC_NEGLIGIBLE, DelayCompensation, PaceGap, SkewOverStaleness
from ssptk.core.divergence import DIVERGENCE_RULE, HELD_OUT_DIVERGENCE_RULE
from ssptk.render.cells import small_share

__all__ = ["WHERE_THE_TRADEOFF_IS", "best_line", "cost_line", "dc_line", "diverged_line", "fact_lines", "first_phrase",
           "legend_mark", "marker", "no_winner_box", "outcome_status", "pace_lines", "verdict_lines", "why_no_winner"]

#: Where a newcomer sees both sides of the tradeoff, when a run does not show them.
WHERE_THE_TRADEOFF_IS = ('notebooks/sync_ssp_async.ipynb, "Both axes" (non-IID data with transient pauses, where '
                         "sync loses to waiting, async to staleness and a middle bound wins)")


def _n(value: float | None) -> str:
    """4 significant digits, as the tables show numbers (``-`` when missing)."""
    return "-" if value is None else f"{value:.4g}"


def _pct(share: float | None) -> str:
    return "-" if share is None else f"{100.0 * share:.0f}%" if share >= 0.01 else "under 1%"


def _names(labels: Iterable[str]) -> str:
    items = list(labels)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1] if items else ""


def _on(o: SettingOutcome) -> str:
    return "held-out loss" if o.diverged_on == "held-out" else "training loss"


def outcome_status(o: SettingOutcome) -> str:
    """How a setting ended, in a few words: ``reached the target``, ``never reached the target``, ``diverged
    (held-out loss)``, ``failed``, ``reached the target in 2 of its 3 runs``."""
    if o.reach == DIVERGED:
        return f"diverged ({_on(o)})"
    if o.reach == FAILED:
        return "failed"
    if o.reach == NEVER:
        return "never reached the target"
    if o.reach == SOME:
        return f"reached the target in {o.reached_runs} of its {o.runs} runs"
    return "reached the target"


def legend_mark(o: SettingOutcome | None) -> str:
    """What a legend adds to a setting's label: `` (DIVERGED)``, `` (DIVERGED, held-out)``, `` (1 of 3 DIVERGED)``,
    or nothing (``o``: ``None`` for a label the verdict does not have)."""
    if o is None or not o.diverged_runs:
        return ""
    which = ", held-out" if o.diverged_on == "held-out" else ""
    return f" ({o.diverged_runs} of {o.runs} DIVERGED{which})" if o.reach != DIVERGED else f" (DIVERGED{which})"


def marker(o: SettingOutcome) -> str:
    """What a figure writes at a setting without a time or minibatches to the target: ``× diverged`` (over
    ``(held-out)`` on a second line, to stay as narrow as its neighbours'), ``× failed``, ``× not reached``."""
    if o.reach == DIVERGED:
        return "× diverged" + ("\n(held-out)" if o.diverged_on == "held-out" else "")
    return "× failed" if o.reach == FAILED else "× not reached"


def _noise_words(noise: Noise, lead: bool) -> str:
    """Why a lead counts (``lead``) or is within noise: the repeats' spread, or the stated per-run figure."""
    if noise.basis == "repeats":
        return ("the spread of the repeats (their min–max times do not overlap)" if lead
                else "their min–max times over the repeats overlap")
    figure = f"{100 * noise.figure:.0f}%"
    if noise.predicted:
        what = f"{figure}, the margin ssptk gives a prediction (no surer than one run)"
    else:
        what = (f"{figure}, the noise ssptk assumes for one run of a setting, since repeats of one setting have varied "
                "by up to 24% on this kind of machine; one run each cannot measure its own spread: --repeat 3 would")
    return what if lead else f"within {what}"


def _early_words(o: SettingOutcome) -> str:
    of_run = f" ({_pct(o.share)} of its run)" if o.share is not None else ""
    return f"{o.label} reached the target after {o.per_worker:.3g} minibatches per worker{of_run}"


def why_no_winner(v: Verdict) -> str:
    """Why the verdict has no winner, in one clause (``""`` when it has one)."""
    f = v.outcome(v.fastest) if v.fastest is not None else None
    if v.kind == "none" or f is None:
        return "no setting reached the target" if v.kind != "single" else "one setting: nothing to compare"
    if v.kind == "unreliable":
        missed = (f"reached it in only {f.reached_runs} of its {f.runs} runs" if f.missed_some and f.repeated
                  else f"{'diverged' if f.diverged_runs else 'failed'} in "
                  f"{'some of its runs' if f.repeated else 'its run'}")
        return f"{f.label}, the fastest to the target, {missed}"
    if v.kind == "early":
        return f"{_early_words(f)}, so the times to it measure start-up, not what staleness costs per update"
    if v.kind == "short":
        run = f", a run of {f.total_per_worker:.3g} per worker" if f.total_per_worker is not None else ""
        return (f"{_early_words(f)}{run}: within each worker's first {EARLY_PER_WORKER} steps, which run slower "
                "while its graphs warm up, so ssptk cannot tell start-up from the cost per update here (more --steps "
                "and a lower --target would)")
    if v.kind == "tie":
        return f"{_names([f.label, *v.tied])} reached the target at the same time ({_n(f.time_s)} s)"
    if v.kind == "noise":
        return f"{f.label}'s lead over {_names(v.close)} is within noise ({_noise_words(v.noise, lead=False)})"
    if v.kind == "single":
        return "one setting: nothing to compare"
    return ""


def first_phrase(v: Verdict) -> str:
    """Who reached the target first, as the target line says it: ties named together, a lead within noise or
    from a setting that missed it in some runs said so."""
    if v.fastest is None:
        return "no run reached it"
    f = v.outcome(v.fastest)
    if v.tied:
        return (f"first to reach it: {_names([f.label, *v.tied])}, tied ({_n(f.time_s)} s, "
                f"{_n(f.minibatches)} minibatches)")
    said = f"first to reach it: {f.label} ({_n(f.time_s)} s, {_n(f.minibatches)} minibatches)"
    if v.kind == "noise":
        return f"{said}, within noise of {_names(v.close)}"
    if v.kind == "unreliable":
        return f"{said}, but it {outcome_status(f).replace('reached the target', 'reached it only')}"
    return said


def diverged_line(v: Verdict) -> str | None:
    """One line naming the diverged settings and the rule each broke (``None`` when none diverged)."""
    if not v.diverged:
        return None
    parts = []
    for on, rule in (("training loss", DIVERGENCE_RULE), ("held-out loss", HELD_OUT_DIVERGENCE_RULE)):
        names = [f"{o.label} ({o.diverged_runs} of {o.runs} runs)" if o.repeated else o.label
                 for o in v.diverged if _on(o) == on]
        if names:
            parts.append(f"{_names(names)} ({rule})")
    return f"Diverged: {'; '.join(parts)}: no time to target is shown for them."


def cost_line(v: Verdict) -> str | None:
    """What each setting cost per update, least first, the never-reached and diverged ones last (the largest
    cost); ``None`` when every setting reached the target (the table shows it) or nothing can be compared."""
    c = v.cost
    if v.kind == "single" or not (c.never or c.diverged):
        return None
    parts = []
    for label in c.order:
        o = v.outcome(label)
        if label in c.diverged:
            parts.append(f"{label} diverged ({_on(o)})")
        elif label in c.never:
            run = f" of its {o.runs} runs" if o.repeated else ""
            within = f" in its {o.total:.4g} minibatches" if o.total is not None and not o.repeated else ""
            parts.append(f"{label} never reached it{within}" if not o.reached_runs
                         else f"{label} missed it in {o.never_runs}{run}")
        else:
            parts.append(f"{label} {_n(o.minibatches)}")
    failed = f" ({_names(c.failed)} failed: unknown)" if c.failed else ""
    return ("What each setting cost per update (minibatches to the target), least first, the largest cost last: "
            + "; ".join(parts) + failed + ".")


def verdict_lines(v: Verdict) -> list[str]:
    """What the time to the target says about the tradeoff, then what each setting cost per update when some never
    reached the target or diverged, then the facts owed to the reader (none for a single setting, nor the
    tradeoff sentence when no setting reached the target: the target line says so)."""
    if v.kind == "single":
        return fact_lines(v)
    lines = []
    if v.winner is not None and v.cost.kind == "same":
        lines.append(f"Fastest to the target: {v.winner}, ahead of every other setting by more than "
                     f"{_noise_words(v.noise, lead=True)}; but staleness cost no progress per update here (every "
                     f"setting needed {_n(v.cost.least)}-{_n(v.cost.most)} minibatches), so it is first only because "
                     f"its steps are faster: the tradeoff is not in this run. Where both sides show: "
                     f"{WHERE_THE_TRADEOFF_IS}.")
    elif v.winner is not None:
        lines.append(f"Fastest to the target: {v.winner}, ahead of every other setting by more than "
                     f"{_noise_words(v.noise, lead=True)}.")
    elif v.no_tradeoff:
        lines.append(f"The staleness tradeoff is not in this run: {why_no_winner(v)}; and every setting needed "
                     f"{_n(v.cost.least)}-{_n(v.cost.most)} minibatches. This run shows what staleness buys "
                     f"(steps/s, wait) and lets drift (skew, staleness); both sides: {WHERE_THE_TRADEOFF_IS}.")
    elif v.kind != "none":
        lines.append(f"No winner on time to the target: {why_no_winner(v)}.")
    cost = cost_line(v)
    return lines + ([cost] if cost else []) + fact_lines(v)


def best_line(v: Verdict) -> str:
    """``best: ssp:8`` for a real winner, else ``best: none (no winner: ...)``: what a notebook prints."""
    if v.winner is not None:
        return f"best: {v.winner} (ahead by more than {_noise_words(v.noise, lead=True)})"
    return f"best: none (no winner: {why_no_winner(v)})"


_BOX = {"early": "no winner: reached early,\nthe times measure start-up",
        "short": "no winner: too few steps\nto tell start-up from pace",
        "noise": "no winner: within noise", "tie": "no winner: a tie",
        "none": "no setting reached the target"}


def no_winner_box(v: Verdict) -> str | None:
    """The figure's box where a star would be: why there is no winner (``None`` with a winner, or one setting)."""
    if v.winner is not None or v.kind == "single":
        return None
    if v.kind == "unreliable" and v.fastest is not None:
        f = v.outcome(v.fastest)
        return "no winner: the fastest\n" + ("missed the target in some runs" if f.missed_some and f.repeated
                                             else ("diverged" if f.diverged_runs else "failed"))
    return _BOX.get(v.kind)


def _skew_line(facts: list[SkewOverStaleness]) -> str:
    """One sentence for every setting whose skew and staleness disagree: each one's figures, then why, once."""
    said = []
    for f in facts:
        if f.far:
            said.append(f"{f.label}'s max skew {f.max_skew} is far above its mean staleness {f.mean_staleness:.3g}")
        if f.less_stale_than:
            said.append(f"{f.label}, which no bound holds, has a lower mean staleness ({f.mean_staleness:.3g}) than "
                        + _names(f"{label}'s {s:.3g}" for label, s in f.less_stale_than))
    whose = _names(f"{f.label}'s" for f in facts)
    return ("; ".join(said) + ": skew counts how many steps one worker got ahead of another, staleness how many "
            "updates landed between a step's read of the parameters and its own update. A worker that races ahead "
            "while the others wait (for a core on a busy machine, or in a pause) applies its updates with few others "
            f"in between, so a large skew can come with a low staleness: here {whose} workers took turns more "
            f"than they ran together, which says nothing about how stale {'they are' if len(facts) > 1 else 'it is'} "
            "in principle.")


def dc_line(f: DelayCompensation) -> str:
    """What a setting's delay compensation did, in one sentence: how large its correction was against the gradient
    (mean, median, largest) and, when no update's reached :data:`~ssptk.analysis.verdict_facts.DC_NEGLIGIBLE`, that
    the setting trained as its plain mode would (and which knob makes it larger)."""
    def share(v: float) -> str:
        return small_share(v).replace("<", "under ")

    what = {"dc": f"dc, lambda {f.lam:g}", "dca": f"dca, adaptive, lambda0 {f.lam:g}"}.get(str(f.form), "")
    spread = [f"median {share(f.median)}" if f.median is not None else "",
              f"at most {share(f.largest)}" if f.largest is not None else ""]
    said = (f"{f.label}'s delay compensation{f' ({what})' if what else ''}: its correction averaged "
            f"{share(f.mean)} of its gradient" + (f" ({', '.join(p for p in spread if p)})" if any(spread) else ""))
    limit = f"{100 * DC_NEGLIGIBLE:g}%"
    if not f.negligible:
        return (f"{said}: {limit} or more in {'some updates' if f.largest is not None else 'the mean'}, so it changed "
                "the updates" + (f" (whether for the better: against plain {f.plain}, in this table)" if f.plain_here
                                 else "") + ".")
    knob = ("dc:LAMBDA with a larger LAMBDA, or the adaptive dca, would make it larger" if f.form == "dc"
            else "dca:LAMBDA0 with a larger LAMBDA0 would make it larger" if f.form == "dca" else "")
    here = f": a difference from {f.plain} here is not the compensation's" if f.plain_here else ""
    return (f"{said}: under {limit}{' in every update' if f.largest is not None else ''}, so it trained as plain "
            f"{f.plain} would{here}" + (f" ({knob})" if knob else "") + ".")


def fact_lines(v: Verdict) -> list[str]:
    """The verdict's facts (:mod:`ssptk.analysis.verdict_facts`) in sentences."""
    skews = [f for f in v.facts if isinstance(f, SkewOverStaleness)]
    return ([_skew_line(skews)] if skews else []) + [dc_line(f) for f in v.facts if isinstance(f, DelayCompensation)]


_WHY = {"clock": "its clock came from a per-step overhead of {p} ms, this run calibrated {r} ms (predicted before "
                 "the run, from other runs or the default)",
        "cores": "its workers had {pc}, this run's {rc}",
        "unmodelled": "this run itself ran at {i:.2f} x the simulator's pace with its own overhead: start-up and the "
                      "OS's scheduling, which the simulator leaves out"}


def pace_lines(gaps: Iterable[PaceGap], what: str = "predicted") -> list[str]:
    """A line per setting whose predicted steps/s differ from the real run's: by how much, and why as far as the
    summaries tell (or that ssptk cannot tell)."""
    out = []
    for g in gaps:
        cores = {k: "a machine each" if c is None else f"{c:g} cores between them"
                 for k, c in (("pc", g.cores_predicted), ("rc", g.cores_real))}
        why = [_WHY[r].format(p=_n(g.overhead_predicted_ms), r=_n(g.overhead_real_ms), i=g.real_over_ideal or 0.0,
                              **cores) for r in g.reasons]
        direction = "above" if g.above else "below"
        out.append(f"{g.label}: the {what} pace ({g.predicted:.4g} steps/s) is {abs(100 * (g.ratio - 1)):.0f}% "
                   f"{direction} the real run's ({g.real:.4g}): "
                   + ("; ".join(why) if why else "ssptk cannot tell why from the summaries") + ".")
    return out
