"""Weights on the GPU: the parameters and buffers by dtype, quantized formats, LoRA adapters.

Quantized formats, bytes per linear weight of shape (n out, k in):

* int8 (LLM.int8, Dettmers et al. 2022; bitsandbytes ``Int8Params``): n*k int8 plus one fp32
  row scale per output row (``SCB``): ``n*k + 4n``.
* nf4 / fp4 (QLoRA, Dettmers et al. 2023; bitsandbytes ``Params4bit``, blocksize 64):
  two 4-bit values per byte plus one fp32 absmax per 64 weights: ``n*k/2 + 4*n*k/64``.
* nf4-dq (double quantization): the absmax constants themselves quantized to 8 bits in
  blocks of 256 with one fp32 constant per block: ``n*k/2 + n*k/64 + 4*n*k/(64*256)``.
* gptq-4bit (AutoGPTQ / transformers GPTQ, group size g, 128 unless ``quant_group_size``): ``qweight`` int32 (k/8, n),
  ``qzeros`` int32 (k/g, n/8), ``scales`` fp16 (k/g, n), ``g_idx`` int32 (k).
* awq-4bit (AutoAWQ GEMM, g=128): ``qweight`` int32 (k, n/8), ``qzeros`` int32 (k/g, n/8),
  ``scales`` fp16 (k/g, n).
* int4 (torchao ``int4_weight_only``, tinygemm layout, g=128 unless ``quant_group_size``): the packed
  weight ``_convert_weight_to_int4pack`` returns, n*k/2 bytes, and ``scales_and_zeros``, (k/g, n, 2) in
  bf16 (torchao/dtypes/affine_quantized_tensor.py ``TensorCoreTiledAQTLayout.from_plain`` at 317392d06b:
  ``pack_tinygemm_scales_and_zeros``): ``n*k/2 + 4*n*k/g``, with n and k padded first (int4_padded_shape).
* fp8 (per-tensor scaled float8): n*k bytes plus one fp32 scale.

torchao's other weight-only formats (inference only; Workload.AO_INFERENCE_QUANTS), read in the torchao commits
of the gpt-fast tables that ran them (pytorch/ao):

* fp6 (``fpx_weight_only(3, 2)``, FP6-LLM e3m2; torchao/dtypes/fpx/fpx.py ``FpxTensorCoreAQTLayout`` at
  b4d076813b): ``packed_fpx_data`` uint8 (n, k/8*6) and a per-row fp16 ``scale`` (n) (``to_scaled_tc_fpx``
  returns ``scale.half()``): ``6*n*k/8 + 2n``. quant_api.py ``fpx_weight_only`` leaves a weight with
  ``in_features % 64`` or ``out_features % 256`` in high precision (format_takes; Sparse-Marlin and QQQ likewise skip a
  weight whose in_features their group does not divide, and the shapes torchao raises on are refused: format_refusal).
* uint1 .. uint7 (``uintx_weight_only(torch.uintN, group_size=64)``, ``UintxLayoutType``; torchao/dtypes/uintx/
  Uintx.py ``UintxTensor`` at b4d076813b): the N bits split into 4-, 2- and 1-bit shards (``bits_to_shard``),
  each uint8 (n, k*bits/8) (bitpacking.py ``pack``, k a multiple of 8); ``scale`` (n, k/g) in the weight's
  dtype (``choose_qparams_affine`` with scale_dtype None) and ``zero_point`` (n, k/g) int32
  (``zero_point_dtype=torch.int32``): ``N*n*k/8 + (b + 4)*n*k/g``.
* int4-sparse-marlin (``int4_weight_only(layout_type=MarlinSparseLayoutType())``, g=128; affine_quantized_tensor.py
  ``MarlinSparseAQTLayout.from_plain`` and torchao/sparsity/marlin ``pack_to_marlin_24`` at 65d86c6c26): the 2:4
  sparse half of the weight packed eight 4-bit values per int32, (k/32, 2n) int32 (``_to_marlin_weights`` over
  the (k/2, n) compressed weight in 16-row tiles); the 2:4 ``meta`` of ``sparse_semi_structured_from_dense_cutlass``
  (torchao/sparsity/marlin/utils.py: int16 for int32 input, two 2-bit indices per four weights), n*k/16 int16; the
  ``scale`` (k/g, n) in the
  weight's dtype (``_to_marlin_scales``) and the ``zero_point`` (n, k/g) bf16 int4_weight_only passes
  (``zero_point_dtype=torch.bfloat16``), kept though the symmetric kernel never reads it:
  ``n*k/4 + n*k/8 + 2*n*k/g + 2*n*k/g``.
* w4a8-qqq (``int8_dynamic_activation_int4_weight(group_size, layout=MarlinQQQLayout())``; torchao/quantization/
  marlin_qqq ``pack_to_marlin_qqq`` and quant_primitives.py ``choose_qparams_and_quantize_affine_qqq`` at
  06e69f6a93): the 4-bit weight packed eight a int32, (k/16, 2n) int32 after ``marlin_permute_weights``; ``s_group``
  fp16 (k/g, n) (empty per channel) and ``s_channel`` fp32 (1, n): ``n*k/2 + 2*n*k/g + 4n``.

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
    adalora_e_bytes,
    float_bytes,
    lora_rounded_bytes,
    lora_shape,
    own_tensor_numels,
    summarize,
    vector_bytes,
    vector_dtype,
)
from vramlens.estimator.memo import identity_cache
from vramlens.models.peft_targets import delta_linears, oft_block, vera_linears
from vramlens.models.spec import ModelSpec
from vramlens.units import BLOCK, DTYPE_BYTES, round_up
from vramlens.workload import FOUR_BIT, OWN_TENSOR_METHODS, UINTX_QUANTS, WO_DEQUANT_QUANTS, Workload

GROUP_SIZE = 128       # GPTQ / AWQ / int4 default group size (AutoGPTQ BaseQuantizeConfig, AutoAWQ q_group_size)
NF4_BLOCK = 64         # bitsandbytes Params4bit default blocksize
DQ_BLOCK = 256         # bitsandbytes nested (double) quantization blocksize
INT4_PAD_OUT = 8       # torchao int4 tinygemm: out_features padded to a multiple of 8 (see int4_padded_shape)
INT4_PAD_IN = 1024     # ... and in_features to a multiple of 1024


def quantized_linear_bytes(n: int, k: int, quant: str, group: int = GROUP_SIZE, ao_scale_bytes: int = 2) -> int:
    """Bytes of one (n, k) linear weight in the quantized format, each tensor rounded to 512 B; ``group``:
    the weights per scale of the group-wise formats (GROUPED_QUANTS; 0 for w4a8-qqq: one scale per output
    channel); ``ao_scale_bytes``: the element size of the uintx formats' scale, the weight's dtype."""
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
        groups = ceil(k / group)
        return r(4 * ceil(k / 8) * n) + r(4 * groups * ceil(n / 8)) + r(2 * groups * n) + r(4 * k)
    if quant == "awq-4bit":
        groups = ceil(k / group)
        return r(4 * k * ceil(n / 8)) + r(4 * groups * ceil(n / 8)) + r(2 * groups * n)
    if quant == "int4":
        n, k = int4_padded_shape(n, k)
        groups = ceil(k / group)
        return r(n * k // 2) + r(2 * 2 * groups * n)
    if quant == "fp8":
        return r(nk) + r(4)
    if quant == "fp6":
        return r(nk * 6 // 8) + r(2 * n)
    if quant in UINTX_QUANTS:
        bits = int(quant[4:])
        groups = ceil(k / group)
        # one uint8 shard per part of the bit width (4, 2, 1 bits), each (n, k*part/8); scale in the weight's
        # dtype and an int32 zero point per group (ao_scale_bytes)
        return (sum(r(n * k * part // 8) for part in UINTX_SHARDS[bits]) + r(ao_scale_bytes * groups * n)
                + r(4 * groups * n))
    if quant == "int4-sparse-marlin":
        groups = ceil(k / group)
        return r(nk // 4) + r(2 * (nk // 16)) + r(2 * groups * n) + r(2 * groups * n)
    if quant == "w4a8-qqq":
        s_group = 2 * ceil(k / group) * n if group and group < k else 0
        return r(nk // 2) + r(s_group) + r(4 * n)
    raise ValueError(quant)


#: The shards a UintxTensor splits a bit width into (torchao/dtypes/uintx/Uintx.py ``bits_to_shard`` at b4d076813b)
UINTX_SHARDS: dict[int, tuple[int, ...]] = {1: (1,), 2: (2,), 3: (2, 1), 4: (4,), 5: (4, 1), 6: (4, 2), 7: (4, 2, 1)}
#: uintx_weight_only's default group size (quant_api.py ``uintx_weight_only(dtype, group_size=64)`` at b4d076813b)
UINTX_GROUP_SIZE = 64


def format_takes(quant: str | None, n: int, k: int, group: int) -> bool:
    """Whether torchao quantizes an (n, k) weight in ``quant`` (``group``: quant_group): a weight it returns
    unchanged stays in high precision.

    * fp6: quant_api.py ``fpx_weight_only``'s ``apply_quant_llm`` at b4d076813b returns a weight with
      ``in_dim % 64`` or ``out_dim % 256`` unchanged ("the shape is not compatible with the kernel");
    * int4-sparse-marlin: ``int4_weight_only``'s ``apply_int4_weight_only_quant`` at 65d86c6c26 returns a weight
      whose ``weight.shape[-1] % group_size`` is not 0;
    * w4a8-qqq: ``apply_int8_dynamic_activation_int4_weight_quant`` at 06e69f6a93 the same (group -1, per output
      channel, is the whole row: every weight is taken).

    Every other format takes every linear; the shapes torchao raises on are format_refusal's."""
    if quant == "fp6":
        return k % 64 == 0 and n % 256 == 0
    if quant in ("int4-sparse-marlin", "w4a8-qqq"):
        return not group or k % group == 0
    return quant is not None


def format_refusal(quant: str, n: int, k: int, group: int) -> str | None:
    """The condition torchao's ``quantize_`` raises on for an (n, k) weight it takes (format_takes), as
    "<dimension> % <m> == 0 (<what raises>)" for the first one broken, or None when it quantizes the weight.

    * uint1..uint7 (at b4d076813b): quant_primitives.py ``_get_reduction_params`` asserts ``input_size %
      block_size == 0`` for the (1, group) block ``choose_qparams_affine`` reduces over, then uintx/bitpacking.py
      ``pack`` asserts the packed (last, in_features) dimension ``% 8 == 0``;
    * int4-sparse-marlin (at 65d86c6c26): ``MarlinSparseAQTLayout.from_plain`` raises ValueError for
      ``in_features % 128`` (its ``out_features`` test, ``out_features != 256 == 0``, is never true); then
      sparsity/marlin/utils.py ``sparse_semi_structured_from_dense_cutlass`` raises for the (n, k) int32 weight's
      rows ``m % 32`` (int16 meta), and ``_to_marlin_scales`` reshapes the (k/g, n) scale to rows of 64
      (``len(scale_perm_24)``): k/g x n % 64;
    * w4a8-qqq (at 06e69f6a93): ``MarlinQQQAQTTensorImpl.from_plain`` raises ValueError unless one of its
      ``thread_config`` (thread_k, thread_n) = (64, 256), (128, 128), (128, 64), (64, 128) divides (k, n)."""
    if quant in UINTX_QUANTS:
        if k % group:
            return f"in_features % {group} == 0 (the group size; choose_qparams_affine asserts it)"
        if k % 8:
            return "in_features % 8 == 0 (bitpacking.pack asserts it)"
    elif quant == "int4-sparse-marlin":
        if k % 128:
            return "in_features % 128 == 0 (MarlinSparseAQTLayout.from_plain raises ValueError)"
        if n % 32:
            return "out_features % 32 == 0 (sparse_semi_structured_from_dense_cutlass raises RuntimeError)"
        if (k // group) * n % 64:
            return (f"in_features / {group} x out_features % 64 == 0 (_to_marlin_scales' reshape of the scale "
                    "raises RuntimeError)")
    elif quant == "w4a8-qqq" and not any(k % tk == 0 and n % tn == 0 for tk, tn in QQQ_THREAD_CONFIG):
        return ("in_features % 64 == 0 and out_features % 128 == 0, or in_features % 128 == 0 and out_features % 64 "
                "== 0 (MarlinQQQAQTTensorImpl.from_plain's thread_config raises ValueError)")
    return None


def shape_refusal(spec: ModelSpec, w: Workload) -> str | None:
    """The line refusing a model whose quantized linears (the output layer too with ``quant_head``) torchao's
    ``quantize_`` raises on in ``w.quantized`` (format_refusal, the first such layer in the model's order), with
    the fix; None when it quantizes every one it takes (format_takes)."""
    quant = w.quantized
    if quant not in (*UINTX_QUANTS, "int4-sparse-marlin", "w4a8-qqq"):  # the formats format_refusal checks
        return None
    group = quant_group(w)
    shapes = [(lin.module, lin.out_features, lin.in_features)
              for lin in quantized_linears(spec, quant, adapted_only(w), group)]
    if quantizes_head(spec, w):
        shapes.append(("lm_head", spec.vocab_size, spec.hidden_size))
    for module, n, k in shapes:
        cond = format_refusal(quant, n, k, group)
        if cond is None:
            continue
        other = "use another --quant, such as int4 (its tinygemm layout pads in_features to a multiple of 1,024)"
        if quant in UINTX_QUANTS:
            # a group every quantized linear's in_features takes (a multiple of 8 packs too)
            fits = [g for g in (256, 128, 64, 32, 16, 8) if all(x % g == 0 for _, _, x in shapes)]
            fix = f"use --quant-group-size {fits[0]}" if fits and k % group else other
        elif quant == "int4-sparse-marlin" and k % 128:
            fix = "use --quant-group-size 128 (int4_weight_only then leaves such a layer in high precision)"
        else:
            fix = other
        return (f"quant={quant!r}: {module} of {spec.name} is {n:,} out x {k:,} in, and torchao needs {cond}: "
                f"{fix}")
    return None


#: Marlin QQQ's (thread_k, thread_n) tiles (affine_quantized_tensor.py ``MarlinQQQAQTTensorImpl.from_plain`` at
#: 06e69f6a93): a weight is refused unless one divides its (in_features, out_features)
QQQ_THREAD_CONFIG = ((64, 256), (128, 128), (128, 64), (64, 128))


def int4_padded_shape(n: int, k: int) -> tuple[int, int]:
    """The (n, k) torchao's int4 tinygemm layout quantizes: ``TensorCoreTiledLayoutType.pre_process`` pads the
    weight with zeros to out_features a multiple of 8 and in_features a multiple of 1024 (torchao/dtypes/
    affine_quantized_tensor.py at 317392d06b; Llama 2's down_proj, k = 11,008, is stored as 11,264)."""
    return round_up(n, INT4_PAD_OUT), round_up(k, INT4_PAD_IN)


def quantizes_head(spec: ModelSpec, w: Workload) -> bool:
    """Whether the output layer is stored quantized (``quant_head`` with quantized weights and an LM head)."""
    return (w.quant_head and w.quantized is not None and spec.head in LM_HEADS
            and format_takes(w.quantized, spec.vocab_size, spec.hidden_size, quant_group(w)))


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
    added = quantized_linear_bytes(spec.vocab_size, spec.hidden_size, quant, quant_group(w), weight_dtype_bytes(w))
    removed = 0 if spec.tied_embeddings else head_weight_bytes(spec, weight_dtype_bytes(w))
    return added, removed


def quant_group(w: Workload) -> int:
    """Weights per scale of the group-wise formats: ``quant_group_size``, or their default (GROUP_SIZE;
    UINTX_GROUP_SIZE for uint1..uint7; 0, one scale per output channel, for w4a8-qqq)."""
    if w.quant_group_size:
        return w.quant_group_size
    if w.quantized in UINTX_QUANTS:
        return UINTX_GROUP_SIZE
    return 0 if w.quantized == "w4a8-qqq" else GROUP_SIZE


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
    total, q = _base_bytes(spec, b, quant, adapted_only(w), quant_group(w))
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
    """Bytes of the buffers an older transformers release registers in each block (``ModelSpec.legacy_buffers_before``
    and ``legacy_rotary_cache_before``, 0 for ``Workload.transformers_version`` at or after them, or none given).

    GPT2Attention (through 4.57) and GPTNeoXAttention (before 4.49): ``bias``, ``torch.tril(torch.ones((P, P),
    dtype=torch.bool)).view(1, 1, P, P)``, and ``masked_bias``, a scalar (one block); GPT-NeoX also its own
    rotary embedding: ``inv_freq`` (dim / 2 fp32) and ``cos_cached``, ``sin_cached`` (P, dim) in fp32, which
    ``from_pretrained(torch_dtype=...)`` leaves fp32 (computed from ``inv_freq.float()``, not in the checkpoint).
    LlamaAttention before 4.41: its own rotary embedding, ``inv_freq`` (head_dim / 2 fp32) and cos/sin caches of
    (P, head_dim) made ``.to(torch.get_default_dtype())``, the load dtype under ``from_pretrained(torch_dtype=...)``.
    """
    if w.transformers_release is None:
        return 0
    P = spec.max_position
    block = 0
    if w.runs_before(spec.legacy_buffers_before):
        block += round_up(P * P, BLOCK) + BLOCK
        dim = spec.legacy_rotary_cache_dim
        if dim:
            block += round_up(4 * (dim // 2), BLOCK) + 2 * round_up(4 * P * dim, BLOCK)
    if w.runs_before(spec.legacy_rotary_cache_before):
        d = spec.head_dim
        block += round_up(4 * (d // 2), BLOCK) + 2 * round_up(DTYPE_BYTES[w.dtype] * P * d, BLOCK)
    return block


def adapted_only(w: Workload) -> tuple[str, ...] | None:
    """The LoRA targets when quantization covers only the adapted linears (``quant_targets="adapted"``), else None."""
    if w.method != "full" and w.quant_targets == "adapted":
        return tuple(w.lora_adapted)
    return None


@identity_cache
def quantized_linears(spec: ModelSpec, quant: str | None, only: tuple[str, ...] | None,
                      group: int) -> tuple[Linear, ...]:
    """The linears stored quantized: those of the blocks (heads outside them stay in high precision),
    or with ``only`` (LoRA targets) the adapted ones among them; ``group``: quant_group (format_takes)."""
    if quant is None:
        return ()
    chosen = summarize(spec).linears
    if only is not None:
        # the adapted linears themselves (not LitGPT's adapter shape): with fused_qkv=True a fused q/k/v linear is
        # adapted when q_proj, k_proj or v_proj names a part of it, names that without fused_qkv match nothing there
        # (check_workload refuses them)
        names = {lin.name for lin in lora_shape(spec, only, True).targets}
        chosen = tuple(lin for lin in chosen if lin.name in names)
    return tuple(lin for lin in chosen
                 if lin.layer is not None and format_takes(quant, lin.out_features, lin.in_features, group))


@identity_cache
def _base_bytes(spec: ModelSpec, b: int, quant: str | None, only: tuple[str, ...] | None = None,
                group: int = GROUP_SIZE) -> tuple[int, int]:
    """(all weight bytes, the quantized linears' bytes) at b bytes per unquantized element."""
    s = summarize(spec)
    if quant is None:
        return float_bytes(spec, b) + s.fixed_bytes, 0
    # quantized linears replace their full-precision bytes; everything else stays at b bytes
    full = 0
    q = 0
    for lin in quantized_linears(spec, quant, only, group):
        if lin.count > 1:  # fused experts: one (E, n, k) tensor, quantized per expert
            full += round_up(lin.count * lin.in_features * lin.out_features * b, BLOCK)
        else:
            full += round_up(lin.in_features * lin.out_features * b, BLOCK)
        q += lin.count * quantized_linear_bytes(lin.out_features, lin.in_features, quant, group, b)
    return float_bytes(spec, b) - full + q + s.fixed_bytes, q


def wo_dequantizes(w: Workload) -> bool:
    """Whether torchao's weight-only linears dequantize each weight at every call (``quant_impl="torchao-wo"``
    with int8 or fp8 weights), one token included: the eager linear knows no matrix-vector kernel.

    int8_weight_only (torchao/dtypes/affine_quantized_tensor.py ``_linear_fp_act_int8_weight_impl`` at 317392d06b
    and 92dd5f557d; torchao 0.18's ``Int8Tensor`` linear the same): ``torch.mm(x, int_data.t().to(x.dtype))``, the
    (n, k) weight cast to the compute dtype alive while the matmul runs, then ``m * scale`` on its output.
    float8_weight_only (``_linear_fp_act_fp8_weight_impl`` at 92dd5f557d): ``F.linear(x, weight.dequantize())``,
    where quant_primitives.py ``_dequantize_affine_no_dtype_check`` (no zero point domain) runs
    ``input.to(output_dtype)`` then ``dequant * scale`` with the weight's own dtype for the per-row scale
    (``float8_weight_only`` passes ``scale_dtype=None``: ``_choose_qparams_affine`` takes ``input.dtype``): two
    (n, k) tensors in the compute dtype alive at the product (dequant_cast_bytes), one during the matmul.
    int4_weight_only's ``_weight_int4pack_mm`` (tinygemm) reads the packed weight: nothing is dequantized.
    Under ``torch.compile`` with coordinate-descent tuning (torchao's ``recommended_inductor_config_setter``, which
    gpt-fast's generate.py calls) inductor decomposes a one-row ``mm`` into a product and a sum
    (torch/_inductor/decomposition.py ``mm``), which fuses the dequantization: gpt-fast's compiled decode holds no
    dequantized weight, and its eager prefill peaks above it anyway.
    """
    return w.quant_impl == "torchao-wo" and w.quantized in WO_DEQUANT_QUANTS


# AutoGPTQ 0.4.2 (AutoGPTQ/AutoGPTQ at v0.4.2, ef442d9f), auto_gptq/nn_modules/qlinear/qlinear_cuda_old.py:
# QuantLinear(kernel_switch_threshold=128) runs its CUDA kernel for ``x.shape[0] < kernel_switch_threshold`` rows
# and dequantizes the weight in PyTorch ops for more (forward, lines 199-269)
CUDA_OLD_SWITCH_ROWS = 128


def gptq_torch_dequant(w: Workload) -> bool:
    """AutoGPTQ's cuda-old QuantLinear (``quant_impl="cuda-old"`` on gptq-4bit weights), which dequantizes the
    whole weight in PyTorch ops for inputs of CUDA_OLD_SWITCH_ROWS rows or more (dequant_cast_bytes)."""
    return w.quant_impl == "cuda-old" and w.quantized == "gptq-4bit"


def uintx_dequantizes(w: Workload) -> bool:
    """Whether the weights are torchao's uintx (uint1..uint7), whose linear has no kernel at b4d076813b: the
    AffineQuantizedTensor's ``F.linear`` dispatch raises QuantizedLinearNotImplementedError for the
    UintxLayoutType and falls back to ``F.linear(input, weight.dequantize(), bias)`` at every call, one row
    included (affine_quantized_tensor.py ``_(func, types, args, kwargs)`` for ``torch.nn.functional.linear``);
    the intermediates of ``dequantize``: uintx_dequant_peak."""
    return w.quantized in UINTX_QUANTS


def uintx_dequant_peak(n: int, k: int) -> int:
    """The most an (n, k) uintx weight's ``dequantize()`` holds (torchao at b4d076813b): ``UintxTensor.get_plain``
    unpacks the shards into one uint8 (n, k) (bitpacking.py ``unpack``: a uint8 (n, k) per shard, shifted, then
    or-ed together: at most 5 n*k bytes for the three shards of uint7), which ``AffineQuantizedTensor.dequantize``
    keeps while quant_primitives.py ``_dequantize_affine_no_dtype_check`` (ZeroPointDomain.INT) runs
    ``input.to(torch.int32, copy=True)``, ``dequant - zero_point.to(torch.int32)`` (both int32 (n, k) alive),
    ``dequant.to(output_dtype)`` and ``dequant * scale``: the uint8 and two int32, 9 n*k bytes, before the weight
    in the compute dtype exists."""
    nk = n * k
    return round_up(nk, BLOCK) + 2 * round_up(4 * nk, BLOCK)


def dequantizes_weights(w: Workload) -> bool:
    """Whether a quantized matmul can hold its whole weight dequantized: bitsandbytes' (or torchao's NF4) 4-bit
    matmuls, torchao's weight-only int8 and fp8 linears (wo_dequantizes), its uintx linears (uintx_dequantizes)
    and AutoGPTQ's cuda-old kernel (gptq_torch_dequant); from how many rows on: dequant_min_rows."""
    return w.quantized in FOUR_BIT or wo_dequantizes(w) or uintx_dequantizes(w) or gptq_torch_dequant(w)


def dequant_min_rows(w: Workload) -> int:
    """The fewest input rows for which a quantized matmul dequantizes its weight (dequantizes_weights): torchao's
    weight-only linears at every call, bitsandbytes' 4-bit ones from 2 (one row takes ``gemv_4bit``), AutoGPTQ's
    cuda-old from CUDA_OLD_SWITCH_ROWS."""
    if wo_dequantizes(w) or uintx_dequantizes(w):
        return 1
    return CUDA_OLD_SWITCH_ROWS if gptq_torch_dequant(w) else 2


def gptq_kernel_buffer_bytes(spec: ModelSpec, w: Workload) -> int:
    """The buffers AutoGPTQ 0.4.2's exllama kernel keeps on each GPU (``quant_impl="exllama"``), 0 otherwise.

    auto_gptq/modeling/_utils.py ``autogptq_post_init`` (v0.4.2, ef442d9f, lines 223-249; optimum's
    ``load_quantized_model`` calls it through ``GPTQQuantizer.post_init_model``): ``temp_dq``, fp16 of
    ``(1, max qweight.numel() * 8)``, the largest quantized linear's k x n weight, which the kernel reconstructs
    a weight into before a cuBLAS matmul for inputs of 8 rows or more (exllama_ext.cpp ``q4_matmul``:
    ``matmul_recons_thd``, which autogptq_post_init sets to 8), and
    ``temp_state``, fp16 of ``(max_input_len, max_inner_outer_dim)``: (1, 1) without act-order, the case modelled
    (under act-order it is max_input_length, 2048 by default, x the largest in or out dimension).
    """
    if w.quant_impl != "exllama" or w.quantized != "gptq-4bit":
        return 0
    dq = max((lin.in_features * lin.out_features
              for lin in quantized_linears(spec, w.quantized, adapted_only(w), quant_group(w))),
             default=0)
    return round_up(2 * dq, BLOCK) + round_up(2 * 1 * 1, BLOCK)


def dequantized_weight_bytes(spec: ModelSpec, w: Workload) -> int:
    """The largest quantized linear's weight dequantized to the compute dtype, 0 unless the matmuls dequantize
    (dequantizes_weights: 4-bit weights, torchao's weight-only int8 and fp8).

    bitsandbytes 0.49 ``MatMul4Bit`` (autograd/_functions.py): the forward runs
    ``F.linear(A, dequantize_4bit(B).to(A.dtype).t())`` and the backward
    ``grad_output @ dequantize_4bit(B).to(grad_output.dtype)``: the whole (n, k) weight in the
    compute dtype exists while each quantized matmul runs (torchao's ``linear_nf4``, torchtune's,
    does the same). A single token without grad takes ``gemv_4bit`` (no dequantized weight).
    bitsandbytes >= 0.50 (``gemm_4bit``) skips it for small batches on some GPUs: an upper bound there.
    """
    if not dequantizes_weights(w):
        return 0
    c = DTYPE_BYTES[w.quant_matmul_dtype]
    return max((round_up(lin.out_features * lin.in_features * c, BLOCK)
                for lin in quantized_linears(spec, w.quantized, adapted_only(w), quant_group(w)) if lin.count == 1),
               default=0)


def dequant_cast_bytes(w: Workload, n: int, k: int) -> int:
    """What else is alive, at its most, while a 4-bit matmul makes its dequantized (n, k) weight (before
    the matmul's output exists): 0 when one kernel writes the weight straight in the compute dtype.

    ``dequant_dtype="fp16"``: ``dequantize_4bit`` returns ``quant_state.dtype``, the dtype the weight had
    when it was quantized; bitsandbytes 0.42.0 ``Params4bit.cuda`` (bitsandbytes/nn/modules.py:168) and
    Lightning's ``_NF4Linear.quantize_`` (lightning/fabric/plugins/precision/bitsandbytes.py, 527d071f49)
    quantize ``weight.half()``, so ``MatMul4Bit``'s ``dequantize_4bit(B, quant_state).to(A.dtype)`` makes
    the fp16 weight, then its copy; the fp16 one is a temporary freed when ``.to`` returns.

    ``nf4_impl="torchao"``: :func:`torchao_nf4_dequant_temporaries`.

    torchao's ``float8_weight_only`` (wo_dequantizes): the float8 weight cast to the compute dtype beside its
    product with the per-row scale (``dequant = input.to(output_dtype); dequant = dequant * scale``), the cast
    freed when the name is rebound; int8_weight_only's single cast has no intermediate.

    AutoGPTQ's cuda-old kernel (gptq_torch_dequant): :func:`gptq_torch_dequant_temporaries`.

    torchao's uintx (uintx_dequantizes): the peak of ``dequantize()`` (uintx_dequant_peak), less the weight it
    returns, which is not alive at that peak (the estimate adds the weight to what this returns).
    """
    if uintx_dequantizes(w):
        return max(0, uintx_dequant_peak(n, k) - round_up(DTYPE_BYTES[w.quant_matmul_dtype] * n * k, BLOCK))
    if wo_dequantizes(w):
        return round_up(DTYPE_BYTES[w.compute_dtype] * n * k, BLOCK) if w.quantized == "fp8" else 0
    if gptq_torch_dequant(w):
        return gptq_torch_dequant_temporaries(n, k, quant_group(w))
    if w.quantized not in FOUR_BIT:
        return 0
    if w.nf4_impl == "torchao" and w.quantized in ("nf4", "nf4-dq"):
        return torchao_nf4_dequant_temporaries(n * k, DTYPE_BYTES[w.compute_dtype])
    # the dtype dequantize_4bit returns, the weight's when it was quantized (the model's, or fp16 under
    # dequant_dtype="fp16"), and the one the matmul casts it to (Workload.quant_matmul_dtype: an fp16 model's
    # 4-bit matmuls run in bnb_compute_dtype, fp32 for transformers' load_in_4bit=True alone)
    src = "fp16" if w.dequant_dtype == "fp16" else w.compute_dtype
    if src != w.quant_matmul_dtype:
        return round_up(DTYPE_BYTES[src] * n * k, BLOCK)
    return 0


#: torchao NF4Tensor's block sizes as torchtune's ``to_nf4`` leaves them (torchao/dtypes/nf4tensor.py
#: ``to_nf4(tensor, block_size=64, scaler_block_size=256)``): one scaler per 64 weights.
TORCHAO_NF4_BLOCK = 64


def gptq_torch_dequant_temporaries(n: int, k: int, group: int) -> int:
    """Beyond the fp16 (k, n) weight, what AutoGPTQ 0.4.2's cuda-old QuantLinear has alive at most while it
    dequantizes in PyTorch ops (qlinear_cuda_old.py forward, lines 231-266, 4 bits).

    ``torch.bitwise_right_shift(qweight.unsqueeze(1).expand(-1, 8, -1), wf.unsqueeze(-1))`` makes an int32
    (k/8, 8, n) tensor, 4 B per weight, and ``.to(torch.int8)`` its 1-byte copy beside it; the unpacked zeros, int8
    (k/g, n), are alive since line 234. Later ``scales * (weight - zeros)`` holds the int8 weight, the int8
    difference and the fp16 product (4 B per weight), less than the 5 B at the shift. The matmul then reads the
    fp16 weight (the 2 B per weight counted as the dequantized weight itself).
    """
    at_shift = round_up(4 * k * n, BLOCK) + round_up(k * n, BLOCK) + round_up(ceil(k / group) * n, BLOCK)
    return at_shift - round_up(2 * k * n, BLOCK)


def torchao_nf4_dequant_temporaries(numel: int, c: int) -> int:
    """The temporaries alive beside the result at the peak of torchao's ``NF4Tensor.get_original_weight``
    for a weight of ``numel`` elements dequantized to c bytes each (torchao v0.1 and after, until the
    class moved in 2026: torchao/dtypes/nf4tensor.py, ``linear_nf4`` -> ``weight.to(input.dtype)`` ->
    ``get_original_weight``).

    ``quantized_data`` packs two codes per byte (e = numel / 2 bytes). The function keeps as locals, all
    alive at its last line ``torch.stack([scaled_first, scaled_second], dim=-1)``:
    ``(quantized_data >> 4).to(torch.long)`` and ``(quantized_data & 0b1111).to(torch.long)`` (8e each),
    ``nf4[first]`` and ``nf4[second]`` (c*e each, the table's dtype), their products with the repeated
    scalers (c*e each), and ``scalers`` (numel / 64 in bf16, dequantize_scalers' ``.to(torch.bfloat16)``);
    the stack's output (c*numel) is the result. Per weight element, in bf16: 4 + 4 + 1 + 1 + 1 + 1 = 12
    bytes beside the 2 of the result.
    """
    e = (numel + 1) // 2
    codes = 2 * round_up(8 * e, BLOCK)
    halves = 4 * round_up(c * e, BLOCK)
    scalers = round_up(2 * (-(-numel // TORCHAO_NF4_BLOCK)), BLOCK)
    return codes + halves + scalers


def head_dequantized_bytes(spec: ModelSpec, w: Workload) -> tuple[int, int]:
    """(the quantized output layer's (V, h) weight dequantized to the compute dtype, the intermediate alive at
    the cast: dequant_cast_bytes); (0, 0) when the output layer is not quantized or its matmul does not
    dequantize (dequantizes_weights)."""
    if not quantizes_head(spec, w) or not dequantizes_weights(w):
        return 0, 0
    V, h = spec.vocab_size, spec.hidden_size
    return round_up(V * h * DTYPE_BYTES[w.quant_matmul_dtype], BLOCK), dequant_cast_bytes(w, V, h)


def lora_dtype_bytes(w: Workload) -> int:
    """Bytes per element of the adapters (and their gradients and Adam states)."""
    return DTYPE_BYTES[w.lora_dtype]


def lora_params(spec: ModelSpec, w: Workload) -> int:
    """What a parameter-efficient method trains: LoRA's A and B (and DoRA's magnitudes), IA3's vectors,
    LN tuning's norm copies, prompt tuning's embedding or LoHa's factors."""
    if w.method == "full":
        return 0
    if w.method in OWN_TENSOR_METHODS:
        return sum(own_tensor_numels(spec, w))
    shape = lora_shape(spec, tuple(w.lora_adapted), w.fused_qkv)
    # AdaLoRA: lora_E, r singular values per adapted linear, trains beside A and B
    return shape.params(w.lora_rank, w.dora) + (shape.count * w.lora_rank if w.method == "adalora" else 0)


def oft_index_buffers(spec: ModelSpec, w: Workload) -> int:
    """OFT's index buffers: each ``OFTRotationModule`` registers ``rows`` and ``cols`` of ``torch.triu_indices(b, b,
    1)`` (int64, b (b - 1) / 2 each; persistent=False, so not in the state dict) and moves them to the base layer's
    device one by one (src/peft/tuners/oft/layer.py at d787f51b, the same in peft 0.21.2); 0 for the other methods."""
    if w.method != "oft":
        return 0
    total = 0
    for _, k in delta_linears(spec, tuple(w.lora_targets)):
        b = oft_block(k, w.oft_block_size)
        total += 2 * round_up(8 * (b * (b - 1) // 2), BLOCK)
    return total


def boft_host_permutations(spec: ModelSpec, w: Workload) -> int:
    """BOFT's ``boft_P`` (1, in, in) fp32 per adapted linear (boft_n_butterfly_factor 1): a buffer of the BOFT layer
    itself, which peft moves to no device (``_move_adapter_to_device_of_base_layer`` moves the adapter dicts,
    ``_replace_module`` the modules named ``boft_*``), so it stays in host RAM on a model loaded to the GPU
    (src/peft/tuners/boft/layer.py, tuners_utils.py at d787f51b); 0 for the other methods."""
    if w.method != "boft" or not w.training:
        return 0
    return sum(4 * k * k for _, k in delta_linears(spec, tuple(w.lora_targets)))


def adapter_bytes(spec: ModelSpec, w: Workload) -> int:
    """LoRA A and B matrices (and DoRA's magnitude vectors) in ``lora_dtype``: peft upcasts adapters to
    fp32 (``autocast_adapter_dtype=True``, peft >= 0.12), torchtune keeps the model's dtype."""
    if w.method == "full":
        return 0
    if w.method in OWN_TENSOR_METHODS:
        # beside the frozen base, which stays whole; VeRA's shared projections and OFT's index buffers too
        return (vector_bytes(spec, w, DTYPE_BYTES[vector_dtype(w)]) + vera_projection_bytes(spec, w)
                + oft_index_buffers(spec, w))
    shape = lora_shape(spec, tuple(w.lora_adapted), w.fused_qkv)
    if w.method == "adalora":
        # AdaLoRA: lora_A and lora_B, lora_E (r, 1), and ``ranknum``, a frozen fp32 (1,) parameter per adapted linear
        return (lora_rounded_bytes(shape, w.lora_rank, lora_dtype_bytes(w)) + adalora_e_bytes(shape, w.lora_rank,
                lora_dtype_bytes(w)) + shape.count * round_up(4, BLOCK))
    return lora_rounded_bytes(shape, w.lora_rank, lora_dtype_bytes(w), w.dora)


def vera_projection_bytes(spec: ModelSpec, w: Workload) -> int:
    """VeRA's frozen projections, one pair shared by every adapted linear: ``VeraModel._init_vera_A_vera_B``
    (src/peft/tuners/vera/model.py, peft 0.21.2 and d787f51b) makes vera_A (r, largest in_features) and vera_B
    (largest out_features, r) with ``_kaiming_init`` (``torch.empty``: torch's default dtype, fp32) as buffers of
    one BufferDict that every layer references; each layer slices its (r, in) and (out, r) views."""
    if w.method != "vera":
        return 0
    dims = vera_linears(spec)
    k = max((i for i, _ in dims), default=0)
    n = max((o for _, o in dims), default=0)
    return round_up(4 * w.vera_rank * k, BLOCK) + round_up(4 * n * w.vera_rank, BLOCK)


def trainable_params(spec: ModelSpec, w: Workload) -> int:
    if w.mode != "train":
        return 0
    if w.method == "full":
        return summarize(spec).grad_params  # a parameter the loss never reaches gets no gradient
    if w.lora_fa:
        # peft's create_lorafa_optimizer (src/peft/optimizers/lorafa.py, peft 0.21.2) sets requires_grad_(False) on
        # every lora_A: B (n, r) per adapted linear trains
        return lora_shape(spec, tuple(w.lora_adapted), w.fused_qkv).sum_n * w.lora_rank
    return lora_params(spec, w)
