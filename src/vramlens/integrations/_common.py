"""What the framework callbacks share: the ``vram/*`` figures of a running watch and the report files."""

from __future__ import annotations

import json
import os
from typing import Any

from vramlens.units import GiB, MiB


def vram_metrics(watch: Any) -> dict[str, float]:
    """The ``vram/*`` figures of the steps ``watch`` has seen so far (empty before the first step)."""
    if watch is None or not watch.records:
        return {}
    records = watch.records
    last = records[-1]
    out = {
        "vram/peak_allocated_gib": round(max(r.peak_allocated_bytes for r in records) / GiB, 4),
        "vram/live_gib": round(last.live_bytes / GiB, 4),
        "vram/activations_gib": round(last.categories["activations_and_temporaries"] / GiB, 4),
    }
    if last.host_rss_bytes is not None:
        out["vram/host_rss_gib"] = round(last.host_rss_bytes / GiB, 4)
    leak = watch.current_leak
    if leak is not None:
        out["vram/leak_mib_per_step"] = round(leak.bytes_per_step / MiB, 4)
    return out


def write_report(report: Any, output_dir: str) -> tuple[str, str]:
    """``vramlens-watch.html`` and ``.json`` in ``output_dir`` (made if missing); their paths."""
    from vramlens.report.html import write_text_atomic

    os.makedirs(output_dir, exist_ok=True)
    html = os.path.join(output_dir, "vramlens-watch.html")
    js = os.path.join(output_dir, "vramlens-watch.json")
    write_text_atomic(html, report.to_html())
    write_text_atomic(js, json.dumps(report.to_dict(), indent=2) + "\n")
    return html, js
