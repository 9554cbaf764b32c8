"""What runs sent over their links, in words and HTML: the report's network section, the one-line forms the
terminal summary and the live dashboard's status line show. The figures come from
:mod:`ssptk.analysis.traffic` (a summary's ``traffic`` section); nothing here measures or draws with matplotlib."""
from __future__ import annotations

import html
import math
from collections.abc import Mapping
from typing import Any

from ssptk.analysis.step_split import PARTS, StepSplit, step_split
from ssptk.analysis.traffic import link_capacity
from ssptk.rundir import Summary, TaskBytes, TrafficSection

__all__ = ["CAPACITY_SENTENCE", "SPLIT_SENTENCE", "network_section", "split_html", "split_legend", "split_text",
           "split_words", "status_text"]

#: What "of capacity" means, in one sentence (the report says it under its network table).
CAPACITY_SENTENCE = (
    "A link of rate R whose fuller direction carries b bytes per minibatch can carry at most R / (8 b) minibatches "
    "a second, whatever the mode; the run's steps/s over that limit is how close it came to the link's capacity "
    "(100%: the link was busy the whole run, so it and not the workers set the pace).")
#: How a worker's step is split (:mod:`ssptk.analysis.step_split`), in a few sentences.
SPLIT_SENTENCE = (
    "A worker's step, each second counted once, in this order: transfer, the time its own tensors (parameters, "
    "gradients, messages) were on the wire, queueing behind the other workers' traffic included; in sync, ssp and "
    "async timed by TensorFlow's step stats on every 10th step, as a share of the time the step was not blocked by "
    "the mode; in local SGD and allreduce estimated (\u2265), the step's own measured bytes at the rate of the "
    "narrowest shaped link they cross as if nothing else used it, a floor. Then wait, what the mode blocked "
    "(measured on every step; allreduce: the all-reduce call less the transfer, so the collective's time above the "
    "floor is wait). Then compute, its process's CPU time, up to what is left (CPU spent while its tensors were "
    "on the wire is already counted). Then other, the rest: the PS's work, waiting for a free core and, where the "
    "transfer is estimated, queueing on a shared link. A faster network shortens transfer; fewer barriers, or "
    "better balanced workers, shorten wait; faster workers shorten compute.")


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"


def _num(v: Any, spec: str = ".3g") -> str:
    return "-" if v is None else format(float(v), spec)


def _percents(split: StepSplit) -> dict[str, int]:
    """Each part's whole percent, rounded so that they add up to 100 (largest remainders)."""
    shares = {p: 100.0 * v for p, v in split.shares().items() if v is not None}
    floor = {p: math.floor(v) for p, v in shares.items()}
    for p in sorted(shares, key=lambda p: floor[p] - shares[p])[:max(0, 100 - sum(floor.values()))]:
        floor[p] += 1
    return floor


def _part(part: str, split: StepSplit, pct: int, how: bool) -> str:
    """One part in words: ``transfer \u2265 84%``, with (``how``) what the reader needs to read it right."""
    word = f"{part} \u2265 {pct}%" if part == "transfer" and split.estimated else f"{part} {pct}%"
    if not how:
        return word
    if part == "transfer":
        if split.timed_steps:
            return f"{word} (timed on {split.timed_steps} steps)"
        rest = "the rest of the all-reduce call is wait" if split.ring else "queueing behind the others is in other"
        return f"{word} (estimated: its bytes at the link's rate; {rest})"
    if part == "compute" and split.cpu_overlap and round(100 * (split.cpu or 0.0)) > pct:
        return f"{word} (of {100 * (split.cpu or 0.0):.0f}% CPU: the rest overlapped)"
    if part == "other" and split.unmeasured:
        return f"{word} (with the {' and '.join(split.unmeasured)}: not measured)"
    return word


def _parts(split: StepSplit, how: bool) -> list[tuple[str, str]]:
    """``(part, words)`` of each part shown, in the order they take their time."""
    pcts = _percents(split)
    return [(p, _part(p, split, pcts[p], how)) for p in PARTS if p in pcts]


def split_words(split: StepSplit, how: bool = True, sep: str = " + ") -> str:
    """The parts in words, in the order they take their time: ``transfer 86% (timed on 6 steps) + wait 14% +
    compute 0% + other 0%`` (``how=False``: the bare shares)."""
    return sep.join(words for _, words in _parts(split, how))


def _lead(split: StepSplit) -> tuple[str, str]:
    """What :func:`split_text` says before and after the parts."""
    return f"a worker's step {split.step_ms:.0f} ms = ", ", each second counted once, in this order"


def split_text(traffic: Mapping[str, Any]) -> str:
    """A worker's step and its parts in one line (``""`` where the summary has no ``step_ms``), e.g.
    ``a worker's step 288 ms = transfer 41% (timed on 12 steps) + wait 20% + compute 6% + other 33%, each second
    counted once, in this order``."""
    split = step_split(traffic)
    if split is None:
        return ""
    before, after = _lead(split)
    return before + split_words(split) + after


def status_text(summary: Mapping[str, Any], split: bool = True) -> str:
    """The traffic for a status line: ``0.74 MB/step \u00b7 ps:0 link 84% of capacity \u00b7 a step: transfer 56%,
    wait 10%, compute 4%, other 30%`` (``transfer \u2265``: an estimate; without the step's parts unless ``split``;
    ``""`` for a run that measured none)."""
    t = Summary.of(summary).traffic
    if not t:
        return ""
    parts = [f"{_num(t.mb_per_minibatch)} MB/step"]
    capacity = link_capacity(summary)
    if capacity:
        parts.append(f"{capacity[0]['task']} link {_pct(capacity[0]['share'])} of capacity")
    parts_of = step_split(t) if split else None
    if parts_of is not None:
        parts.append("a step: " + split_words(parts_of, how=False, sep=", "))
    return " \u00b7 ".join(parts)


def _color(part: str) -> str:
    """A step part's colour as CSS (matplotlib imported here: the text forms above do without it)."""
    from matplotlib.colors import to_hex

    from ssptk.render.style import STEP_SPLIT_COLORS
    return str(to_hex(STEP_SPLIT_COLORS[part]))


def _bar(split: StepSplit, width: str = "120px") -> str:
    """A worker's step as one stacked bar, its parts in their order (inline CSS: the report stays one
    self-contained file)."""
    pcts = _percents(split)
    cells = "".join(f'<span title="{p} {pcts[p]}%" style="display:inline-block;height:10px;'
                    f'width:{100 * (split.shares()[p] or 0):.1f}%;background:{_color(p)}"></span>'
                    for p in PARTS if split.shares()[p])
    return f'<span style="display:flex;width:{width};min-width:120px;background:#eee">{cells}</span>'


def split_html(traffic: Mapping[str, Any], width: str = "100%", line: bool = False) -> str:
    """A worker's step as a stacked bar with its parts in words under it, each after its colour, as the report's
    network table and the dashboard (``line``: the whole :func:`split_text`) show it (``""`` where the summary has
    no ``step_ms``)."""
    split = step_split(traffic)
    if split is None:
        return ""
    words = " + ".join(f'<span style="color:{_color(p)}">\u25a0</span>\u00a0{html.escape(w)}'
                       for p, w in _parts(split, True))
    if line:
        before, after = _lead(split)
        words = html.escape(before) + words + html.escape(after)
    return (f'{_bar(split, width)}<div style="font-size:12px;color:#444;text-align:left;margin-top:2px">'
            f"{words}</div>")


def split_legend() -> str:
    """The parts' colours in their order, as HTML."""
    return " ".join(f'<span style="color:{_color(p)}">\u25a0</span> {p}' for p in PARTS)


def _runs_table(summaries: Mapping[str, Summary]) -> str:
    """One row per run, seven columns so that it fits a 900 px window: the limit and how close the run came in one
    cell, a worker's step as a bar with its parts in words under it."""
    head = ["run", "network", "MB/minibatch", "busiest link", "steps/s of the link's limit", "step ms",
            "a worker's step"]
    rows = []
    for label, s in summaries.items():
        t = s.traffic or TrafficSection()
        cap = link_capacity(s)
        top = cap[0] if cap else {}
        speed = _num(s.steps_per_s)
        limit = (f"{speed} of <span>{_num(top.get('limit_steps_per_s'))}</span>: <span>{_pct(top.get('share'))}</span>"
                 if top else speed)
        step = split_html(t) or "-"
        cells = [html.escape(label), html.escape(str(t.network or "free loopback")), _num(t.mb_per_minibatch),
                 html.escape(f"{top['task']}, {top['rate'] / 1e6:.4g}\u00a0Mbit/s") if top else "-",
                 limit, _num(t.step_ms, ".0f"), step]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return ('<div class="table-wrap"><table><thead><tr>' + "".join(f"<th>{html.escape(h)}</th>" for h in head)
            + "</tr></thead><tbody>" + "".join(rows) + "</tbody></table></div>")


def _task_order(task: str) -> tuple[bool, str, int]:
    """PS tasks first, then by role and index (``worker:10`` after ``worker:9``)."""
    role, _, index = task.partition(":")
    return role != "ps", role, int(index) if index.isdigit() else 0


def _steps_of(task: str, summary: Summary) -> Any:
    """The minibatches a task's bytes are per: a worker's own steps, a PS task's all of the run's."""
    role, _, index = task.partition(":")
    steps = summary.per_worker_steps  # int keys in memory, str keys once read back from JSON
    own = (steps.get(index) or (steps.get(int(index)) if index.isdigit() else None)) if role == "worker" else None
    return own or summary.total_steps


def _tasks_table(summaries: Mapping[str, Summary]) -> str:
    """Bytes each task sent and received per minibatch (kB; a worker's: per step of its own), one column per run."""
    tasks: list[str] = []
    for s in summaries.values():
        tasks += [t for t in (s.traffic or TrafficSection()).tasks if t not in tasks]
    tasks.sort(key=_task_order)
    head = "".join(f"<th>{html.escape(label)}</th>" for label in summaries)
    rows = []
    for task in tasks:
        cells = []
        for s in summaries.values():
            counts = (s.traffic or TrafficSection()).tasks.get(task)
            n = _steps_of(task, s)
            b = TaskBytes.of(counts)
            cells.append(f"{_num(b.sent / n / 1e3)} / {_num(b.received / n / 1e3)}"
                         if isinstance(counts, Mapping) and n else "-")
        rows.append(f"<tr><td>{html.escape(task)}</td>" + "".join(f"<td>{c}</td>" for c in cells)
                    + "</tr>")
    return ('<div class="table-wrap"><table><thead><tr><th>kB per minibatch (a worker: its own), sent / received</th>'
            + head + "</tr></thead><tbody>" + "".join(rows) + "</tbody></table></div>")


def network_section(summaries: Mapping[str, Mapping[str, Any]]) -> str:
    """The report's network section for runs' summaries (label -> ``summary.json``): per run, the bytes per
    minibatch, the busiest shaped link and how close the run came to its capacity, a worker's step split into
    compute, transfer, wait and other; then each task's bytes per minibatch; and why a run measured none (its
    ``traffic_not_measured``). ``""`` when no run says anything of its traffic (older runs)."""
    given = {label: Summary.of(s) for label, s in summaries.items() if isinstance(s, Mapping)}
    measured = {label: s for label, s in given.items() if s.traffic}
    unmeasured = "".join(f'<p class="notes">{html.escape(label)}: traffic not measured: {html.escape(str(why))}</p>'
                         for label, s in given.items() if label not in measured and (why := s.traffic_not_measured))
    if not measured:
        return f"<h2>Network</h2>{unmeasured}" if unmeasured else ""
    return "\n".join([
        "<h2>Network</h2>", _runs_table(measured),
        f'<p class="notes">{html.escape(CAPACITY_SENTENCE)}</p>',
        f'<p class="notes">{split_legend()}. {html.escape(SPLIT_SENTENCE)}</p>',
        _tasks_table(measured),
        '<p class="notes">MB/minibatch: what the workers sent and received per minibatch. Bytes are IP packets on '
        "each task's link, headers included, counted by the kernel (traffic.json); a worker sends its gradients (push) "
        "and receives the parameters (pull).</p>", unmeasured])
