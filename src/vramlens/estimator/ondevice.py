"""Weights quantized on the GPU: the caching allocator's segments that torchao's ``quantize_`` leaves behind.

torchao's gpt-fast flow (torchao/_models/llama/generate.py at 317392d06b, ``_load_model`` and ``main``):

1. ``model.to(device, dtype)`` copies each parameter to the GPU in the run's dtype, one allocation per
   tensor in module order (a blocking host-to-device copy converts on the host: aten/src/ATen/native/cuda/
   Copy.cu ``copy_kernel_cuda``, "For blocking transfers conversions are performed on CPU").
2. ``quantize_`` replaces every ``nn.Linear``'s weight there, one after another
   (quant_api.py ``_replace_with_custom_fn_if_matches_filter`` and ``insert_subclass``): each quantization's
   full-size temporaries and its quantized tensors are allocated among the blocks freed so far (best fit), and
   the high-precision weight is freed when the parameter is replaced.
3. ``setup_caches`` allocates the KV cache: two ``torch.zeros`` (b, kv, M, d) per layer (model.py KVCache).
4. The first CUDA-graph capture of the compiled decode (``torch.compile(mode="reduce-overhead")``) runs
   ``torch.cuda.graph.__enter__``, which calls ``torch.cuda.empty_cache()``: the wholly free segments go
   back to CUDA, the ones that hold a quantized weight or a cache tensor stay with their free remainder.

The model code is gpt-fast's: the attention's q, k and v projections are one linear ``wqkv``
((a + 2 kv) d, h), so they are loaded and quantized as one tensor. The sequence is replayed through
the allocator simulator (vramlens.allocator.simulator, PyTorch's defaults); what it returns is the
reserve over the live tensors, added to the estimate's peak reserved, and the load's own peak.

The temporaries of each format, from torchao's code (quant_primitives.py ``_choose_qparams_affine`` and
``_quantize_affine_no_dtype_cast``, affine_quantized_tensor.py; int8 and int4 at 317392d06b, float8 at
92dd5f557d), for an (n, k) weight in the run's dtype (b bytes):

* int8 (``int8_weight_only``, and ``int8_dynamic_activation_int8_weight``'s weight): per-row symmetric:
  ``torch.clamp(torch.round(input * (1.0 / scale)) + zero_point, ...)`` then ``.to(int8)``: four (n, k)
  temporaries at b bytes, each alive beside the next; a scale (n) at b bytes and an int64 zero point (n) kept.
* int4 (``int4_weight_only``, tinygemm layout): ``TensorCoreTiledLayoutType.pre_process`` pads a copy
  (weights.int4_padded_shape); per-group min, max, scale and zero (n, k/g) at b bytes; ``(input - min_val) /
  scale``, ``round``, ``clamp`` at b bytes, ``.to(int32)`` at 4 bytes; ``from_plain`` packs two values a byte
  (``int_data[::, ::2] << 4 | int_data[::, 1::2]``: two (n, k/2) int32, then uint8), ``_convert_weight_to_int4pack``
  and ``pack_tinygemm_scales_and_zeros`` (a ``torch.cat`` and its ``.contiguous()`` transpose). That packing is
  torch >= 2.5's path (``TORCH_VERSION_AT_LEAST_2_5``); torch 2.4 packs the int32 values directly (without the
  two (n, k/2) int32 and the uint8 temporaries: 82 MiB less slack for Llama 2 7B at group 64, 5 MiB for Llama 3 8B).
* fp8 (``float8_dynamic_activation_float8_weight``, scale_dtype float32): ``torch.clamp(input *
  scale.reciprocal(), ...)``: two (n, k) fp32 temporaries (the fp32 scale promotes the product), then
  ``.to(float8_e4m3fn)``. ``float8_weight_only`` (``quant_impl="torchao-wo"``) passes ``scale_dtype=None``, so
  ``_choose_qparams_affine`` keeps the per-row scale in the weight's dtype (``scale_dtype = input.dtype``) and the
  two (n, k) temporaries are at b bytes (quant_api.py ``float8_weight_only`` and quant_primitives.py at 92dd5f557d).

The small temporaries of the parameter choice (per-row minima and maxima, under 1 MiB: the small pool)
are left out; the ones that outlive a weight (scales, zero points) are kept.
"""

from __future__ import annotations

from dataclasses import dataclass

from vramlens.estimator.compiled import QKV
from vramlens.estimator.inventory import Linear, lora_shape, summarize
from vramlens.estimator.kv_cache import kv_dtype_bytes, max_cache_len
from vramlens.estimator.memo import identity_cache
from vramlens.estimator.weights import (
    TORCHAO_NF4_BLOCK,
    adapted_only,
    int4_padded_shape,
    lora_dtype_bytes,
    quant_group,
    quantized_linears,
    quantizes_head,
    weight_dtype_bytes,
    wo_dequantizes,
)
from vramlens.models.spec import ModelSpec, TensorInfo
from vramlens.units import dtype_bytes
from vramlens.workload import ON_DEVICE_QUANTS, UINTX_QUANTS, Workload

_Event = tuple[str, object, int]


@dataclass(frozen=True, slots=True)
class OnDeviceQuant:
    """What quantizing on the GPU leaves and costs.

    slack_bytes: reserved but free inside the segments that stay after ``empty_cache`` (their free remainder),
        on top of the weights and the cache.
    load_peak_bytes: the allocator's peak reserve while loading and quantizing (before the cache is emptied).
    """

    slack_bytes: int
    load_peak_bytes: int


def quantize_events(name: str, n: int, k: int, quant: str, b: int, group: int,
                    fp8_scale_bytes: int = 4) -> list[_Event]:
    """The allocations and frees of one (n, k) weight's quantization (the module docstring has the sources);
    ``fp8_scale_bytes``: the float8 scale's element size, which the product with it takes (4: the dynamic-activation
    config's float32, b: float8_weight_only's scale in the weight's dtype)."""
    A = "alloc"
    F = "free"
    nk = n * k
    if quant == "int8":
        return [(A, (name, "scale"), b * n), (A, (name, "zero"), 8 * n), (A, "inv", b * n),
                (A, "t1", b * nk), (A, "t2", b * nk), (F, "t1", 0), (A, "t3", b * nk), (F, "t2", 0),
                (A, "t4", b * nk), (F, "t3", 0), (A, (name, "q"), nk), (F, "t4", 0), (F, "inv", 0)]
    if quant == "fp8":
        sb = fp8_scale_bytes
        return [(A, (name, "scale"), sb * n), (A, "rec", sb * n), (A, "t1", sb * nk), (A, "t2", sb * nk), (F, "t1", 0),
                (A, (name, "q"), nk), (F, "t2", 0), (F, "rec", 0)]
    if quant == "int4":
        n, k = int4_padded_shape(n, k)
        nk = n * k
        g = n * (k // group) * b  # one (n, k/g) per-group tensor
        return [(A, "pad", b * nk),
                # _choose_qparams_affine: min, max; scale = clamp((max - min) / 15); zero = min + scale * 8
                (A, "min", g), (A, "max", g), (A, "s1", g), (A, "s2", g), (F, "s1", 0), (A, "scale", g), (F, "s2", 0),
                (A, "z1", g), (A, "zero", g), (F, "z1", 0), (F, "min", 0), (F, "max", 0),
                # quantize (FLOAT zero-point domain): min_val = zero - scale * 8; round((input - min_val) / scale)
                (A, "a1", g), (A, "mv", g), (F, "a1", 0), (A, "t1", b * nk), (A, "t2", b * nk), (F, "t1", 0),
                (A, "t3", b * nk), (F, "t2", 0), (A, "t4", b * nk), (F, "t3", 0), (F, "mv", 0),
                (A, "t5", 4 * nk), (F, "t4", 0),
                # from_plain: two int32 (n, k/2), the uint8 pairs, the packed weight, scales_and_zeros
                (A, "s", 2 * nk), (A, "o", 2 * nk), (F, "s", 0), (A, "u8", nk // 2), (F, "o", 0),
                (A, (name, "packed"), nk // 2), (A, "cat", 2 * g), (A, (name, "sz"), 2 * g), (F, "cat", 0),
                (F, "u8", 0), (F, "t5", 0), (F, "scale", 0), (F, "zero", 0), (F, "pad", 0)]
    if quant in UINTX_QUANTS:
        return uintx_quantize_events(name, n, k, int(quant[4:]), b, group)
    if quant == "fp6":
        return fp6_quantize_events(name, n, k)
    if quant == "w4a8-qqq":
        return qqq_quantize_events(name, n, k, group)
    if quant == "int4-sparse-marlin":
        return sparse_marlin_quantize_events(name, n, k, b, group)
    raise ValueError(quant)


def sparse_marlin_quantize_events(name: str, n: int, k: int, b: int, group: int) -> list[_Event]:
    """``int4_weight_only(layout_type=MarlinSparseLayoutType())``'s quantization of one (n, k) fp16 weight (torchao at
    65d86c6c26), op for op, the GPU's allocations only. affine_quantized_tensor.py ``from_hp_to_intx`` keeps its
    locals (the pruned weight ``input_float``, ``scale``, the int32 ``data``) until it returns:

    * ``MarlinSparseLayoutType.pre_process``: sparsity/marlin ``inject_24`` and sparsity/utils.py ``mask_creator``
      (``abs`` of the weight, ``argsort`` of its groups of four: the sorted values and the int64 indices, a float32
      ``torch.ones`` mask scattered in place, ``.bool()``), ``(mask * w).contiguous()`` (a product and its copy: the
      2:4-pruned weight) and ``mask.contiguous()``;
    * quant_primitives.py ``_choose_qparams_affine`` (SYMMETRIC, preserve_zero: per-group min and max, two
      ``zeros_like``, ``torch.max(-min_val_neg, max_val_pos)``, the divided and clamped scale, the ``full_like`` zero
      point cast to bfloat16) and ``_quantize_affine_no_dtype_cast`` (``1.0 / scale``, ``input * (...)``, ``round``,
      the bfloat16 zero point added, which promotes the fp16 sum to float32, ``clamp``, then ``.to(torch.int32)``);
    * ``MarlinSparseAQTLayout.from_plain`` calls sparsity/marlin ``pack_to_marlin_24``: ``_compress_quantized_24_weight``
      (``q_24 - zp`` and its transposed copy, int32; utils.py ``sparse_semi_structured_from_dense_cutlass`` over the
      (n, k) int32: the ``!= 0`` bools and their 2:4 index expressions, two int64 index tensors (each an int64 cast and
      a shift), two ``gather`` and their ``stack`` (the compressed half), the int64 ``meta_4``, its int16 cast and the
      shifted ors of ``meta``, the int16 ``meta_reordered`` kept, and ``_calculate_meta_reordering_scatter_offsets``'s
      int64 (n, k/16) row and column offsets with their arithmetic; then the compressed half transposed into a copy
      and ``+ zp``); ``_to_marlin_weights`` (``marlin_permute_weights``: the tile permute's copy and the ``[:, perm]``
      gather; ``q_w.cpu()`` packs eight values an int64 on the host, and ``.to(orig_device, dtype=torch.int32)`` brings
      back the (k/32, 2n) int32: the host-side tensors are not on the GPU) and ``_to_marlin_scales`` (a copy of the
      transposed scale and its gather, kept).

    The per-row ``torch.max(q_w_24)`` check, the permutation tables (made on the host) and the index copies are
    scalars or under 1 MiB, left out (module docstring)."""
    A, F = "alloc", "free"
    nk = n * k
    G = n * (k // group) * b  # one per-group tensor in the weight's dtype
    off = nk // 2  # an int64 (n, k/16) offset tensor
    ev: list[_Event] = [
        # pre_process: mask_creator, then (mask * w).contiguous(), mask.contiguous()
        (A, "abs", b * nk), (A, "sv", b * nk), (A, "idx", 8 * nk), (F, "sv", 0), (A, "ones", 4 * nk), (F, "abs", 0),
        (F, "idx", 0), (A, "mask", nk), (F, "ones", 0), (A, "mul", b * nk), (A, "w24", b * nk), (F, "mul", 0),
        (A, "maskc", nk), (F, "mask", 0), (F, "maskc", 0),
        # _choose_qparams_affine
        (A, "min", G), (A, "max", G), (A, "z1", G), (A, "minneg", G), (F, "z1", 0), (A, "z2", G), (A, "maxpos", G),
        (F, "z2", 0), (A, "neg", G), (A, "mx", G), (F, "neg", 0), (F, "maxpos", 0), (A, "d", G), (A, "scale", G),
        (F, "d", 0), (A, "full", G), (A, (name, "zero"), 2 * n * (k // group)), (F, "min", 0), (F, "max", 0),
        (F, "minneg", 0), (F, "mx", 0), (F, "full", 0),
        # _quantize_affine_no_dtype_cast, .to(int32)
        (A, "rec", G), (A, "inv", G), (F, "rec", 0), (A, "t1", b * nk), (F, "inv", 0), (A, "t2", b * nk),
        (F, "t1", 0), (A, "t3", 4 * nk), (F, "t2", 0), (A, "t4", 4 * nk), (F, "t3", 0), (A, "data", 4 * nk),
        (F, "t4", 0),
        # _compress_quantized_24_weight: q_24 - zp, .t().contiguous()
        (A, "sub", 4 * nk), (A, "nozp", 4 * nk), (F, "sub", 0),
        # sparse_semi_structured_from_dense_cutlass: the masks and expressions (bool (n, k/4) each)
        (A, "ne", nk), (A, "e0", nk // 4), (A, "n0", nk // 4), (A, "e1", nk // 4), (F, "n0", 0),
        (A, "n1", nk // 4), (A, "n2", nk // 4), (A, "e2", nk // 4), (F, "n1", 0), (F, "n2", 0),
        (A, "o", nk // 4), (A, "bit2", nk // 4), (F, "o", 0), (A, "n3", nk // 4), (A, "bit3", nk // 4), (F, "n3", 0),
        # idxs0, idxs1: an int64 cast, a shift, an or (int64 (n, k/4))
        (A, "c0", 2 * nk), (A, "s0", 2 * nk), (F, "c0", 0), (A, "i0", 2 * nk), (F, "s0", 0),
        (A, "c1", 2 * nk), (A, "s1", 2 * nk), (F, "c1", 0), (A, "i1", 2 * nk), (F, "s1", 0),
        # the two gathers (int32 (n, k/4)), their stack, meta_4, meta_n (int16), meta's shifted ors
        (A, "g0", nk), (A, "g1", nk), (A, "sparse", 2 * nk), (A, "s2", 2 * nk), (A, "m4", 2 * nk), (F, "s2", 0),
        (A, "mn", nk // 2), (A, "h1", nk // 8), (A, "r1", nk // 8), (F, "h1", 0), (A, "h2", nk // 8),
        (A, "r2", nk // 8), (F, "r1", 0), (F, "h2", 0), (A, "h3", nk // 8), (A, "meta", nk // 8), (F, "r2", 0),
        (F, "h3", 0), (A, (name, "meta"), nk // 8),
        # _calculate_meta_reordering_scatter_offsets: int64 (n, k/16)
        (A, "ar1", 8 * n), (A, "rows", off), (F, "ar1", 0), (A, "ar2", 8 * (k // 16)), (A, "cols", off),
        (F, "ar2", 0),
        (A, "a1", off), (A, "a2", off), (F, "a1", 0), (A, "a3", off), (A, "a4", off), (F, "a3", 0), (A, "a5", off),
        (F, "a2", 0), (F, "a4", 0), (A, "a6", off), (A, "a7", off), (F, "a6", 0), (A, "a8", off), (F, "a5", 0),
        (F, "a7", 0), (A, "a9", off), (A, "a10", off), (F, "a9", 0), (A, "a11", off), (F, "a10", 0),
        (A, "a12", off), (F, "a11", 0), (A, "a13", off), (F, "a8", 0), (F, "a12", 0), (A, "a14", off),
        (A, "a15", off), (F, "a14", 0), (A, "a16", off), (F, "a15", 0), (A, "rows2", off), (F, "a13", 0),
        (F, "a16", 0), (F, "rows", 0)]
    for side in ("tr", "bl"):  # topright, bottomleft: two remainders, two bool compares, an and, .to(int8)
        ev += [(A, "m1", off), (A, (side, 1), nk // 16), (F, "m1", 0), (A, "m2", off), (A, (side, 2), nk // 16),
               (F, "m2", 0), (A, (side, 3), nk // 16), (F, (side, 1), 0), (F, (side, 2), 0), (A, side, nk // 16),
               (F, (side, 3), 0)]
    ev += [(A, "d1", nk // 16), (F, "d1", 0), (A, "d2", nk // 16), (F, "d2", 0),  # rows +=, cols -= (tr - bl)
           (A, "maj", off), (A, "mnr", off), (A, "p1", off), (A, "p2", off), (F, "p1", 0), (A, "p3", off),
           (A, "p4", off), (F, "p2", 0), (F, "p3", 0), (A, "offsets", off), (F, "p4", 0),
           *[(F, t, 0) for t in ("rows2", "cols", "tr", "bl", "maj", "mnr")],
           # scatter_ into meta_reordered; the function's locals go
           *[(F, t, 0) for t in ("ne", "e0", "e1", "e2", "bit2", "bit3", "i0", "i1", "g0", "g1", "m4", "mn", "meta",
                                 "offsets")],
           # the compressed half transposed into a copy, + zp
           (A, "ct", 2 * nk), (F, "sparse", 0), (A, "comp", 2 * nk), (F, "nozp", 0), (F, "ct", 0),
           # _to_marlin_weights: the permute's copy and gather, packed on the host, the int32 back on the GPU
           (A, "pc", 2 * nk), (A, "pg", 2 * nk), (F, "pc", 0), (F, "pg", 0), (A, (name, "q"), nk // 4),
           # _to_marlin_scales
           (A, "sc", G), (A, (name, "scale"), G), (F, "sc", 0),
           (F, "comp", 0), (F, "w24", 0), (F, "scale", 0), (F, "data", 0)]
    return ev


def qqq_quantize_events(name: str, n: int, k: int, group: int) -> list[_Event]:
    """Marlin QQQ's quantization of one (n, k) fp16 weight (torchao at 06e69f6a93), op for op:
    ``MarlinQQQTensor.from_hp_to_intx`` (MarlinQQQLayout's pre- and post_process are the identity) calls
    quant_primitives.py ``choose_qparams_and_quantize_affine_qqq``, whose fourth result, the dequantized ``w_ref``
    (n, k) fp16, is bound to ``_`` and lives until from_hp_to_intx returns. Per group of 128: ``amax(abs(w))``, ``round(w
    / s_group).int()``, its clamp, ``(q_w - half_q_val).half() * s_group``, then the per-channel int8 pass over
    ``w_ref`` (``amax(abs)``, divide, round, clamp, ``.to(int8)`` kept to the return, ``.half() * s_channel``); per
    channel (group 0): ``amax(abs(w))``, ``round(w / s_channel).int()``, clamp, ``q_w.half() * s_channel``. Then
    ``MarlinQQQAQTTensorImpl.from_plain`` over ``int_data.t()``: marlin_qqq/utils.py ``marlin_permute_weights`` (the
    reshape after the tile permute copies, the ``[:, perm]`` gather copies again), ``q_w.to(torch.int64)``, a zeroed
    int64 (k/16, 2n), eight ``q_packed |= (q_w[:, i::8] & 0xF) << 4i`` (per channel; ``q_w[:, i::8] << 4i`` per
    group: int64 slice-sized temporaries), ``.to(torch.int32)``; ``_to_marlin_scales``' gathers of the scales."""
    A, F = "alloc", "free"
    nk = n * k
    per_group = bool(group) and group < k
    G = 2 * (nk // group) if per_group else 0  # one fp16 per group
    if per_group:
        ev: list[_Event] = [
            (A, "abs", 2 * nk), (A, "sg", G), (F, "abs", 0),
            (A, "dv", 2 * nk), (A, "rd", 2 * nk), (F, "dv", 0), (A, "qi", 4 * nk), (F, "rd", 0),
            (A, "qc", 4 * nk), (F, "qi", 0),
            (A, "sub", 4 * nk), (A, "hf", 2 * nk), (F, "sub", 0), (A, "wr", 2 * nk), (F, "hf", 0),
            (A, "abs2", 2 * nk), (A, "sc", 2 * n), (F, "abs2", 0),
            (A, "d2", 2 * nk), (A, "r2", 2 * nk), (F, "d2", 0), (A, "c2", 2 * nk), (F, "r2", 0), (A, "t8", nk),
            (F, "c2", 0), (A, "h2", 2 * nk), (A, "wr2", 2 * nk), (F, "h2", 0), (F, "wr", 0),
            (A, "scf", 4 * n), (F, "sc", 0), (A, "sgd", 2 * G), (A, "sgh", G), (F, "sgd", 0), (F, "sg", 0),
            (F, "t8", 0)]
        w_ref = "wr2"
    else:
        ev = [(A, "abs", 2 * nk), (A, "sc", 2 * n), (F, "abs", 0),
              (A, "dv", 2 * nk), (A, "rd", 2 * nk), (F, "dv", 0), (A, "qi", 4 * nk), (F, "rd", 0),
              (A, "qc", 4 * nk), (F, "qi", 0), (A, "hf", 2 * nk), (A, "wr", 2 * nk), (F, "hf", 0),
              (A, "scf", 4 * n), (F, "sc", 0)]
        w_ref = "wr"
    # from_plain: the Marlin tile permute, int64 packing, scales
    ev += [(A, "p1", 4 * nk), (A, "p2", 4 * nk), (F, "p1", 0), (A, "p64", 8 * nk), (F, "p2", 0), (A, "pk", nk)]
    for _ in range(8):
        ev += [(A, "a", nk), (A, "s", nk), (F, "a", 0), (F, "s", 0)] if not per_group else [(A, "s", nk), (F, "s", 0)]
    ev += [(A, (name, "q"), nk // 2), (F, "pk", 0), (F, "p64", 0)]
    if per_group:
        ev += [(A, (name, "s_group"), G), (F, "sgh", 0)]
    ev += [(A, (name, "s_channel"), 4 * n), (F, "scf", 0), (F, "qc", 0), (F, w_ref, 0)]
    return ev


def fp6_quantize_events(name: str, n: int, k: int) -> list[_Event]:
    """``fpx_weight_only(3, 2)``'s quantization of one (n, k) weight (torchao at b4d076813b), op for op:
    affine_quantized_tensor.py ``from_hp_to_fpx`` (FpxTensorCoreLayoutType's pre- and post_process are the identity);
    quant_primitives.py ``choose_qparams_affine_fpx`` (``tensor.float()``, ``abs``, ``amax(1)``, clamp, divide,
    ``.half()``: the fp16 per-row scale kept) and ``quantize_affine_fpx`` (``tensor.float()``, then ``tensor /
    scale.view(-1, 1)`` in fp32, freed once ``x ^ sign`` rebinds ``x``); prototype/custom_fp_utils.py
    ``_f32_to_fpx_unpacked`` (the int32 sign and ``x ^ sign``, three bool masks and their temporaries, the denormal
    path in fp32 then uint8, ``mant_odd`` in int32 (its shift a temporary), ``normal_x >> 21`` in int32 then uint8,
    ``full_like``, two ``torch.where``, the int32 shifted sign then uint8 and masked, the final ``|``; every local
    alive until it returns); fpx.py ``_pack_tc_fp6`` (``flip`` copies; the 2-bit and 4-bit parts each masked,
    permuted and flattened into a copy, then ``_pack``: one shifted slice per value a byte, all alive in its list,
    or-ed pairwise; the ``torch.cat`` kept, (n, 6k/8) uint8)."""
    A, F = "alloc", "free"
    nk = n * k
    q, h = nk // 4, nk // 2  # a 2-bit part's slice, a 4-bit part's
    ev: list[_Event] = [
        # choose_qparams_affine_fpx
        (A, "f", 4 * nk), (A, "abs", 4 * nk), (A, "amax", 4 * n), (F, "abs", 0), (A, "cl", 4 * n), (F, "amax", 0),
        (A, "dv", 4 * n), (F, "cl", 0), (A, (name, "scale"), 2 * n), (F, "dv", 0), (F, "f", 0),
        # quantize_affine_fpx
        (A, "f2", 4 * nk), (A, "q", 4 * nk),
        # _f32_to_fpx_unpacked
        (A, "sign", 4 * nk), (A, "xx", 4 * nk), (F, "q", 0), (A, "sat", nk), (A, "nsat", nk), (A, "lt", nk), (A, "den", nk),
        (F, "nsat", 0), (F, "lt", 0), (A, "or", nk), (A, "norm", nk), (F, "or", 0),
        (A, "dx", 4 * nk), (A, "dx8", nk), (F, "dx", 0),
        (A, "sh", 4 * nk), (A, "mo", 4 * nk), (F, "sh", 0),
        (A, "nx", 4 * nk), (A, "nx8", nk), (F, "nx", 0),
        (A, "full", nk), (F, "xx", 0), (A, "w1", nk), (F, "full", 0), (A, "w2", nk), (F, "w1", 0),
        (A, "sl", 4 * nk), (A, "sl8", nk), (F, "sl", 0), (A, "sl8b", nk), (F, "sl8", 0), (A, "u", nk), (F, "w2", 0),
        *[(F, t, 0) for t in ("sign", "sat", "den", "norm", "dx8", "nx8", "mo", "sl8b", "f2")],
        # _pack_tc_fp6
        (A, "fl", nk), (A, "a1", nk), (A, "t2", nk), (F, "a1", 0), (A, "t2f", nk),
        *[(A, ("p", i), q) for i in range(4)], (A, "o1", q), (A, "o2", q), (F, "o1", 0), (A, "o3", q), (F, "o2", 0),
        *[(F, ("p", i), 0) for i in range(4)], (F, "t2f", 0), (F, "t2", 0),
        (A, "m4", nk), (A, "m4f", nk), (A, "r0", h), (A, "r1", h), (A, "r", h), (F, "r0", 0), (F, "r1", 0),
        (F, "m4f", 0), (F, "m4", 0),
        (A, (name, "packed"), 6 * nk // 8), (F, "o3", 0), (F, "r", 0), (F, "fl", 0), (F, "u", 0)]
    return ev


def uintx_quantize_events(name: str, n: int, k: int, bits: int, b: int, group: int) -> list[_Event]:
    """``uintx_weight_only(torch.uintN, group_size)``'s quantization of one (n, k) weight in b-byte floats (torchao at
    b4d076813b): affine_quantized_tensor.py ``from_hp_to_intx`` (UintxLayoutType's pre_process is the identity),
    quant_primitives.py ``_choose_qparams_affine`` (ASYMMETRIC, preserve_zero, int32 zero point: per-group min and
    max, two ``zeros_like``, the clamped minimum and maximum, the scale, ``quant_min - round(min_val_neg / scale)``
    clamped and cast to int32; every local alive until it returns), ``_quantize_affine_no_dtype_cast``
    (ZeroPointDomain.INT: ``torch.clamp(torch.round(input * (1.0 / scale)) + zero_point, ...)``: ``1.0 / scale`` a
    reciprocal and a product, freed once the first (n, k) product exists; four (n, k)
    temporaries at b bytes, the int32 zero point promoted to the input's dtype, each alive beside the next), the
    ``.to(torch.uint8)`` sub-byte dtypes get, then ``UintxLayoutType.post_process``: bitpacking.py ``pack``, one
    ``(data & mask) >> shift`` uint8 (n, k) per shard (all kept in its list), each packed into a zeroed (n, k*part/8)
    uint8 by ``packed |= narrow << (part * i)`` (a slice-sized temporary each time)."""
    from vramlens.estimator.weights import UINTX_SHARDS

    A, F = "alloc", "free"
    nk = n * k
    g = n * (k // group) * b  # one per-group tensor in the weight's dtype
    ev: list[_Event] = [
        (A, "min", g), (A, "max", g), (A, "z1", g), (A, "minneg", g), (F, "z1", 0), (A, "z2", g), (A, "maxpos", g),
        (F, "z2", 0), (A, "d", g), (A, "s1", g), (F, "d", 0), (A, (name, "scale"), g), (F, "s1", 0),
        (A, "q1", g), (A, "q2", g), (F, "q1", 0), (A, "q3", g), (F, "q2", 0), (A, "zp", g), (F, "q3", 0),
        (A, (name, "zero"), 4 * n * (k // group)), (F, "zp", 0), (F, "min", 0), (F, "max", 0), (F, "minneg", 0),
        (F, "maxpos", 0),
        (A, "rec", g), (A, "inv", g), (F, "rec", 0), (A, "t1", b * nk), (F, "inv", 0), (A, "t2", b * nk),
        (F, "t1", 0), (A, "t3", b * nk), (F, "t2", 0), (A, "t4", b * nk), (F, "t3", 0), (A, "u8", nk), (F, "t4", 0)]
    parts = UINTX_SHARDS[bits]
    for i in range(len(parts)):
        ev += [(A, ("m", i), nk), (A, ("sh", i), nk), (F, ("m", i), 0)]
    for i, part in enumerate(parts):
        ev.append((A, (name, "shard", i), nk * part // 8))
        for _ in range(8 // part):
            ev += [(A, "slice", nk * part // 8), (F, "slice", 0)]
    ev += [(F, ("sh", i), 0) for i in range(len(parts))]
    ev.append((F, "u8", 0))
    return ev


def _tensor_bytes(t: TensorInfo, b: int) -> int:
    return t.numel * (dtype_bytes(t.dtype) if t.dtype is not None else b)


def on_device_events(spec: ModelSpec, w: Workload) -> list[_Event]:
    """Load, quantize, allocate the cache, empty the cache: the event stream of the module docstring."""
    quant = w.quantized
    assert quant in ON_DEVICE_QUANTS
    b = weight_dtype_bytes(w)
    group = quant_group(w)
    sb = b if wo_dequantizes(w) else 4  # float8_weight_only's scale in the weight's dtype
    targets = {lin.name for lin in quantized_linears(spec, quant, None, group)}
    head = quantizes_head(spec, w)
    if head:
        targets |= {t.name for t in spec.tensors if t.role == "lm_head"}
    fused: dict[int, list[TensorInfo]] = {}
    for t in spec.tensors:
        if t.layer is not None and t.module in QKV and t.name in targets:
            fused.setdefault(t.layer, []).append(t)
    load: list[tuple[str, int, int | None, int | None]] = []  # name, bytes, (n, k) when quantized
    for t in spec.tensors:
        if t.role == "buffer":
            continue  # gpt-fast's buffers (freqs_cis, the causal mask) are made by setup_caches, not loaded
        group_qkv = fused.get(t.layer) if t.layer is not None else None
        if group_qkv and len(group_qkv) == len(QKV) and t in group_qkv:
            if t is not group_qkv[0]:
                continue
            n = sum(x.out_features for x in group_qkv)  # wqkv: ((a + 2 kv) d, h)
            load.append((t.name, n * t.in_features * b, n, t.in_features))
        elif t.name in targets:
            load.append((t.name, _tensor_bytes(t, b), t.out_features, t.in_features))
        else:
            load.append((t.name, _tensor_bytes(t, b), None, None))
    ev: list[_Event] = [("alloc", name, size) for name, size, _, _ in load]
    for name, _, out_f, in_f in load:
        if out_f is not None and in_f is not None:
            ev += quantize_events(name, out_f, in_f, quant, b, group, sb)
            ev.append(("free", name, 0))
    if head and spec.tied_embeddings:  # the output layer's quantized copy of its own; the embedding stays
        ev += quantize_events("lm_head", spec.vocab_size, spec.hidden_size, quant, b, group, sb)
    per_layer = w.batch * spec.n_kv_heads * max_cache_len(w) * spec.head_dim * kv_dtype_bytes(w)
    for layer in range(spec.n_decoder_layers):
        ev += [("alloc", ("k_cache", layer), per_layer), ("alloc", ("v_cache", layer), per_layer)]
    ev.append(("empty_cache", None, 0))
    return ev


@identity_cache
def _replay(spec: ModelSpec, w: Workload) -> OnDeviceQuant:
    from vramlens.allocator.simulator import simulate
    from vramlens.estimator.reserve import allocator_config

    r = simulate(on_device_events(spec, w), allocator_config(w.alloc_conf), max_points=2)
    return OnDeviceQuant(slack_bytes=r.final_reserved_bytes - r.final_allocated_bytes,
                         load_peak_bytes=r.peak_reserved_bytes)


def on_device_quant(spec: ModelSpec, w: Workload) -> OnDeviceQuant | None:
    """The slack and load peak of quantizing on the GPU, None unless ``w.quantize_on_device``."""
    if not w.quantize_on_device or w.quantized is None:
        return None
    return _replay(spec, w)



# torchtune's QLoRA set-up of 2024 (lora_finetune_single_device at 412a4ecd, 2024-03-22, and fef3ed10, 2024-04-16,
# with torchao's NF4Tensor of that time: torchao/dtypes/nf4tensor.py at 185236c82, the nightly of 2024-03-22, and
# v0.1, the release torchtune pinned in April; the quantization code is the same in both)
#
# 1. ``with utils.set_default_dtype(bf16), self._device: model = config.instantiate(cfg_model)`` builds the model
#    on the GPU. lora_llama2 builds one block (attention q, k, v, output, then the MLP's w1, w2, w3, then the two
#    norms), the embedding, the output layer and the final norm, then TransformerDecoder deep-copies the block once
#    per layer (modules/transformer.py ``_get_clones``: ``copy.deepcopy``) and the template is dropped. Each
#    quantized LoRALinear makes its bf16 nn.Linear weight, quantizes it (``to_nf4``) and lets the bf16 weight go;
#    the deep copy of an NF4 weight is torchtune's ``aten.clone`` override
#    (modules/low_precision/_register_nf4_dispatch_ops.py at 412a4ecd, utils/_register_nf4_dispatch_ops.py at
#    fef3ed10): ``to_nf4(weight.get_original_weight())``, a dequantization and a quantization. Each block's
#    RotaryPositionalEmbeddings keeps an fp32 ``cache`` of (max_seq_len, head_dim / 2, 2) (modules/
#    position_embeddings.py ``build_rope_cache``).
# 2. ``model.load_state_dict`` from the checkpoint torch.load(map_location="cpu", mmap=True) read: a bf16
#    weight is copied in place; an NF4 weight's ``copy_`` is torchtune's override ``inplace_copy``:
#    ``to_nf4(host_weight.to(device))``, then the new quantized pieces replace the old ones, which are freed.
# 3. No ``torch.cuda.empty_cache()`` before training (torchtune added utils.cleanup_before_training in April 2024,
#    called by the distributed recipes only): the segments reserved while loading stay reserved, and
#    ``memory_stats_log``'s ``reset_peak_memory_stats`` after set-up keeps them in max_memory_reserved.
# The step's own transients are taken to fit in what set-up reserved or to need their own reserve (the larger
# of the two is the run's peak); their placement among set-up's free blocks is not replayed. At 412a4ecd the
# recipe also called ``model.state_dict()`` before loading (validate_state_dict_for_lora), whose hook dequantizes
# every NF4 weight on the GPU and moves it to the host; that pass is not replayed (in the trace of
# scripts/torchtune2024_qlora_trace.py its dequantizations fit in the blocks the build freed: no more reserve).

#: torchtune's module order inside a block (CausalSelfAttention, FeedForward w1 = gate, w2 = down, w3 = up)
_TUNE_ORDER = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "down_proj", "up_proj")
#: torchao's ``to_nf4(tensor, block_size=64, scaler_block_size=256)`` (nf4tensor.py)
_NF4_SCALER_BLOCK = 256


def to_nf4_events(key: object, numel: int) -> list[_Event]:
    """torchao's ``to_nf4`` of a bf16 weight of ``numel`` elements (``NF4Tensor.from_tensor`` at 185236c82 / v0.1).

    Kept, as the NF4 tensor's pieces under ``(key, piece)``: the 16-entry bf16 table ``nf4``, ``scaler_mean``,
    ``quantization_factor`` (``256 / (2 * scaler_absmax)`` over the expanded (n_scaler_blocks, 256) view: its
    ``[:, 0]`` keeps the whole bf16 storage of numel / 64 elements), ``quantized_scalers`` (int8, numel / 64)
    and ``quantized_data`` (two codes a byte, numel / 2). The temporaries, in order: ``get_block_absmax``'s
    ``blocks.abs()`` and ``.max(dim=1)``'s values and int64 indices; the scalers' double quantization at numel / 64
    elements; ``blocks / scales`` (bf16); ``quantize_tensor_nearest``'s ``(value - nf4).abs()`` over a
    (numel, 16) broadcast, 32 bytes a weight each and both alive at the ``abs``, then ``diff.min(dim=-1)``'s bf16
    values and int64 indices; ``q[::2] << 4 | q[1::2]`` (int64, numel / 2 each) and its ``.to(torch.uint8)``.
    """
    A, F = "alloc", "free"
    n = numel
    s = -(-n // TORCHAO_NF4_BLOCK)  # scalers: one per block of 64
    s2 = -(-s // _NF4_SCALER_BLOCK)  # scalers of the scalers
    k = key
    return [(A, (k, "nf4"), 32),
            # double_quantize_scalers
            (A, "abs1", 2 * n), (A, "s1", 2 * s), (A, "i1", 8 * s), (F, "abs1", 0), (F, "i1", 0),
            (A, (k, "scaler_mean"), 2), (A, "s1c", 2 * s), (F, "s1", 0),
            (A, "abs2", 2 * s), (A, "s2", 2 * s2), (A, "i2", 8 * s2), (F, "abs2", 0), (F, "i2", 0),
            (A, "twice", 2 * s), (A, (k, "quantization_factor"), 2 * s), (F, "twice", 0),
            (A, "mul", 2 * s), (A, "round", 2 * s), (F, "mul", 0), (A, "clamp", 2 * s), (F, "round", 0),
            (A, (k, "quantized_scalers"), s), (F, "clamp", 0), (F, "s1c", 0), (F, "s2", 0),
            # convert_to_norm_float_weight
            (A, "abs3", 2 * n), (A, "s3", 2 * s), (A, "i3", 8 * s), (F, "abs3", 0), (F, "i3", 0),
            (A, "scaled", 2 * n),
            (A, "sub", 32 * n), (A, "diff", 32 * n), (F, "sub", 0), (A, "minv", 2 * n), (A, "mini", 8 * n),
            (F, "minv", 0), (F, "diff", 0),
            (A, "shl", 4 * n), (A, "or", 4 * n), (F, "shl", 0), (A, (k, "quantized_data"), -(-n // 2)), (F, "or", 0),
            (F, "mini", 0), (F, "scaled", 0), (F, "s3", 0)]


def nf4_dequant_events(out: object, numel: int) -> list[_Event]:
    """torchao's ``NF4Tensor.get_original_weight`` (185236c82 / v0.1): the bf16 result stays under ``out``.

    ``(quantized_data >> 4)`` and ``& 0b1111`` (uint8, numel / 2) made int64 (``.to(torch.long)``); ``nf4[...]``
    of each half (bf16); ``dequantize_scalers`` (bf16, numel / 64, then ``+ scaler_mean``); each half times
    ``repeated.flatten()``, which copies the expanded scalers (bf16, numel / 2); ``torch.stack`` of the two products
    is the result; the locals go when the function returns (vramlens.estimator.weights
    .torchao_nf4_dequant_temporaries counts the same tensors at the stack).
    """
    A, F = "alloc", "free"
    n = numel
    e = -(-n // 2)
    s = -(-n // TORCHAO_NF4_BLOCK)
    return [(A, "hi", e), (A, "first", 8 * e), (F, "hi", 0), (A, "lo", e), (A, "second", 8 * e), (F, "lo", 0),
            (A, "d1", 2 * e), (A, "d2", 2 * e), (A, "sdiv", 2 * s), (A, "scalers", 2 * s), (F, "sdiv", 0),
            (A, "rep1", 2 * e), (A, "p1", 2 * e), (F, "rep1", 0), (A, "rep2", 2 * e), (A, "p2", 2 * e),
            (F, "rep2", 0), (A, out, 2 * n),
            (F, "first", 0), (F, "second", 0), (F, "d1", 0), (F, "d2", 0), (F, "scalers", 0), (F, "p1", 0),
            (F, "p2", 0)]


_NF4_PIECES = ("quantized_scalers", "quantization_factor", "scaler_mean", "quantized_data", "nf4")


def _block(spec: ModelSpec, w: Workload) -> list[tuple[str, int, bool, tuple[int, int] | None]]:
    """One block's tensors in torchtune's order of construction: (module, bytes or numel, NF4?, LoRA (n, k))."""
    quantized = {lin.module for lin in quantized_linears(spec, w.quantized, adapted_only(w), quant_group(w))
                 if lin.layer == 0}
    adapted = {lin.module for lin in lora_shape(spec, tuple(w.lora_targets)).targets if lin.layer == 0}
    lins: list[Linear] = sorted((lin for lin in summarize(spec).linears if lin.layer == 0),
                                key=lambda lin: _TUNE_ORDER.index(lin.module) if lin.module in _TUNE_ORDER else 99)
    b = weight_dtype_bytes(w)
    out: list[tuple[str, int, bool, tuple[int, int] | None]] = []
    for lin in lins:
        nk = lin.out_features * lin.in_features
        lora = (lin.out_features, lin.in_features) if lin.module in adapted else None
        q = lin.module in quantized
        out.append((lin.module, nk if q else b * nk, q, lora))
    return out


def torchtune_nf4_setup_events(spec: ModelSpec, w: Workload) -> list[_Event]:
    """Build, deep-copy and load torchtune's 2024 QLoRA model on the GPU (the comment above has the sources)."""
    b = weight_dtype_bytes(w)
    lb = lora_dtype_bytes(w)
    r = w.lora_rank
    h = spec.hidden_size
    rope = spec.max_position * (spec.head_dim // 2) * 2 * 4  # fp32 (max_seq_len, head_dim / 2, 2)
    block = _block(spec, w)
    norms = [("sa_norm", b * h), ("mlp_norm", b * h)]
    ev: list[_Event] = []

    def linear(layer: object, module: str, size: int, q: bool, lora: tuple[int, int] | None,
               source: object | None) -> None:
        key = (layer, module)
        if not q:
            ev.append(("alloc", key, size))
        elif source is None:  # LoRALinear(quantize_base=True): the bf16 nn.Linear, to_nf4, the bf16 dropped
            ev.append(("alloc", "bf16", 2 * size))
            ev.extend(to_nf4_events(key, size))
            ev.append(("free", "bf16", 0))
        else:  # torchtune's NF4 clone: to_nf4(get_original_weight())
            ev.extend(nf4_dequant_events("bf16", size))
            ev.extend(to_nf4_events(key, size))
            ev.append(("free", "bf16", 0))
        if lora is not None:
            n, k = lora
            ev.extend((("alloc", (key, "lora_a"), lb * r * k), ("alloc", (key, "lora_b"), lb * n * r)))

    def tensors_of(layer: object) -> list[object]:
        keys: list[object] = []
        for module, _, q, lora in block:
            key = (layer, module)
            keys += [(key, p) for p in _NF4_PIECES] if q else [key]
            keys += [(key, "lora_a"), (key, "lora_b")] if lora else []
        return keys + [(layer, "rope"), (layer, "sa_norm"), (layer, "mlp_norm")]

    # the template block: attention (rope after the projections), MLP, norms
    attn = [x for x in block if x[0] in _TUNE_ORDER[:4]]
    for module, size, q, lora in attn:
        linear("template", module, size, q, lora, None)
    ev.append(("alloc", ("template", "rope"), rope))
    for module, size, q, lora in block[len(attn):]:
        linear("template", module, size, q, lora, None)
    ev += [("alloc", ("template", name), size) for name, size in norms]
    ev += [("alloc", "tok_embeddings", b * spec.vocab_size * h), ("alloc", "output", b * spec.vocab_size * h),
           ("alloc", "norm", b * h)]
    # deepcopy per layer, in the block's module order: sa_norm, attn (q, k, v, output, rope), mlp_norm, mlp
    for layer in range(spec.n_layers):
        ev.append(("alloc", (layer, "sa_norm"), b * h))
        for module, size, q, lora in attn:
            linear(layer, module, size, q, lora, "template")
        ev.append(("alloc", (layer, "rope"), rope))
        ev.append(("alloc", (layer, "mlp_norm"), b * h))
        for module, size, q, lora in block[len(attn):]:
            linear(layer, module, size, q, lora, "template")
    ev += [("free", key, 0) for key in tensors_of("template")]
    # load_state_dict: each NF4 weight re-quantized from its host copy, the old pieces freed
    for layer in range(spec.n_layers):
        for module, size, q, _ in block:
            if not q:
                continue
            key = (layer, module)
            ev.append(("alloc", "h2d", 2 * size))
            ev.extend(to_nf4_events((key, "new"), size))
            ev.append(("free", "h2d", 0))
            ev += [("free", (key, p), 0) for p in _NF4_PIECES]
    return ev


@identity_cache
def _tune_replay(spec: ModelSpec, w: Workload) -> int:
    from vramlens.allocator.simulator import simulate
    from vramlens.estimator.reserve import allocator_config

    return simulate(torchtune_nf4_setup_events(spec, w), allocator_config(w.alloc_conf), max_points=2).peak_reserved_bytes


def torchtune_nf4_setup_peak(spec: ModelSpec, w: Workload) -> int | None:
    """The reserve torchtune's 2024 QLoRA set-up leaves (peak reserved while building and loading), None unless
    ``w.quantize_on_device`` on a QLoRA training workload."""
    if not w.quantize_on_device or w.mode != "train" or w.quantized not in ("nf4", "nf4-dq"):
        return None
    return _tune_replay(spec, w)
