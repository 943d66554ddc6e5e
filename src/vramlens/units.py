"""Bytes, dtype sizes, and parsing/printing of sizes.

Bytes are exact ints everywhere in vramlens; this module is the only place that turns
them into text ("13.48 GiB") or text into them ("24GB", "80GiB", "7B").
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from vramlens.errors import InputError
from vramlens.limits import show

#: Longest size or count text accepted ("1.5B", "80GiB" are 4-5 characters; 64 is generous,
#: and keeps a 5,000-digit string from ever reaching float()).
MAX_NUMBER_TEXT = 64

KiB = 1024
MiB = 1024**2
GiB = 1024**3
TiB = 1024**4

#: The CUDA caching allocator rounds every request up to a multiple of 512 bytes
#: (kMinBlockSize in c10/cuda/CUDACachingAllocator.cpp); the one definition in vramlens.
BLOCK = 512

#: Bytes per element of each dtype vramlens knows. Sub-byte formats (nf4, fp4, int4) are
#: handled by the quantization formulas in :mod:`vramlens.estimator.weights`, not here.
DTYPE_BYTES: dict[str, int] = {
    "fp64": 8,
    "fp32": 4,
    "tf32": 4,
    "fp16": 2,
    "bf16": 2,
    "fp8": 1,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "bool": 1,
}

#: Names used by torch, safetensors headers and config.json's ``torch_dtype`` mapped to ours.
DTYPE_ALIASES: dict[str, str] = {
    "float64": "fp64", "double": "fp64", "f64": "fp64", "F64": "fp64",
    "float32": "fp32", "float": "fp32", "f32": "fp32", "F32": "fp32",
    "float16": "fp16", "half": "fp16", "f16": "fp16", "F16": "fp16",
    "bfloat16": "bf16", "BF16": "bf16",
    "float8_e4m3fn": "fp8", "float8_e5m2": "fp8", "F8_E4M3": "fp8", "F8_E5M2": "fp8",
    "I8": "int8", "U8": "uint8", "I16": "int16", "I32": "int32", "I64": "int64", "BOOL": "bool",
}


def canonical_dtype(name: str) -> str:
    """Return vramlens' name for a dtype given in any common spelling.

    Raises:
        InputError: the name is not a dtype vramlens knows.
    """
    key = str(name).strip()
    key = key.removeprefix("torch.")
    if key in DTYPE_BYTES:
        return key
    if key in DTYPE_ALIASES:
        return DTYPE_ALIASES[key]
    low = key.lower()
    if low in DTYPE_BYTES:
        return low
    if low in DTYPE_ALIASES:
        return DTYPE_ALIASES[low]
    raise InputError(f"unknown dtype {name!r}: use one of {', '.join(sorted(DTYPE_BYTES))}")


def dtype_bytes(name: str) -> int:
    """Bytes per element of ``name`` (any spelling accepted by :func:`canonical_dtype`)."""
    return DTYPE_BYTES[canonical_dtype(name)]


_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*$")
_SIZE_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "kib": KiB,
    "m": 1000**2, "mb": 1000**2, "mib": MiB,
    "g": 1000**3, "gb": 1000**3, "gib": GiB,
    "t": 1000**4, "tb": 1000**4, "tib": TiB,
}


def parse_size(text: str | int | float, *, what: str = "size") -> int:
    """Parse ``"24GB"`` (1e9-byte units), ``"80GiB"`` (binary) or a plain byte count.

    Raises:
        InputError: the text is not a size; the message names it and shows valid forms.
    """
    if isinstance(text, bool):
        raise InputError(f"{what}={text!r} is not a size: write e.g. 24GB, 80GiB or 1073741824")
    if isinstance(text, (int, float)):
        if isinstance(text, float) and not math.isfinite(text):
            raise InputError(f"{what}={text!r} is not a size: write e.g. 24GB, 80GiB or 1073741824")
        if text <= 0:
            raise InputError(f"{what}={text!r} must be positive")
        return int(text)
    if len(str(text)) > MAX_NUMBER_TEXT:
        raise InputError(f"{what}={show(text)} is {len(str(text)):,} characters, over the limit of "
                         f"{MAX_NUMBER_TEXT}: write e.g. 24GB, 80GiB or 1073741824")
    m = _SIZE.match(str(text))
    if not m or m.group(2).lower() not in _SIZE_UNITS:
        raise InputError(f"{what}={text!r} is not a size: write e.g. 24GB, 80GiB or 1073741824")
    if len(m.group(1)) > 30:  # float() would make 1e400 an infinity
        raise InputError(f"{what}={text[:40]!r}... has {len(m.group(1))} digits: too large to be a size")
    value = float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()]
    if not math.isfinite(value):
        raise InputError(f"{what}={text!r} is too large to be a size")
    if value <= 0:
        raise InputError(f"{what}={text!r} must be positive")
    return int(round(value))


_COUNT = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kKmMbBtT]?)\s*$")
_COUNT_UNITS = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}


def parse_count(text: str | int, *, what: str = "params", limit: int | None = None) -> int:
    """Parse a parameter count such as ``"7B"``, ``"350M"``, ``"1.5b"`` or ``"124000000"``.

    Raises:
        InputError: not a count, not positive, or over ``limit``; the message names the value.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        if text <= 0:
            raise InputError(f"{what}={show(text)} must be positive")
        value: float | int = text
    else:
        if len(str(text)) > MAX_NUMBER_TEXT:
            raise InputError(f"{what}={show(text)} is {len(str(text)):,} characters, over the limit of "
                             f"{MAX_NUMBER_TEXT}: write e.g. 7B, 350M or 124000000")
        m = _COUNT.match(str(text))
        if not m:
            raise InputError(f"{what}={text!r} is not a count: write e.g. 7B, 350M or 124000000")
        value = float(m.group(1)) * _COUNT_UNITS[m.group(2).lower()]
        if value < 1:
            raise InputError(f"{what}={text!r} must be positive")
    if limit is not None and value > limit:
        raise InputError(f"{what}={show(text)} is over the limit of {human_count(limit)} ({limit:,}): "
                         f"no model is that large")
    if not math.isfinite(value):
        raise InputError(f"{what}={show(text)} is too large to be a count")
    return int(round(value))


def gib(n_bytes: int) -> float:
    return n_bytes / GiB


def format_bytes(n_bytes: int, *, unit: str = "GiB", digits: int = 2) -> str:
    """Format with a fixed binary unit so that columns line up (``"13.48 GiB"``)."""
    div = {"B": 1, "KiB": KiB, "MiB": MiB, "GiB": GiB, "TiB": TiB}[unit]
    if unit == "B":
        return f"{n_bytes:,} B"
    return f"{n_bytes / div:,.{digits}f} {unit}"


def format_gib(n_bytes: int | float | None, *, unit: bool = True, grouped: bool = True) -> str:
    """Bytes as GiB with two decimals: ``"1,013.48 GiB"``; ``unit=False`` where a column header names the unit,
    ``grouped=False`` without thousands separators; ``""`` for an absent value (an empty cell)."""
    if n_bytes is None:
        return ""
    text = f"{n_bytes / GiB:,.2f}" if grouped else f"{n_bytes / GiB:.2f}"
    return f"{text} GiB" if unit else text


def human_bytes(n_bytes: int) -> str:
    """Pick the binary unit that suits the value (for prose, not for tables)."""
    for unit, div in (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(n_bytes) >= div:
            return f"{n_bytes / div:.2f} {unit}"
    return f"{n_bytes} B"


def human_count(n: int) -> str:
    for suffix, div in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if n >= div:
            return f"{n / div:.2f}{suffix}"
    return str(n)


def ceil_div(n: int, m: int) -> int:
    """``ceil(n / m)`` in exact integers (``m`` > 0)."""
    return -(-n // m)


def round_up(n: int, multiple: int) -> int:
    """``n`` rounded up to a multiple of ``multiple`` (> 0), in exact integers."""
    return ceil_div(n, multiple) * multiple


def block_bytes(n: int) -> int:
    """Bytes the caching allocator gives a tensor of ``n`` bytes: ``n`` rounded up to whole 512-byte blocks
    (``BLOCK``, c10/cuda/CUDACachingAllocator.cpp ``kMinBlockSize``); 0 for nothing."""
    return round_up(int(n), BLOCK) if n > 0 else 0


def pow2_ceil(n: int) -> int:
    """The smallest power of two >= ``n`` (0 stays 0): what PyTorch's pinned host allocator hands out
    (aten/src/ATen/core/CachingHostAllocator.h ``c10::llvm::PowerOf2Ceil(size)``)."""
    return 0 if n <= 0 else 1 << (n - 1).bit_length()


def peak_indices(totals: Sequence[int], max_points: int, *, keep_last: bool = False) -> list[int]:
    """Which points of a timeline to keep so that at most ``max_points`` remain and every spike survives.

    The series is cut into equal runs of ``ceil(n / runs)`` points and each run keeps the index of its largest
    total (the first of equals), so the global peak is always kept exactly (PyTorch's memory viewer draws the
    same envelope). ``keep_last`` also keeps the final point (where the run ends), within the same budget
    (with ``max_points=1`` the peak wins).

    Args:
        totals: the value of each point, in order.
        max_points: the most indices returned (>= 1).
        keep_last: keep the last index too.

    Returns:
        Increasing indices into ``totals``.

    Raises:
        ValueError: ``max_points`` < 1.
    """
    if max_points < 1:
        raise ValueError(f"max_points={max_points} must be >= 1")
    n = len(totals)
    if n <= max_points:
        return list(range(n))
    runs = max_points - 1 if keep_last and max_points > 1 else max_points
    length = ceil_div(n - 1 if keep_last and max_points > 1 else n, runs)
    end = n - 1 if keep_last and max_points > 1 else n
    keep = [max(range(start, min(start + length, end)), key=lambda i: (totals[i], -i))
            for start in range(0, end, length)]
    if keep_last:
        if max_points == 1:
            return [max(range(n), key=lambda i: (totals[i], -i))]
        keep.append(n - 1)
    return keep
