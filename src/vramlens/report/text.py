"""Plain-text reports: a table of components and a bar against the GPU's capacity.

Reports format values; they compute nothing. Binary units (GiB) throughout, labelled.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, TextIO

from vramlens.estimator.breakdown import Breakdown
from vramlens.report.svg import LABELS  # noqa: E402  one table of component names for every report
from vramlens.units import GiB, format_gib, human_count

if TYPE_CHECKING:
    from vramlens.estimator.core import Estimate


def use_color(stream: TextIO | None = None) -> bool:
    stream = stream or sys.stdout
    return stream.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def _c(text: str, code: str, color: bool) -> str:
    return f"\x1b[{code}m{text}\x1b[0m" if color else text


def breakdown_table(bd: Breakdown, *, explain: bool = True, width: int = 100) -> list[str]:
    lines = [f"{'component':<26} {'GiB':>10}  where it comes from"]
    lines.append("-" * min(width, 100))
    for c in bd.components:
        if c.bytes == 0 and c.name not in ("weights", "activations"):
            continue
        text = c.explain if explain else ""
        room = max(10, width - 40)
        if len(text) > room:
            text = text[: room - 3] + "..."
        lines.append(f"{LABELS.get(c.name, c.name):<26} {c.bytes / GiB:>10,.2f}  {text}")
    lines.append("-" * min(width, 100))
    lines.append(f"{'peak allocated':<26} {bd.peak_allocated / GiB:>10,.2f}  max_memory_allocated, at the {bd.peak_phase} peak")
    lines.append(f"{'peak reserved':<26} {bd.peak_reserved / GiB:>10,.2f}  max_memory_reserved (caching allocator)")
    lines.append(f"{'device total':<26} {bd.device_total / GiB:>10,.2f}  what nvidia-smi shows")
    if bd.host_bytes:
        lines.append(f"{'host RAM (offload)':<26} {bd.host_bytes / GiB:>10,.2f}")
    return lines


def capacity_bar(used: int, capacity: int, *, headroom: float = 0.10, width: int = 50, color: bool = False) -> str:
    """``[#########-----|--]  61.2% of 80.00 GiB``; ``|`` marks the headroom line."""
    frac = used / capacity if capacity else 0.0
    filled = min(width, round(frac * width))
    mark = round((1 - headroom) * width)
    cells = []
    for i in range(width):
        ch = "#" if i < filled else "-"
        if i == mark and i >= filled:
            ch = "|"
        cells.append(ch)
    bar = "".join(cells)
    over = frac > (1 - headroom)
    bar = _c(bar, "31" if frac > 1 else ("33" if over else "32"), color)
    return f"[{bar}] {frac:6.1%} of {format_gib(capacity)}"


def render_estimate(est: Estimate, *, color: bool = False, width: int = 100, headroom: float = 0.10) -> str:
    """The human output of ``vramlens estimate``."""
    m = est.model
    w = est.workload
    out = []
    title = f"{m.name}: {human_count(m.params)} params"
    if est.trainable_params and est.trainable_params != m.params:
        title += f", {human_count(est.trainable_params)} trainable ({est.trainable_params / m.params:.2%})"
    out.append(_c(title, "1", color))
    desc = f"{w.mode}, {w.method}, dtype {w.dtype}" + (f", amp {w.amp}" if w.amp else "")
    if w.quantized:
        desc += f", {w.quantized}"
    desc += f", batch {w.batch} x seq {w.seq}"
    if w.new_tokens:
        desc += f" + {w.new_tokens} new tokens"
    if w.training:
        desc += f", {w.optimizer}, checkpointing {w.checkpointing}, attention {w.attention}"
        if w.grad_accum > 1:
            desc += f", grad-accum {w.grad_accum} (effective batch {w.effective_batch})"
    if w.gpus > 1:
        desc += f", {w.gpus} GPUs (dp {w.dp}, tp {w.tp}, pp {w.pp}" + (f", zero {w.zero}" if w.zero else "") + \
            (", fsdp" if w.fsdp else "") + ")"
    out.append(desc)
    if m.assumed:
        out.append("assumed: " + "; ".join(m.assumed))
    out.append("")
    out.append(f"memory per GPU{' (most-loaded rank)' if w.gpus > 1 else ''}:")
    out.extend(breakdown_table(est.breakdown, width=width))
    if est.gpu is not None and est.headroom_bytes is not None:  # an estimate for a GPU has both
        out.append("")
        out.append(f"{est.gpu.name}: " + capacity_bar(est.device_total, est.gpu.capacity_bytes, headroom=headroom, color=color))
        word, rest = est.verdict.split(" (", 1)
        out.append(_c(word.upper(), "32;1" if est.fits else "31;1", color) + " (" + rest)
        out.append(est.advice)
    hl = est.host_load
    out.append(f"host RAM to load: {hl.eager_bytes / GiB:,.1f} GiB eager (fp32 init + state dict), "
               f"{hl.low_cpu_mem_usage_bytes / GiB:,.1f} GiB with low_cpu_mem_usage, "
               f"{hl.device_map_bytes / GiB:,.1f} GiB with device_map (one shard)")
    for n in est.breakdown.notes:
        out.append(f"note: {n}")
    return "\n".join(out)
