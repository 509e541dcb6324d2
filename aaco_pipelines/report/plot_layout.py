"""Margins that keep a plot's texts inside its image, found in one cheap pass.

matplotlib's constrained layout does this generally: it asks every artist for its tight
bounding box, twice, and the draw then lays every text out again. For AACO's plots (a grid of
axes, texts around each one) that was two thirds of a plot's time, and a run draws three of them
per model. Here only the texts that sit outside an axes (tick labels, axis labels, titles) are
measured, once, with the renderer's own font metrics; the margins between and around the axes
are set from them; an axes whose resized ticks read differently (its locator picked others)
is measured again, once; then texts placed inside an axes that still cross the image's edge (an
annotation near the right border) widen that margin.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

PAD_PT = 4.0  # space between the outermost text and the image's edge


def fit_margins(figure: Figure) -> None:
    """Set the figure's subplot margins so its tick labels, axis labels, titles and inner texts
    stay inside the image and off the neighbouring axes."""
    renderer = figure.canvas.get_renderer()
    px_per_pt = figure.dpi / 72.0
    width, height = figure.bbox.width, figure.bbox.height
    shown = [ax for ax in figure.axes if ax.axison]
    if not shown:
        return
    needs = {ax: _needs(ax, renderer, px_per_pt) for ax in shown}
    margins, gaps, geometry = _layout(shown, needs, px_per_pt)
    _adjust(figure, margins, gaps, geometry)
    # Resized, an axes' locator may pick other ticks ("1.175" where "1.2" was measured): then
    # measure that axes again, once (comparing the labels' strings costs no text layout).
    moved = [ax for ax in shown if _tick_texts(ax) != needs[ax]["texts"]]
    if moved:
        needs |= {ax: _needs(ax, renderer, px_per_pt) for ax in moved}
        margins, gaps, geometry = _layout(shown, needs, px_per_pt)
        _adjust(figure, margins, gaps, geometry)
    overflow = _inner_overflow(shown, renderer, width, height)
    if any(overflow):
        grown = tuple(m + o for m, o in zip(margins, overflow, strict=True))
        _adjust(figure, grown, gaps, geometry)


def _layout(shown: list, needs: dict, px_per_pt: float):
    """Margins (left, right, bottom, top) and gaps (between columns, rows) in pixels from
    what each axes needs, and the grid's geometry."""
    pad = PAD_PT * px_per_pt
    grid = shown[0].get_subplotspec().get_gridspec()
    rows, cols = grid.get_geometry()

    def at(row=None, col=None):
        return [
            needs[ax]
            for ax in shown
            if (row is None or ax.get_subplotspec().rowspan.start == row)
            and (col is None or ax.get_subplotspec().colspan.start == col)
        ]

    left = max(n["left"] for n in at(col=0)) + pad
    right = max(n["right"] for n in at(col=cols - 1)) + pad
    bottom = max(n["bottom"] for n in at(row=rows - 1)) + pad
    top = max(n["top"] for n in at(row=0)) + pad
    wgap = max(
        [max(n["left"] for n in at(col=c)) + max(n["right"] for n in at(col=c - 1)) + pad
         for c in range(1, cols) if at(col=c) and at(col=c - 1)],
        default=0.0,
    )  # fmt: skip
    hgap = max(
        [max(n["top"] for n in at(row=r)) + max(n["bottom"] for n in at(row=r - 1)) + pad
         for r in range(1, rows) if at(row=r) and at(row=r - 1)],
        default=0.0,
    )  # fmt: skip
    return (left, right, bottom, top), (wgap, hgap), (rows, cols)


def _adjust(figure: Figure, margins, gaps, geometry) -> None:
    """subplots_adjust from margins and gaps in pixels (it takes fractions of the figure and of
    the average axes)."""
    left, right, bottom, top = margins
    wgap, hgap = gaps
    rows, cols = geometry
    width, height = figure.bbox.width, figure.bbox.height
    axes_width = max((width - left - right - (cols - 1) * wgap) / cols, 1.0)
    axes_height = max((height - bottom - top - (rows - 1) * hgap) / rows, 1.0)
    figure.subplots_adjust(
        left=min(left / width, 0.45),
        right=max(1.0 - right / width, 0.55),
        bottom=min(bottom / height, 0.45),
        top=max(1.0 - top / height, 0.55),
        wspace=wgap / axes_width,
        hspace=hgap / axes_height,
    )


def _needs(ax: Axes, renderer, px_per_pt: float) -> dict[str, float]:
    """Pixels each side of the axes needs for the texts drawn outside it."""
    y_widths, y_heights = _tick_label_sizes(ax.yaxis, renderer)
    x_widths, x_heights = _tick_label_sizes(ax.xaxis, renderer)
    tick_space = _tick_space(ax.yaxis, px_per_pt)
    left = (max(y_widths, default=0.0) + tick_space if y_widths else 0.0) + _label_thickness(
        ax.yaxis, renderer, px_per_pt
    )
    bottom = (
        max(x_heights, default=0.0) + _tick_space(ax.xaxis, px_per_pt) if x_heights else 0.0
    ) + _label_thickness(ax.xaxis, renderer, px_per_pt)
    top = _text_height(ax.title, renderer) + 6.0 * px_per_pt if ax.get_title() else 0.0
    # a tick label centred on the axes' edge reaches half its size past it
    top = max(top, max(y_heights, default=0.0) / 2.0)
    right = x_widths[-1] / 2.0 if x_widths else 0.0
    return {"left": left, "right": right, "bottom": bottom, "top": top, "texts": _tick_texts(ax)}


def _tick_texts(ax: Axes) -> tuple[list[str], list[str]]:
    """The tick labels' strings on both axes, as the locator places them now."""
    return tuple(
        [label.get_text() for label in axis.get_majorticklabels()] for axis in (ax.xaxis, ax.yaxis)
    )


def _tick_label_sizes(axis, renderer) -> tuple[list[float], list[float]]:
    """Widths and heights of the tick labels drawn (inside the view, visible, not empty), in
    tick order."""
    low, high = sorted(axis.get_view_interval())
    widths, heights = [], []
    for loc, label in zip(axis.get_majorticklocs(), axis.get_majorticklabels(), strict=False):
        if not (label.get_visible() and label.get_text()):
            continue
        if not (low - 1e-9 * abs(high - low) <= loc <= high + 1e-9 * abs(high - low)):
            continue
        box = label.get_window_extent(renderer)
        widths.append(box.width)
        heights.append(box.height)
    return widths, heights


def _tick_space(axis, px_per_pt: float) -> float:
    tick = axis.get_major_ticks()[0] if axis.get_majorticklocs().size else None
    if tick is None:
        return 0.0
    return (tick.get_tick_padding() + tick.get_pad()) * px_per_pt  # the tick, then the label's pad


def _label_thickness(axis, renderer, px_per_pt: float) -> float:
    """The axis label's extent across the axis (its height, rotated or not), with its pad."""
    label = axis.label
    if not (label.get_visible() and label.get_text()):
        return 0.0
    box = label.get_window_extent(renderer)
    across = box.width if axis.axis_name == "y" else box.height
    return across + axis.labelpad * px_per_pt


def _text_height(text, renderer) -> float:
    return text.get_window_extent(renderer).height


def _inner_overflow(axes: list, renderer, width: float, height: float) -> tuple[float, ...]:
    """How far texts placed inside the axes (annotations, value labels, notes) cross each edge
    of the image: (left, right, bottom, top) in pixels."""
    left = right = bottom = top = 0.0
    for ax in axes:
        for text in ax.texts:
            if not (text.get_visible() and text.get_text()):
                continue
            box = text.get_window_extent(renderer)
            left = max(left, -box.x0)
            right = max(right, box.x1 - width)
            bottom = max(bottom, -box.y0)
            top = max(top, box.y1 - height)
    return left, right, bottom, top
