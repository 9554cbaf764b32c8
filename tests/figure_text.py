"""A figure's text as a reader sees it: :func:`text_problems` draws a matplotlib figure with the Agg canvas and
measures every text it drew (titles, suptitles, axis labels, tick labels, legends, annotations) against each other,
against the figure's edges and against its panels: overlapping texts, texts cut off at an edge, a panel's own
text spilling out of it, and legends that cover much of a panel or its data. Only what was really drawn counts
(a tick label outside the view is not), and a rotated text is its rotated box, not the larger upright box that
holds it. Test helper, no ssptk import."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import combinations
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PathCollection
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.text import Text
from matplotlib.transforms import Bbox

__all__ = ["DATA_SHARE", "LEGEND_SHARE", "LINE_SHARE", "PAD_PX", "SHOWN_PX", "Problems", "drawn_texts", "text_problems"]

#: How wide a notebook cell or the report shows a figure (pixels).
SHOWN_PX = 912
#: Pixels each box is shrunk by before two are said to overlap (a box includes the line's leading and descent).
PAD_PX = 1.0
#: Most of a panel's area a legend inside it may cover, and most of its drawn data points it may hide.
LEGEND_SHARE = 0.25
DATA_SHARE = 0.1
LINE_SHARE = 0.5


@dataclass(frozen=True)
class _Box:
    """A drawn text: its name for a message, its rotated rectangle's corners and upright box (display pixels),
    the legend it is part of (if any) and the axes it belongs to (if any)."""

    name: str
    corners: np.ndarray
    bbox: Bbox
    legend: Legend | None
    axes: Axes | None
    text: Text


class Problems(list[str]):
    """What :func:`text_problems` found, one line each; ``kinds`` the kinds found (``"overlap"``, ``"clipped"``,
    ``"spills"``, ``"legend covers"``, ``"legend hides"``)."""

    @property
    def kinds(self) -> set[str]:
        return {p.split(":", 1)[0] for p in self}

    def of(self, kind: str) -> list[str]:
        return [p for p in self if p.startswith(kind + ":")]


def drawn_texts(fig: Figure) -> tuple[Any, list[Text]]:
    """Draw ``fig`` on a new Agg canvas; ``(renderer, every Text drawn with visible characters)``."""
    canvas = FigureCanvasAgg(fig)
    renderer = canvas.get_renderer()
    drawn: dict[int, Text] = {}
    plain = renderer.draw_text

    def draw_text(gc: Any, x: float, y: float, s: str, prop: Any, angle: float, ismath: Any = False,
                  mtext: Any = None) -> Any:
        if mtext is not None and s.strip():
            drawn[id(mtext)] = mtext
        return plain(gc, x, y, s, prop, angle, ismath=ismath, mtext=mtext)

    renderer.draw_text = draw_text
    try:
        canvas.draw()
    finally:
        del renderer.draw_text
    return renderer, list(drawn.values())


def _corners(t: Text, renderer: Any) -> tuple[np.ndarray, Bbox]:
    """The rotated rectangle a text covers (4 corners) and its upright bounding box."""
    box = t.get_window_extent(renderer)
    angle = np.deg2rad(t.get_rotation() % 180)
    if abs(np.sin(angle)) < 1e-6 or abs(np.cos(angle)) < 1e-6:
        return np.array([[box.x0, box.y0], [box.x1, box.y0], [box.x1, box.y1], [box.x0, box.y1]]), box
    upright = Text(text=t.get_text(), fontproperties=t.get_fontproperties(), linespacing=t.get_linespacing())
    upright.set_figure(t.figure)
    flat = upright.get_window_extent(renderer)
    w, h = flat.width, flat.height
    c, s = np.cos(angle), np.sin(angle)
    local = np.array([[-w / 2, -h / 2], [w / 2, -h / 2], [w / 2, h / 2], [-w / 2, h / 2]])
    centre = np.array([(box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2])
    return centre + local @ np.array([[c, s], [-s, c]]), box


def _shrunk(corners: np.ndarray, pad: float) -> np.ndarray:
    centre = corners.mean(axis=0)
    out = []
    for p in corners:
        d = p - centre
        n = np.linalg.norm(d)
        out.append(p - d / n * pad * np.sqrt(2) if n > pad * 2 else centre)
    return np.array(out)


def _separated(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two convex polygons are apart (the separating axis theorem)."""
    for poly in (a, b):
        for i in range(len(poly)):
            edge = poly[(i + 1) % len(poly)] - poly[i]
            axis = np.array([-edge[1], edge[0]])
            pa, pb = a @ axis, b @ axis
            if pa.max() <= pb.min() or pb.max() <= pa.min():
                return True
    return False


def _names(fig: Figure) -> dict[int, tuple[str, Legend | None, Axes | None]]:
    """Every text of ``fig`` a reader can name, by id: where it is and what kind, its legend and its axes."""
    names: dict[int, tuple[str, Legend | None, Axes | None]] = {}
    for lg in [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None] + list(fig.legends):
        where = "figure legend" if lg in fig.legends else f"legend of {_panel(lg.axes)}"
        for t in [*lg.get_texts(), lg.get_title()]:
            names[id(t)] = (f"{where} {t.get_text()!r}", lg, None if lg in fig.legends else lg.axes)
    for ax in fig.axes:
        panel = _panel(ax)
        for t in (ax.title, getattr(ax, "_left_title", None), getattr(ax, "_right_title", None)):
            if t is not None:
                names[id(t)] = (f"title of {panel} {t.get_text()!r}", None, ax)
        for letter, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            names[id(axis.label)] = (f"{letter} label of {panel} {axis.label.get_text()!r}", None, ax)
            names[id(axis.get_offset_text())] = (f"{letter} offset of {panel}", None, ax)
            for tick in [*axis.get_major_ticks(), *axis.get_minor_ticks()]:
                for t in (tick.label1, tick.label2):
                    names[id(t)] = (f"{letter} tick of {panel} {t.get_text()!r}", None, ax)
        for t in ax.texts:
            names[id(t)] = (f"text in {panel} {t.get_text()!r}", None, ax)
    suptitle = getattr(fig, "_suptitle", None)
    if suptitle is not None:
        names[id(suptitle)] = (f"suptitle {suptitle.get_text()!r}", None, None)
    return names


def _panel(ax: Axes | None) -> str:
    if ax is None:
        return "the figure"
    title = ax.get_title() or ax.get_ylabel() or "untitled"
    return f"panel {title.splitlines()[0]!r}"


def _line_samples(ax: Axes, step: float = 2.0) -> list[np.ndarray]:
    """Each line a panel draws (lines, bar tops, scatter points) as display points about ``step`` pixels apart,
    only the parts inside the panel."""
    box = ax.get_window_extent()
    paths = []
    for ln in ax.get_lines():
        if ln.get_visible() and len(ln.get_xdata()) and ln.get_linestyle() not in ("None", " ", ""):
            paths.append(ln.get_transform().transform(np.column_stack([ln.get_xdata(orig=False),
                                                                         ln.get_ydata(orig=False)])))
    for patch in ax.patches:
        if patch.get_visible() and hasattr(patch, "get_height") and patch.get_height() > 0:
            corners = patch.get_transform().transform(patch.get_path().vertices[:4])
            top = corners[np.argsort(corners[:, 1])[-2:]]
            paths.append(top)
    for c in ax.collections:
        if isinstance(c, PathCollection) and c.get_visible() and len(c.get_offsets()):  # scatter points
            paths.extend(p.reshape(1, 2) for p in c.get_offset_transform().transform(c.get_offsets()))
    out = []
    for xy in paths:
        xy = np.asarray(xy, dtype="float64").reshape(-1, 2)
        xy = xy[np.isfinite(xy).all(axis=1)]
        if len(xy) > 1:
            seg = np.r_[0.0, np.cumsum(np.hypot(*np.diff(xy, axis=0).T))]
            at = np.arange(0.0, seg[-1] + step, step)
            xy = np.column_stack([np.interp(at, seg, xy[:, 0]), np.interp(at, seg, xy[:, 1])])
        inside = (xy[:, 0] >= box.x0) & (xy[:, 0] <= box.x1) & (xy[:, 1] >= box.y0) & (xy[:, 1] <= box.y1)
        if inside.any():
            out.append(xy[inside])
    return out


def _legend_problems(fig: Figure, boxes: list[_Box], renderer: Any) -> list[str]:
    out = []
    for ax in fig.axes:
        lg = ax.get_legend()
        if lg is None or not lg.get_visible():
            continue
        frame, panel = lg.get_window_extent(renderer), ax.get_window_extent(renderer)
        inter = Bbox.intersection(frame, panel)
        share = 0.0 if inter is None else inter.width * inter.height / max(panel.width * panel.height, 1.0)
        if share > LEGEND_SHARE:
            out.append(f"legend covers: {share:.0%} of {_panel(ax)} ({len(lg.get_texts())} entries)")
        lines = _line_samples(ax)
        under = [float(np.mean((xy[:, 0] > frame.x0) & (xy[:, 0] < frame.x1) & (xy[:, 1] > frame.y0)
                               & (xy[:, 1] < frame.y1))) for xy in lines]
        if lines:
            total = sum(u * len(xy) for u, xy in zip(under, lines)) / sum(len(xy) for xy in lines)
            if total > DATA_SHARE or max(under) > LINE_SHARE:
                out.append(f"legend hides: {total:.0%} of what {_panel(ax)} draws ({max(under):.0%} of one line)")
    legends = [lg for lg in [ax.get_legend() for ax in fig.axes] + list(fig.legends) if lg is not None]
    for lg in legends:
        frame = lg.get_window_extent(renderer)
        for b in boxes:
            if b.legend is not lg and frame.overlaps(b.bbox) and not _separated(
                    _shrunk(b.corners, PAD_PX), _frame_corners(frame)):
                owner = "figure legend" if lg in fig.legends else f"legend of {_panel(lg.axes)}"
                out.append(f"overlap: {owner} over {b.name}")
    for a, b in combinations(legends, 2):
        if a.get_window_extent(renderer).overlaps(b.get_window_extent(renderer)):
            out.append(f"overlap: two legends ({_panel(a.axes)}, {_panel(b.axes)})")
    return out


def _past(box: Bbox, frame: Bbox, tolerance: float = 0.5) -> list[str]:
    """The edges of ``frame`` that ``box`` reaches past (by more than ``tolerance`` pixels)."""
    return [edge for edge, past in (("left", box.x0 < frame.x0 - tolerance), ("right", box.x1 > frame.x1 + tolerance),
                                    ("bottom", box.y0 < frame.y0 - tolerance), ("top", box.y1 > frame.y1 + tolerance))
            if past]


def _frame_corners(box: Bbox) -> np.ndarray:
    return np.array([[box.x0, box.y0], [box.x1, box.y0], [box.x1, box.y1], [box.x0, box.y1]])


def text_problems(fig: Figure, ignore: Iterable[str] = (), width_px: float | None = SHOWN_PX) -> Problems:
    """Every place ``fig``'s text cannot be read, one line each: ``overlap: A / B`` (two texts over each other, or a
    legend over a text), ``clipped: A at the left edge`` (past the figure's edge), ``spills: A out of its panel``
    (a panel's own text or legend past its frame), ``legend covers: N% of panel P`` (more than
    :data:`LEGEND_SHARE` of it), ``legend hides: N% of what panel P draws`` (more than :data:`DATA_SHARE` of its
    lines' length, or :data:`LINE_SHARE` of one line's). ``ignore``: kinds to leave out. Drawn ``width_px`` wide,
    as a notebook shows it (``None``: at the figure's own dpi)."""
    if width_px is not None:
        fig.set_dpi(width_px / fig.get_figwidth())
    renderer, texts = drawn_texts(fig)
    fig_box = fig.bbox
    names = _names(fig)
    boxes = []
    for t in texts:
        name, legend, ax = names.get(id(t), (f"figure text {t.get_text()!r}", None, None))
        corners, bbox = _corners(t, renderer)
        boxes.append(_Box(name, corners, bbox, legend, ax, t))
    out = Problems()
    for b in boxes:
        edges = _past(b.bbox, fig_box)
        if edges:
            out.append(f"clipped: {b.name} at the {' and '.join(edges)} edge{'s' if len(edges) > 1 else ''}")
        if b.axes is not None and b.legend is None and b.text in b.axes.texts:
            if _past(b.bbox, b.axes.get_window_extent(renderer)):
                out.append(f"spills: {b.name} out of {_panel(b.axes)}")
    for a, b in combinations(boxes, 2):
        if a.legend is not None and a.legend is b.legend:
            continue  # a legend lays out its own entries
        if a.bbox.overlaps(b.bbox) and not _separated(_shrunk(a.corners, PAD_PX), _shrunk(b.corners, PAD_PX)):
            out.append(f"overlap: {a.name} / {b.name}")
    for lg in [ax.get_legend() for ax in fig.axes] + list(fig.legends):
        if lg is None or not lg.get_visible():
            continue
        frame = lg.get_window_extent(renderer)
        name = "figure legend" if lg in fig.legends else f"legend of {_panel(lg.axes)}"
        edges = _past(frame, fig_box)
        if edges:
            out.append(f"clipped: {name} at the {' and '.join(edges)} edge{'s' if len(edges) > 1 else ''}")
        if lg not in fig.legends:
            panel = lg.axes.get_window_extent(renderer)
            inside = Bbox.intersection(frame, panel)
            if inside is not None and inside.width * inside.height > 4 and _past(frame, panel, 1.0):
                out.append(f"spills: {name} partly out of it")  # wholly outside is a placement, not a spill
    out.extend(_legend_problems(fig, boxes, renderer))
    skip = set(ignore)
    return Problems(p for p in out if p.split(":", 1)[0] not in skip)
