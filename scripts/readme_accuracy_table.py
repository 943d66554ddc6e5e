"""The README's accuracy table, made from `vramlens validate published --json`.

    python scripts/readme_accuracy_table.py           # rewrite the table in README.md in place
    python scripts/readme_accuracy_table.py --check   # exit 1 when README.md's table is stale

tests/docs/test_readme.py calls `accuracy_table` on the command's output and compares, so the
README cannot drift from the estimator: change an estimate, run this, commit both.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
HEADER = ("| case | figure | published | vramlens | error |", "|---|---|---:|---:|---:|")
#: The table runs from its header to the summary line under it.
_BLOCK = re.compile(r"^\| case \| figure \|.*?^\d+ cases: median [^\n]*$", re.S | re.M)
MiB = 2**20


def published_rows() -> list[dict]:
    """What `vramlens validate published --json` prints, parsed."""
    from vramlens.cli.main import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["validate", "published", "--json"])
    if code != 0:
        raise RuntimeError(f"vramlens validate published --json exited {code}")
    return json.loads(out.getvalue())


def accuracy_table(rows: Iterable[Mapping]) -> str:
    """The Markdown table (MiB rounded to whole numbers, error to 0.1%) and its summary line.

    Rows the estimator cannot reproduce show the published figure in bytes and the reason.
    The median is the CLI's: the upper middle of the sorted |errors|.
    """
    lines = list(HEADER)
    errors = []
    for r in rows:
        if r["estimated_bytes"] is None:
            lines.append(f"| {r['id']} | - | {r['published_bytes']:,} B | - | {r['reason']} |")
            continue
        errors.append(abs(r["error"]))
        lines.append(f"| {r['id']} | {r['figure']} | {r['published_bytes'] / MiB:,.0f} MiB | "
                     f"{r['estimated_bytes'] / MiB:,.0f} MiB | {r['error']:+.1%} |")
    errors.sort()
    lines.append("")
    lines.append(f"{len(errors)} cases: median |error| {errors[len(errors) // 2]:.1%}, "
                 f"within 10%: {sum(e <= 0.10 for e in errors)}, max {errors[-1]:.1%}.")
    return "\n".join(lines)


def readme_table(text: str) -> str:
    """The accuracy table as the README has it now."""
    m = _BLOCK.search(text)
    if m is None:
        raise ValueError("README.md has no accuracy table (a '| case | figure |' header down to 'N cases: median')")
    return m.group(0)


def replace_table(text: str, table: str) -> str:
    readme_table(text)  # raises when there is none
    return _BLOCK.sub(lambda _: table, text, count=1)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    text = README.read_text(encoding="utf-8")
    table = accuracy_table(published_rows())
    if readme_table(text) == table:
        return 0
    if "--check" in argv:
        print("README.md's accuracy table is stale: run python scripts/readme_accuracy_table.py", file=sys.stderr)
        return 1
    README.write_text(replace_table(text, table), encoding="utf-8")
    print("README.md: accuracy table updated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
