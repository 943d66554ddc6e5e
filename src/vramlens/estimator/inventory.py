"""Aggregates of a ModelSpec's tensor inventory that the formulas need, computed once per spec.

The estimator must answer in well under a millisecond, and the advisor evaluates tens of
thousands of plans per second, so per-tensor sums (bytes rounded to the allocator's 512-byte
blocks, LoRA shapes, quantization group counts) are computed once per (spec, question) here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from vramlens.estimator.linears import linear_group
from vramlens.estimator.memo import identity_cache
from vramlens.models.peft_targets import peft_delta_numels, peft_vector_numels
from vramlens.models.spec import ModelSpec, TensorInfo
from vramlens.units import BLOCK, DTYPE_BYTES, round_up

if TYPE_CHECKING:
    from vramlens.workload import Workload

#: bitsandbytes Optimizer8bit(min_8bit_size=4096): smaller parameters keep 32-bit optimizer states.
BNB_MIN_8BIT_SIZE = 4096

LINEAR_ROLES = ("linear", "conv1d", "expert")  # routers are plain parameters (transformers 5), not nn.Linear


@dataclass(frozen=True, slots=True)
class Linear:
    name: str
    module: str
    in_features: int   # k
    out_features: int  # n
    layer: int | None
    count: int = 1     # fused MoE experts store E linears in one (E, n, k) tensor


@dataclass(frozen=True, slots=True)
class Summary:
    """Per-spec sums. ``*_bytes_at[b]`` is the size with every tensor rounded to 512 B at b bytes/element."""

    params: int
    linears: tuple[Linear, ...]          # quantizable, LoRA-targetable weights (lm_head excluded)
    fixed_bytes: int                     # tensors with a fixed dtype (int buffers, quantized checkpoints)
    float_numel: int                     # elements that take the run's dtype
    float_bytes_at: dict[int, int]       # bytes per element -> rounded bytes of the float tensors
    param_bytes_at: dict[int, int]       # bytes per element -> rounded bytes of the float parameters the loss reaches
    grad_params: int                     # parameters the loss reaches (all but ModelSpec.outside_loss)
    largest_param_numel: int


def _fixed_dtype(t: TensorInfo) -> str | None:
    """The dtype of a tensor that keeps its own (an int buffer, a quantized checkpoint); None for one in the run's dtype."""
    if t.dtype is not None and (t.dtype not in ("fp32", "fp16", "bf16") or t.role == "buffer"):
        return t.dtype
    return None


@identity_cache
def summarize(spec: ModelSpec) -> Summary:
    linears: list[Linear] = []
    fixed = 0
    fl_numel = 0
    fl_bytes = {1: 0, 2: 0, 4: 0}
    p_bytes = {1: 0, 2: 0, 4: 0}
    largest = 0
    outside = set(spec.outside_loss)
    grad_params = 0
    for t in spec.tensors:
        n = t.numel
        if t.role in LINEAR_ROLES and len(t.shape) == 2:
            linears.append(Linear(t.name, t.module, t.in_features, t.out_features, t.layer))
        elif t.role == "expert" and len(t.shape) == 3:
            # (E, out, in), or with logical_shape the (E, out, in) a transposed layout stands for (gpt-oss)
            linears.append(Linear(t.name, t.module, t.in_features, t.out_features, t.layer, t.shape[0]))
        if t.is_parameter:
            largest = max(largest, n)
        fixed_dtype = _fixed_dtype(t)
        if fixed_dtype is not None:
            fixed += round_up(n * DTYPE_BYTES.get(fixed_dtype, 1), BLOCK)
            continue
        fl_numel += n
        for b in fl_bytes:
            fl_bytes[b] += round_up(n * b, BLOCK)
        if t.is_parameter and t.name not in outside:  # no gradient, so no optimizer state either
            grad_params += n
            for b in p_bytes:
                p_bytes[b] += round_up(n * b, BLOCK)
    return Summary(
        params=spec.params,
        linears=tuple(linears),
        fixed_bytes=fixed,
        float_numel=fl_numel,
        float_bytes_at=fl_bytes,
        param_bytes_at=p_bytes,
        grad_params=grad_params,
        largest_param_numel=largest,
    )


@identity_cache
def trained_param_numels(spec: ModelSpec) -> tuple[int, ...]:
    """Elements of each parameter a full fine-tune trains (float, reached by the loss): one entry per
    tensor, the unit torch.optim's state, bitsandbytes' and torchao's per-tensor layouts work in."""
    outside = set(spec.outside_loss)
    return tuple(t.numel for t in spec.tensors
                 if t.is_parameter and _fixed_dtype(t) is None and t.name not in outside)


def lora_matrix_numels(shape: LoraShape, r: int) -> tuple[int, ...]:
    """Elements of each LoRA matrix: A (r, k) and B (n, r) per targeted linear."""
    out: list[int] = []
    for lin in shape.targets:
        out.extend([r * lin.in_features, lin.out_features * r] * lin.count)
    return tuple(out)


def float_bytes(spec: ModelSpec, bytes_per_elem: int) -> int:
    s = summarize(spec)
    if bytes_per_elem in s.float_bytes_at:
        return s.float_bytes_at[bytes_per_elem]
    return round_up(s.float_numel * bytes_per_elem, BLOCK)


@dataclass(frozen=True, slots=True)
class LoraShape:
    """LoRA adapters on the targeted linears: A is (r, k), B is (n, r)."""

    targets: tuple[Linear, ...]
    sum_k: int        # sum of in_features: A's columns
    sum_n: int        # sum of out_features: B's rows
    count: int

    def params(self, r: int, dora: bool = False) -> int:
        """A and B of every adapted linear, plus DoRA's magnitude vector (one per output row) with ``dora``."""
        return r * (self.sum_k + self.sum_n) + (self.sum_n if dora else 0)


def _matches(lin: Linear, targets: tuple[str, ...]) -> bool:
    # peft matches target_modules by the suffix of the module's qualified name
    return lin.module in targets or any(lin.name.removesuffix(".weight").endswith("." + t) for t in targets)


#: LitGPT's names for the q, k and v parts of its fused attention linear (``lora_query``, ``lora_key``,
#: ``lora_value``), spelled as the separate projections of a transformers model
QKV_SLICES = ("q_proj", "k_proj", "v_proj")


def qkv_slice_widths(spec: ModelSpec) -> tuple[int, int, int]:
    """The output widths of q, k and v in a fused attention linear: heads x head_dim, kv heads x head_dim twice."""
    kv = spec.n_kv_heads * spec.head_dim
    return spec.n_heads * spec.head_dim, kv, kv


def is_fused_qkv(spec: ModelSpec, lin: Linear) -> bool:
    """Whether ``lin`` is a block's fused q/k/v linear (GPT-NeoX's and Falcon's ``query_key_value``): an
    attention input linear as wide as q, k and v together."""
    return (lin.layer is not None and linear_group(lin.name.removesuffix(".weight"), lin.module) == "qkv"
            and lin.out_features == sum(qkv_slice_widths(spec)))


def qkv_slices(spec: ModelSpec, lin: Linear, targets: tuple[str, ...]) -> tuple[bool, bool, bool]:
    """Which of q, k and v LitGPT's LoRAQKVLinear adapts in the fused linear ``lin`` (``Workload.fused_qkv``):
    ``enable_lora`` from q_proj, k_proj and v_proj (LitGPT's lora_query, lora_key, lora_value); the fused linear's
    own name or all-linear enables all three. (False, False, False) when ``lin`` is no fused q/k/v linear."""
    if not is_fused_qkv(spec, lin):
        return False, False, False
    if "all-linear" in targets or _matches(lin, targets):
        return True, True, True
    q, k, v = (t in targets for t in QKV_SLICES)
    return q, k, v


def _litgpt_qkv(spec: ModelSpec, lin: Linear, enabled: tuple[bool, bool, bool]) -> Linear:
    """LitGPT's LoRAQKVLinear as one adapter (lit_gpt/lora.py at 8641822, lines 207-218; litgpt/lora.py at 5895df10):
    ``lora_A`` is (r x enabled parts, in_features) and ``lora_B`` (sum of the enabled parts' widths, r), so the
    adapter is a linear of in_features x the enabled parts in and the enabled widths out."""
    widths = qkv_slice_widths(spec)
    return Linear(name=lin.name, module=lin.module, in_features=lin.in_features * sum(enabled),
                  out_features=sum(n for n, on in zip(widths, enabled) if on), layer=lin.layer, count=lin.count)


@identity_cache
def lora_shape(spec: ModelSpec, targets: tuple[str, ...], fused_qkv: bool = False) -> LoraShape:
    """Which linears peft's LoraConfig(target_modules=targets) adapts.

    "all-linear" follows peft: every linear layer except the output layer (lm_head). With ``fused_qkv``
    (LitGPT) a fused q/k/v linear carries one LoRAQKVLinear over the parts that ``targets`` name (qkv_slices).
    """
    lins = tuple(lin for lin in summarize(spec).linears if lin.count == 1)  # peft adapts nn.Linear modules, not fused 3-D expert tensors
    if targets == ("all-linear",) or "all-linear" in targets:
        chosen = tuple(lin for lin in lins if lin.layer is not None or lin.module not in ("lm_head", "classifier", "score"))
    else:
        chosen = tuple(lin for lin in lins if _matches(lin, targets))
    if fused_qkv:
        fused = {lin.name: qkv_slices(spec, lin, targets) for lin in lins if is_fused_qkv(spec, lin)}
        named = {lin.name for lin in chosen}
        chosen = tuple(_litgpt_qkv(spec, lin, fused[lin.name]) if lin.name in fused else lin
                       for lin in lins if lin.name in named or any(fused.get(lin.name, ())))
    return LoraShape(
        targets=chosen,
        sum_k=sum(lin.in_features * lin.count for lin in chosen),
        sum_n=sum(lin.out_features * lin.count for lin in chosen),
        count=sum(lin.count for lin in chosen),
    )


@identity_cache
def _trained_lora_shape(spec: ModelSpec, targets: tuple[str, ...], fused_qkv: bool = False) -> LoraShape:
    outside = set(spec.outside_loss)
    chosen = tuple(lin for lin in lora_shape(spec, targets, fused_qkv).targets if lin.name not in outside)
    return LoraShape(targets=chosen, sum_k=sum(lin.in_features * lin.count for lin in chosen),
                     sum_n=sum(lin.out_features * lin.count for lin in chosen),
                     count=sum(lin.count for lin in chosen))


def trained_lora_shape(spec: ModelSpec, targets: tuple[str, ...], fused_qkv: bool = False) -> LoraShape:
    """The adapters that get a gradient (and optimizer states): those on linears the loss reaches (LLaVA's
    last vision block, past ``vision_feature_layer``, holds adapters that never get one); ``lora_shape``
    when every linear is reached."""
    if not spec.outside_loss:
        return lora_shape(spec, targets, fused_qkv)
    return _trained_lora_shape(spec, targets, fused_qkv)


_LORA_BYTES: dict[tuple[int, int, int], tuple[LoraShape, int]] = {}


def dora_bytes(shape: LoraShape, bytes_per_elem: int) -> int:
    """DoRA's magnitude vectors (peft DoraLinearLayer.weight, one (n,) parameter per adapted linear), rounded."""
    return sum(lin.count * round_up(lin.out_features * bytes_per_elem, BLOCK) for lin in shape.targets)


def lora_rounded_bytes(shape: LoraShape, r: int, bytes_per_elem: int, dora: bool = False) -> int:
    """Adapter bytes with each A and B (and DoRA magnitude) rounded to the allocator's 512-byte blocks (memoized)."""
    if dora:
        return lora_rounded_bytes(shape, r, bytes_per_elem) + dora_bytes(shape, bytes_per_elem)
    key = (id(shape), r, bytes_per_elem)
    hit = _LORA_BYTES.get(key)
    if hit is not None and hit[0] is shape:
        return hit[1]
    total = 0
    for lin in shape.targets:
        total += lin.count * round_up(r * lin.in_features * bytes_per_elem, BLOCK)
        total += lin.count * round_up(r * lin.out_features * bytes_per_elem, BLOCK)
    if len(_LORA_BYTES) > 4096:
        _LORA_BYTES.clear()
    _LORA_BYTES[key] = (shape, total)
    return total


def lora_b_rounded_bytes(shape: LoraShape, r: int, bytes_per_elem: int) -> int:
    """The B matrices alone (n, r) per adapted linear, each rounded to the allocator's 512-byte blocks: what LoRA-FA
    trains (peft's create_lorafa_optimizer freezes every lora_A: src/peft/optimizers/lorafa.py, peft 0.21.2)."""
    return sum(lin.count * round_up(r * lin.out_features * bytes_per_elem, BLOCK) for lin in shape.targets)


def adalora_e_bytes(shape: LoraShape, r: int, bytes_per_elem: int) -> int:
    """AdaLoRA's singular values: one ``lora_E`` (r, 1) parameter per adapted linear, rounded
    (src/peft/tuners/adalora/layer.py ``AdaLoraLayer.update_layer``, peft 0.21.2 and d787f51b)."""
    return sum(lin.count * round_up(r * bytes_per_elem, BLOCK) for lin in shape.targets)


def vector_dtype(w: Workload) -> str:
    """dtype of what IA3 or LN tuning trains (and of its gradients and Adam states): IA3's vectors in
    ``lora_dtype`` (peft's ``cast_adapter_dtype`` upcasts a half ``ia3_l`` ParameterDict entry to fp32 under
    ``autocast_adapter_dtype=True``); LN tuning's norm copies in the model's dtype (a ModuleDict of deep-copied
    norms, which ``cast_adapter_dtype`` does not touch: src/peft/tuners/tuners_utils.py, peft 0.21.2)."""
    if w.method in ("prompt-tuning", "prefix-tuning"):
        return "fp32"  # nn.Embedding made in torch's default dtype; PeftModel moves it to the device only
    return w.dtype if w.method == "ln-tuning" else w.lora_dtype


def own_tensor_numels(spec: ModelSpec, w: Workload) -> tuple[int, ...]:
    """Elements of each tensor a method of OWN_TENSOR_METHODS trains: IA3's, LN tuning's or prompt tuning's
    (models.peft_vector_numels), LoHa's, LoKr's or OFT's factors (models.peft_delta_numels)."""
    return (peft_vector_numels(spec, w.method, w.vector_size)
            + peft_delta_numels(spec, w.method, tuple(w.lora_targets), w.lora_rank, w.decompose_factor,
                                w.oft_block_size, w.boft_block_size))


def vector_bytes(spec: ModelSpec, w: Workload, bytes_per_elem: int) -> int:
    """IA3's, LN tuning's, prompt tuning's or LoHa's trainable tensors (own_tensor_numels), each rounded to the
    allocator's 512-byte blocks; 0 for the other methods."""
    return sum(round_up(n * bytes_per_elem, BLOCK) for n in own_tensor_numels(spec, w))


def largest_vector(spec: ModelSpec, w: Workload, bytes_per_elem: int) -> int:
    """The largest of those tensors, rounded."""
    return round_up(max(own_tensor_numels(spec, w), default=0) * bytes_per_elem, BLOCK)
