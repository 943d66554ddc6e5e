"""Weights on the GPU: the parameters and buffers by dtype, quantized formats, LoRA adapters.

Quantized formats, bytes per linear weight of shape (n out, k in):

* int8 (LLM.int8, Dettmers et al. 2022; bitsandbytes ``Int8Params``): n*k int8 plus one fp32
  row scale per output row (``SCB``): ``n*k + 4n``.
* nf4 / fp4 (QLoRA, Dettmers et al. 2023; bitsandbytes ``Params4bit``, blocksize 64):
  two 4-bit values per byte plus one fp32 absmax per 64 weights: ``n*k/2 + 4*n*k/64``.
* nf4-dq (double quantization): the absmax constants themselves quantized to 8 bits in
  blocks of 256 with one fp32 constant per block: ``n*k/2 + n*k/64 + 4*n*k/(64*256)``.
* gptq-4bit (AutoGPTQ / transformers GPTQ, group size g=128): ``qweight`` int32 (k/8, n),
  ``qzeros`` int32 (k/g, n/8), ``scales`` fp16 (k/g, n), ``g_idx`` int32 (k).
* awq-4bit (AutoAWQ GEMM, g=128): ``qweight`` int32 (k, n/8), ``qzeros`` int32 (k/g, n/8),
  ``scales`` fp16 (k/g, n).
* int4 (torchao-style int4 weight-only, g=128): n*k/2 plus bf16 scale and zero per group.
* fp8 (per-tensor scaled float8): n*k bytes plus one fp32 scale.

Layers kept in higher precision: embeddings, norms, biases and the output layer (lm_head) stay
in the compute dtype, as bitsandbytes' ``llm_int8_skip_modules`` default and GPTQ/AWQ do.
"""

from __future__ import annotations

from math import ceil

from vramlens.estimator.inventory import (
    float_bytes,
    lora_rounded_bytes,
    lora_shape,
    summarize,
)
from vramlens.estimator.memo import identity_cache
from vramlens.models.spec import ModelSpec
from vramlens.units import BLOCK, DTYPE_BYTES, round_up
from vramlens.workload import Workload

GROUP_SIZE = 128       # GPTQ / AWQ / int4 default group size (AutoGPTQ BaseQuantizeConfig, AutoAWQ q_group_size)
NF4_BLOCK = 64         # bitsandbytes Params4bit default blocksize
DQ_BLOCK = 256         # bitsandbytes nested (double) quantization blocksize


def quantized_linear_bytes(n: int, k: int, quant: str) -> int:
    """Bytes of one (n, k) linear weight in the quantized format, each tensor rounded to 512 B."""
    def r(x: int) -> int:
        return round_up(int(x), BLOCK)

    nk = n * k
    if quant == "int8":
        return r(nk) + r(4 * n)
    if quant in ("nf4", "fp4"):
        return r(ceil(nk / 2)) + r(4 * ceil(nk / NF4_BLOCK))
    if quant == "nf4-dq":
        blocks = ceil(nk / NF4_BLOCK)
        return r(ceil(nk / 2)) + r(blocks) + r(4 * ceil(blocks / DQ_BLOCK)) + r(4)
    if quant == "gptq-4bit":
        groups = ceil(k / GROUP_SIZE)
        return r(4 * ceil(k / 8) * n) + r(4 * groups * ceil(n / 8)) + r(2 * groups * n) + r(4 * k)
    if quant == "awq-4bit":
        groups = ceil(k / GROUP_SIZE)
        return r(4 * k * ceil(n / 8)) + r(4 * groups * ceil(n / 8)) + r(2 * groups * n)
    if quant == "int4":
        groups = ceil(k / GROUP_SIZE)
        return r(ceil(nk / 2)) + r(2 * 2 * groups * n)
    if quant == "fp8":
        return r(nk) + r(4)
    raise ValueError(quant)


def weight_dtype_bytes(w: Workload) -> int:
    """Bytes per element of the stored weights."""
    if w.method == "qlora":
        # QLoRA keeps non-quantized parts in the compute dtype (bnb_4bit_compute_dtype)
        return DTYPE_BYTES[w.compute_dtype]
    return DTYPE_BYTES[w.dtype]


def base_weight_bytes(spec: ModelSpec, w: Workload) -> tuple[int, str]:
    """Bytes of the model's own parameters and buffers on the GPU, and the formula used."""
    b = weight_dtype_bytes(w)
    quant = w.quantized
    total, q = _base_bytes(spec, b, quant)
    if quant is None:
        return total, f"{summarize(spec).params:,} params x {b} B ({w.dtype if w.method != 'qlora' else w.compute_dtype})"
    return total, f"{quant} linear weights ({q:,} B) + the rest at {b} B (embeddings, norms, biases, lm_head)"


@identity_cache
def _base_bytes(spec: ModelSpec, b: int, quant: str | None) -> tuple[int, int]:
    """(all weight bytes, the quantized linears' bytes) at b bytes per unquantized element."""
    s = summarize(spec)
    if quant is None:
        return float_bytes(spec, b) + s.fixed_bytes, 0
    # quantized linears replace their full-precision bytes; everything else stays at b bytes
    full = 0
    q = 0
    for lin in s.linears:
        if lin.layer is None:  # heads outside the blocks (lm_head, classifier) stay in high precision
            continue
        if lin.count > 1:  # fused experts: one (E, n, k) tensor, quantized per expert
            full += round_up(lin.count * lin.in_features * lin.out_features * b, BLOCK)
        else:
            full += round_up(lin.in_features * lin.out_features * b, BLOCK)
        q += lin.count * quantized_linear_bytes(lin.out_features, lin.in_features, quant)
    return float_bytes(spec, b) - full + q + s.fixed_bytes, q


def lora_params(spec: ModelSpec, w: Workload) -> int:
    if w.method == "full":
        return 0
    return lora_shape(spec, tuple(w.lora_targets)).params(w.lora_rank)


def adapter_bytes(spec: ModelSpec, w: Workload) -> int:
    """LoRA A and B matrices. peft upcasts adapters to fp32 (``autocast_adapter_dtype=True``, peft >= 0.12)."""
    if w.method == "full":
        return 0
    shape = lora_shape(spec, tuple(w.lora_targets))
    return lora_rounded_bytes(shape, w.lora_rank, 4)


def trainable_params(spec: ModelSpec, w: Workload) -> int:
    if w.mode != "train":
        return 0
    if w.method == "full":
        return summarize(spec).grad_params  # a parameter the loss never reaches gets no gradient
    return lora_params(spec, w)
