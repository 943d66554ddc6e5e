"""The README's table of real-GPU measurements against today's estimate.

Reads validation/stack-gpu.json (written on a GPU by scripts/gpu_stack_validate.py: each case's
``torch.cuda.max_memory_allocated``), recomputes the estimate of every case with the code as it
is now, and prints the Markdown table and its summary line.

    python scripts/gpu_report.py           # rewrite the table in README.md in place
    python scripts/gpu_report.py --check   # exit 1 when README.md's table is stale

tests/docs/test_readme.py compares the README with ``gpu_table()``, so the table cannot drift
from the estimator.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
STACK = ROOT / "validation" / "stack-gpu.json"
HEADER = ("| case (H200) | settings | torch.cuda peak | vramlens | error |", "|---|---|---:|---:|---:|")
_BLOCK = re.compile(r"^\| case \(H200\) \|.*?^\d+ real-GPU cases: [^\n]*$", re.S | re.M)
MiB = 2**20
_SHOWN = ("batch", "seq", "dtype", "amp", "method", "attention", "checkpointing", "optimizer", "loss",
          "loss_chunks", "optimizer_in_backward", "activation_offload", "new_tokens", "task")


def _settings(wl: dict[str, Any]) -> str:
    parts = [wl.get("mode", "inference")]
    for k in _SHOWN:
        if k in wl and wl[k] not in (None, False):
            parts.append(k.replace("_", "-") if wl[k] is True else f"{k.replace('_', '-')} {wl[k]}")
    return ", ".join(parts)


def rows(path: Path = STACK) -> list[dict[str, Any]]:
    """Each measured case with today's estimate of its peak."""
    sys.path.insert(0, str(ROOT / "src"))
    from vramlens.estimator import estimate

    out = []
    for c in json.loads(path.read_text())["cases"]:
        measured = c.get("cuda_max_allocated")
        if not measured:
            continue
        e = estimate(c["model"], gpu="H200", **c["workload"]).breakdown.peak_allocated
        out.append({"case": c["case"], "settings": _settings(c["workload"]), "measured": measured, "estimate": e,
                    "error": e / measured - 1})
    return out


def gpu_table(data: list[dict[str, Any]]) -> str:
    """The Markdown table and its summary line."""
    lines = list(HEADER)
    for r in data:
        lines.append(f"| {r['case']} | {r['settings']} | {r['measured'] / MiB:,.0f} MiB | {r['estimate'] / MiB:,.0f} MiB "
                     f"| {r['error']:+.1%} |")
    errs = [abs(r["error"]) for r in data]
    within = sum(1 for e in errs if e <= 0.02)
    lines.append("")
    lines.append(f"{len(data)} real-GPU cases: median |error| {statistics.median(errs):.1%}, "
                 f"within 2%: {within}, max {max(errs):.1%}.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    table = gpu_table(rows())
    text = README.read_text()
    if not _BLOCK.search(text):
        print("README.md has no real-GPU table to update", file=sys.stderr)
        return 1
    new = _BLOCK.sub(lambda _m: table, text)
    if "--check" in argv:
        if new != text:
            print("README.md's real-GPU table is stale: run python scripts/gpu_report.py", file=sys.stderr)
            return 1
        return 0
    README.write_text(new)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
