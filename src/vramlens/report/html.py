"""Self-contained HTML reports: inline CSS and SVG, no scripts, no network, open offline.

``render_html(kind, data)`` takes the JSON object a command prints (``estimate``, ``fit``,
``trace`` or ``place``) and returns one HTML document; ``chart_svg(kind, data)`` is its main
chart alone (for ``--svg`` / ``--png``); ``write_estimate_html`` and ``write_html``
write it atomically (a temporary file in the same folder, then a rename), so an error
never leaves half a report behind.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vramlens import __version__
from vramlens.report import svg
from vramlens.report.labels import device_label
from vramlens.units import format_gib, peak_indices

if TYPE_CHECKING:
    from vramlens.estimator.core import Estimate

KINDS = ("estimate", "fit", "trace", "place")

CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2rem auto;max-width:60rem;color:#222;padding:0 1rem}
h1{font-size:1.5rem;margin-bottom:.2rem} h2{font-size:1.15rem;margin-top:2rem;border-bottom:1px solid #ddd}
table{border-collapse:collapse;width:100%;font-size:.92rem} th,td{text-align:left;padding:.3rem .5rem;border-bottom:1px solid #eee;vertical-align:top}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.swatch{display:inline-block;width:.8rem;height:.8rem;margin-right:.4rem;vertical-align:middle}
.verdict{font-size:1.2rem;font-weight:bold;padding:.5rem .8rem;border-radius:4px;display:inline-block}
.fits{background:#e3f4e8;color:#11602b} .nofit{background:#fbe4e4;color:#8a1010} .unknown{background:#eee}
.muted{color:#666;font-size:.85rem} code{font-size:.85rem} svg{max-width:100%;height:auto}
dl{display:grid;grid-template-columns:max-content auto;gap:.2rem 1rem} dt{font-weight:bold}
"""


def _page(title: str, body: list[str]) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f'<meta name="generator" content="vramlens {escape(__version__)}">',
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>",
        *body,
        f'<footer class="muted"><p>Made by vramlens {escape(__version__)} on {stamp}. '
        "Sizes in GiB (1 GiB = 1024³ bytes).</p></footer>",
        "</body></html>",
    ])


def _verdict(data: Mapping[str, Any]) -> str:
    fits = data.get("fits")
    gpu = data.get("gpu")
    if fits is None or not gpu:
        return '<p class="verdict unknown">No GPU given: pass --gpu to get a verdict.</p>'
    cls = "fits" if fits else "nofit"
    said = data.get("verdict")
    if not said:  # a report written before the verdict was in the JSON
        spare = data.get("headroom_bytes") or 0
        said = (f"{'fits' if fits else 'does not fit'} ({gpu['name']}): {format_gib(data.get('device_total_bytes'))} "
                f"of {format_gib(gpu['usable_bytes'])}, {format_gib(abs(spare))} {'to spare' if spare >= 0 else 'short'}")
    word, _, rest = said.partition(" (")
    return (f'<p class="verdict {cls}" id="verdict"><strong>{escape(word.upper())}</strong> ({escape(rest)}</p>'
            + (f'<p>{escape(data.get("advice") or "")}</p>' if data.get("advice") else ""))


def _components_table(data: Mapping[str, Any]) -> str:
    comps: Mapping[str, int] = data.get("components") or {}
    expl: Mapping[str, str] = data.get("explanations") or {}
    rows = ['<table id="components"><thead><tr><th>component</th><th class="num">GiB</th><th class="num">bytes</th>'
            "<th>where it comes from</th></tr></thead><tbody>"]
    for name, b in comps.items():
        rows.append(f'<tr><td><span class="swatch" style="background:{svg.color_of(name, list(comps))}"></span>'
                    f"{escape(svg.label_of(name))}</td><td class=\"num\">{format_gib(b, unit=False)}</td><td class=\"num\">{b:,}</td>"
                    f"<td>{escape(expl.get(name, ''))}</td></tr>")
    rows.append("</tbody><tfoot>")
    for key, label, why in (
        ("peak_allocated_bytes", "peak allocated", f"max_memory_allocated, at the {data.get('peak_phase') or ''} peak"),
        ("peak_reserved_bytes", "peak reserved", "max_memory_reserved (caching allocator)"),
        ("device_total_bytes", "device total", "what nvidia-smi shows"),
        ("host_bytes", "host RAM", "offloaded or staged on the CPU"),
    ):
        if data.get(key) is not None and (key != "host_bytes" or data.get(key)):
            rows.append(f'<tr><th>{label}</th><td class="num" id="{key}">{format_gib(data[key], unit=False)}</td>'
                        f'<td class="num">{data[key]:,}</td><td>{escape(why)}</td></tr>')
    rows.append("</tfoot></table>")
    return "\n".join(rows)


def _inputs(data: Mapping[str, Any]) -> str:
    model = data.get("model") or {}
    work = data.get("workload") or {}
    gpu = data.get("gpu") or {}
    if not isinstance(gpu, Mapping):
        gpu = {"name": gpu}
    out = ["<h2>Inputs</h2><dl>"]
    for k, v in model.items():
        if v not in (None, [], ""):
            out.append(f"<dt>model.{escape(str(k))}</dt><dd>{escape(_fmt(v))}</dd>")
    for k, v in work.items():
        out.append(f"<dt>{escape(str(k))}</dt><dd>{escape(_fmt(v))}</dd>")
    for k, v in gpu.items():
        out.append(f"<dt>gpu.{escape(str(k))}</dt><dd>{escape(_fmt(v))}</dd>")
    out.append("</dl>")
    return "\n".join(out)


def _fmt(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return str(v).lower() if isinstance(v, bool) else "none"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, (list, tuple)):
        return ", ".join(map(str, v))
    return str(v)


def _notes(data: Mapping[str, Any]) -> str:
    notes = list(data.get("notes") or []) + [f"assumed: {a}" for a in (data.get("model") or {}).get("assumed") or []]
    if not notes:
        return ""
    return "<h2>Notes</h2><ul>" + "".join(f"<li>{escape(str(n))}</li>" for n in notes) + "</ul>"


def _estimate_body(data: Mapping[str, Any], headroom: float) -> list[str]:
    name = (data.get("model") or {}).get("name", "model")
    return [
        f"<h1>{escape(name)}: memory per GPU</h1>",
        f'<p class="muted">source: {escape(str(data.get("source", "estimate")))}; '
        f'{(data.get("model") or {}).get("params", 0):,} parameters</p>',
        _verdict(data),
        '<figure id="chart">' + svg.estimate_chart(data, headroom=headroom) + "</figure>",
        "<h2>Components, and the formula each number came from</h2>",
        _components_table(data),
        _notes(data),
        _inputs(data),
    ]


def _plans_table(plans: Sequence[Mapping[str, Any]]) -> str:
    rows = ['<table id="plans"><thead><tr><th>#</th><th>plan</th><th class="num">device total GiB</th>'
            "<th>fits</th><th>changes, trade-offs</th></tr></thead><tbody>"]
    for i, p in enumerate(plans, 1):
        changes = p.get("changes") or p.get("tradeoffs") or {}
        text = (", ".join(f"{k}={_fmt(v)}" for k, v in changes.items()) if isinstance(changes, Mapping)
                else "; ".join(map(str, changes)))
        fits = p.get("fits")
        rows.append(f"<tr><td>{i}</td><td>{escape(str(p.get('name') or p.get('label') or f'plan {i}'))}</td>"
                    f'<td class="num">{format_gib(p.get("device_total_bytes"), unit=False)}</td>'
                    f"<td>{'' if fits is None else ('yes' if fits else 'no')}</td><td>{escape(text)}</td></tr>")
    rows.append("</tbody></table>")
    return "\n".join(rows)


def plan_label(plan: Mapping[str, Any], base: Mapping[str, Any] | None = None) -> str:
    """A plan's name, or its settings that differ from ``base`` (default: Workload's defaults)."""
    if plan.get("name") or plan.get("label"):
        return str(plan.get("name") or plan.get("label"))
    settings = plan.get("settings") or plan.get("changes") or {}
    if base is None:
        from vramlens.workload import Workload

        base = Workload().to_dict()
        base["lora_targets"] = ",".join(base["lora_targets"])
    diff = [f"{k}={_fmt(v)}" for k, v in settings.items() if k != "mode" and base.get(k) != v]
    return " ".join(diff) or "as given"


def _fit_plans(data: Mapping[str, Any]) -> tuple[list[dict[str, Any]], bool]:
    """The plans to show, labelled; the closest plan (marked so) when none fits."""
    plans = [dict(p, name=plan_label(p)) for p in data.get("plans") or []]
    if not plans and data.get("closest"):
        return [dict(data["closest"], name="closest: " + plan_label(data["closest"]))], True
    return plans, False


def _fit_capacity(data: Mapping[str, Any]) -> int | None:
    gpu = data.get("gpu") or {}
    return gpu.get("usable_bytes") if isinstance(gpu, Mapping) else data.get("usable_bytes")


def _fit_body(data: Mapping[str, Any], headroom: float) -> list[str]:
    plans, closest = _fit_plans(data)
    name = (data.get("model") or {}).get("name", "model")
    body = [f"<h1>{escape(str(name))}: plans that fit</h1>"]
    if data.get("message"):
        body.append(f"<p>{escape(str(data['message']))}</p>")
    if closest or not plans:
        body.append('<p class="verdict nofit">No plan fits.</p>')
    if plans:
        body.append('<figure id="chart">' + chart_svg("fit", data, headroom=headroom) + "</figure>")
        body.append("<h2>Closest plan (does not fit)</h2>" if closest else "<h2>Plans</h2>")
        body.append(_plans_table(plans))
    asks = [(k, data[k]) for k in ("max_batch", "max_seq", "max_context", "min_gpu", "min_gpus") if k in data]
    if asks:
        body.append("<h2>Limits</h2><dl>")
        for k, v in asks:
            shown = {a: b for a, b in v.items() if a != "settings"} if isinstance(v, Mapping) else v
            text = ", ".join(f"{a}={_fmt(b)}" for a, b in shown.items()) if isinstance(shown, Mapping) else _fmt(shown)
            body.append(f"<dt>{escape(k)}</dt><dd>{escape(text)}</dd>")
        body.append("</dl>")
    body.append(_inputs(data))
    return body


def _place_columns(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{"name": str(o.get("kind")), "components": {device_label(k): v for k, v in (o.get("device_bytes") or {}).items()}}
            for o in data.get("options") or []]


def _place_body(data: Mapping[str, Any], headroom: float) -> list[str]:
    budgets: Mapping[str, Any] = data.get("budgets") or {}
    devices = list(budgets)
    for o in data.get("options") or []:
        devices += [k for k in o.get("device_bytes") or {} if k not in devices]
    body = [f"<h1>{escape(str(data.get('model')))} on {data.get('gpus')} x {escape(str(data.get('gpu')))}: "
            "where the blocks go</h1>",
            '<p class="muted">Inference: every block on the GPUs, GPUs then CPU RAM then disk (Accelerate-style, '
            "blocks never split), and CPU only. GPU budgets already keep the headroom and reserve the KV cache and "
            "activations.</p>",
            '<figure id="chart">' + chart_svg("place", data, headroom=headroom) + "</figure>",
            '<h2>Options</h2><table id="options"><thead><tr><th>option</th><th>fits</th><th class="num">tokens/s</th>'
            + "".join(f'<th class="num">{escape(device_label(d))} GiB</th>' for d in devices)
            + "<th>why not</th></tr></thead><tbody>"]
    body.append('<tr><td class="muted">budget</td><td></td><td></td>'
                + "".join(f'<td class="num muted">{format_gib(budgets.get(d), unit=False)}</td>' for d in devices) + "<td></td></tr>")
    for o in data.get("options") or []:
        used = o.get("device_bytes") or {}
        body.append(f"<tr><td>{escape(str(o.get('kind')))}</td><td>{'yes' if o.get('fits') else 'no'}</td>"
                    f'<td class="num">{o.get("tokens_per_s", 0):,.2f}</td>'
                    + "".join(f'<td class="num">{format_gib(used.get(d), unit=False)}</td>' for d in devices)
                    + f"<td>{escape(str(o.get('reason') or ''))}</td></tr>")
    body.append("</tbody></table>")
    for o in data.get("options") or []:
        if o.get("kind") == "hybrid" and o.get("device_map"):
            body.append('<h2>device_map (hybrid)</h2><table id="device_map"><thead><tr><th>block</th><th>device</th>'
                        "</tr></thead><tbody>")
            body += [f"<tr><td><code>{escape(str(k))}</code></td><td>{escape(str(v))}</td></tr>"
                     for k, v in o["device_map"].items()]
            body.append("</tbody></table>")
    body.append(_inputs({"model": {"name": data.get("model")}, "workload": data.get("workload") or {},
                         "gpu": {"name": data.get("gpu"), "count": data.get("gpus")}}))
    return body


def timeline_from_events(events: Sequence[Mapping[str, Any]], *, max_points: int = 1500) -> list[tuple[float, dict[str, int]]]:
    """Live bytes by tag after each event, from ``{"seq", "action", "nbytes", "tag"}`` dicts.

    The stream is thinned to at most ``max_points`` points, always keeping the peak.
    """
    live: dict[str, int] = {}
    points: list[tuple[float, dict[str, int]]] = []
    for i, e in enumerate(events):
        tag = str(e.get("tag", "other"))
        sign = -1 if e.get("action") == "free" else 1
        live[tag] = live.get(tag, 0) + sign * int(e.get("nbytes", 0))
        points.append((float(e.get("seq", i)), dict(live)))
    totals = [sum(p[1].values()) for p in points]
    return [points[j] for j in peak_indices(totals, max_points, keep_last=True)]


def _trace_body(data: Mapping[str, Any], headroom: float) -> list[str]:
    body = _estimate_body(data, headroom)
    tr = data.get("trace") or {}
    if _timeline_points(data):
        body.insert(3, '<figure id="timeline">' + chart_svg("trace", data, headroom=headroom) + "</figure>")
    for key, title, cols in (
        ("top_modules_at_peak", "Top modules at the peak", ("module", "bytes")),
        ("top_tensors_at_peak", "Top tensors at the peak", ("bytes", "tag", "module", "op", "phase", "step")),
    ):
        rows = tr.get(key) or []
        if not rows:
            continue
        body.append(f"<h2>{title}</h2><table id=\"{key}\"><thead><tr>" +
                    "".join(f"<th>{c}{' (GiB)' if c == 'bytes' else ''}</th>" for c in cols) + "</tr></thead><tbody>")
        for r in rows:
            body.append("<tr>" + "".join(
                f'<td class="num">{format_gib(r.get(c), unit=False)}</td>' if c == "bytes" else f"<td>{escape(_fmt(r.get(c)))}</td>"
                for c in cols) + "</tr>")
        body.append("</tbody></table>")
    return body


def _timeline_points(data: Mapping[str, Any]) -> list[tuple[float, dict[str, int]]]:
    points = data.get("timeline")
    if points is None and data.get("events_list"):
        points = timeline_from_events(data["events_list"])
    return [(float(p[0]), dict(p[1])) if not isinstance(p, Mapping) else (float(p["x"]), dict(p["bytes"]))
            for p in points or []]


def chart_svg(kind: str, data: Mapping[str, Any], *, headroom: float = 0.10) -> str:
    """The main chart of a report as SVG text: the breakdown bar (estimate), the plans side by
    side (fit), the memory timeline with the peak marked (trace; the breakdown bar when the
    object has no ``"timeline"``), the options side by side by device (place).

    Raises:
        InputError: an unknown kind.
    """
    from vramlens.errors import InputError

    if kind == "estimate":
        return svg.estimate_chart(data, headroom=headroom)
    if kind == "fit":
        plans, closest = _fit_plans(data)
        name = (data.get("model") or {}).get("name")
        title = ("Closest plan (does not fit)" if closest else "Plans side by side") + (f": {name}" if name else "")
        return svg.plans_chart(plans, capacity=_fit_capacity(data), headroom=headroom, title=title + ", per GPU")
    if kind == "trace":
        points = _timeline_points(data)
        if not points:
            return svg.estimate_chart(data, headroom=headroom)
        gpu = data.get("gpu") or {}
        name = (data.get("model") or {}).get("name", "model")
        return svg.timeline(points, title=f"{name}: live memory by category over the traced step(s)",
                            x_label="event", capacity=gpu.get("usable_bytes"))
    if kind == "place":
        budgets = data.get("budgets") or {}
        gpu_budget = sum(v for k, v in budgets.items() if str(k).isdigit()) or None
        return svg.plans_chart(_place_columns(data), capacity=gpu_budget, headroom=0.0,
                               title=f"{data.get('model')}: bytes per device for each option (line: GPU budget)")
    raise InputError(f"kind={kind!r} is not one of: {', '.join(KINDS)}")


def render_html(kind: str, data: Mapping[str, Any], *, headroom: float = 0.10) -> str:
    """One self-contained HTML document for a command's JSON object.

    Args:
        kind: "estimate" (``Estimate.to_dict()``), "fit" (an object with ``"plans"``, each with
            ``"components"`` and optionally ``"device_total_bytes"``, ``"fits"``, ``"changes"``)
            or "trace" (``TraceResult.to_dict()``, optionally with ``"timeline"``: a list of
            ``[x, {category: bytes}]`` points, or ``"events_list"``: event dicts), or "place"
            (``Placement.to_dict()``, optionally with ``"workload"``).
        data: the object.
        headroom: fraction of the GPU kept free, for the headroom line.

    Returns:
        HTML text.

    Raises:
        InputError: an unknown kind.
    """
    from vramlens.errors import InputError

    if kind not in KINDS:
        raise InputError(f"kind={kind!r} is not one of: {', '.join(KINDS)}")
    model = data.get("model") or {}
    name = model.get("name", "model") if isinstance(model, Mapping) else str(model)  # place: a name
    body = {"estimate": _estimate_body, "fit": _fit_body, "trace": _trace_body, "place": _place_body}[kind](
        data, headroom)
    return _page(f"vramlens {kind}: {name}", body)


def write_text_atomic(path: str | os.PathLike[str], text: str | bytes) -> Path:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename.

    The file gets the mode a plain ``open(path, "w")`` would give (0666 less the umask: 0644 under
    the usual 022), not mkstemp's private 0600; a file that exists keeps its mode.
    """
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    try:
        special = not stat.S_ISREG(target.stat().st_mode) and not stat.S_ISDIR(target.stat().st_mode)
    except OSError:
        special = False
    if special:  # the rename would replace the device itself (as root: /dev/null becomes a plain file)
        from vramlens.errors import InputError

        raise InputError(f"cannot write {target}: it is a device, FIFO or socket, not a file: choose a file path")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    except OSError as e:
        from vramlens.errors import InputError

        raise InputError(f"cannot write {target}: {e.strerror}: choose a file in a folder that exists and is "
                         "writable") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode("utf-8") if isinstance(text, str) else text)
        try:
            mode = target.stat().st_mode & 0o7777
        except OSError:
            mode = 0o666 & ~_umask()
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(e, OSError):  # the user's path (a folder, a device, no permission), not a bug
            from vramlens.errors import InputError

            raise InputError(f"cannot write {target}: {e.strerror or e}: choose a writable file path (not a "
                             "folder) on a disk with room") from None
        raise
    return target


def _umask() -> int:
    """The process umask (read by setting it and putting it back: the only portable way)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_html(kind: str, data: Mapping[str, Any], path: str | os.PathLike[str], *, headroom: float = 0.10) -> Path:
    """Render and write a report atomically; returns the path written."""
    return write_text_atomic(path, render_html(kind, data, headroom=headroom))


def write_estimate_html(est: Estimate, path: str | os.PathLike[str], *, headroom: float | None = None) -> Path:
    """The ``vramlens estimate --html FILE`` report of an Estimate."""
    return write_html("estimate", est.to_dict(), path, headroom=0.10 if headroom is None else headroom)


__all__ = ["KINDS", "chart_svg", "device_label", "plan_label", "render_html", "timeline_from_events", "write_estimate_html", "write_html", "write_text_atomic"]
