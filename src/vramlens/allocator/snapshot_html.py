"""A small self-contained HTML page for a SnapshotReport: figures, explanation, SVG timeline.

Deliberately plain (inline CSS, one inline SVG, no script); vramlens.report may restyle it.
"""

from __future__ import annotations

import html

from vramlens.allocator.snapshot import SnapshotReport
from vramlens.units import GiB, human_bytes

_W, _H, _PAD = 720, 220, 40


def _polyline(points: list[tuple[float, float]]) -> str:
    return " ".join(f"{x:.1f},{y:.1f}" for x, y in points)


def timeline_svg(timeline: tuple[tuple[int, int, int], ...]) -> str:
    """An SVG of allocated (blue) and reserved (orange) bytes over trace entries."""
    if not timeline:
        return "<p>No allocation history was recorded.</p>"
    xs = [p[0] for p in timeline]
    top = max(max(p[1], p[2]) for p in timeline) or 1
    x0, x1 = min(xs), max(xs) or 1

    def sx(x: int) -> float:
        return _PAD + (x - x0) / max(x1 - x0, 1) * (_W - 2 * _PAD)

    def sy(y: int) -> float:
        return _H - _PAD + -(y / top) * (_H - 2 * _PAD)

    alloc = _polyline([(sx(i), sy(a)) for i, a, _ in timeline])
    res = _polyline([(sx(i), sy(r)) for i, _, r in timeline])
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" role="img" '
        f'aria-label="allocated and reserved memory over time">'
        f'<line x1="{_PAD}" y1="{_H - _PAD}" x2="{_W - _PAD}" y2="{_H - _PAD}" stroke="#888"/>'
        f'<line x1="{_PAD}" y1="{_PAD}" x2="{_PAD}" y2="{_H - _PAD}" stroke="#888"/>'
        f'<text x="{_PAD}" y="{_PAD - 8}" font-size="11">{top / GiB:.2f} GiB</text>'
        f'<text x="{_W - _PAD}" y="{_H - 12}" font-size="11" text-anchor="end">trace entry {x1}</text>'
        f'<polyline fill="none" stroke="#e67e22" stroke-width="1.5" points="{res}"/>'
        f'<polyline fill="none" stroke="#2e86c1" stroke-width="1.5" points="{alloc}"/>'
        f'<text x="{_W - _PAD}" y="{_PAD}" font-size="11" text-anchor="end" fill="#e67e22">reserved</text>'
        f'<text x="{_W - _PAD}" y="{_PAD + 14}" font-size="11" text-anchor="end" fill="#2e86c1">allocated</text>'
        "</svg>"
    )


def render_html(report: SnapshotReport, title: str = "vramlens snapshot") -> str:
    """The whole page as a string."""
    rows = [
        ("reserved", report.reserved_bytes), ("allocated", report.allocated_bytes),
        ("active", report.active_bytes), ("reserved - allocated", report.fragmentation_bytes),
        ("largest free block", report.largest_free_block_bytes), ("peak allocated", report.peak_allocated_bytes),
        ("peak reserved", report.peak_reserved_bytes),
    ]
    table = "".join(
        f"<tr><th>{html.escape(k)}</th><td>{human_bytes(v) if v is not None else 'not recorded'}</td></tr>"
        for k, v in rows)
    frames = "".join(
        f"<tr><td>{html.escape(f.frame)}</td><td>{human_bytes(f.bytes)}</td><td>{f.count}</td></tr>"
        for f in report.top_frames)
    explain = "".join(f"<li>{html.escape(line)}</li>" for line in report.explanation)
    svg = timeline_svg(report.history.timeline if report.history else ())
    return (
        "<!doctype html><html><head><meta charset=\"utf-8\">"
        f"<title>{html.escape(title)}</title>"
        "<style>body{font:14px system-ui,sans-serif;margin:2em;max-width:60em}"
        "table{border-collapse:collapse}td,th{padding:2px 10px;text-align:left;border-bottom:1px solid #ddd}"
        "</style></head><body>"
        f"<h1>{html.escape(title)}</h1>"
        f"<p>{report.segments} segments, source: {html.escape(report.source)}</p>"
        f"<table>{table}</table><h2>Timeline</h2>{svg}"
        f"<h2>Why reserved exceeds allocated</h2><ul>{explain}</ul>"
        f"<h2>Largest live allocations by source line</h2>"
        f"<table><tr><th>frame</th><th>bytes</th><th>count</th></tr>{frames}</table>"
        "</body></html>\n"
    )
