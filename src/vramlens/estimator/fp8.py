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

The recipes (``--fp8-recipe``, Workload.fp8_recipe; torchtitan's ``--float8.recipe_name`` and ``--mx.recipe_name``):

* ``tensorwise``: the above (``Float8LinearConfig()``).
* ``rowwise`` (torchao 0.18 config.py ``Float8LinearConfig.from_recipe_name``: AXISWISE casts, e4m3 for the
  gradient too, power-of-2 scales): the same casts at the same moments (float8_linear.py
  ``matmul_with_hp_or_float8_args``), each with a vector of fp32 scales (float8_utils.py ``tensor_to_amax``:
  ``torch.amax(..., dim=axiswise_dim, keepdim=True)``) along the axis its matmul reduces: the input and the
  incoming gradient for grad_input one per token row (``axiswise_dim=-1``: 4*b*s bytes), the weight one per output
  row (forward, ``dim=0`` of the transposed weight: 4*n) or per input column (grad_input: 4*k), the incoming gradient
  and the saved input for grad_weight one per column (``dim=0``: 4*n and 4*k). Both backward GEMMs run without fast
  accumulation, where float8_ops.py ``addmm_float8_unwrapped`` calls the tensorwise kernel and scales the output
  afterwards by ``a_inverse_scale * b_inverse_scale``, an fp32 tensor of the output's shape (4*b*s*k for
  grad_input, 4*n*k for grad_weight): grad_input's is smaller than the saved input's cast (9 bytes per element)
  that follows it, so the down projection's backward peak is the tensorwise one with the vectors of scales
  (:func:`down_backward`) unless b*s is small against the weight, where grad_weight's GEMM (the two float8
  operands, float8_ops.py ``preprocess_addmm``'s row-major copies of both, the fp32 scaling and grad_weight) is
  larger. (Tensorwise runs the same copies without the scaling; that moment is not counted for it.)
* ``rowwise_with_gw_hp``: rowwise casts for the forward and for grad_input's incoming gradient, a tensorwise
  cast of the weight for grad_input (``cast_config_weight_for_grad_input``, whose scale float8_ops.py
  ``preprocess_addmm`` repeats to one per column, 4*k bytes), and no cast at all for grad_weight (its two configs
  ``ScalingType.DISABLED``): grad_weight is a bf16 matmul of the incoming gradient and the saved input, so the
  saved input is never cast in backward and the fp32 output scaling of grad_input (4*b*s*k) is that backward's
  peak.
* ``mxfp8_cublas`` and ``mxfp8_cublas_rceil`` (torchao 0.13 e4e681be6, the version of the published B200 rows:
  prototype/mx_formats config.py ``MXLinearConfig.from_recipe_name``, mx_linear.py ``mx_mm``; the dense MXLinear
  left torchao after that, 0.18 has none): ``mx_mm.forward`` saves ``input_hp`` and ``weight_hp`` as
  Float8Linear does; each cast along the last dim (``MXTensor.to_mx``, mx_tensor.py ``to_mx``) makes an fp32
  copy of its source, the scaled copy (``data_hp / scale_fp32``, or ``data_hp * descale_fp`` under RCEIL) and
  its clamp, 12 bytes per element at once, then the float8 data (1 byte) and one e8m0 scale per 32 elements
  (``block_size`` 32, 1 byte each); the casts along dim 1 (the weight's and the saved input's for grad_input and
  grad_weight, the incoming gradient's for grad_weight) run the CUDA kernel (``mxfp8_quantize_cuda`` with
  ``MXFP8Dim1CastKernelChoice.CUDA``), which writes the float8 data and the scales with no fp32 copy. to_mx asserts
  the cast dim is a multiple of the block size: linears with dims not multiples of 32 stay bf16 here. cuBLAS'
  swizzled copies of the scales (1/32 of the data) are not counted.

Not modelled: FSDP's float8 all-gather; torch.compile,
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
from vramlens.units import DTYPE_BYTES, ceil_div
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


#: the MX block: one e8m0 scale (1 byte) per 32 elements along the cast dim (torchao 0.13 mx_formats config.py
#: ``MXLinearConfig.block_size``); ``to_mx`` asserts the dim is a multiple of it
MX_BLOCK = 32
#: bytes per element an MX cast along the last dim holds above its bf16 source at once: the fp32 copy (4), the
#: scaled copy (4) and its clamp (4), torchao 0.13 mx_tensor.py ``to_mx``
MX_CAST_PEAK = 4 + 4 + 4
#: the first GPU generation with MX (block-scaled) float8 tensor cores: Blackwell (sm_100); torch._scaled_mm's
#: block-scaled path needs it (aten/src/ATen/native/cuda/Blas.cpp, ``_scaled_mm`` with e8m0 scales)
MX_MIN_COMPUTE_CAPABILITY = (10, 0)


def converts(k: int, n: int, multiple: int = DIM_MULTIPLE) -> bool:
    """Whether a (k -> n) nn.Linear is converted (torchtitan's filter: dims multiples of 16; of 32, the MX block,
    for the MX recipes)."""
    return k % multiple == 0 and n % multiple == 0


def is_mx(w: Workload) -> bool:
    """Whether --fp8's recipe is MX training (mxfp8_cublas, mxfp8_cublas_rceil)."""
    return w.fp8_recipe.startswith("mxfp8")


def _multiple(w: Workload) -> int:
    return MX_BLOCK if is_mx(w) else DIM_MULTIPLE


def _scale(w: Workload, rows: int) -> int:
    """One cast's float8 scale: one fp32 scalar (tensorwise), one fp32 per row of ``rows`` (rowwise)."""
    return _r(4 * rows) if w.fp8_recipe in ("rowwise", "rowwise_with_gw_hp") else _r(4)


def _mx(elems: int) -> int:
    """An MX cast's result: the float8 data (1 byte per element) and its e8m0 scales (1 byte per 32)."""
    return _r(elems) + _r(ceil_div(elems, MX_BLOCK))


def _linear_backward(w: Workload, t: int, k: int, n: int) -> int:
    """Bytes a converted (k -> n) linear's float8 backward holds at its peak beyond its saved tensors, the
    incoming gradient (t x n, bf16) included, eager (torchao 0.18 float8_linear.py
    ``matmul_with_hp_or_float8_args.backward``; torchao 0.13 mx_linear.py ``mx_mm.backward``)."""
    go = _r(2 * t * n)
    if is_mx(w):
        # the incoming gradient cast along its last dim (to_mx: 12 B per element at once), then grad_input from
        # it and the weight's dim-1 cast (CUDA kernel), the incoming gradient's and the saved input's dim-1
        # casts (CUDA kernel) and grad_weight (n x k, bf16)
        return go + max(MX_CAST_PEAK // 4 * _r(4 * t * n), _mx(t * n) + _mx(n * k) + _r(2 * t * k) + _mx(t * n) + _mx(t * k)
                        + _r(2 * n * k))
    rowwise = w.fp8_recipe in ("rowwise", "rowwise_with_gw_hp")
    s_t = _scale(w, t)  # the gradient's cast for grad_input: one scale per token row under the rowwise recipes
    # the weight's cast for grad_input: one per input column under rowwise; tensorwise under rowwise_with_gw_hp,
    # whose scale preprocess_addmm repeats to one per column (4*k bytes) beside the rowwise gradient's
    s_w = _r(4 * k) if w.fp8_recipe == "rowwise" else _r(4)
    go0 = _r(t * n) + s_t
    wt = _r(n * k) + s_w + (_r(4 * k) if w.fp8_recipe == "rowwise_with_gw_hp" else 0)
    gi = _r(2 * t * k)
    moments = [
        2 * _r(4 * t * n) + _r(t * n) + s_t,    # the gradient's first cast in progress (9 B per element)
        go0 + 2 * _r(4 * n * k) + _r(n * k) + s_w,  # then the weight's
        # the grad_input GEMM: preprocess_addmm's row-major copy of the transposed float8 weight
        # (``b_data.t().contiguous().t()``), the rowwise recipes' fp32 output scaling, grad_input (bf16)
        go0 + wt + _r(n * k) + (2 * _r(4) + _r(4 * t * k) if rowwise else 0) + gi,
    ]
    if w.fp8_recipe == "rowwise_with_gw_hp":
        moments.append(go0 + wt + gi + _r(2 * n * k))  # grad_weight: a bf16 matmul of the gradient and the saved input
        return go + max(moments)
    go1 = _r(t * n) + _scale(w, n)  # the gradient's cast for grad_weight (one scale per column under rowwise)
    xin = _r(t * k) + _scale(w, k)  # the saved input's
    moments += [
        go0 + wt + gi + 2 * _r(4 * t * n) + _r(t * n) + _scale(w, n),
        go0 + wt + gi + go1 + 2 * _r(4 * t * k) + _r(t * k) + _scale(w, k),
        # the grad_weight GEMM: the copies of the transposed gradient (``a_data.contiguous()``) and of the input,
        # the fp32 output scaling (n x k, rowwise), grad_weight (bf16)
        go0 + wt + gi + go1 + xin + _r(t * n) + _r(t * k) + (2 * _r(4) + _r(4 * n * k) if rowwise else 0)
        + _r(2 * n * k),
    ]
    return go + max(moments)


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
    if dims is None or not converts(dims[1], dims[0], _multiple(w)):  # the down projection: f -> h
        return 0
    h, f = dims
    t = b * s
    if tp > 1:
        return _down_backward_tp(h, f, t, tp, DTYPE_BYTES[w.compute_dtype])
    return _linear_backward(w, t, f, h)


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
    if dims is None or not converts(*dims, _multiple(w)):  # the input projection: h -> f
        return 0
    h, f = dims
    t = b * s
    if tp > 1:
        return _gate_up_backward_tp(h, f, t, tp, DTYPE_BYTES[w.compute_dtype]) if spec.gated_mlp else 0
    waiting = _r(2 * t * h) + (_r(2 * t * f) if spec.gated_mlp else 0)  # the residual gradient, the other branch's
    return waiting + _linear_backward(w, t, h, f)


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
    if dims is None or not converts(dims[1], dims[0], _multiple(w)):  # the down projection: f -> h
        return 0
    h, f = dims
    t = b * s
    if is_mx(w):
        # to_mx of the input (12 B per element at once), then of the weight beside the input's MX copy
        return max(MX_CAST_PEAK // 4 * _r(4 * t * f), _mx(t * f) + MX_CAST_PEAK // 4 * _r(4 * h * f))
    if w.fp8_recipe != "tensorwise":
        # rowwise scales: one per token row of the input, one per output row of the weight (axiswise_dim 0 of
        # the transposed weight)
        return max(2 * _r(4 * t * f) + _r(t * f) + _r(4 * t),
                   _r(t * f) + _r(4 * t) + 2 * _r(4 * h * f) + _r(h * f) + _r(4 * h))
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
    if is_mx(w):
        out = [f"fp8: torchao MX training ({w.fp8_recipe}, torchao 0.13 MXLinear) saves the bf16 input and weight for "
               "backward, as nn.Linear does, and casts them to mxfp8 (e4m3 data, one e8m0 scale per 32 elements) in "
               "each matmul: it adds transients (12 B per element along the last dim, the dim-1 casts by the CUDA "
               "kernel), not saved activations; the output layer and linears with dims not multiples of 32 stay "
               "bf16; counted eager (torch.compile fuses the casts)"]
    else:
        scaling = {"tensorwise": "tensorwise dynamic scaling", "rowwise": "rowwise scaling, one fp32 scale per row",
                   "rowwise_with_gw_hp": "rowwise scaling, grad_weight in bf16"}[w.fp8_recipe]
        out = [f"fp8: torchao 0.18 Float8Linear ({scaling}) saves the bf16 input and weight for "
               "backward, as nn.Linear does, and casts them to float8 in each matmul: it adds transients (9 B per "
               "element being cast), not saved activations; no amax history (torchao removed delayed scaling); the "
               "output layer and linears with dims not multiples of 16 stay bf16; counted eager (torch.compile "
               "fuses the casts)"]
    if w.tp > 1:
        out.append(f"fp8 with tp={w.tp}: torchao's float8 TP styles (torchtitan's apply_tp with float8): the attention's "
                   "and MLP's inputs cast to float8 before their all-gathers, so q/k/v and gate/up keep the gathered "
                   "float8 tensor (b*s*h bytes) for backward instead of the bf16 one, and o and down keep float8 "
                   "copies of their inputs; each incoming gradient cast once")
    if is_mx(w) and compute_capability is not None and tuple(compute_capability) < MX_MIN_COMPUTE_CAPABILITY:
        out.append(f"fp8: {gpu_name or 'this GPU'} (compute capability {compute_capability[0]}."
                   f"{compute_capability[1]}) has no MX (block-scaled) float8 tensor cores: {w.fp8_recipe} needs "
                   "10.0 or later (Blackwell); use --fp8-recipe tensorwise or rowwise")
    elif compute_capability is not None and tuple(compute_capability) < MIN_COMPUTE_CAPABILITY:
        out.append(f"fp8: {gpu_name or 'this GPU'} (compute capability {compute_capability[0]}."
                   f"{compute_capability[1]}) has no float8 tensor cores: torch._scaled_mm needs 8.9 or later "
                   "(Ada, Hopper, Blackwell); drop --fp8 or use torchao's emulate=True (slow)")
    return out
