"""What runs sent over their links, in words and HTML: the report's network section, the one-line forms the
terminal summary and the live dashboard's status line show. The figures come from
:mod:`ssptk.analysis.traffic` (a summary's ``traffic`` section); nothing here measures or draws with matplotlib."""
from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from ssptk.analysis.traffic import link_capacity, step_split

__all__ = ["CAPACITY_SENTENCE", "SPLIT_SENTENCE", "network_section", "split_text", "status_text"]

#: What "of capacity" means, in one sentence (the report says it under its network table).
CAPACITY_SENTENCE = (
    "A link of rate R whose fuller direction carries b bytes per minibatch can carry at most R / (8 b) minibatches "
    "a second, whatever the mode; the run's steps/s over that limit is how close it came to the link's capacity "
    "(100%: the link was busy the whole run, so it and not the workers set the pace).")
#: How a worker's step is split (:func:`ssptk.analysis.traffic.step_split`), in one sentence.
SPLIT_SENTENCE = (
    "A worker's step: compute is its process's CPU time (measured); transfer, in sync, ssp and async, is timed: "
    "the time some tensor of the step (parameters, gradients, messages) was on the wire, queueing behind the other "
    "workers' traffic included, from TensorFlow's step stats on every 10th step; in local SGD and allreduce it is "
    "an estimate (\u2265), the step's own measured bytes at the rate of the narrowest shaped link they cross, as if "
    "nothing else used it, so a floor; wait is what the mode blocked (measured); other is the rest: the PS's "
    "work, waiting for a free core, and (where transfer is estimated) queueing on a shared link.")
_PARTS = ("compute", "transfer", "wait", "other")


def _word(part: str, traffic: Mapping[str, Any]) -> str:
    """The part's name, ``transfer \u2265`` where the transfer is an estimate (a floor)."""
    return part + (" \u2265" if part == "transfer" and not traffic.get("transfer_timed_steps") else "")


def _how(traffic: Mapping[str, Any]) -> str:
    """How a transfer share was had: ``(timed on N steps)`` or ``(estimated)``."""
    timed = traffic.get("transfer_timed_steps")
    return f" (timed on {timed} steps)" if timed else " (estimated)"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"


def _num(v: Any, spec: str = ".3g") -> str:
    return "-" if v is None else format(float(v), spec)


def split_text(traffic: Mapping[str, Any]) -> str:
    """A worker's step and its parts in one line (``""`` where the summary has no ``step_ms``), e.g.
    ``a worker's step 288 ms: compute 6%, transfer 41% (timed on 12 steps), wait 20%, other 33%``."""
    split = step_split(traffic)
    if not split:
        return ""
    parts = [f"{_word(key, traffic)} {_pct(split[key])}" + (_how(traffic) if key == "transfer" else "")
             for key in _PARTS if split.get(key) is not None]
    return f"a worker's step {_num(traffic.get('step_ms'), '.0f')} ms: " + ", ".join(parts)


def status_text(summary: Mapping[str, Any]) -> str:
    """The traffic for a status line: ``0.74 MB/step · ps:0 link 84% of capacity · transfer 56% of a step``
    (``transfer ≥``: an estimate, :func:`ssptk.analysis.traffic.step_split`; ``""`` for a run that measured none)."""
    t = summary.get("traffic")
    if not isinstance(t, Mapping) or not t:
        return ""
    parts = [f"{_num(t.get('mb_per_minibatch'))} MB/step"]
    capacity = link_capacity(summary)
    if capacity:
        parts.append(f"{capacity[0]['task']} link {_pct(capacity[0]['share'])} of capacity")
    transfer = step_split(t).get("transfer")
    if transfer is not None:
        parts.append(f"{_word('transfer', t)} {_pct(transfer)} of a step")
    return " \u00b7 ".join(parts)


def _color(part: str) -> str:
    """A step part's colour as CSS (matplotlib imported here: the text forms above do without it)."""
    from matplotlib.colors import to_hex

    from ssptk.render.style import STEP_SPLIT_COLORS
    return str(to_hex(STEP_SPLIT_COLORS[part]))


def _bar(split: Mapping[str, float | None]) -> str:
    """A worker's step as one stacked bar (inline CSS: the report stays one self-contained file)."""
    cells = "".join(f'<span title="{key} {_pct(split.get(key))}" style="display:inline-block;height:10px;'
                    f'width:{100 * (split.get(key) or 0):.1f}%;background:{_color(key)}"></span>'
                    for key in _PARTS if split.get(key))
    return f'<span style="display:flex;width:120px;background:#eee">{cells}</span>'


def _runs_table(summaries: Mapping[str, Mapping[str, Any]]) -> str:
    """One row per run, seven columns so that it fits a 900 px window: the limit and how close the run came in one
    cell, a worker's step as a bar with its parts in words under it."""
    head = ["run", "network", "MB/minibatch", "busiest link", "steps/s of the link's limit", "step ms",
            "a worker's step"]
    rows = []
    for label, s in summaries.items():
        t = s.get("traffic") or {}
        cap = link_capacity(s)
        top = cap[0] if cap else {}
        split = step_split(t)
        speed = _num(s.get("steps_per_s"))
        limit = (f"{speed} of <span>{_num(top.get('limit_steps_per_s'))}</span>: <span>{_pct(top.get('share'))}</span>"
                 if top else speed)
        parts = ", ".join(f"{_word(key, t)} {_pct(split[key])}" for key in _PARTS if split.get(key) is not None)
        step = f'{_bar(split)}<div style="font-size:11px;color:#555">{parts}</div>' if split else "-"
        cells = [html.escape(label), html.escape(str(t.get("network") or "free loopback")),
                 _num(t.get("mb_per_minibatch")),
                 html.escape(f"{top['task']}, {top['rate'] / 1e6:.4g}\u00a0Mbit/s") if top else "-",
                 limit, _num(t.get("step_ms"), ".0f"), step]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return ('<div class="table-wrap"><table><thead><tr>' + "".join(f"<th>{html.escape(h)}</th>" for h in head)
            + "</tr></thead><tbody>" + "".join(rows) + "</tbody></table></div>")


def _task_order(task: str) -> tuple[bool, str, int]:
    """PS tasks first, then by role and index (``worker:10`` after ``worker:9``)."""
    role, _, index = task.partition(":")
    return role != "ps", role, int(index) if index.isdigit() else 0


def _steps_of(task: str, summary: Mapping[str, Any]) -> Any:
    """The minibatches a task's bytes are per: a worker's own steps, a PS task's all of the run's."""
    role, _, index = task.partition(":")
    steps = summary.get("per_worker_steps") or {}  # int keys in memory, str keys once read back from JSON
    own = (steps.get(index) or (steps.get(int(index)) if index.isdigit() else None)) if role == "worker" else None
    return own or summary.get("total_steps")


def _tasks_table(summaries: Mapping[str, Mapping[str, Any]]) -> str:
    """Bytes each task sent and received per minibatch (kB; a worker's: per step of its own), one column per run."""
    tasks: list[str] = []
    for s in summaries.values():
        tasks += [t for t in ((s.get("traffic") or {}).get("tasks") or {}) if t not in tasks]
    tasks.sort(key=_task_order)
    head = "".join(f"<th>{html.escape(label)}</th>" for label in summaries)
    rows = []
    for task in tasks:
        cells = []
        for s in summaries.values():
            counts = ((s.get("traffic") or {}).get("tasks") or {}).get(task)
            n = _steps_of(task, s)
            cells.append(f"{_num(counts['sent'] / n / 1e3)} / {_num(counts['received'] / n / 1e3)}"
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
    measured = {label: s for label, s in summaries.items() if isinstance(s, Mapping) and s.get("traffic")}
    unmeasured = "".join(f'<p class="notes">{html.escape(label)}: traffic not measured: {html.escape(str(why))}</p>'
                         for label, s in summaries.items() if label not in measured and isinstance(s, Mapping)
                         and (why := s.get("traffic_not_measured")))
    if not measured:
        return f"<h2>Network</h2>{unmeasured}" if unmeasured else ""
    legend = " ".join(f'<span style="color:{_color(k)}">\u25a0</span> {k}' for k in _PARTS)
    return "\n".join([
        "<h2>Network</h2>", _runs_table(measured),
        f'<p class="notes">{html.escape(CAPACITY_SENTENCE)}</p>',
        f'<p class="notes">{legend}. {html.escape(SPLIT_SENTENCE)}</p>',
        _tasks_table(measured),
        '<p class="notes">MB/minibatch: what the workers sent and received per minibatch. Bytes are IP packets on '
        "each task's link, headers included, counted by the kernel (traffic.json); a worker sends its gradients (push) "
        "and receives the parameters (pull).</p>", unmeasured])
