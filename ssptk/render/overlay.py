"""Overlay figures for the notebook widgets: several runs on the same axes, one highlighted.

Pure rendering. Input is ``label -> (steps, events, config)`` (the frames of :mod:`ssptk.rundir.logs`);
output is a :class:`matplotlib.figure.Figure` built without pyplot, so nothing here touches the
user's global matplotlib state (no style, no rcParams, no list of open figures) and it works headless.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from ssptk import analysis as an
from ssptk.analysis.step_split import blocked_share
from ssptk.render.skew import draw_skew
from ssptk.render.style import NotebookFigure, default_colors, draw_bound, palette, set_loss_scale
from ssptk.render.verdict_words import legend_mark
from ssptk.rundir import Summary

__all__ = ["RunFrames", "notes_html", "overlay_figure", "summary_line", "static_html", "staleness_looks",
           "LOSS_GID", "SKEW_GID", "BOUND_GID"]

#: ``(steps, events, config)`` of one run; events and config may be None.
RunFrames = tuple[pd.DataFrame, "pd.DataFrame | None", "Mapping[str, Any] | None"]
#: ``gid`` prefixes of the drawn lines (``"loss:<label>"``, ``"skew:<label>"``), so tests and tools can find them.
LOSS_GID, SKEW_GID, BOUND_GID = "loss:", "skew:", "bound:"

#: Most entries a legend inside an overlay figure's panel lists; more go below the panels.
OVERLAY_LEGEND_INSIDE = 4
_FADED = {"lw": 1.0, "alpha": 0.3, "zorder": 2}
_PLAIN = {"lw": 1.5, "alpha": 0.9, "zorder": 2}
_HIGHLIGHT = {"lw": 2.4, "alpha": 1.0, "zorder": 4}


def overlay_figure(
    runs: Mapping[str, RunFrames],
    highlight: str | None = None,
    *,
    colors: Mapping[str, Any] | None = None,
    styles: Mapping[str, str] | None = None,
    title: str | None = None,
    note: str | None = None,
    figsize: tuple[float, float] = (11.0, 4.0),
    verdict: an.Verdict | None = None,
) -> Figure:
    """Two panels, every run overlaid: smoothed training loss and step skew, both against wall time.

    ``highlight`` names the run drawn thick and opaque (with its SSP bound S+1 dashed on the skew
    panel); the others are faded. With ``highlight=None`` every run is drawn plainly. ``colors`` and
    ``styles`` (matplotlib line styles) map labels to looks (default: :func:`default_colors`, solid).
    ``note`` is printed under the title (e.g. "not run yet: press Run"). Wall time runs from each
    run's start barrier; losses use :func:`ssptk.analysis.smoothing_window` of its workers. Each run
    gives exactly one loss line (``gid`` ``"loss:<label>"``) and one skew line (``"skew:<label>"``). A run that
    diverged says so in the legend: as the runs' ``verdict`` has it (the training or the held-out loss), else by the
    training loss.
    """
    fig = NotebookFigure(figsize=figsize, layout="constrained")
    ax_loss, ax_skew = fig.subplots(1, 2)
    heading = title or "runs overlaid"
    fig.suptitle(heading if not note else f"{heading}\n{note}")
    ax_loss.set(title="loss vs wall time (smoothed)", xlabel="wall time (s)", ylabel="training loss")
    ax_skew.set(title="step skew", xlabel="wall time (s)", ylabel="most - least advanced (steps)")
    if not runs:
        for ax in (ax_loss, ax_skew):
            ax.text(0.5, 0.5, "no runs yet", ha="center", va="center", transform=ax.transAxes, color="0.5")
        return fig
    colors = {**default_colors(list(runs)), **(colors or {})}
    losses: list[pd.Series] = []
    for label, (steps, events, config) in runs.items():
        look = _PLAIN if highlight is None else (_HIGHLIGHT if label == highlight else _FADED)
        kw = {"color": colors[label], "ls": (styles or {}).get(label, "-"), **look}
        if steps is None or steps.empty:
            ax_loss.plot([], [], label=f"{label} (no records)", gid=LOSS_GID + label, **kw)
            ax_skew.plot([], [], gid=SKEW_GID + label, **kw)
            continue
        df = an.prepare_steps(steps, an.start_time(events))
        window = an.smoothing_window(max(an.n_workers(config, df), 1))
        curves = an.loss_curves(df, by="elapsed", smooth=window)
        overall = curves[curves["worker"] == an.ALL_WORKERS]
        said = [o for o in (verdict.outcomes if verdict is not None else ()) if o.label == label]
        shown = label + (legend_mark(said[0]) if said else
                         " (DIVERGED)" if an.divergence(df, window)["diverged"] else "")
        ax_loss.plot(overall["elapsed"], overall["smoothed"], label=shown, gid=LOSS_GID + label, **kw)
        losses.append(overall["smoothed"])
        finished = an.finish_times(df, events) if events is not None else None
        skew = an.skew_timeline(df, finished, end_when_one_left=True)
        draw_skew(ax_skew, skew["elapsed"], skew["skew"], kw.pop("color"), label=label, band=label == highlight,
                  gid=SKEW_GID + label, **kw)
        bound = an.staleness_bound(config)
        if label == highlight and bound is not None:
            draw_bound(ax_skew, bound, color=colors[label], lw=1.0, gid=BOUND_GID + label)
    set_loss_scale(ax_loss, losses)
    _legend(fig, ax_loss, ax_skew)
    return fig


def _legend(fig: Figure, ax_loss: Any, ax_skew: Any) -> None:
    """One legend for both panels (the runs' looks are the same in each): in the loss panel for a few entries,
    below the panels in columns for more (a sweep with its predictions has a dozen, which would cover half a
    panel)."""
    handles, labels = ax_loss.get_legend_handles_labels()
    for h, lab in zip(*ax_skew.get_legend_handles_labels()):
        if lab not in labels and lab.startswith("bound"):
            handles.append(h)
            labels.append(lab)
    if not handles:
        return
    if len(handles) <= OVERLAY_LEGEND_INSIDE:
        ax_loss.legend(handles, labels, fontsize="small")
    else:
        fig.legend(handles, labels, loc="outside lower center", ncols=min(len(handles), 5), fontsize="small",
                   frameon=False)


def summary_line(label: str, summary: Mapping[str, Any] | None) -> str:
    """``label: 143.2 steps/s, max skew 3, final loss 0.11, wait 21%`` (or why the run failed)."""
    s = Summary.of(summary)
    if s.status not in (None, "ok"):
        return f"{label}: failed: {s.reason or 'unknown reason'}"
    if s.diverged:
        on = " on the held-out loss" if s.diverged_on == "held-out" else ""
        label = f"{label}: DIVERGED{on} at global step {s.diverged_at_step}"

    def num(value: Any, fmt: str) -> str:
        return "-" if value is None else format(value, fmt)

    return (f"{label}: {num(s.steps_per_s, '.1f')} steps/s, max skew {num(s.max_skew, 'g')}, "
            f"final loss {num(s.final_loss, '.4g')}, wait {num(blocked_share(s), '.0%')}")


def notes_html(notes: Sequence[str]) -> str:
    """Sentences under a notebook view's figures (a comparison's verdict in words), as small HTML paragraphs."""
    import html

    return "".join(f'<p style="color:#555;font-size:13px;margin:2px 0">{html.escape(n)}</p>' for n in notes)


def static_html(title: str, caption: str, fig: Figure, table: pd.DataFrame, notes: Sequence[str] = ()) -> str:
    """A self-contained HTML fragment: ``title``, the metrics ``table``, ``notes`` under it (the comparison's verdict
    in words) and ``fig`` as an embedded PNG ``<img>`` captioned ``caption`` (what a notebook without a widget
    frontend, or nbconvert, shows)."""
    from ssptk.render.report import Report

    return Report(title, table, [(caption, fig)], notes)._repr_html_()


def staleness_looks(runs: Mapping[str, tuple[int, Any]],
                    values: Sequence[int]) -> tuple[dict[str, Any], dict[str, str]]:
    """Colours and line styles for ``label -> (staleness, group)``: the colour says the staleness (its
    place in ``values``, so it stays put as runs are added), the line style the group (e.g. workers and
    straggler), in order of first appearance."""
    cmap = palette(len(values))
    groups = list(dict.fromkeys(group for _, group in runs.values()))
    colors = {label: cmap(list(values).index(s) % cmap.N if s in values else 0) for label, (s, _) in runs.items()}
    styles = {label: ("-", "--", ":", "-.")[groups.index(g) % 4] for label, (_, g) in runs.items()}
    return colors, styles
