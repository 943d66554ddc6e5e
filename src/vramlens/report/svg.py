"""SVG charts: pure functions from plain values (bytes, dicts) to SVG text.

Three charts, one palette so a component has the same colour everywhere:

* :func:`breakdown_bar` -- a horizontal stacked bar of components against the GPU's capacity,
  with the headroom line and the peak (what nvidia-smi shows) marked;
* :func:`timeline` -- stacked areas by category over event index or time, the peak marked
  (the shape of PyTorch's memory viewer);
* :func:`plans_chart` -- plans side by side, one stacked column each.

Axes are in GiB (binary, 1024**3 bytes) and labelled so. Every chart carries a ``<title>``
and ``<desc>`` and ``role="img"`` so screen readers announce it. Reports compute nothing:
they draw the numbers they are given.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any
from xml.sax.saxutils import escape

from vramlens.units import GiB, format_gib

#: One colour per Breakdown component (colour-blind-safe hues after Okabe & Ito, 2008).
COLORS: dict[str, str] = {
    "weights": "#0072B2",
    "master_weights": "#56B4E9",
    "gradients": "#009E73",
    "optimizer_states": "#E69F00",
    "activations": "#D55E00",
    "kv_cache": "#CC79A7",
    "temporaries": "#F0E442",
    "comm_buffers": "#999999",
    "runtime": "#444444",
}
#: Colours for categories that are not components (trace tags, modules), used in turn.
EXTRA_COLORS = ("#8C564B", "#17BECF", "#BCBD22", "#7F7F7F", "#9467BD", "#2CA02C", "#1F77B4", "#FF7F0E")

LABELS: dict[str, str] = {
    "weights": "weights",
    "master_weights": "master weights",
    "gradients": "gradients",
    "optimizer_states": "optimizer states",
    "activations": "activations",
    "kv_cache": "KV cache",
    "temporaries": "temporaries",
    "comm_buffers": "comm buffers",
    "runtime": "CUDA context + workspaces",
}

FONT = "font-family=\"system-ui, -apple-system, 'Segoe UI', sans-serif\""


def color_of(name: str, order: Sequence[str] = ()) -> str:
    """The colour of a component, or a stable pick for any other category."""
    if name in COLORS:
        return COLORS[name]
    extras = [n for n in order if n not in COLORS]
    i = extras.index(name) if name in extras else sum(map(ord, name))
    return EXTRA_COLORS[i % len(EXTRA_COLORS)]


def label_of(name: str) -> str:
    return LABELS.get(name, name.replace("_", " "))


def nice_step(span_bytes: float, ticks: int = 5) -> float:
    """A tick step in bytes that is 1, 2 or 5 times a power of ten in GiB."""
    span = max(span_bytes / GiB, 1e-9)
    raw = span / max(1, ticks)
    mag: float = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if raw <= m * mag:
            return m * mag * GiB
    return 10 * mag * GiB  # pragma: no cover - the loop always returns


def _tick_label(n_bytes: float, step: float) -> str:
    digits = max(0, -math.floor(math.log10(step / GiB))) if step < GiB else 0
    return f"{n_bytes / GiB:,.{digits}f}"


def _open(width: int, height: int, title: str, desc: str, ident: str) -> list[str]:
    t, d = f"{ident}-title", f"{ident}-desc"
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-labelledby="{t} {d}" {FONT} font-size="12">',
        f'<title id="{t}">{escape(title)}</title>',
        f'<desc id="{d}">{escape(desc)}</desc>',
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>',
    ]


def _legend(names: Iterable[str], x: float, y: float, width: float, order: Sequence[str]) -> tuple[list[str], float]:
    """Legend swatches wrapped into rows; returns the elements and the height used."""
    out, cx, cy = [], x, y
    for n in names:
        text = label_of(n)
        w = 18 + 7 * len(text) + 14
        if cx + w > x + width and cx > x:
            cx, cy = x, cy + 18
        out.append(f'<rect x="{cx:.1f}" y="{cy:.1f}" width="12" height="12" fill="{color_of(n, order)}"/>')
        out.append(f'<text x="{cx + 16:.1f}" y="{cy + 10:.1f}">{escape(text)}</text>')
        cx += w
    return out, cy - y + 18


def breakdown_bar(
    components: Mapping[str, int],
    *,
    capacity: int | None = None,
    headroom: float = 0.10,
    total: int | None = None,
    title: str = "Memory per GPU by component",
    width: int = 760,
) -> str:
    """A horizontal stacked bar of components against the GPU's capacity.

    Args:
        components: bytes by component name, in display order (``Breakdown.as_dict()``).
        capacity: the GPU's usable bytes; the axis ends there (or at the bar, if longer).
        headroom: fraction of capacity kept free; a dashed line marks ``capacity * (1 - headroom)``.
        total: the peak the verdict uses (device total); marked with a solid line. Component
            peaks do not all happen at once, so the stack may be longer than this line.
        title: the chart's accessible title.
        width: pixels.

    Returns:
        SVG text.
    """
    parts = [(n, int(b)) for n, b in components.items() if int(b) > 0]
    stacked = sum(b for _, b in parts)
    axis_max: float = max(stacked, capacity or 0, total or 0, 1)
    step = nice_step(axis_max)
    axis_max = math.ceil(axis_max / step) * step
    left, right, top, bar_h = 20, 20, 34, 36
    plot_w = width - left - right
    order = [n for n, _ in parts]
    legend, legend_h = _legend(order, left, top + bar_h + 36, plot_w, order)
    height = int(top + bar_h + 36 + legend_h + 8)

    def px(n: float) -> float:
        return left + plot_w * n / axis_max

    desc = "; ".join(f"{label_of(n)} {format_gib(b)}" for n, b in parts)
    if total is not None:
        desc += f"; peak {format_gib(total)}"
    if capacity:
        desc += f"; capacity {format_gib(capacity)}, headroom {headroom:.0%}"
    out = _open(width, height, title, desc, "vl-bar")
    out.append(f'<text x="{left}" y="18" font-weight="bold">{escape(title)}</text>')
    x = float(left)
    for n, b in parts:
        w = plot_w * b / axis_max
        out.append(
            f'<rect class="seg" data-component="{escape(n)}" x="{x:.2f}" y="{top}" width="{w:.2f}" '
            f'height="{bar_h}" fill="{color_of(n, order)}"><title>{escape(label_of(n))}: {format_gib(b)}</title></rect>'
        )
        x += w
    # axis with GiB ticks
    ay = top + bar_h + 4
    out.append(f'<line x1="{left}" y1="{ay}" x2="{left + plot_w}" y2="{ay}" stroke="#333"/>')
    t = 0.0
    while t <= axis_max + 1:
        tx = px(t)
        out.append(f'<line x1="{tx:.2f}" y1="{ay}" x2="{tx:.2f}" y2="{ay + 4}" stroke="#333"/>')
        out.append(f'<text x="{tx:.2f}" y="{ay + 16}" text-anchor="middle">{_tick_label(t, step)}</text>')
        t += step
    out.append(f'<text x="{left + plot_w}" y="{ay + 28}" text-anchor="end" fill="#555">GiB (1 GiB = 1024³ bytes)</text>')
    if capacity:
        cx = px(capacity)
        out.append(f'<line class="capacity" x1="{cx:.2f}" y1="{top - 8}" x2="{cx:.2f}" y2="{top + bar_h}" '
                   f'stroke="#000" stroke-width="2"/>')
        out.append(f'<text x="{cx:.2f}" y="{top - 10}" text-anchor="end">capacity {format_gib(capacity)}</text>')
        if headroom:
            hx = px(capacity * (1 - headroom))
            out.append(f'<line class="headroom" x1="{hx:.2f}" y1="{top - 4}" x2="{hx:.2f}" y2="{top + bar_h + 4}" '
                       f'stroke="#B00020" stroke-width="2" stroke-dasharray="4 3">'
                       f'<title>headroom line: {headroom:.0%} kept free</title></line>')
    if total is not None:
        tx = px(total)
        out.append(f'<line class="peak" x1="{tx:.2f}" y1="{top}" x2="{tx:.2f}" y2="{top + bar_h}" stroke="#fff" '
                   f'stroke-width="3"><title>peak (device total): {format_gib(total)}</title></line>')
        out.append(f'<line x1="{tx:.2f}" y1="{top}" x2="{tx:.2f}" y2="{top + bar_h}" stroke="#000" stroke-width="1"/>')
    out.extend(legend)
    out.append("</svg>")
    return "\n".join(out)


def _gib_axes(py: Callable[[float], float], left: float, top: float, pw: float, ph: float, y_max: float, step: float) -> list[str]:
    """The x and y axis lines of a vertical chart, GiB ticks on the y axis and its label."""
    out = [f'<line x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}" stroke="#333"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + ph}" stroke="#333"/>']
    t = 0.0
    while t <= y_max + 1:
        ty = py(t)
        out.append(f'<line x1="{left - 4}" y1="{ty:.2f}" x2="{left}" y2="{ty:.2f}" stroke="#333"/>')
        out.append(f'<text x="{left - 6}" y="{ty + 4:.2f}" text-anchor="end">{_tick_label(t, step)}</text>')
        t += step
    out.append(f'<text x="14" y="{top + ph / 2:.1f}" transform="rotate(-90 14 {top + ph / 2:.1f})" '
               f'text-anchor="middle">GiB (binary)</text>')
    return out


def timeline(
    points: Sequence[tuple[float, Mapping[str, int]]],
    *,
    title: str = "Memory over the step",
    x_label: str = "event",
    capacity: int | None = None,
    width: int = 760,
    height: int = 320,
) -> str:
    """Stacked areas of live bytes by category over time, the peak marked.

    Args:
        points: ``(x, {category: bytes})`` in x order: an event index or a time in seconds.
        title: the accessible title.
        x_label: what x is ("event", "time (ms)").
        capacity: the GPU's usable bytes, drawn as a line when given.
        width, height: pixels of the plot area and axes (the legend adds below).

    Returns:
        SVG text.
    """
    cats: list[str] = []
    for _, d in points:
        for c in d:
            if c not in cats:
                cats.append(c)
    order = [c for c in COLORS if c in cats] + [c for c in cats if c not in COLORS]
    totals = [sum(int(v) for v in d.values()) for _, d in points]
    peak_i = max(range(len(totals)), key=totals.__getitem__) if totals else None
    y_max: float = max(totals + [capacity or 0, 1])
    step = nice_step(y_max)
    y_max = math.ceil(y_max / step) * step
    left, right, top, bottom = 64, 20, 30, 44
    pw, ph = width - left - right, height - top - bottom
    xs = [float(x) for x, _ in points]
    x0, x1 = (min(xs), max(xs)) if xs else (0.0, 1.0)
    xspan = (x1 - x0) or 1.0

    def px(x: float) -> float:
        return left + pw * (x - x0) / xspan

    def py(b: float) -> float:
        return top + ph - ph * b / y_max

    legend, legend_h = _legend(order, left, height + 4, pw, order)
    desc = f"{len(points)} points; categories: {', '.join(label_of(c) for c in order)}"
    if peak_i is not None:
        desc += f"; peak {format_gib(totals[peak_i])} at {x_label} {points[peak_i][0]:g}"
    out = _open(width, int(height + legend_h + 8), title, desc, "vl-timeline")
    out.append(f'<text x="{left}" y="18" font-weight="bold">{escape(title)}</text>')
    base = [0] * len(points)
    for c in order:
        upper = [base[i] + int(points[i][1].get(c, 0)) for i in range(len(points))]
        if points and any(u != b for u, b in zip(upper, base)):
            pts = [f"{px(xs[i]):.2f},{py(upper[i]):.2f}" for i in range(len(points))]
            pts += [f"{px(xs[i]):.2f},{py(base[i]):.2f}" for i in reversed(range(len(points)))]
            out.append(f'<polygon class="area" data-category="{escape(c)}" points="{" ".join(pts)}" '
                       f'fill="{color_of(c, order)}" fill-opacity="0.85"><title>{escape(label_of(c))}</title></polygon>')
        base = upper
    # axes
    out.extend(_gib_axes(py, left, top, pw, ph, y_max, step))
    xstep = nice_step(xspan * GiB) / GiB
    t = math.ceil(x0 / xstep) * xstep
    while t <= x1 + 1e-9:
        tx = px(t)
        out.append(f'<line x1="{tx:.2f}" y1="{top + ph}" x2="{tx:.2f}" y2="{top + ph + 4}" stroke="#333"/>')
        out.append(f'<text x="{tx:.2f}" y="{top + ph + 16}" text-anchor="middle">{t:g}</text>')
        t += xstep
    out.append(f'<text x="{left + pw / 2:.1f}" y="{top + ph + 34}" text-anchor="middle">{escape(x_label)}</text>')
    if capacity:
        cy = py(capacity)
        out.append(f'<line class="capacity" x1="{left}" y1="{cy:.2f}" x2="{left + pw}" y2="{cy:.2f}" stroke="#000" '
                   f'stroke-dasharray="6 3"/>')
        out.append(f'<text x="{left + pw}" y="{cy - 4:.2f}" text-anchor="end">capacity {format_gib(capacity)}</text>')
    if peak_i is not None:
        mx, my = px(xs[peak_i]), py(totals[peak_i])
        out.append(f'<circle class="peak" cx="{mx:.2f}" cy="{my:.2f}" r="5" fill="none" stroke="#B00020" stroke-width="2">'
                   f'<title>peak {format_gib(totals[peak_i])}</title></circle>')
        anchor = "end" if mx > left + pw / 2 else "start"
        dx = -8 if anchor == "end" else 8
        out.append(f'<text x="{mx + dx:.2f}" y="{max(top + 10, my - 8):.2f}" text-anchor="{anchor}" fill="#B00020">'
                   f'peak {format_gib(totals[peak_i])}</text>')
    out.extend(legend)
    out.append("</svg>")
    return "\n".join(out)


def plans_chart(
    plans: Sequence[Mapping[str, Any]],
    *,
    capacity: int | None = None,
    headroom: float = 0.10,
    title: str = "Plans side by side",
    width: int | None = None,
    height: int = 320,
) -> str:
    """One stacked column of components per plan, side by side, against the capacity.

    Args:
        plans: each a mapping with ``"name"`` (or ``"label"``) and ``"components"`` (bytes by
            name); ``"device_total_bytes"`` marks the plan's peak when present.
        capacity: the GPU's usable bytes; a line across all columns.
        headroom: fraction kept free; a dashed line at ``capacity * (1 - headroom)``.
        title: the accessible title.
        width: pixels (default: grows with the number of plans).
        height: pixels of the plot area and axes (the legend adds below).

    Returns:
        SVG text.
    """
    names = [str(p.get("name") or p.get("label") or f"plan {i + 1}") for i, p in enumerate(plans)]
    comps = [{k: int(v) for k, v in (p.get("components") or {}).items() if int(v) > 0} for p in plans]
    cats: list[str] = []
    for d in comps:
        cats += [c for c in d if c not in cats]
    order = [c for c in COLORS if c in cats] + [c for c in cats if c not in COLORS]
    stacks = [sum(d.values()) for d in comps]
    y_max: float = max(stacks + [capacity or 0, 1])
    step = nice_step(y_max)
    y_max = math.ceil(y_max / step) * step
    col, gap = 56, 36
    left, right, top, bottom = 64, 20, 30, 60
    width = width or max(360, left + right + len(plans) * (col + gap) + gap)
    pw, ph = width - left - right, height - top - bottom

    def py(b: float) -> float:
        return top + ph - ph * b / y_max

    legend, legend_h = _legend(order, left, height + 4, pw, order)
    desc = "; ".join(f"{n}: {format_gib(s)}" for n, s in zip(names, stacks))
    out = _open(width, int(height + legend_h + 8), title, desc, "vl-plans")
    out.append(f'<text x="{left}" y="18" font-weight="bold">{escape(title)}</text>')
    slot = pw / max(1, len(plans))
    cw = min(col, slot * 0.7)
    for i, (name, d) in enumerate(zip(names, comps)):
        cx = left + slot * i + (slot - cw) / 2
        base = 0
        for c in order:
            b = d.get(c, 0)
            if not b:
                continue
            y0, y1 = py(base + b), py(base)
            out.append(f'<rect class="seg" data-plan="{i}" data-component="{escape(c)}" x="{cx:.2f}" y="{y0:.2f}" '
                       f'width="{cw:.2f}" height="{y1 - y0:.2f}" fill="{color_of(c, order)}">'
                       f'<title>{escape(name)}: {escape(label_of(c))} {format_gib(b)}</title></rect>')
            base += b
        total = plans[i].get("device_total_bytes")
        if total is not None:
            ty = py(int(total))
            out.append(f'<line class="peak" x1="{cx - 4:.2f}" y1="{ty:.2f}" x2="{cx + cw + 4:.2f}" y2="{ty:.2f}" '
                       f'stroke="#000" stroke-width="2"><title>{escape(name)}: peak {format_gib(int(total))}</title></line>')
        label = name if len(name) <= 18 else name[:17] + "…"
        out.append(f'<text x="{cx + cw / 2:.2f}" y="{top + ph + 16}" text-anchor="middle">{escape(label)}</text>')
        out.append(f'<text x="{cx + cw / 2:.2f}" y="{top + ph + 30}" text-anchor="middle" fill="#555">'
                   f'{stacks[i] / GiB:,.1f}</text>')
    out.extend(_gib_axes(py, left, top, pw, ph, y_max, step))
    if capacity:
        cy = py(capacity)
        out.append(f'<line class="capacity" x1="{left}" y1="{cy:.2f}" x2="{left + pw}" y2="{cy:.2f}" stroke="#000"/>')
        out.append(f'<text x="{left + pw}" y="{cy - 4:.2f}" text-anchor="end">capacity {format_gib(capacity)}</text>')
        if headroom:
            hy = py(capacity * (1 - headroom))
            out.append(f'<line class="headroom" x1="{left}" y1="{hy:.2f}" x2="{left + pw}" y2="{hy:.2f}" '
                       f'stroke="#B00020" stroke-dasharray="4 3"/>')
    out.extend(legend)
    out.append("</svg>")
    return "\n".join(out)


def estimate_chart(data: Mapping[str, Any], *, headroom: float = 0.10) -> str:
    """The breakdown bar of an ``Estimate.to_dict()`` object."""
    gpu = data.get("gpu") or None
    name = (data.get("model") or {}).get("name", "model")
    title = f"{name}: memory per GPU" + (f" on {gpu['name']}" if gpu else "")
    return breakdown_bar(
        data.get("components") or {},
        capacity=gpu["usable_bytes"] if gpu else None,
        headroom=headroom,
        total=data.get("device_total_bytes"),
        title=title,
    )


def svg_to_png(svg: str, *, scale: float = 2.0) -> bytes:
    """Rasterize SVG text with cairosvg (an optional dependency).

    Raises:
        MissingExtraError: cairosvg (or the cairo library it needs) is not installed.
    """
    from vramlens.errors import MissingExtraError

    try:
        import cairosvg
    except (ImportError, OSError):  # OSError: the package is there but libcairo is not
        e = MissingExtraError("cairosvg", "png")
        # name the SVG alternative too
        e.msg = "PNG output needs cairosvg, which is not installed: pip install 'vramlens[png]' (or write --svg FILE)"
        e.args = (e.msg,)
        raise e from None
    png: bytes = cairosvg.svg2png(bytestring=svg.encode("utf-8"), scale=scale)
    return png


__all__ = [
    "COLORS", "LABELS", "breakdown_bar", "color_of", "estimate_chart", "label_of", "nice_step",
    "plans_chart", "svg_to_png", "timeline",
]
