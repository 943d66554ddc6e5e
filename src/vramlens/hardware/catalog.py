"""The GPU catalog: datasheet figures in ``data/gpus.json``, looked up by name, alias or size.

``get_gpu("A100 80GB")``, ``get_gpu("rtx4090")`` and ``get_gpu("NVIDIA H100 80GB HBM3")`` (the
name NVML reports) all find their card: names are compared case-insensitively with spaces,
dashes and vendor words (NVIDIA, GeForce, Tesla, AMD, Instinct, Apple) removed. A size such as
``"24GB"`` (24e9 bytes) or ``"80GiB"`` gives a generic GPU of exactly that capacity, whose
throughput figures are the GENERIC_* constants below (an A100-class card: only memory matters
to whether a workload fits; time estimates on a generic GPU are rough).
"""

from __future__ import annotations

import difflib
import json
import os
import re
from functools import lru_cache
from importlib import resources
from typing import Any

from vramlens.errors import UnknownGPUError
from vramlens.hardware.gpu import GPU
from vramlens.units import MiB, parse_size

#: Throughput given to a GPU described only by its size: A100-class figures
#: (NVIDIA A100 datasheet: 2.0 TB/s, 312 TFLOPS bf16/fp16, 19.5 TFLOPS fp32), rounded.
GENERIC_BANDWIDTH_BYTES_S = 2.0e12
GENERIC_BF16_FLOPS = 312e12
GENERIC_FP32_FLOPS = 19.5e12

_VENDOR_WORDS = ("nvidia", "geforce", "tesla", "amd", "instinct", "apple", "radeon")
_SIZE_ONLY = re.compile(r"^\s*[0-9]*\.?[0-9]+\s*(kb|kib|mb|mib|gb|gib|tb|tib|g|t)\s*$", re.IGNORECASE)


def _key(text: str) -> str:
    """Normalise a name for matching: lower case, vendor words and punctuation removed."""
    low = text.lower()
    for word in _VENDOR_WORDS:
        low = re.sub(rf"\b{word}\b", " ", low)
    return re.sub(r"[^a-z0-9]", "", low)


def _gpu_from_entry(entry: dict[str, Any]) -> GPU:
    usable = entry.get("usable_bytes")
    if usable is None and entry.get("nvidia_smi_total_mib") is not None:
        usable = int(entry["nvidia_smi_total_mib"]) * MiB
    cc = entry.get("compute_capability")
    return GPU(
        name=entry["name"],
        memory_bytes=int(entry["memory_bytes"]),
        bandwidth_bytes_s=float(entry["bandwidth_bytes_s"]),
        bf16_flops=float(entry["bf16_flops"]),
        fp16_flops=float(entry["fp16_flops"]),
        fp32_flops=float(entry["fp32_flops"]),
        arch=entry["arch"],
        vendor=entry.get("vendor", "nvidia"),
        compute_capability=tuple(cc) if cc else None,
        usable_bytes=int(usable) if usable is not None else None,
        interconnect_bytes_s=float(entry.get("interconnect_bytes_s", 32e9)),
        pcie_bytes_s=float(entry.get("pcie_bytes_s", 32e9)),
        unified=bool(entry.get("unified", False)),
        aliases=tuple(entry.get("aliases", ())),
        source=entry.get("source", ""),
        bf16=bool(entry.get("bf16", True)),
        sms=int(entry["sms"]) if entry.get("sms") is not None else None,
        cuda_total_bytes=int(entry["cuda_total_bytes"]) if entry.get("cuda_total_bytes") is not None else None,
        cuda_total_source=entry.get("cuda_total_source", ""),
    )


@lru_cache(maxsize=1)
def _data() -> dict[str, Any]:
    text = resources.files("vramlens.hardware").joinpath("data/gpus.json").read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


@lru_cache(maxsize=1)
def _catalog() -> tuple[tuple[GPU, ...], dict[str, GPU]]:
    gpus = tuple(_gpu_from_entry(e) for e in _data()["gpus"])
    index: dict[str, GPU] = {}
    for gpu in gpus:
        for name in (gpu.name, *gpu.aliases):
            index.setdefault(_key(name), gpu)
    return gpus, index


@lru_cache(maxsize=1)
def _ambiguous() -> dict[str, tuple[str, ...]]:
    """Normalised bare names ("a100") -> the catalog cards they could mean."""
    return {_key(name): tuple(cards) for name, cards in _data()["ambiguous"].items()}


def list_gpus() -> tuple[GPU, ...]:
    """Every GPU in the catalog, in catalog order (newest data-centre cards first)."""
    return _catalog()[0]


def generic_gpu(memory_bytes: int, name: str | None = None) -> GPU:
    """A GPU known only by its memory; throughput is the documented GENERIC_* figures."""
    return GPU(
        name=name or f"{memory_bytes:,} B GPU",
        memory_bytes=int(memory_bytes),
        bandwidth_bytes_s=GENERIC_BANDWIDTH_BYTES_S,
        bf16_flops=GENERIC_BF16_FLOPS,
        fp16_flops=GENERIC_BF16_FLOPS,
        fp32_flops=GENERIC_FP32_FLOPS,
        arch="generic",
        vendor="generic",
        source="size given by the user; throughput assumed A100-class (vramlens.hardware.catalog.GENERIC_*)",
    )


def _size_name(text: str) -> str:
    m = re.match(r"^\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]+)\s*$", text)
    assert m is not None
    unit = m.group(2)
    unit = {"g": "GB", "t": "TB"}.get(unit.lower(), unit.upper().replace("I", "i"))
    return f"{m.group(1)} {unit} GPU"


def as_gpu(gpu: str | GPU | None) -> GPU | None:
    """``gpu`` as the API functions take it: a catalog name or a size (:func:`get_gpu`), a GPU, or None.

    Raises:
        UnknownGPUError: anything else (a number, a list ...), named with what to give instead.
    """
    if gpu is None or isinstance(gpu, GPU):
        return gpu
    if isinstance(gpu, str):
        return get_gpu(gpu)
    from vramlens.limits import show

    raise UnknownGPUError(f"gpu={show(gpu)} is not a GPU: give a catalog name such as 'A100-80GB' (see `vramlens "
                          "gpus`), a size such as '24GB', or a vramlens.GPU")


def get_gpu(name_or_size: str) -> GPU:
    """Find a GPU by name or alias (loose, case-insensitive), or make one from a size.

    Args:
        name_or_size: "A100-80GB", "a100 80gb", "h100 sxm", "4090", "rtx4090", an NVML name such as
            "NVIDIA H100 80GB HBM3", or a size: "24GB" (24e9 bytes), "80GiB" (80 * 2**30).

    Returns:
        The catalog GPU, or a generic one named "24 GB GPU" for a size.

    Raises:
        UnknownGPUError: neither a catalog name nor a size (the message lists the closest names),
            or a bare name that several cards share ("a100": 40 or 80 GB, "h100": SXM, PCIe or
            NVL), listed in the data's ``ambiguous`` map: the message lists the variants.
    """
    from vramlens.limits import MAX_DEVICE_BYTES, MAX_GPU_NAME, show

    text = str(name_or_size).strip()
    if len(text) > MAX_GPU_NAME:
        raise UnknownGPUError(f"gpu={show(text)} is {len(text):,} characters: a GPU name or size has at most "
                              f"{MAX_GPU_NAME}; see `vramlens gpus`")
    if _SIZE_ONLY.match(text):
        size = parse_size(text, what="gpu")
        if size > MAX_DEVICE_BYTES:
            raise UnknownGPUError(f"gpu={text!r} is {size:.3g} bytes: over the limit of {MAX_DEVICE_BYTES:,} "
                                  "(1 PiB); give the memory of one GPU, such as 80GB")
        return generic_gpu(size, name=_size_name(text))
    if re.match(r"[-+\u2212]\s*[\d.]", text):  # "-1GB" was read as the key "1gb", found inside "h200141gb"
        raise UnknownGPUError(f"gpu={text!r} is a signed size: give the memory of one GPU without a sign, such as 24GB")
    gpus, index = _catalog()
    key = _key(text)
    if key in _ambiguous():
        variants = _ambiguous()[key]
        raise UnknownGPUError(f"gpu={text!r} is ambiguous: it names {', '.join(variants[:-1])} or {variants[-1]}, "
                              f"which differ in memory or bandwidth; name one of them (vramlens gpus lists them)")
    if key in index:
        return index[key]
    if key:
        # A unique catalog key containing the query, or contained in it ("h100sxm580gb").
        hits = {id(g): g for k, g in index.items() if key in k or (len(k) >= 3 and k in key)}
        by_name = {g.name: g for g in gpus}
        for k, variants in _ambiguous().items():  # "a100-90" may mean any A100, not the A10
            if key in k or k in key:
                hits.update((id(by_name[n]), by_name[n]) for n in variants)
        if len(hits) == 1:
            return next(iter(hits.values()))
    raise UnknownGPUError(_unknown_message(text, key))


def _closeness(query: str, key: str) -> float:
    """Similarity of two keys: difflib's ratio plus a bonus for a shared prefix ("a100...")."""
    prefix = len(os.path.commonprefix([query, key]))
    return difflib.SequenceMatcher(None, query, key).ratio() + 0.5 * prefix / max(len(query), 1)


def _unknown_message(text: str, key: str) -> str:
    gpus, index = _catalog()
    best: dict[str, float] = {}
    for k, gpu in index.items():
        score = _closeness(key, k)
        if score > best.get(gpu.name, -1.0):
            best[gpu.name] = score
    names = sorted(best, key=lambda n: -best[n])[:2]
    return f"unknown GPU {text!r}: closest: {', '.join(names)}; or give a size such as 24GB"
