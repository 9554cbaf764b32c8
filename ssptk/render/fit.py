"""Text that fits a figure shown about 900 pixels wide: titles broken into lines at the figure's width, one legend
below the panels when a panel's own would cover much of it, category tick labels turned when they would run into
each other, and a short note at the foot of a category that has no value. Measured with matplotlib's own font
metrics (:data:`matplotlib.textpath.text_to_path`), before any drawing; nothing here changes matplotlib's global
state. tests/figure_text.py measures the drawn result."""
from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.legend import Legend
from matplotlib.textpath import text_to_path

__all__ = ["LEGEND_INSIDE", "foot_note", "label_ticks", "legend_below", "legend_columns", "text_width", "wrap_title"]

#: Most entries a legend inside a panel lists: a 2x3 grid's panel is ~280 px wide, and a legend of 7 covered 30%
#: of it, of 12 more than half; a figure with more gets one legend below its panels.
LEGEND_INSIDE = 5
#: Share of the figure's width a title or a legend below may take (the rest: margins).
_WIDTH_SHARE = 0.94


def text_width(text: str, fontsize: float | str = "medium") -> float:
    """The width of one line of ``text`` in points, at ``fontsize`` (points, or a name such as ``"small"``)."""
    width, _, _ = text_to_path.get_text_width_height_descent(text, FontProperties(size=fontsize), ismath=False)
    return float(width)


def _points(fontsize: float | str) -> float:
    return float(FontProperties(size=fontsize).get_size_in_points())


def wrap_title(text: str, width_in: float, fontsize: float | str = "large", sep: str = " \u00b7 ") -> str:
    """``text`` broken into lines that fit ``width_in`` inches at ``fontsize``: between its ``sep``-separated parts
    first (``ssp, staleness S=4 · 8 workers · model mlp``), inside a part only when it alone is too wide. Lines
    already in ``text`` are kept."""
    room = _WIDTH_SHARE * 72.0 * width_in
    out: list[str] = []
    for line in text.split("\n"):
        current = ""
        for part in line.split(sep):
            joined = f"{current}{sep}{part}" if current else part
            if text_width(joined, fontsize) <= room:
                current = joined
                continue
            if current:
                out.append(current)
            current = part
            while text_width(current, fontsize) > room:  # one part too wide for a line: at its spaces
                chars = max(8, int(len(current) * room / text_width(current, fontsize)))
                head, _, tail = textwrap.fill(current, chars).partition("\n")
                if not tail:
                    break
                out.append(head)
                current = tail.replace("\n", " ")
        out.append(current)
    return "\n".join(out)


def legend_below(fig: Figure, handles: Sequence[Any], labels: Sequence[str], fontsize: float | str = "small",
                 **kw: Any) -> Legend:
    """One legend for the whole figure, under its panels, in as many columns as fit the figure's width (a
    constrained layout makes room for it; ``kw`` overrides the placement, e.g. for fixed margins)."""
    ncols = legend_columns(labels, fig.get_figwidth(), fontsize)
    place: dict[str, Any] = {"loc": "outside lower center"} if fig.get_layout_engine() is not None else {
        "loc": "lower center", "bbox_to_anchor": (0.5, 0.0)}
    return fig.legend(list(handles), list(labels), **{**place, "ncols": ncols, "fontsize": fontsize,
                                                      "frameon": False, **kw})


def legend_columns(labels: Sequence[str], width_in: float, fontsize: float | str = "small") -> int:
    """The most columns a legend of ``labels`` ``width_in`` inches wide can have, entries split into columns in
    order as matplotlib does, each column as wide as its widest entry."""
    size = _points(fontsize)
    # an entry: its handle (2 em), the gap to its text (0.8 em), the text, the gap to the next column (2 em)
    widths = [text_width(str(label), size) + 4.8 * size for label in labels]
    room = _WIDTH_SHARE * 72.0 * width_in
    for ncols in range(len(widths), 1, -1):
        if sum(max(col) for col in np.array_split(np.array(widths), ncols)) <= room:
            return ncols
    return 1


def label_ticks(ax: Axes, labels: Sequence[str], fontsize: float | str = "medium") -> None:
    """Category ticks 0..n-1 named ``labels``: level while each fits its share of the panel's width, else turned
    35° (right-aligned under its tick), so that neighbours never run into each other."""
    ax.set_xticks(range(len(labels)))
    fig = ax.figure  # a figure or a subfigure: its width in inches either way
    width_pt = 72.0 * fig.bbox.width / fig.dpi * ax.get_position().width
    slot = width_pt / max(1, len(labels))
    if max((text_width(str(label), fontsize) for label in labels), default=0.0) <= 0.85 * slot:
        ax.set_xticklabels([str(label) for label in labels], fontsize=fontsize)
    else:
        ax.set_xticklabels([str(label) for label in labels], fontsize=fontsize, rotation=35, ha="right",
                           rotation_mode="anchor")


def foot_note(ax: Axes, x: float, text: str, color: Any = "0.25", fontsize: float | str = 8) -> Any:
    """``text`` upright from the foot of the panel at data ``x`` (why a category has no bar or point: ``× not
    reached``): written along the axis, as narrow as one line, so notes at neighbouring categories never meet."""
    return ax.annotate(text, (x, 0.02), xycoords=("data", "axes fraction"), rotation=90, ha="center", va="bottom",
                       fontsize=fontsize, color=color)
