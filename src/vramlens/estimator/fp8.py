"""FP8 training with torchao's Float8Linear (``--fp8``): what it adds to a bf16 step.

Read from torchao 0.18 (torchao/float8/), the recipe torchtitan's ``[float8]`` converter and
torchtune's ``enable_fp8_training`` apply (``convert_to_float8_training`` with the default
``Float8LinearConfig()``: the tensorwise recipe, dynamic scaling, e4m3 inputs and weights, e5m2
gradients; eager, as the tracer runs it):

* Saved for backward: ``matmul_with_hp_or_float8_args.forward`` calls
  ``ctx.save_for_backward(input_hp, weight_hp_t)``, the high-precision input and weight, the
  same tensors as ``F.linear`` keeps; backward casts them to float8 again. The saved activations
  do not change. (``force_recompute_fp8_weight_in_bwd`` is deprecated and a no-op in 0.18;
  ``enable_fsdp_float8_all_gather``, which gathers float8 weights, is off by default and not
  modelled.)
* There is no amax history: delayed scaling was removed from torchao (0.18 has only
  ``ScalingType.DYNAMIC`` and ``DISABLED``, config.py), so each cast computes its scale from the
  tensor itself (``float8_utils.tensor_to_scale``: one fp32 scalar per tensor under tensorwise).
* Transient casts: each cast (``_ToFloat8ConstrFunc.forward``, float8_training_tensor.py) makes
  ``tensor.to(float32) * scale`` (fp32), ``to_fp8_saturated`` clamps it (fp32 again,
  float8_utils.py) and then converts it (1 byte per element): the product and the clamped copy
  are alive while the float8 copy is made, 9 bytes per element above the bf16 tensor. A forward
  casts the input and the weight (1 byte per weight); a backward casts the incoming gradient
  twice (for grad_input and grad_weight), the weight again and the saved input again, and keeps
  each float8 copy until it returns.

Under tensor parallelism (``--tp``), torchtitan's ``apply_tp`` with float8 on (torchtitan 9dec370
torchtitan/parallelisms/parallelize_llama.py) uses torchao's float8 styles (float8_tensor_parallel.py, the
same in torchao eab345c and 0.18): ``PrepareFloat8ModuleInput`` on the attention and the MLP casts the
sequence-sharded norm output to float8 *before* its all-gather, so q/k/v (and gate/up) receive one gathered
float8 tensor (b*s*h bytes) and save it for backward in place of the gathered bf16 one
(``matmul_with_hp_or_float8_args`` saves its input as given; ``tensor_already_casted_to_fp8`` skips the
cast); ``Float8RowwiseParallel._prepare_input_fn`` casts the o and down projections' local inputs
(b*s*a*d/tp, b*s*f/tp), which save the float8 copy: the down projection's bf16 input (the MLP product) is
then freed, the o projection's is the SDPA output the kernel keeps anyway. Each float8 tensor carries its
fp32 scale (one 512-byte block). See :func:`tp_saved_delta`. The outputs stay bf16
(``NoopFwToFloat8BwDynamic``: a no-op forward, a float8 cast of the gradient in backward).

Not modelled: the rowwise recipes (axiswise scales, one fp32 per row; newer torchtitan converters default
to "rowwise"), which cast the same tensors with vectors of scales; FSDP's float8 all-gather; torch.compile,
whose partitioner may save float8 casts instead of the bf16 inputs; torchao before 0.9's
``manual_float8_matmul_with_args_in_float8`` (eab345c, December 2024), which saved the float8 input and the
float8 weight cast for backward (without TP: b*s*k bytes instead of 2*b*s*k, plus k*n per linear).
The output layer stays bf16: torchtitan's Llama 3 configs set ``filter_fqns = ["output"]`` (the field's
default is empty, and a converted output layer would cast the b*s*V logits' gradient).

The largest of these transients is the MLP down projection's backward (its input is b*s*f):
the incoming gradient (b*s*h), the gradient of its input (b*s*f, bf16), the two float8 copies of
the incoming gradient, the weight's float8 copy (h*f bytes) and the cast of the saved input
(9 bytes per element). torchao converts ``torch.nn.Linear`` only: transformers' grouped MoE
experts (parameters, not linears) keep bf16 matmuls, so MoE blocks add only attention's casts,
which are smaller and not counted.
"""

from __future__ import annotations

from vramlens.models.spec import ModelSpec
from vramlens.units import DTYPE_BYTES
from vramlens.units import block_bytes as _r  # one allocation's bytes, in 512-byte blocks
from vramlens.workload import Workload

#: torchao/float8/float8_linear.py: the float8 GEMMs need both dims of a weight to be multiples of 16
#: (float8_linear_utils.py ``_auto_filter_for_tensorwise``; torchtitan's module filter skips the rest)
DIM_MULTIPLE = 16
#: bytes per element a cast holds above its bf16 source: ``tensor.to(float32) * scale`` (4), its
#: clamp (4, float8_utils.to_fp8_saturated) and the float8 result (1), float8_training_tensor.py
CAST_PEAK = 4 + 4 + 1
#: the first GPU generation with float8 tensor cores: Ada (sm_89) and Hopper (sm_90); torch._scaled_mm
#: refuses older ones (aten/src/ATen/native/cuda/Blas.cpp: "torch._scaled_mm is only supported on CUDA
#: devices with compute capability >= 9.0 or 8.9")
MIN_COMPUTE_CAPABILITY = (8, 9)


def converts(k: int, n: int) -> bool:
    """Whether a (k -> n) nn.Linear is converted (torchtitan's filter: dims multiples of 16)."""
    return k % DIM_MULTIPLE == 0 and n % DIM_MULTIPLE == 0


def _mlp_dims(spec: ModelSpec, w: Workload, tp: int) -> tuple[int, int] | None:
    """(hidden, the widest MLP's width on this rank) of a float8 training step's dense MLP; None
    without --fp8 or for MoE MLPs (transformers' grouped experts are not nn.Linear)."""
    if not (w.fp8 and w.training) or spec.is_moe:
        return None
    return spec.hidden_size, max(1, max(spec.ffn_size, spec.dense_ffn_size or 0) // tp)


def down_backward(spec: ModelSpec, w: Workload, b: int, s: int, tp: int = 1) -> int:
    """Bytes the MLP down projection's float8 backward holds beyond the saved activations, the
    incoming gradient included (0 without --fp8, for MoE MLPs, or when the projection is not converted)."""
    dims = _mlp_dims(spec, w, tp)
    if dims is None or not converts(dims[1], dims[0]):  # the down projection: f -> h
        return 0
    h, f = dims
    t = b * s
    scale = _r(4)  # one fp32 scalar per cast (tensorwise), each its own 512-byte block
    if tp > 1:
        return _down_backward_tp(h, f, t, tp, DTYPE_BYTES[w.compute_dtype])
    return (_r(2 * t * h)            # the incoming gradient (bf16)
            + 2 * (_r(t * h) + scale)  # its two float8 casts (for grad_input and for grad_weight)
            + _r(h * f) + scale        # the weight's float8 cast for grad_input
            + _r(2 * t * f)            # grad_input (bf16)
            + 2 * _r(4 * t * f) + _r(t * f) + scale)  # the saved input's cast: product, clamp, float8


def _down_backward_tp(h: int, f: int, t: int, tp: int, c: int) -> int:
    """The down projection's backward under torchao's ``Float8RowwiseParallel(output_layouts=Shard(1))``, f the
    rank's width, beside the incoming gradient's sequence shard (b*s/tp*h, bf16): ``NoopFwToFloat8BwDynamic``
    (applied after the output's reduce-scatter) casts that shard to float8 (9 bytes per element), the
    redistribution's backward all-gathers the float8 shard (the collective's output and its concatenation
    along the sequence, b*s*h bytes each), and the matmul gets the gathered float8 gradient for both grads; its
    saved input is float8 already, so only the weight shard is cast again (9 bytes per element) before
    grad_input (b*s*f, bf16). Traced on the fake process group (a block with h = 4f/tp)."""
    scale = _r(4)
    cast_shard = 2 * _r(4 * t * h // tp) + _r(t * h // tp) + scale
    gather = _r(t * h // tp) + scale + 2 * _r(t * h)
    weight_cast = 2 * _r(4 * h * f) + _r(h * f) + scale
    after = _r(t * h) + scale + max(weight_cast, _r(h * f) + scale + _r(c * t * f))
    return _r(c * t * h // tp) + max(cast_shard, gather, after)


def _gate_up_backward_tp(h: int, f: int, t: int, tp: int, c: int) -> int:
    """Under torchao's float8 TP styles, a gated MLP's temporaries when the up projection's
    ``NoopFwToFloat8BwDynamic`` casts its incoming gradient (b*s*f/tp, f the rank's width): the product's two
    input gradients (bf16; the other branch's waits), the cast (``tensor.to(float32) * scale`` and its clamp,
    4 + 4 bytes per element, and the float8 result) and the residual stream's gradient shard (b*s/tp*h).
    The gradient arrives whole (a local Shard(-1) tensor): one cast serves grad_input and grad_weight, and the
    saved input is the gathered float8 one, not cast again. Traced on the fake process group: the backward
    peak of a block whose MLP is wide against the vocabulary."""
    return _r(c * t * h // tp) + 2 * _r(c * t * f) + 2 * _r(4 * t * f) + _r(t * f) + _r(4)


def tp_mlp_freed(spec: ModelSpec, w: Workload, b: int, s: int, tp: int) -> int:
    """What a gated MLP's saved tensors have lost by the time its input projections' backward runs under
    torchao's float8 TP styles: the down projection's float8 input and the product's two bf16 inputs (the
    activation's output and up's); 0 without --fp8 or tp > 1, for MoE and ungated MLPs."""
    dims = _mlp_dims(spec, w, tp)
    if tp <= 1 or dims is None or not spec.gated_mlp:
        return 0
    t, f = b * s, dims[1]
    down = tp_down_input(spec, w, b, s, tp) or _r(DTYPE_BYTES[w.compute_dtype] * t * f)
    return down + 2 * _r(DTYPE_BYTES[w.compute_dtype] * t * f)


def gate_up_backward(spec: ModelSpec, w: Workload, b: int, s: int, tp: int = 1) -> int:
    """The temporaries of the MLP input projection's float8 backward (gate/up, or fc1): the block's incoming
    residual gradient (b*s*h), the other branch's gradient waiting for its own projection (gated MLPs),
    the incoming gradient (b*s*f), its first float8 cast, the weight's, grad_input (b*s*h) and the second
    cast of the incoming gradient (9 bytes per element). Larger than the down projection's figure, but at
    a moment when the MLP's saved tensors are freed: a temporaries figure, not a peak candidate (the
    down projection's is)."""
    dims = _mlp_dims(spec, w, tp)
    if dims is None or not converts(*dims):  # the input projection: h -> f
        return 0
    h, f = dims
    t = b * s
    scale = _r(4)
    if tp > 1:
        return _gate_up_backward_tp(h, f, t, tp, DTYPE_BYTES[w.compute_dtype]) if spec.gated_mlp else 0
    return (_r(2 * t * h)                                   # the block's incoming residual gradient
            + (_r(2 * t * f) if spec.gated_mlp else 0)      # the other branch's gradient, waiting
            + _r(2 * t * f)                                 # the incoming gradient (bf16)
            + _r(t * f) + scale + _r(h * f) + scale         # its float8 cast for grad_input, the weight's
            + _r(2 * t * h)                                 # grad_input (bf16)
            + 2 * _r(4 * t * f) + _r(t * f) + scale)        # the incoming gradient cast again (grad_weight)


def tp_saved_delta(spec: ModelSpec, w: Workload, b: int, s: int, tp: int, *, o_input_copied: bool = False) -> int:
    """What torchao's float8 tensor-parallel styles change in one block's saved tensors on a rank (0 without
    --fp8 or tp > 1, and for MoE blocks, whose experts the plan does not shard this way).

    ``o_input_copied``: the o projection's bf16 input is a copy only it keeps (eager attention's contiguous
    output), which its float8 copy then replaces; otherwise it is the SDPA output, which the kernel keeps.
    A group whose linears are not converted (dims not multiples of 16) keeps its bf16 tensors (torchtitan's
    float8 styles would refuse a plain nn.Linear: float8_tensor_parallel.py ``_apply`` raises ValueError)."""
    if not (w.fp8 and w.training) or tp <= 1 or spec.is_moe or spec.mla is not None:
        return 0
    c = DTYPE_BYTES[w.compute_dtype]
    h, t = spec.hidden_size, b * s
    q, kv, f = spec.n_heads * spec.head_dim, spec.n_kv_heads * spec.head_dim, spec.ffn_size
    scale = _r(4)  # the float8 tensor's fp32 scale (tensorwise)
    delta = 0
    if converts(h, q) and converts(h, kv):
        # the gathered attention input (b, s, h): float8 instead of bf16, kept by q, k and v together
        delta += _r(t * h) + scale - _r(c * t * h)
    if converts(q, h):
        # o's local input (b, s, a*d/tp): its float8 copy, beside (or instead of) the bf16 one
        delta += _r(t * q // tp) + scale - (_r(c * t * q // tp) if o_input_copied else 0)
    if converts(h, f):
        delta += _r(t * h) + scale - _r(c * t * h)  # the gathered MLP input
    if converts(f, h):
        # down's local input (b, s, f/tp), the MLP's product: float8 instead of bf16 (the product is freed)
        delta += _r(t * f // tp) + scale - _r(c * t * f // tp)
    return delta


def tp_down_input(spec: ModelSpec, w: Workload, b: int, s: int, tp: int) -> int:
    """The down projection's saved float8 input on a rank under torchao's float8 TP styles (b*s*f/tp bytes and its
    scale; 0 when it is not converted)."""
    dims = _mlp_dims(spec, w, tp)
    if tp <= 1 or dims is None or not converts(spec.ffn_size, spec.hidden_size):
        return 0
    return _r(b * s * dims[1]) + _r(4)


def forward_transient(spec: ModelSpec, w: Workload, b: int, s: int, tp: int = 1) -> int:
    """The largest cast inside a block's forward: the down projection's input (b*s*f), or its weight
    after the input's float8 copy (0 without --fp8)."""
    dims = _mlp_dims(spec, w, tp)
    if dims is None or not converts(dims[1], dims[0]):  # the down projection: f -> h
        return 0
    h, f = dims
    t = b * s
    if tp > 1:
        # Float8RowwiseParallel casts the input in its input hook and the block's saved tensors keep the float8
        # copy (tp_saved_delta); the bf16 product stays alive (the caller's argument) through the projection
        product = _r(DTYPE_BYTES[w.compute_dtype] * t * f)
        return product + max(2 * _r(4 * t * f), 2 * _r(4 * h * f) + _r(h * f)) + _r(4)
    inp = 2 * _r(4 * t * f) + _r(t * f)
    weight = _r(t * f) + 2 * _r(4 * h * f) + _r(h * f)
    return max(inp, weight) + _r(4)


def notes(w: Workload, gpu_name: str | None, compute_capability: tuple[int, int] | None) -> list[str]:
    """What --fp8 means here, and whether the GPU can run it."""
    if not (w.fp8 and w.training):
        return []
    out = ["fp8: torchao 0.18 Float8Linear (tensorwise dynamic scaling) saves the bf16 input and weight for "
           "backward, as nn.Linear does, and casts them to float8 in each matmul: it adds transients (9 B per "
           "element being cast), not saved activations; no amax history (torchao removed delayed scaling); the "
           "output layer and linears with dims not multiples of 16 stay bf16; counted eager (torch.compile "
           "fuses the casts)"]
    if w.tp > 1:
        out.append(f"fp8 with tp={w.tp}: torchao's float8 TP styles (torchtitan's apply_tp with float8): the attention's "
                   "and MLP's inputs cast to float8 before their all-gathers, so q/k/v and gate/up keep the gathered "
                   "float8 tensor (b*s*h bytes) for backward instead of the bf16 one, and o and down keep float8 "
                   "copies of their inputs; each incoming gradient cast once")
    if compute_capability is not None and tuple(compute_capability) < MIN_COMPUTE_CAPABILITY:
        out.append(f"fp8: {gpu_name or 'this GPU'} (compute capability {compute_capability[0]}."
                   f"{compute_capability[1]}) has no float8 tensor cores: torch._scaled_mm needs 8.9 or later "
                   "(Ada, Hopper, Blackwell); drop --fp8 or use torchao's emulate=True (slow)")
    return out
