"""Regenerate the README's `vramlens validate capacity` tables (the per-engine summary and the per-case KV
figure) from validation/capacity-cases.json, in place between the summary's header and the end of the case
table. Run from the repository root: ``PYTHONPATH=src python scripts/readme_capacity_table.py``."""

from __future__ import annotations

import json
import re
from pathlib import Path

from vramlens.serving.validation import KV_FIGURES, run_cases, summarize

ROOT = Path(__file__).resolve().parents[1]
SUMMARY_HEAD = ("| engine | cases | figures | median \\|error\\| | within 10% | KV cases | KV median \\|error\\| "
                "| KV within 3% | refusals agreed |")
CASE_HEAD = "| case (source) | KV figure | logged | vramlens | error | weights error |"


def _pct(x: float | None, digits: int = 1) -> str:
    return "" if x is None else f"{x:+.{digits}%}"


def _num(key: str, x: float) -> str:
    return f"{x:,.0f}" if key in ("kv_tokens", "num_gpu_blocks") else f"{x:,.2f}"


def tables() -> str:
    results = run_cases(json.loads((ROOT / "validation" / "capacity-cases.json").read_text()))
    lines = [SUMMARY_HEAD, "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for s in summarize(results):
        lines.append(f"| {s.engine} | {s.cases} | {s.figures} | {s.median_abs_error or 0:.1%} | {s.within_10 or 0:.0%} "
                     f"| {s.kv_cases} | {s.kv_median_abs_error or 0:.1%} | {s.kv_within_3 or 0:.0%} "
                     f"| {s.refusals_agreed}/{s.refusals} |")
    lines += ["", CASE_HEAD, "|---|---|---:|---:|---:|---:|"]
    for r in results:
        link = f"[{r.id}]({r.source.split()[0]})"  # the URL, without a trailing "(comment by ...)"
        if r.engine_refused:
            lines.append(f"| {link} | engine refused | | {'refused' if r.refusal else 'started'} | | |")
            continue
        kv = next((c for key in KV_FIGURES for c in r.checks if c.key == key), None)
        weights = next((c for c in r.checks if c.key in ("weights_gib", "model_buffer_mib")), None)
        if kv is None:
            continue
        predicted = "refused" if kv.predicted is None else _num(kv.key, kv.predicted)
        lines.append(f"| {link} | {kv.figure} | {_num(kv.key, kv.logged)} | {predicted} | {_pct(kv.error)} "
                     f"| {_pct(weights.error) if weights else ''} |")
    return "\n".join(lines)


def main() -> None:
    readme = ROOT / "README.md"
    text = readme.read_text()
    start = text.index(SUMMARY_HEAD)
    case_start = text.index(CASE_HEAD, start)
    end = text.index("\n\n", case_start)
    new = text[:start] + tables() + text[end:]
    if not re.search(re.escape(CASE_HEAD), new):
        raise SystemExit("README tables not found")
    readme.write_text(new)


if __name__ == "__main__":
    main()
