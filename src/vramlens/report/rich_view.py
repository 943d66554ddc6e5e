"""Terminal reports with rich: tables, a stacked bar against the GPU's capacity, progress.

Needs the ``rich`` extra; nothing in the core imports this module at import time (the CLI
imports it when rich is installed and stdout is a terminal). The views take the JSON objects
the commands print (``Estimate.to_dict()``, ``vramlens fit --json``, ``TraceResult.to_dict()``,
``Placement.to_dict()``) and lay them out; they compute nothing else.

Colour follows the console rich was given (its own detection, ``NO_COLOR``, ``TERM=dumb``).
Without colour every component gets its own glyph in the bar, so the bar still reads.
Sizes are GiB (1024**3 bytes) everywhere, and labelled so.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from vramlens.report.labels import device_label
from vramlens.report.svg import COLORS, EXTRA_COLORS, label_of
from vramlens.units import GiB, format_gib

#: Glyphs used instead of colours when the terminal shows none (one per component).
GLYPHS: dict[str, str] = {
    "weights": "█",
    "master_weights": "▓",
    "gradients": "▒",
    "optimizer_states": "░",
    "activations": "#",
    "kv_cache": "=",
    "temporaries": "+",
    "comm_buffers": "~",
    "runtime": "@",
}
EXTRA_GLYPHS = "%&*o"
FREE = "·"
HEADROOM_MARK = "|"
CAPACITY_MARK = "┃"
SPARKS = "▁▂▃▄▅▆▇█"


def gib(n: int | float | None) -> str:
    """Bytes as GiB with two decimals (the unit goes in the column header or after the number)."""
    return format_gib(n, unit=False)


class _View:
    """A renderable built when it is printed, so it knows the console's colour and width."""

    def __init__(self, build: Callable[[_Palette, int], RenderableType]):
        self.build = build

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        colour = console.color_system is not None and not console.no_color
        # 8 or 16 colours cannot keep the palette's hues apart: glyphs tell the components apart.
        # Console.color_system is the system's name ("256", "truecolor"), not a ColorSystem.
        solid = colour and console.color_system in ("256", "truecolor")
        yield self.build(_Palette(colour, solid=solid), options.max_width)


class _Palette:
    """Colour or glyph of each category, stable within one view."""

    def __init__(self, colour: bool, *, solid: bool | None = None):
        self.colour = colour
        self.solid = colour if solid is None else solid
        self.extras: list[str] = []

    def _extra(self, name: str) -> int:
        if name not in self.extras:
            self.extras.append(name)
        return self.extras.index(name)

    def glyph(self, name: str) -> str:
        if self.solid:
            return "█"
        return GLYPHS.get(name) or EXTRA_GLYPHS[self._extra(name) % len(EXTRA_GLYPHS)]

    def style(self, name: str) -> str:
        if not self.colour:
            return ""
        return COLORS.get(name) or EXTRA_COLORS[self._extra(name) % len(EXTRA_COLORS)]

    def swatch(self, name: str) -> Text:
        return Text(self.glyph(name), style=self.style(name))


def stacked_bar(parts: Sequence[tuple[str, int]], pal: _Palette, *, width: int, capacity: int | None = None,
                headroom: float = 0.10) -> Text:
    """``[███▓▓░░····|·]``: the parts stacked left to right; ``·`` is free capacity and ``|``
    the headroom line (``capacity * (1 - headroom)``). The axis ends at the capacity, or at the
    stack when it is longer: then ``┃`` marks the capacity (and what is past it is red)."""
    width = max(4, width)
    stacked = sum(b for _, b in parts)
    axis = max(stacked, capacity or 0, 1)
    cells: list[tuple[str, str]] = []
    cum = 0
    for name, b in parts:
        start = round(cum / axis * width)
        cum += b
        cells += [(pal.glyph(name), pal.style(name))] * (round(cum / axis * width) - start)
    cells += [(FREE, "dim" if pal.colour else "")] * (width - len(cells))
    if capacity:
        cap_cell = round(capacity / axis * width)
        for i in range(cap_cell, width):  # over capacity
            cells[i] = (cells[i][0], "bold red" if pal.colour else "")
        if cap_cell < width:
            cells[cap_cell] = (CAPACITY_MARK, "bold")
        if headroom:
            i = min(width - 1, round(capacity * (1 - headroom) / axis * width))
            cells[i] = (HEADROOM_MARK, "bold red" if pal.colour else "")
    text = Text("[")
    run, run_style = "", None
    for ch, style in cells:  # one span per run of equal style
        if style != run_style and run:
            text.append(run, style=run_style or "")
            run = ""
        run, run_style = run + ch, style
    text.append(run, style=run_style or "")
    text.append("]")
    return text


def _legend(parts: Sequence[tuple[str, int]], pal: _Palette) -> Text:
    text = Text()
    for i, (name, b) in enumerate(parts):
        if i:
            text.append("   ")
        text.append_text(pal.swatch(name))
        text.append(f" {label_of(name)} {gib(b)} GiB")
    return text


def capacity_view(parts: Sequence[tuple[str, int]], pal: _Palette, *, width: int, capacity: int | None,
                  headroom: float, total: int | None, gpu_name: str | None = None) -> Group:
    """The full-width bar, what it says in words, and its legend."""
    shown = total if total is not None else sum(b for _, b in parts)
    if capacity:
        suffix = f" {gib(shown)} of {gib(capacity)} GiB ({shown / capacity:.1%})"
    else:
        suffix = f" {gib(shown)} GiB"
    head = Text(f"{gpu_name}: " if gpu_name else "")
    bar = stacked_bar(parts, pal, width=min(width, 100) - len(suffix) - len(head) - 2, capacity=capacity,
                      headroom=headroom)
    lines: list[RenderableType] = [head + bar + Text(suffix)]
    if capacity:
        key = f"{FREE} free"
        if headroom:
            key = (f"{HEADROOM_MARK} headroom line: {headroom:.0%} kept free, {gib(capacity * (1 - headroom))} GiB "
                   f"usable; " + key)
        if sum(b for _, b in parts) > capacity:
            key += f"; {CAPACITY_MARK} capacity, exceeded"
        lines.append(Text(key, style="dim"))
    lines.append(_legend(parts, pal))
    return Group(*lines)


def _parts(components: Mapping[str, int]) -> list[tuple[str, int]]:
    return [(n, int(b)) for n, b in components.items() if int(b) > 0]


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, (list, tuple)):
        return ",".join(map(str, v))
    return str(v)


def workload_line(w: Mapping[str, Any]) -> str:
    """One line for a workload dict (``Workload.to_dict()``)."""
    if not w:
        return ""
    s = f"{w.get('mode')}, {w.get('method')}, dtype {w.get('dtype')}" + (f", amp {w['amp']}" if w.get("amp") else "")
    if w.get("quant"):
        s += f", {w['quant']}"
    s += f", batch {w.get('batch')} x seq {w.get('seq')}"
    if w.get("new_tokens"):
        s += f" + {w['new_tokens']} new tokens"
    if w.get("mode") == "train":
        s += f", {w.get('optimizer')}, checkpointing {w.get('checkpointing')}, attention {w.get('attention')}"
        if (w.get("grad_accum") or 1) > 1:
            s += f", grad-accum {w['grad_accum']}"
    if (w.get("gpus") or 1) > 1:
        s += f", {w['gpus']} GPUs (tp {w.get('tp')}, pp {w.get('pp')}" + (f", zero {w['zero']}" if w.get("zero") else "") \
            + (", fsdp" if w.get("fsdp") else "") + ")"
    return s


def components_table(data: Mapping[str, Any], pal: _Palette) -> Table:
    """Components with their GiB and the formula (or trace tags) each came from, then the peaks."""
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, expand=False)
    t.add_column("component", no_wrap=True)
    t.add_column("GiB", justify="right", no_wrap=True)
    t.add_column("where it comes from", overflow="fold")
    expl = data.get("explanations") or {}
    for name, b in (data.get("components") or {}).items():
        if not b and name not in ("weights", "activations"):
            continue
        t.add_row(pal.swatch(name) + Text(" " + label_of(name)), gib(b), expl.get(name, ""))
    t.add_section()
    for key, label, why in (
        ("peak_allocated_bytes", "peak allocated", f"max_memory_allocated, at the {data.get('peak_phase') or ''} peak"),
        ("peak_reserved_bytes", "peak reserved", "max_memory_reserved (caching allocator)"),
        ("device_total_bytes", "device total", "what nvidia-smi shows"),
        ("host_bytes", "host RAM (offload)", "offloaded or staged on the CPU"),
    ):
        if data.get(key) is not None and (key != "host_bytes" or data[key]):
            t.add_row(Text(label, style="bold"), gib(data[key]), why)
    return t


def _notes(data: Mapping[str, Any]) -> list[RenderableType]:
    out: list[RenderableType] = [Text(f"note: {n}", style="dim") for n in data.get("notes") or []]
    return out


def estimate_view(data: Mapping[str, Any] | Any, *, headroom: float = 0.10) -> _View:
    """`vramlens estimate`: the components table, the bar against the GPU and the verdict.

    Args:
        data: ``Estimate.to_dict()`` (or an Estimate).
        headroom: fraction of the GPU kept free, for the headroom line.
    """
    d: Mapping[str, Any] = data.to_dict() if hasattr(data, "to_dict") else data

    def build(pal: _Palette, width: int) -> RenderableType:
        colour = pal.colour
        m = d.get("model") or {}
        title = Text(f"{m.get('name', 'model')}: {m.get('params', 0):,} params", style="bold")
        tp = m.get("trainable_params")
        if tp and tp != m.get("params"):
            title.append(f", {tp:,} trainable", style="bold")
        out: list[RenderableType] = [title, Text(workload_line(d.get("workload") or {}))]
        if m.get("assumed"):
            out.append(Text("assumed: " + "; ".join(m["assumed"]), style="dim"))
        gpu = d.get("gpu")
        out.append(Text(f"memory per GPU{' (most-loaded rank)' if (d.get('workload') or {}).get('gpus', 1) > 1 else ''}, "
                        "GiB = 1024³ bytes:"))
        out.append(components_table(d, pal))
        out.append(capacity_view(_parts(d.get("components") or {}), pal, width=width,
                                 capacity=gpu["usable_bytes"] if gpu else None, headroom=headroom,
                                 total=d.get("device_total_bytes"), gpu_name=gpu["name"] if gpu else None))
        if gpu and d.get("fits") is not None:
            word, _, rest = (d.get("verdict") or ("fits" if d["fits"] else "does not fit")).partition(" (")
            verdict = Text()
            verdict.append(word.upper(), style=("bold green" if d["fits"] else "bold red") if colour else "bold")
            verdict.append(" (" + rest if rest else "", style="")
            out.append(verdict)
        if d.get("advice"):
            out.append(Text(d["advice"]))
        out += _notes(d)
        return Group(*out)

    return _View(build)


def _speed(p: Mapping[str, Any]) -> str:
    if p.get("step_time_s") is not None:
        return f"{p['step_time_s']:.3g} s/step"
    return f"{p.get('tokens_per_s', 0):,.0f} tok/s"


def fit_view(data: Mapping[str, Any], *, bar_width: int | None = None) -> _View:
    """`vramlens fit`: the plans side by side, each a mini bar against the GPU.

    Args:
        data: the ``vramlens fit --json`` object; ``"usable_bytes"`` (the GPU's capacity) and
            ``"model"`` ({"name": ...}) are drawn when present.
        bar_width: cells of each plan's bar (default: a fifth of the width, 10 to 24).
    """
    from vramlens.report.html import plan_label

    def build(pal: _Palette, width: int) -> RenderableType:
        colour = pal.colour
        cells = bar_width or max(10, min(24, width // 5))
        cap = data.get("usable_bytes")
        headroom = data.get("headroom") or 0.0
        out: list[RenderableType] = []
        name = (data.get("model") or {}).get("name")
        if name:
            out.append(Text(f"{name} on {data.get('gpus_per_node', 1) * data.get('nodes', 1)} x {data.get('gpu')}",
                            style="bold"))
        out.append(Text(str(data.get("message") or "")))
        plans = list(data.get("plans") or [])
        closest = not plans and data.get("closest")
        if closest:
            plans = [data["closest"]]
            out.append(Text("closest plan (does not fit):", style="bold"))
        t = Table(box=box.SIMPLE_HEAD, pad_edge=False)
        t.add_column("#", justify="right")
        t.add_column("speed", justify="right", no_wrap=True)
        t.add_column("GiB per GPU", justify="right", no_wrap=True)
        t.add_column(f"vs {gib(cap)} GiB" if cap else "components", no_wrap=True)
        t.add_column("changes, trade-offs", overflow="fold", ratio=1, min_width=20)
        seen: list[str] = []
        for i, p in enumerate(plans, 1):
            parts = _parts(p.get("components") or {})
            seen += [n for n, _ in parts if n not in seen]
            what = Text(plan_label(p))
            for tr in p.get("tradeoffs") or []:
                what.append(f"\n- {tr}", style="dim")
            if p.get("host_bytes"):
                what.append(f"\nhost RAM {gib(p['host_bytes'])} GiB", style="dim")
            total = Text(gib(p.get("device_total_bytes")))
            if p.get("fits") is False:
                total.append(" (no)", style="red" if colour else "")
            t.add_row(str(i), _speed(p), total, stacked_bar(parts, pal, width=cells, capacity=cap,
                                                            headroom=headroom), what)
        if plans:
            out.append(t)
            legend = Text()
            for i, n in enumerate(seen):
                if i:
                    legend.append("   ")
                legend.append_text(pal.swatch(n))
                legend.append(" " + label_of(n))
            out.append(legend)
            if cap and headroom:
                out.append(Text(f"{HEADROOM_MARK} headroom line: {headroom:.0%} kept free; {FREE} free", style="dim"))
        for k in ("max_batch", "max_seq", "max_context", "min_gpu", "min_gpus"):
            if k in data:
                v = data[k]
                shown = {a: b for a, b in v.items() if a != "settings"} if isinstance(v, Mapping) else v
                out.append(Text(f"{k}: " + (", ".join(f"{a}={_fmt(b)}" for a, b in shown.items())
                                             if isinstance(shown, Mapping) else _fmt(shown))))
        return Group(*out)

    return _View(build)


def sparkline(points: Sequence[Sequence[Any]], width: int) -> tuple[Text, int, int | None]:
    """The live total of timeline points as one line of bars (each cell the most of its points).

    Returns:
        The line, the largest total and the x (event seq) where it is.
    """
    totals = [sum(int(v) for v in p[1].values()) for p in points]
    if not totals:
        return Text(), 0, None
    top = max(totals)
    i_top = totals.index(top)
    n = min(width, len(totals))
    line = Text()
    for c in range(n):
        chunk = totals[c * len(totals) // n: (c + 1) * len(totals) // n] or [0]
        level = max(chunk) / top if top else 0
        line.append(SPARKS[min(len(SPARKS) - 1, round(level * (len(SPARKS) - 1)))])
    return line, top, int(points[i_top][0])


def trace_view(data: Mapping[str, Any], *, top: int = 10) -> _View:
    """`vramlens trace`: the measured breakdown, peaks by step and phase, what is alive at the peak.

    Args:
        data: ``TraceResult.to_dict()``; its ``"timeline"`` (when present) is drawn as a sparkline.
        top: rows of the modules and tensors tables.
    """

    def build(pal: _Palette, width: int) -> RenderableType:
        m = data.get("model") or {}
        tr = data.get("trace") or {}
        out: list[RenderableType] = [
            Text(f"{m.get('name', 'model')}: {m.get('params', 0):,} parameters "
                 f"({m.get('trainable_params', 0):,} trainable)", style="bold"),
            Text(workload_line(data.get("workload") or {})),
        ]
        how = f"traced ({tr.get('backend', '?')}"
        if tr.get("extrapolated_from_layers"):
            k = tr["extrapolated_from_layers"]
            m1, m2 = tr.get("truncated_layers") or (k - 1, k)
            how += f", extrapolated from {m1} and {m2} of {m.get('layers')} layers"
        out.append(Text(how + f") in {tr.get('seconds', 0):.1f} s, {tr.get('events', 0):,} events", style="dim"))
        out.append(components_table(data, pal))
        gpu = data.get("gpu")
        out.append(capacity_view(_parts(data.get("components") or {}), pal, width=width,
                                 capacity=gpu["usable_bytes"] if gpu else None, headroom=0.10,
                                 total=data.get("device_total_bytes"), gpu_name=gpu["name"] if gpu else None))
        if data.get("timeline"):
            line, peak, at = sparkline(data["timeline"], min(width, 100) - 2)
            out.append(Text(f"live memory over the step(s), {len(data['timeline']):,} points, "
                            f"peak {gib(peak)} GiB at event {at:,}:"))
            out.append(Text(" ") + line)
        if tr.get("step_peaks"):
            out.append(Text("peak by step: " + ", ".join(f"step {s['step']} {gib(s['peak_bytes'])} GiB"
                                                         for s in tr["step_peaks"])))
        phases = [p for p in tr.get("phase_peaks") or [] if p["phase"] != "setup"]
        if phases:
            many = len(tr.get("step_peaks") or []) > 1
            out.append(Text("peak by phase: " + ", ".join(
                p["phase"] + (f" (step {p['step']})" if many else "") + f" {gib(p['peak_bytes'])} GiB" for p in phases)))
        mods = (tr.get("top_modules_at_peak") or [])[:top]
        if mods:
            out.append(Text(f"alive at the peak ({data.get('peak_phase')}), by module:"))
            t = Table(box=box.SIMPLE_HEAD, pad_edge=False)
            t.add_column("GiB", justify="right")
            t.add_column("module", overflow="fold")
            for r in mods:
                t.add_row(f"{r['bytes'] / GiB:,.3f}", r["module"])
            out.append(t)
        tensors = (tr.get("top_tensors_at_peak") or [])[:top]
        if tensors:
            out.append(Text("largest tensors alive at the peak:"))
            t = Table(box=box.SIMPLE_HEAD, pad_edge=False)
            for c in ("GiB", "tag", "module", "op", "phase", "step"):
                t.add_column(c, justify="right" if c in ("GiB", "step") else "left",
                             overflow="fold" if c == "module" else "ellipsis")
            for r in tensors:
                t.add_row(f"{r['bytes'] / GiB:,.3f}", str(r.get("tag")), str(r.get("module") or "<top>"),
                          str(r.get("op")), str(r.get("phase")), str(r.get("step")))
            out.append(t)
        out += _notes(data)
        return Group(*out)

    return _View(build)


def device_map_runs(device_map: Mapping[str, Any]) -> str:
    """Consecutive blocks on one device, joined: ``'model.embed_tokens .. model.layers.20 -> 0'``."""
    runs: list[list[str]] = []
    last: Any = object()
    for name, dev in device_map.items():
        if runs and dev == last:
            runs[-1][1] = name
        else:
            runs.append([name, name, str(dev)])
        last = dev
    return "; ".join(f"{a}{' .. ' + b if b != a else ''} -> {dev}" for a, b, dev in runs)


def place_view(data: Mapping[str, Any], *, bar_width: int = 20) -> _View:
    """`vramlens place`: the options side by side, bytes per device against each budget.

    Args:
        data: ``Placement.to_dict()``, optionally with ``"workload"`` (``Workload.to_dict()``).
        bar_width: cells of each option's GPU bar.
    """

    def build(pal: _Palette, width: int) -> RenderableType:
        colour = pal.colour
        budgets: Mapping[str, int] = data.get("budgets") or {}
        gpus = [k for k in budgets if str(k).isdigit()]
        gpu_budget = sum(budgets[k] for k in gpus)
        out: list[RenderableType] = [Text(f"{data.get('model')} on {data.get('gpus')} x {data.get('gpu')}", style="bold")]
        if data.get("workload"):
            out.append(Text(workload_line(data["workload"])))
        devices: list[str] = list(budgets)
        for o in data.get("options") or []:
            devices += [k for k in o.get("device_bytes") or {} if k not in devices]
        t = Table(box=box.SIMPLE_HEAD, pad_edge=False)
        t.add_column("option")
        t.add_column("fits")
        t.add_column("tok/s", justify="right")
        t.add_column(f"GPUs vs {gib(gpu_budget)} GiB" if gpu_budget else "GPUs", no_wrap=True)
        for dev in devices:
            t.add_column(f"{device_label(dev)} GiB", justify="right")
        t.add_column("why not", overflow="fold")
        t.add_row(Text("budget", style="dim"), "", "", "", *[Text(gib(budgets.get(dev)), style="dim") for dev in devices],
                  "")
        for o in data.get("options") or []:
            used = o.get("device_bytes") or {}
            parts = [(device_label(k), int(v)) for k, v in used.items() if k in gpus and int(v) > 0]
            fits = Text("yes" if o.get("fits") else "no",
                        style=("green" if o.get("fits") else "red") if colour else "")
            t.add_row(str(o.get("kind")), fits, f"{o.get('tokens_per_s', 0):,.2f}",
                      stacked_bar(parts, pal, width=bar_width, capacity=gpu_budget or None, headroom=0.0),
                      *[gib(used.get(dev)) if dev in used else "" for dev in devices], o.get("reason") or "")
        out.append(t)
        out.append(Text("budgets already keep the headroom and reserve the KV cache and activations; "
                        f"{FREE} free", style="dim"))
        for o in data.get("options") or []:
            if o.get("kind") == "hybrid" and o.get("fits") and o.get("device_map"):
                out.append(Text("device_map (hybrid): " + device_map_runs(o["device_map"])))
        return Group(*out)

    return _View(build)


VIEWS: dict[str, Callable[..., _View]] = {
    "estimate": estimate_view, "fit": fit_view, "trace": trace_view, "place": place_view,
}


def render_text(kind: str, data: Mapping[str, Any], *, width: int = 100, color: bool = False, **kw: Any) -> str:
    """A view rendered into a string at a fixed width (for tests and files).

    Args:
        kind: "estimate", "fit", "trace" or "place".
        data: the command's JSON object.
        width: columns.
        color: emit ANSI colours (truecolor) or not.
        kw: passed to the view (``headroom``, ``top``).
    """
    import io

    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=color, color_system="truecolor" if color else None,
                      no_color=not color, highlight=False)
    console.print(VIEWS[kind](data, **kw))
    return buf.getvalue()


class TerminalProgress:
    """A rich progress bar on a console that appears only once the work has taken ``delay`` seconds.

    Call :meth:`update` from the work: ``update(done, total)`` for counted work (fit's search),
    ``update(message="step 1/2 traced")`` for messages (a trace's progress); ``i/n`` in a message
    moves the bar. Use it as a context manager; the bar disappears when the work ends.
    """

    _COUNT = re.compile(r"(\d+)/(\d+)")

    def __init__(self, console: Console, description: str, *, delay: float = 1.0):
        self.console = console
        self.description = description
        self.delay = delay
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._t0 = time.monotonic()
        self._state: dict[str, Any] = {"completed": 0, "total": None}

    def __enter__(self) -> TerminalProgress:
        self._t0 = time.monotonic()
        if self.delay <= 0:
            self._start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def _start(self) -> None:
        self._progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                  MofNCompleteColumn(), TimeElapsedColumn(), console=self.console, transient=True)
        state = dict(self._state)
        self._task = self._progress.add_task(state.pop("description", self.description), **state)
        self._progress.start()

    def update(self, done: int | None = None, total: int | None = None, *, message: str | None = None) -> None:
        if message is not None:
            m = self._COUNT.search(message)
            if m and done is None:
                done, total = int(m.group(1)), int(m.group(2))
            self._state["description"] = f"{self.description}: {message}"
        if done is not None:
            self._state["completed"] = done
        if total is not None:
            self._state["total"] = total
        if self._progress is None:
            if time.monotonic() - self._t0 < self.delay:
                return
            self._start()
        assert self._progress is not None and self._task is not None  # _start made them
        self._progress.update(self._task, **self._state)

    def counter(self) -> Callable[[int, int], None]:
        """A ``progress(done, total)`` callback for :func:`vramlens.advise.fit`."""
        return lambda done, total: self.update(done, total)

    def messages(self) -> Callable[[str], None]:
        """A ``progress(message)`` callback for :func:`vramlens.trace.trace`."""
        return lambda msg: self.update(message=msg)


__all__ = [
    "GLYPHS", "TerminalProgress", "VIEWS", "capacity_view", "components_table", "device_label", "device_map_runs",
    "estimate_view", "fit_view", "gib", "place_view", "render_text", "sparkline", "stacked_bar", "trace_view",
    "workload_line",
]
