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
from vramlens.estimator.kv_cache import kv_dtype_bytes, max_cache_len
from vramlens.estimator.memo import identity_cache
from vramlens.estimator.weights import (
    int4_padded_shape,
    quant_group,
    quantized_linears,
    quantizes_head,
    weight_dtype_bytes,
    wo_dequantizes,
)
from vramlens.models.spec import ModelSpec, TensorInfo
from vramlens.units import dtype_bytes
from vramlens.workload import ON_DEVICE_QUANTS, Workload

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
    raise ValueError(quant)


def _tensor_bytes(t: TensorInfo, b: int) -> int:
    return t.numel * (dtype_bytes(t.dtype) if t.dtype is not None else b)


def on_device_events(spec: ModelSpec, w: Workload) -> list[_Event]:
    """Load, quantize, allocate the cache, empty the cache: the event stream of the module docstring."""
    quant = w.quantized
    assert quant in ON_DEVICE_QUANTS
    b = weight_dtype_bytes(w)
    group = quant_group(w)
    sb = b if wo_dequantizes(w) else 4  # float8_weight_only's scale in the weight's dtype
    targets = {lin.name for lin in quantized_linears(spec, quant, None)}
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

    r = simulate(on_device_events(spec, w), max_points=2)
    return OnDeviceQuant(slack_bytes=r.final_reserved_bytes - r.final_allocated_bytes,
                         load_peak_bytes=r.peak_reserved_bytes)


def on_device_quant(spec: ModelSpec, w: Workload) -> OnDeviceQuant | None:
    """The slack and load peak of quantizing on the GPU, None unless ``w.quantize_on_device``."""
    if not w.quantize_on_device or w.quantized is None:
        return None
    return _replay(spec, w)

