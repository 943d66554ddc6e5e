"""Inverse questions: the largest batch, sequence and context that fit; the smallest GPU and the
fewest GPUs that fit.

Memory never decreases as batch, sequence or generated tokens grow (a property the estimator's
tests pin), so the largest fitting value is found by doubling, then bisecting: O(log n)
evaluations, each exact (:class:`vramlens.advise.fastmem.FastMemory`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from vramlens.advise.budget import Budget
from vramlens.advise.fastmem import FastMemory
from vramlens.advise.plan import settings_of
from vramlens.estimator import estimate_spec
from vramlens.hardware.gpu import GPU
from vramlens.limits import SEARCH_BUDGET_S
from vramlens.models.spec import ModelSpec
from vramlens.workload import Workload

#: Largest value tried for a batch or a token count (beyond it, the answer is "at least").
SEARCH_CAP = 1 << 24
#: The Workload fields whose largest fitting value :func:`largest` finds.
SizeField = Literal["batch", "seq", "new_tokens"]


def _with_size(w: Workload, field: SizeField, value: int) -> Workload:
    """``w`` with ``field`` set to ``value`` (each field spelled out, so each is type-checked)."""
    if field == "batch":
        return replace(w, batch=value)
    if field == "seq":
        return replace(w, seq=value)
    return replace(w, new_tokens=value)


@dataclass(frozen=True, slots=True)
class Largest:
    """The largest value of one setting that fits, and what stopped it.

    Attributes:
        field: the setting ("batch", "seq", "context").
        value: the largest value that fits, or None when even the smallest does not.
        limited_by: "memory", "max_position" (the model's context length), or "cap".
        workload: the workload the question was asked of (with ``value`` set).
        device_total: per-GPU bytes at ``value``.
        partial: the time budget ran out before the bisection closed: ``value`` fits, but a
            larger one may too (``limited_by`` is then "budget").
    """

    field: str
    value: int | None
    limited_by: str
    workload: Workload
    device_total: int | None = None
    partial: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "limited_by": self.limited_by, "device_total_bytes": self.device_total,
                "partial": self.partial, "settings": settings_of(self.workload)}


def _fits(fm: FastMemory, w: Workload, limit: float, host_limit: int | None) -> tuple[bool, int | None]:
    if fm.problems(w):
        return False, None
    r = fm.totals(w)
    if r is None:
        return False, None
    dev, host = r
    return dev <= limit and (host_limit is None or host <= host_limit), dev


def largest(spec: ModelSpec, w: Workload, gpu: GPU, field: SizeField, *, headroom: float = 0.10,
            host_ram: int | None = None, cap: int = SEARCH_CAP, fm: FastMemory | None = None,
            budget_s: float = SEARCH_BUDGET_S) -> Largest:
    """The largest value of ``field`` (batch, seq or new_tokens) with which ``w`` fits ``gpu``.

    Args:
        cap: the largest value tried; reaching it reports ``limited_by="cap"`` (or
            "max_position" when the cap is the model's context length).
        budget_s: seconds the search may run; past them the largest value found to fit so far
            is returned with ``partial=True``.
    """
    budget = Budget.begin(budget_s)
    fm = fm or FastMemory(spec, gpu)
    limit = gpu.capacity_bytes * (1 - headroom)
    low_value = 0 if field == "new_tokens" else 1

    def at(v: int) -> tuple[bool, int | None]:
        return _fits(fm, _with_size(w, field, v), limit, host_ram)

    ok, dev = at(low_value)
    if not ok:
        return Largest(field, None, "memory", _with_size(w, field, low_value), dev)
    lo, hi = low_value, max(low_value + 1, 1)
    while hi <= cap:
        if budget.spent():
            return Largest(field, lo, "budget", _with_size(w, field, lo), at(lo)[1], partial=True)
        ok, _ = at(hi)
        if not ok:
            break
        lo, hi = hi, hi * 2
    else:
        hi = cap + 1
    # invariant: lo fits, hi does not (or is past the cap)
    while hi - lo > 1:
        if budget.spent():
            return Largest(field, lo, "budget", _with_size(w, field, lo), at(lo)[1], partial=True)
        mid = (lo + hi) // 2
        if at(mid)[0]:
            lo = mid
        else:
            hi = mid
    limited = "memory" if hi <= cap else ("max_position" if cap == _position_cap(spec, w, field) else "cap")
    return Largest(field, lo, limited, _with_size(w, field, lo), at(lo)[1])


def _position_cap(spec: ModelSpec, w: Workload, field: SizeField) -> int:
    if field == "seq":
        return spec.max_position
    if field == "new_tokens":
        return max(0, spec.max_position - w.seq)
    return SEARCH_CAP


def max_batch(spec: ModelSpec, w: Workload, gpu: GPU, *, headroom: float = 0.10, host_ram: int | None = None,
              cap: int = SEARCH_CAP, fm: FastMemory | None = None, budget_s: float = SEARCH_BUDGET_S) -> Largest:
    """Largest micro-batch per GPU (grad_accum unchanged)."""
    return largest(spec, w, gpu, "batch", headroom=headroom, host_ram=host_ram, cap=cap, fm=fm, budget_s=budget_s)


def max_seq(spec: ModelSpec, w: Workload, gpu: GPU, *, headroom: float = 0.10, host_ram: int | None = None,
            fm: FastMemory | None = None, budget_s: float = SEARCH_BUDGET_S) -> Largest:
    """Longest sequence (prompt for inference), at most the model's max_position_embeddings."""
    return largest(spec, w, gpu, "seq", cap=spec.max_position, headroom=headroom, host_ram=host_ram, fm=fm,
                   budget_s=budget_s)


def inference_of(w: Workload) -> Workload:
    """The inference counterpart of a workload (same precision, quantization and split)."""
    if not w.training:
        return w
    quant = w.quantized
    return replace(w, mode="inference", method="full", quant=quant, amp=None, grad_accum=1, zero=0, fsdp=False,
                   offload="none", checkpointing="none", dtype=w.compute_dtype)


def max_context(spec: ModelSpec, w: Workload, gpu: GPU, *, headroom: float = 0.10, host_ram: int | None = None,
                fm: FastMemory | None = None, budget_s: float = SEARCH_BUDGET_S) -> Largest:
    """Longest context (prompt plus generated tokens) whose KV cache fits, at the workload's batch.

    For a training workload, asked of its inference counterpart. ``value`` is seq + new_tokens.
    """
    wi = inference_of(w)
    r = largest(spec, wi, gpu, "new_tokens", cap=max(0, spec.max_position - wi.seq), headroom=headroom,
                host_ram=host_ram, fm=fm, budget_s=budget_s)
    value = None if r.value is None else wi.seq + r.value
    limited = "max_position" if r.limited_by == "max_position" else r.limited_by
    return Largest("context", value, limited, r.workload, r.device_total)


def min_gpu(spec: ModelSpec, w: Workload, *, headroom: float = 0.10, gpus: list[GPU] | None = None,
            exclude: str = "") -> GPU | None:
    """The catalog GPU with the least memory on which ``w`` fits (ties: the higher bandwidth).

    Unified-memory devices (Apple) are left out: plans speak CUDA (ZeRO, FSDP, bitsandbytes).
    ``fit``'s "it would fit on ..." is this answer (``exclude`` leaves out the GPU asked about).
    The catalog is small (one estimate per entry), so this needs no time budget.
    """
    from vramlens.hardware.catalog import list_gpus

    candidates = sorted(gpus or list_gpus(), key=lambda g: (g.capacity_bytes, -g.bandwidth_bytes_s, g.name))
    for g in candidates:
        if g.unified or g.name == exclude:
            continue
        if estimate_spec(spec, w, g, headroom=headroom).fits:
            return g
    return None


#: GPU counts tried for "fewest GPUs": powers of two, then whole 8-GPU nodes.
GPU_COUNTS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512)
