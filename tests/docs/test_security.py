"""SECURITY.md cannot drift from vramlens.limits: every bound is listed there, with its value."""

from __future__ import annotations

import re
from pathlib import Path

from vramlens import limits

ROOT = Path(__file__).resolve().parents[2]
TEXT = (ROOT / "SECURITY.md").read_text(encoding="utf-8")
BOUNDS = sorted(n for n in vars(limits) if re.fullmatch(r"(MAX|SEARCH)_[A-Z0-9_]+", n))


def _row(name: str) -> str:
    (row,) = [line for line in TEXT.splitlines() if line.startswith(f"| `{name}` |")]
    return row.split("|")[2].strip()


def _value(text: str) -> float:
    """'4,096' '2^30' '100T' '8 MiB' '10^15 B/s' '1 PiB' '10 s' as a number."""
    text = text.replace(",", "").split(" B")[0].removesuffix(" s").strip()
    units = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "PiB": 2**50, "T": 10**12}
    for unit, scale in units.items():
        if text.endswith(unit):
            return float(text.removesuffix(unit).strip()) * scale
    if "^" in text:
        base, exp = text.split("^")
        return float(int(base) ** int(exp))
    return float(text)


def test_every_bound_is_in_security_md_with_its_value():
    assert BOUNDS, "no bounds found in vramlens.limits"
    for name in BOUNDS:
        assert _value(_row(name)) == float(getattr(limits, name)), name


def test_security_md_lists_no_bound_that_is_gone():
    listed = set(re.findall(r"^\| `((?:MAX|SEARCH)_[A-Z0-9_]+)` \|", TEXT, re.M))
    assert listed == set(BOUNDS)
