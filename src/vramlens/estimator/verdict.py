"""The one verdict rule, in words: fits means device total + headroom <= capacity.

Used by `estimate` (text, rich, HTML, JSON ``verdict``), `fit` and the web page, so every entry point
says the same thing with both numbers.
"""

from __future__ import annotations

from vramlens.hardware.gpu import GPU
from vramlens.units import human_bytes


def usable_bytes(gpu: GPU, headroom: float) -> int:
    """What may be used of one GPU: its capacity less the headroom kept free."""
    return int(gpu.capacity_bytes * (1 - headroom))


def verdict(total: int, gpu: GPU, headroom: float, gpus: int = 1) -> str:
    """"fits (A100-80GB): 13.2 GiB of 71.7 GiB usable (79.7 GiB less 10% headroom), 58.5 GiB to spare" or
    "does not fit (RTX-4090): needs 30.1 GiB, 19.9 GiB usable (22.1 GiB less 10% headroom), 10.2 GiB short"
    (per GPU)."""
    cap = gpu.capacity_bytes
    usable = usable_bytes(gpu, headroom)
    where = f" per GPU ({gpus} x {gpu.name})" if gpus > 1 else f" ({gpu.name})"
    less = f"{human_bytes(cap)} less {headroom:.0%} headroom"
    if total <= usable:
        return (f"fits{where}: {human_bytes(total)} of {human_bytes(usable)} usable ({less}), "
                f"{human_bytes(usable - total)} to spare")
    return (f"does not fit{where}: needs {human_bytes(total)}, {human_bytes(usable)} usable ({less}), "
            f"{human_bytes(total - usable)} short")
