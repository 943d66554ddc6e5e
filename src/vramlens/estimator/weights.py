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
in the compute dtype, as bitsandbytes' ``llm_int8_skip_modules`` default and GPTQ/AWQ do; with
``quant_head`` the output layer is stored in the quantized format too (:func:`quantized_head_bytes`):
LitGPT's QLoRA (litgpt/finetune/lora.py at 5895df10 uses Lightning Fabric's ``BitsandbytesPrecision``,
whose ``_convert_layers`` replaces every ``nn.Linear``: no ``ignore_modules`` is passed, so
``lm_head.linear`` is NF4), torchao's ``quantize_(model, int8_weight_only())`` / ``int4_weight_only()``
(the default filter takes every ``nn.Linear``) and gpt-fast's quantize.py. A tied output layer
becomes a quantized copy of its own (replacing the module's weight unties it); the embedding stays.
Which linears are quantized under LoRA/QLoRA (``quant_targets``): every linear of the blocks
(transformers' ``BitsAndBytesConfig`` replaces every ``nn.Linear`` but the output layer,
``get_keys_to_not_convert``; torchtune >= 0.3's QLoRA builders use ``FrozenNF4Linear`` for the
linears without adapters) or only the adapted ones (torchtune 0.1 - 0.2's QLoRA:
``LoRALinear(quantize_base=True)``, the other linears plain ``nn.Linear``).
"""

from __future__ import annotations

from math import ceil

from vramlens.estimator.heads import LM_HEADS
from vramlens.estimator.inventory import (
    Linear,
    float_bytes,
    lora_rounded_bytes,
    lora_shape,
    summarize,
)
from vramlens.estimator.memo import identity_cache
from vramlens.models.spec import ModelSpec
from vramlens.units import BLOCK, DTYPE_BYTES, round_up
from vramlens.workload import FOUR_BIT, Workload

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


def quantizes_head(spec: ModelSpec, w: Workload) -> bool:
    """Whether the output layer is stored quantized (``quant_head`` with quantized weights and an LM head)."""
    return w.quant_head and w.quantized is not None and spec.head in LM_HEADS


def head_weight_bytes(spec: ModelSpec, b: int) -> int:
    """The output layer's (V, h) weight at b bytes per element, rounded to 512 B."""
    return round_up(spec.vocab_size * spec.hidden_size * b, BLOCK)


def quantized_head_bytes(spec: ModelSpec, w: Workload) -> tuple[int, int]:
    """(bytes the quantized output layer adds, bytes it removes) to the weights: its (V, h) weight in
    the quantized format (quantized_linear_bytes), replacing the high-precision one when untied; a tied
    one stays as the input embedding, so nothing is removed. (0, 0) when the head is not quantized."""
    if not quantizes_head(spec, w):
        return 0, 0
    quant = w.quantized
    assert quant is not None
    added = quantized_linear_bytes(spec.vocab_size, spec.hidden_size, quant)
    removed = 0 if spec.tied_embeddings else head_weight_bytes(spec, weight_dtype_bytes(w))
    return added, removed


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
    total, q = _base_bytes(spec, b, quant, adapted_only(w))
    if quant is None:
        return total, f"{summarize(spec).params:,} params x {b} B ({w.dtype if w.method != 'qlora' else w.compute_dtype})"
    which = "the adapted linears' weights" if adapted_only(w) else "linear weights"
    added, removed = quantized_head_bytes(spec, w)
    if added:
        tied = " (a copy of its own: the tied embedding stays)" if spec.tied_embeddings else ""
        return (total + added - removed,
                f"{quant} {which} ({q:,} B) + the output layer in {quant}{tied} ({added:,} B) + the rest at {b} B "
                "(embeddings, norms, biases)")
    return total, f"{quant} {which} ({q:,} B) + the rest at {b} B (embeddings, norms, biases, lm_head)"


def legacy_block_buffer_bytes(spec: ModelSpec, w: Workload) -> int:
    """Bytes of the buffers an older transformers release registers in each block (``ModelSpec.legacy_buffers_before``,
    0 for ``Workload.transformers_version`` at or after it, or none given).

    GPT2Attention (through 4.57) and GPTNeoXAttention (before 4.49): ``bias``, ``torch.tril(torch.ones((P, P),
    dtype=torch.bool)).view(1, 1, P, P)``, and ``masked_bias``, a scalar (one block); GPT-NeoX also its own
    rotary embedding: ``inv_freq`` (dim / 2 fp32) and ``cos_cached``, ``sin_cached`` (P, dim) in fp32, which
    ``from_pretrained(torch_dtype=...)`` leaves fp32 (computed from ``inv_freq.float()``, not in the checkpoint).
    """
    if not w.runs_before(spec.legacy_buffers_before):
        return 0
    P = spec.max_position
    block = round_up(P * P, BLOCK) + BLOCK
    dim = spec.legacy_rotary_cache_dim
    if dim:
        block += round_up(4 * (dim // 2), BLOCK) + 2 * round_up(4 * P * dim, BLOCK)
    return block


def adapted_only(w: Workload) -> tuple[str, ...] | None:
    """The LoRA targets when quantization covers only the adapted linears (``quant_targets="adapted"``), else None."""
    if w.method != "full" and w.quant_targets == "adapted":
        return tuple(w.lora_targets)
    return None


@identity_cache
def quantized_linears(spec: ModelSpec, quant: str | None, only: tuple[str, ...] | None) -> tuple[Linear, ...]:
    """The linears stored quantized: those of the blocks (heads outside them stay in high precision),
    or with ``only`` (LoRA targets) the adapted ones among them."""
    if quant is None:
        return ()
    chosen = lora_shape(spec, only).targets if only is not None else summarize(spec).linears
    return tuple(lin for lin in chosen if lin.layer is not None)


@identity_cache
def _base_bytes(spec: ModelSpec, b: int, quant: str | None, only: tuple[str, ...] | None = None) -> tuple[int, int]:
    """(all weight bytes, the quantized linears' bytes) at b bytes per unquantized element."""
    s = summarize(spec)
    if quant is None:
        return float_bytes(spec, b) + s.fixed_bytes, 0
    # quantized linears replace their full-precision bytes; everything else stays at b bytes
    full = 0
    q = 0
    for lin in quantized_linears(spec, quant, only):
        if lin.count > 1:  # fused experts: one (E, n, k) tensor, quantized per expert
            full += round_up(lin.count * lin.in_features * lin.out_features * b, BLOCK)
        else:
            full += round_up(lin.in_features * lin.out_features * b, BLOCK)
        q += lin.count * quantized_linear_bytes(lin.out_features, lin.in_features, quant)
    return float_bytes(spec, b) - full + q + s.fixed_bytes, q


def dequantized_weight_bytes(spec: ModelSpec, w: Workload) -> int:
    """The largest quantized linear's weight dequantized to the compute dtype, 0 without 4-bit weights.

    bitsandbytes 0.49 ``MatMul4Bit`` (autograd/_functions.py): the forward runs
    ``F.linear(A, dequantize_4bit(B).to(A.dtype).t())`` and the backward
    ``grad_output @ dequantize_4bit(B).to(grad_output.dtype)``: the whole (n, k) weight in the
    compute dtype exists while each quantized matmul runs (torchao's ``linear_nf4``, torchtune's,
    does the same). A single token without grad takes ``gemv_4bit`` (no dequantized weight).
    bitsandbytes >= 0.50 (``gemm_4bit``) skips it for small batches on some GPUs: an upper bound there.
    """
    if w.quantized not in FOUR_BIT:
        return 0
    c = DTYPE_BYTES[w.compute_dtype]
    return max((round_up(lin.out_features * lin.in_features * c, BLOCK)
                for lin in quantized_linears(spec, w.quantized, adapted_only(w)) if lin.count == 1), default=0)


def dequant_cast_bytes(w: Workload, n: int, k: int) -> int:
    """The fp16 (n, k) weight alive beside its compute-dtype copy while a 4-bit matmul casts it, 0 when
    the weight is dequantized straight to the compute dtype.

    ``dequantize_4bit`` returns ``quant_state.dtype``, the dtype the weight had when it was quantized;
    bitsandbytes 0.42.0 ``Params4bit.cuda`` (bitsandbytes/nn/modules.py:168) and Lightning's
    ``_NF4Linear.quantize_`` (lightning/fabric/plugins/precision/bitsandbytes.py, 527d071f49) quantize
    ``weight.half()``, so ``MatMul4Bit``'s ``dequantize_4bit(B, quant_state).to(A.dtype)`` makes the
    fp16 weight, then its copy; the fp16 one is a temporary freed when ``.to`` returns (Workload.dequant_dtype).
    """
    if w.quantized in FOUR_BIT and w.dequant_dtype == "fp16" and w.compute_dtype != "fp16":
        return round_up(2 * n * k, BLOCK)
    return 0


def head_dequantized_bytes(spec: ModelSpec, w: Workload) -> tuple[int, int]:
    """(the 4-bit output layer's (V, h) weight dequantized to the compute dtype, the fp16 intermediate
    alive at the cast: dequant_cast_bytes); (0, 0) when the output layer is not in 4 bits."""
    if not quantizes_head(spec, w) or w.quantized not in FOUR_BIT:
        return 0, 0
    V, h = spec.vocab_size, spec.hidden_size
    return round_up(V * h * DTYPE_BYTES[w.compute_dtype], BLOCK), dequant_cast_bytes(w, V, h)


def lora_dtype_bytes(w: Workload) -> int:
    """Bytes per element of the adapters (and their gradients and Adam states)."""
    return DTYPE_BYTES[w.lora_dtype]


def lora_params(spec: ModelSpec, w: Workload) -> int:
    if w.method == "full":
        return 0
    return lora_shape(spec, tuple(w.lora_targets)).params(w.lora_rank, w.dora)


def adapter_bytes(spec: ModelSpec, w: Workload) -> int:
    """LoRA A and B matrices (and DoRA's magnitude vectors) in ``lora_dtype``: peft upcasts adapters to
    fp32 (``autocast_adapter_dtype=True``, peft >= 0.12), torchtune keeps the model's dtype."""
    if w.method == "full":
        return 0
    shape = lora_shape(spec, tuple(w.lora_targets))
    return lora_rounded_bytes(shape, w.lora_rank, lora_dtype_bytes(w), w.dora)


def trainable_params(spec: ModelSpec, w: Workload) -> int:
    if w.mode != "train":
        return 0
    if w.method == "full":
        return summarize(spec).grad_params  # a parameter the loss never reaches gets no gradient
    return lora_params(spec, w)
