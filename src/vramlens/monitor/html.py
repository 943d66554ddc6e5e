"""The watch report as one self-contained HTML page (inline CSS and SVG, no scripts), drawn with
vramlens.report's stylesheet and timeline chart. It formats values; it computes nothing."""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from typing import Any

from vramlens import __version__
from vramlens.report.html import CSS
from vramlens.report.svg import timeline
from vramlens.units import format_gib, human_bytes


def _table(ident: str, header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table id="{ident}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def render(d: Mapping[str, Any]) -> str:
    """HTML text of ``WatchReport.to_dict()``."""
    return _page(f"vramlens watch: {d.get('device')}",
                 [f"<h1>vramlens watch: {escape(str(d.get('device')))} ({escape(str(d.get('backend')))})</h1>",
                  *_body(d)])


def render_run(d: Mapping[str, Any]) -> str:
    """HTML text of ``RunReport.to_dict()``: the command, a column per rank, then each rank's report."""
    ranks = d.get("ranks") or []
    body = [f"<h1>vramlens run: <code>{escape(' '.join(d.get('command') or []))}</code></h1>",
            f'<p id="exit">exit code {d.get("exit_code")}' + (f" (signal {d['signal']})" if d.get("signal") else "")
            + f"; peak allocated <b>{human_bytes(d.get('peak_allocated_bytes') or 0)}</b> "
            f"over {len(ranks)} process(es).</p>"]
    body += [f'<p class="muted">note: {escape(n)}</p>' for n in d.get("notes") or ()]
    names = [f"rank {r['rank']}" if r["rank"] is not None else f"pid {r['pid']}" for r in ranks]
    if len(ranks) > 1:
        body.append("<h2>Peak allocated by rank</h2>")
        body.append(_table("ranks", ["step", *names], [
            [str(row["step"]), *[_num(row["peak_allocated_bytes"].get(n)) for n in names]] for row in d.get("steps") or []]))
    for name, r in zip(names, ranks):
        rep = r["report"]
        body.append(f"<h2>{escape(name)}: {escape(str(rep.get('device')))} ({escape(str(rep.get('backend')))})</h2>")
        body += _body(rep)
    return _page("vramlens run", body)


def _body(d: Mapping[str, Any]) -> list[str]:
    steps = d.get("steps") or []
    body = [f"<p>{len(steps)} step record(s); peak allocated <b>{human_bytes(d.get('peak_allocated_bytes') or 0)}</b>.</p>"]
    if steps:
        points = [(float(s["step"]), {k: int(v) for k, v in s["categories"].items() if v}) for s in steps]
        body.append('<figure id="timeline">' + timeline(points, title="Peak memory of each step by category",
                                                         x_label="optimizer step") + "</figure>")
    leak = d.get("leak")
    body.append("<h2>Leak</h2>")
    if leak:
        body.append(f'<p class="verdict nofit" id="leak">{human_bytes(leak["bytes_per_step"])} per step survive '
                    f'({escape(leak["measured"])} bytes, steps {leak["first_step"]} to {leak["last_step"]})</p>')
        if leak["sites"]:
            body.append(_table("leak-sites", ["bytes", "tensors", "allocated at", "called from"], [
                [human_bytes(s["nbytes"]), str(s["count"]), f"<code>{escape(s['where'])}</code>",
                 "<br>".join(f"<code>{escape(f)}</code>" for f in s["stack"][1:])] for s in leak["sites"]]))
    else:
        body.append('<p class="verdict fits" id="leak">No leak: what survives each step does not grow.</p>')
    oom = d.get("oom")
    if oom:
        body.append("<h2>Out of memory</h2>")
        body.append(f'<p class="verdict nofit" id="oom">{escape(oom["kind"])} after {oom["step"]} step(s): '
                    + (f"an allocation of {human_bytes(oom['requested_bytes'])} failed " if oom["requested_bytes"] else "")
                    + f"with {human_bytes(oom['live_bytes'])} alive.</p>")
        body.append(_table("oom-categories", ["category", "bytes"],
                           [[escape(c.replace("_", " ")), f"{b:,}"] for c, b in oom["categories"].items()]))
        if oom["fixes"]:
            body.append(_table("oom-fixes", ["vramlens estimate flags", "device total", "fits"], [
                [f"<code>{escape(' '.join(f['flags']))}</code>", format_gib(f["device_total_bytes"]),
                 "yes" if f["fits"] else "no"] for f in oom["fixes"]]))
        body += [f'<p class="muted">{escape(n)}</p>' for n in oom["notes"]]
    if steps:
        cats = list(steps[0]["categories"])
        body.append("<h2>Steps</h2>")
        body.append(_table("steps", ["step", "peak allocated", "peak reserved", "live after", "host RSS",
                                     *[c.replace("_", " ") for c in cats]], [
            [str(s["step"]), f"{s['peak_allocated_bytes']:,}", _num(s["peak_reserved_bytes"]), f"{s['live_bytes']:,}",
             _num(s["host_rss_bytes"]), *[f"{s['categories'].get(c, 0):,}" for c in cats]] for s in steps]))
    body += [f'<p class="muted">note: {escape(n)}</p>' for n in d.get("notes") or ()]
    env = d.get("environment") or {}
    body.append("<h2>Environment</h2><dl>" + "".join(
        f"<dt>{escape(str(k))}</dt><dd>{escape(str(v))}</dd>" for k, v in env.items()) + "</dl>")
    return body


def _page(title: str, body: list[str]) -> str:
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f'<meta name="generator" content="vramlens {escape(__version__)}">',
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>",
        *body, f'<footer class="muted"><p>Made by vramlens {escape(__version__)}. Bytes are exact; '
        "the chart is in GiB (1 GiB = 1024³ bytes).</p></footer>", "</body></html>"])


def _num(v: int | None) -> str:
    return "" if v is None else f"{v:,}"
