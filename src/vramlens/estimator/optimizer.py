"""Gradients, master weights and optimizer states of the trainable parameters.

Per trainable parameter (P_t of them), with p the bytes of the parameter dtype:

* gradients: p bytes (``param.grad`` has the parameter's dtype). LoRA: only A and B (and DoRA's
  magnitude vectors), in the adapters' dtype (``--lora-dtype``: peft's fp32 by default).
* master weights: under ``--dtype fp16|bf16 --amp ...`` (DeepSpeed/Megatron mixed precision) an
  fp32 copy, 4 bytes (Rajbhandari et al. 2020, ZeRO §3.1: "K = 12" = 4 master + 4 + 4 Adam).
* Adam/AdamW: ``exp_avg`` and ``exp_avg_sq`` in the parameter's dtype (torch/optim/adam.py
  ``torch.zeros_like(p)``), or fp32 when an fp32 master copy is kept; ``step`` is a CPU scalar.
* SGD: none; SGD with momentum: one ``momentum_buffer``. Lion: one ``exp_avg`` (Chen et al. 2023).
* Adafactor (Shazeer & Stern 2018; torch.optim.Adafactor): a row and a column second-moment
  vector for each matrix (n + k) in the parameter's dtype, the full vector for 1-D parameters;
  no first moment.
* 8-bit Adam/AdamW (Dettmers et al. 2022, bitsandbytes ``Optimizer2State.init_state``): per
  parameter two uint8 states plus one fp32 absmax per 256-element block each (``blocksize = 256``
  since bitsandbytes 0.44, PR #1365; 2,048 before), each tensor its own allocation; tensors with
  fewer than 4,096 elements (``min_8bit_size``) keep two fp32 states (``dtype=torch.float32``,
  whatever the parameter's dtype); one signed and one unsigned 256-entry fp32 quantization map
  (``fill_qmap``) per optimizer. Paged variants allocate the same bytes in CUDA unified memory,
  which the driver may evict to the host under pressure.
* torchao's low-bit AdamW (torchao/optim/adam.py ``_AdamBase._new_buffer``, subclass_8bit.py,
  subclass_4bit.py, subclass_fp8.py): ``exp_avg`` and ``exp_avg_sq`` are tensor subclasses made of
  ``codes`` (uint8 of the parameter's shape; 4-bit: two codes packed per byte; FP8: float8_e4m3fn),
  ``scale`` (fp32, one per block: 256 elements for 8-bit and FP8, 128 for 4-bit) and, for 8-bit
  and 4-bit, a per-tensor fp32 ``qmap`` (256 and 16 entries; the 4-bit second moment uses a linear
  16-level map, with no rank-1 normalization); a tensor is quantized only when it has at least
  4,096 elements and a whole number of blocks, else ``torch.zeros_like(p)``: two states in the
  parameter's own dtype. ``step`` is a CPU scalar.
* torchao's CPUOffloadOptimizer (torchao/optim/cpu_offload.py, ``torch.optim.AdamW, fused=True``):
  each parameter of at least ``minimal_size=4096`` elements gets a pinned host copy and a pinned
  host gradient (``torch.empty_like(..., pin_memory=True)``), and its AdamW states live on the
  host; smaller parameters keep a fused AdamW on the GPU. The GPU keeps the parameters and the
  gradients (``offload_gradients=False``, the default).
"""

from __future__ import annotations

from dataclasses import dataclass

from vramlens.estimator.inventory import (
    BNB_MIN_8BIT_SIZE,
    LoraShape,
    adalora_e_bytes,
    largest_vector,
    lora_b_rounded_bytes,
    lora_matrix_numels,
    lora_rounded_bytes,
    summarize,
    trained_lora_shape,
    trained_param_numels,
    vector_bytes,
    vector_dtype,
)
from vramlens.estimator.memo import identity_cache
from vramlens.models.peft_targets import peft_vector_numels
from vramlens.models.spec import ModelSpec
from vramlens.units import BLOCK, DTYPE_BYTES, ceil_div, pow2_ceil, round_up
from vramlens.workload import OWN_TENSOR_METHODS, VECTOR_METHODS, Workload

#: bitsandbytes Optimizer2State.init_state: ``blocksize = 256`` absmax block (bitsandbytes >= 0.44)
BNB_BLOCK = 256
#: bitsandbytes Optimizer8bit.fill_qmap: create_dynamic_map(signed=True) and (signed=False), 256 fp32
#: entries each, one pair per optimizer (``name2qmap``), moved to the GPU at the first step
BNB_QMAPS_BYTES = 2 * round_up(256 * 4, BLOCK)
BNB_OPTIMIZERS = ("adamw-8bit", "paged-adamw-8bit")


@dataclass(frozen=True, slots=True)
class LowBitState:
    """The layout of one of torchao's quantized optimizer states (torchao/optim/subclass_*.py ``zeros``).

    Args:
        block: elements per fp32 scale (the optimizer's ``block_size`` default).
        code_bits: bits per element of ``codes``.
        qmap_entries: fp32 entries of the tensor's own lookup table (0: FP8 has none).
        step_bytes_per_elem: what the compiled ``single_param_adam`` allocates beyond the states,
            per element of the parameter (see TORCHAO_LOW_BIT).
    """

    block: int
    code_bits: int
    qmap_entries: int
    step_bytes_per_elem: int


#: torchao's low-bit AdamW (torchao 0.18, torchao/optim/adam.py): block sizes are the classes'
#: defaults (AdamW8bit/AdamWFp8 ``block_size=256``, AdamW4bit ``block_size=128``); 8-bit's qmap
#: is ``create_dynamic_map`` (256 entries), 4-bit's ``create_dynamic_map(True, 3, 4)`` and
#: ``linspace(0, 1, 17)[1:]`` (16 entries each).
#: The step runs ``torch.compile(single_param_adam)`` per parameter. The buffers of the full size
#: that inductor's output code allocates for it (torch 2.13, its CPU backend: the CUDA backend
#: cannot be generated here; scripts/gpu_lowbit_validate.py measures a GPU): 8-bit the two updated
#: moments in fp32 before requantization (2 x 4 B), 4-bit those plus the two unpacked int64 code
#: tensors before packing (2 x 8 B) and the two unpacked uint8 copies of the old codes (2 x 1 B),
#: FP8 none (its quantization is a division and a cast, fused with the update). Each also
#: allocates two fp32 per-block amax buffers, counted apart. Inductor's Triton scheduler, run on
#: the CPU (``torch._inductor.config.cpu_backend = "triton"``, output code read, kernels not
#: built), allocates the same for 4-bit and FP8, but for 8-bit only the two new uint8 code
#: tensors (2 x 1 B: a persistent reduction quantizes each 256-element block in registers);
#: whether CUDA's schedule is that one is not settled without a GPU, so the C++ figure stays.
TORCHAO_LOW_BIT: dict[str, LowBitState] = {
    "adamw-8bit-torchao": LowBitState(block=256, code_bits=8, qmap_entries=256, step_bytes_per_elem=2 * 4),
    "adamw-4bit-torchao": LowBitState(block=128, code_bits=4, qmap_entries=16, step_bytes_per_elem=2 * 4 + 2 * 8 + 2),
    "adamw-fp8-torchao": LowBitState(block=256, code_bits=8, qmap_entries=0, step_bytes_per_elem=0),
}
#: torchao _AdamBase._new_buffer: "follow bitsandbytes, only quantize tensors >= 4096 values"
TORCHAO_MIN_QUANT_SIZE = 4096
CPU_OFFLOAD = "adamw-cpu-offload-torchao"
#: torchao CPUOffloadOptimizer(minimal_size=4096): smaller parameters stay on the GPU's own optimizer
TORCHAO_OFFLOAD_MIN_SIZE = 4096

#: bitsandbytes' 32-bit optimizers (PagedAdamW, Lion) keep fp32 states whatever the parameter's dtype
#: (bitsandbytes/optim/optimizer.py Optimizer2State/Optimizer1State.init_state: optim_bits 32 ->
#: ``get_state_buffer(p, dtype=torch.float32)``).
BNB_32BIT = ("paged-adamw", "lion")
#: bitsandbytes' paged optimizers: Optimizer8bit.get_state_buffer allocates the states of a parameter
#: of at least 1e5 elements with ``F.get_paged`` (cudaMallocManaged: CUDA unified memory, outside
#: PyTorch's caching allocator), a smaller one's with ``torch.zeros_like``.
BNB_PAGED = ("paged-adamw", "paged-adamw-8bit")
BNB_PAGED_MIN_NUMEL = 100_000
STATES_PER_PARAM = {"adamw": 2, "adam": 2, "paged-adamw": 2, "sgd": 0, "sgd-momentum": 1, "lion": 1, "none": 0}
#: Optimizers with Adam's two moments (exp_avg, exp_avg_sq), in whatever layout.
ADAM_LIKE = ("adamw", "adam", "paged-adamw", "adamw-8bit", "paged-adamw-8bit", *TORCHAO_LOW_BIT, CPU_OFFLOAD)


def param_dtype_bytes(w: Workload) -> int:
    """Bytes of a trainable parameter (LoRA adapters: ``lora_dtype``, fp32 by default)."""
    if w.method in OWN_TENSOR_METHODS:
        return DTYPE_BYTES[vector_dtype(w)]
    if w.method != "full":
        return DTYPE_BYTES[w.lora_dtype]
    return DTYPE_BYTES[w.dtype]


def _adapters(spec: ModelSpec, w: Workload, b: int) -> int:
    """Bytes of one adapter-shaped tensor set (A, B, DoRA magnitudes; IA3's or LN tuning's tensors) at b bytes
    per element."""
    if w.method in OWN_TENSOR_METHODS:
        return vector_bytes(spec, w, b)
    if w.lora_fa:  # LoRA-FA: lora_A frozen, B alone gets a gradient and LoraFAOptimizer's exp_avg_B, exp_avg_sq_B
        return lora_b_rounded_bytes(trained_lora_shape(spec, tuple(w.lora_adapted), w.fused_qkv), w.lora_rank, b)
    if w.method == "adalora":  # lora_E (r, 1) trains beside A and B
        shape = trained_lora_shape(spec, tuple(w.lora_adapted), w.fused_qkv)
        return lora_rounded_bytes(shape, w.lora_rank, b) + adalora_e_bytes(shape, w.lora_rank, b)
    return lora_rounded_bytes(trained_lora_shape(spec, tuple(w.lora_adapted), w.fused_qkv), w.lora_rank, b, w.dora)


def _largest_adapter(shape: LoraShape, r: int, b: int, dora: bool) -> int:
    """The largest single adapter tensor: A (r, k), B (n, r), or a DoRA magnitude (n,)."""
    return max((round_up(max(r * max(t.in_features, t.out_features), t.out_features if dora else 0) * b, BLOCK)
                for t in shape.targets), default=0)


def state_dtype_bytes(w: Workload) -> int:
    """Bytes per element of a state kept in the parameter's precision: fp32 with a master copy and in
    bitsandbytes' 32-bit optimizers, else the trainable parameter's dtype."""
    if w.optimizer in BNB_32BIT or has_master_copy(w):
        return 4
    return param_dtype_bytes(w)


def paged_state_bytes(spec: ModelSpec, w: Workload) -> tuple[int, int]:
    """A paged optimizer's states in CUDA unified memory: (their bytes as the allocator would have
    rounded them, their bytes in unified memory). (0, 0) for the other optimizers.

    PagedAdamW keeps two fp32 states per element, PagedAdamW8bit two uint8 ones (its fp32 absmax
    and the quantization maps stay torch tensors), for each trained tensor of at least 1e5 elements
    (BNB_PAGED_MIN_NUMEL).
    """
    if w.mode != "train" or w.optimizer not in BNB_PAGED:
        return 0, 0
    per = 4 if w.optimizer == "paged-adamw" else 1
    big = [n for n in _tensor_numels(spec, w.method, tuple(w.lora_adapted), w.lora_rank, w.fused_qkv,
                                     w.vector_size) if n >= BNB_PAGED_MIN_NUMEL]
    return sum(2 * round_up(per * n, BLOCK) for n in big), sum(2 * per * n for n in big)


def has_master_copy(w: Workload) -> bool:
    """An fp32 master copy exists when half-precision weights are trained with --amp."""
    return w.mode == "train" and w.method == "full" and w.amp is not None and w.dtype in ("fp16", "bf16")


def gradient_bytes(spec: ModelSpec, w: Workload, trainable: int) -> int:
    if w.mode != "train" or trainable == 0:
        return 0
    if w.method == "full":
        b = param_dtype_bytes(w)
        return summarize(spec).param_bytes_at.get(b, round_up(trainable * b, BLOCK))
    return _adapters(spec, w, param_dtype_bytes(w))


@identity_cache
def _adafactor_bytes(spec: ModelSpec, b: int) -> int:
    """torch.optim.Adafactor's state (``p.new_zeros``: the parameter's dtype): for a matrix the
    row variance (all dims but the last) and the column variance (all but the second to last);
    for a vector the full variance; each tensor rounded to the allocator's block."""
    total = 0
    for t in spec.tensors:
        if t.role == "buffer":
            continue
        if len(t.shape) >= 2:
            rows = t.numel // t.shape[-1]
            cols = t.numel // t.shape[-2]
            total += round_up(rows * b, BLOCK) + round_up(cols * b, BLOCK)
        else:
            total += round_up(t.numel * b, BLOCK)
    return total


def master_bytes(spec: ModelSpec, w: Workload, trainable: int) -> int:
    if not has_master_copy(w):
        return 0
    return summarize(spec).param_bytes_at[4]


def optimizer_state_bytes(spec: ModelSpec, w: Workload, trainable: int) -> tuple[int, str]:
    """Bytes of the optimizer's state for ``trainable`` parameters, and the formula in words."""
    if w.mode != "train" or w.optimizer == "none" or trainable == 0:
        return 0, "no optimizer"
    opt = w.optimizer
    state_b = state_dtype_bytes(w)
    if opt in STATES_PER_PARAM:
        k = STATES_PER_PARAM[opt]
        if w.method == "full":
            one = summarize(spec).param_bytes_at.get(state_b, round_up(trainable * state_b, BLOCK))
        else:
            one = _adapters(spec, w, state_b)
        if w.method == "adalora":
            ipt = adalora_allocator_bytes(spec, w)
            return k * one + ipt, (f"{k} state(s) x {trainable:,} params x {state_b} B + AdaLoRA's RankAllocator "
                                   f"(ipt, exp_avg_ipt, exp_avg_unc per adapter tensor: {ipt:,} B)")
        return k * one, f"{k} state(s) x {trainable:,} params x {state_b} B"
    if opt == "adafactor":
        if w.method == "full":
            total = _adafactor_bytes(spec, state_b)
        elif w.method in OWN_TENSOR_METHODS:
            total = vector_bytes(spec, w, state_b)  # a 1-D tensor keeps the full second-moment vector
        else:
            shape = trained_lora_shape(spec, tuple(w.lora_adapted), w.fused_qkv)
            r = w.lora_rank
            # A is (r, k): rows r + columns k; B is (n, r): rows n + columns r
            total = sum(lin.count * (round_up(r * state_b, BLOCK) + round_up(lin.in_features * state_b, BLOCK)
                                     + round_up(lin.out_features * state_b, BLOCK) + round_up(r * state_b, BLOCK))
                        for lin in shape.targets)
            if w.dora:  # a 1-D magnitude keeps the full second-moment vector
                total += sum(lin.count * round_up(lin.out_features * state_b, BLOCK) for lin in shape.targets)
        return total, f"Adafactor: row + column second moments per matrix (n + k) at {state_b} B"
    if opt in BNB_OPTIMIZERS or opt in TORCHAO_LOW_BIT or opt == CPU_OFFLOAD:
        lay = per_tensor_states(spec, opt, state_b, w.method, tuple(w.lora_adapted), w.lora_rank,
                                fused_qkv=w.fused_qkv, virtual_tokens=w.vector_size)
        return lay.gpu_bytes, lay.formula
    raise ValueError(opt)


@dataclass(frozen=True, slots=True)
class TensorStates:
    """Optimizer states laid out tensor by tensor (bitsandbytes' and torchao's layouts).

    gpu_bytes: the states on the GPU, each tensor rounded to the allocator's 512-byte blocks.
    host_bytes: what lives in host RAM (CPUOffloadOptimizer: pinned parameter and gradient copies,
        each a power of two, and the AdamW states).
    step_bytes: the largest transient one parameter's step allocates on the GPU.
    formula: the layout in words.
    """

    gpu_bytes: int
    host_bytes: int
    step_bytes: int
    formula: str


def _tensor_numels(spec: ModelSpec, method: str, targets: tuple[str, ...], rank: int,
                   fused_qkv: bool = False, virtual_tokens: int = 0) -> tuple[int, ...]:
    if method == "full":
        return trained_param_numels(spec)
    if method in VECTOR_METHODS:
        return peft_vector_numels(spec, method, virtual_tokens)
    return lora_matrix_numels(trained_lora_shape(spec, targets, fused_qkv), rank)


def _bnb_8bit(n: int) -> int:
    """bitsandbytes Optimizer2State.init_state for one parameter of n elements."""
    if n < BNB_MIN_8BIT_SIZE:
        return 2 * round_up(n * 4, BLOCK)  # state1, state2 in fp32
    return 2 * (round_up(n, BLOCK) + round_up(4 * ceil_div(n, BNB_BLOCK), BLOCK))  # uint8 state + fp32 absmax


def _torchao_quantized(lay: LowBitState, n: int) -> bool:
    """torchao _AdamBase._new_buffer: ``numel() >= 4096 and numel() % block_size == 0``."""
    return n >= TORCHAO_MIN_QUANT_SIZE and n % lay.block == 0


def _torchao_state(lay: LowBitState, n: int, state_b: int) -> int:
    """exp_avg and exp_avg_sq of one parameter of n elements (OptimState*bit.zeros, or zeros_like)."""
    if not _torchao_quantized(lay, n):
        return 2 * round_up(n * state_b, BLOCK)
    one = (round_up(n * lay.code_bits // 8, BLOCK) + round_up(4 * (n // lay.block), BLOCK)
           + round_up(4 * lay.qmap_entries, BLOCK))
    return 2 * one


def _torchao_step(lay: LowBitState, n: int) -> int:
    """The compiled single_param_adam's buffers for one quantized parameter (TORCHAO_LOW_BIT): the
    full-size ones and the two per-block amax vectors; an unquantized one's step is one fused
    element-wise kernel."""
    if not _torchao_quantized(lay, n):
        return 0
    return round_up(n * lay.step_bytes_per_elem, BLOCK) + 2 * round_up(4 * (n // lay.block), BLOCK)


@identity_cache
def per_tensor_states(spec: ModelSpec, opt: str, state_b: int, method: str, targets: tuple[str, ...],
                      rank: int, fused_qkv: bool = False, virtual_tokens: int = 0) -> TensorStates:
    """The states of ``opt`` (bitsandbytes 8-bit, torchao low-bit or CPU offload), tensor by tensor.

    ``state_b``: bytes per element of a state kept in the parameter's precision (the parameter's
    dtype, fp32 with a master copy or for LoRA adapters).
    """
    numels = _tensor_numels(spec, method, targets, rank, fused_qkv, virtual_tokens)
    if opt in BNB_OPTIMIZERS:
        gpu = sum(_bnb_8bit(n) for n in numels) + (BNB_QMAPS_BYTES if max(numels, default=0) >= BNB_MIN_8BIT_SIZE else 0)
        return TensorStates(gpu, 0, 0, "2 uint8 states + fp32 absmax per 256 per tensor; tensors < 4,096 "
                                       "elements 2 fp32 states (bitsandbytes 8-bit)")
    if opt in TORCHAO_LOW_BIT:
        lay = TORCHAO_LOW_BIT[opt]
        gpu = sum(_torchao_state(lay, n, state_b) for n in numels)
        step = max((_torchao_step(lay, n) for n in numels), default=0)
        codes = {8: "uint8" if lay.qmap_entries else "float8_e4m3fn", 4: "4-bit (2 per byte)"}[lay.code_bits]
        qmap = f" + a {lay.qmap_entries}-entry fp32 qmap" if lay.qmap_entries else ""
        return TensorStates(gpu, 0, step, f"2 states of {codes} codes + fp32 scale per {lay.block}{qmap} per tensor; "
                                          f"tensors < 4,096 elements or not a multiple of {lay.block}: 2 states "
                                          f"at {state_b} B (torchao)")
    if opt == CPU_OFFLOAD:
        gpu = host = 0
        for n in numels:
            b = round_up(n * state_b, BLOCK)
            if n < TORCHAO_OFFLOAD_MIN_SIZE:
                gpu += 2 * b  # the on-device fused AdamW's exp_avg, exp_avg_sq
            else:
                host += 2 * pow2_ceil(n * state_b) + 2 * n * state_b  # pinned copy + pinned grad; AdamW states
        return TensorStates(gpu, host, 0, "AdamW states of parameters >= 4,096 elements on the host "
                                          "(torchao CPUOffloadOptimizer); smaller ones' 2 states on the GPU")
    raise ValueError(opt)


def optimizer_step_temporary(spec: ModelSpec, w: Workload, trainable: int) -> tuple[int, str]:
    """The largest transient allocation inside ``optimizer.step()``.

    CUDA's default for torch.optim is ``foreach=True`` (torch/optim/optimizer.py
    ``_default_to_fused_or_foreach``); ``_multi_tensor_adam`` computes
    ``exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs)``, a new list the size of all states
    of one dtype group: one more state-sized copy. SGD and Lion's foreach paths likewise build
    one parameter-sized temporary list (``_foreach_sign`` / the momentum update ``_foreach_add``).
    Adafactor updates per tensor; its temporaries are one tensor's worth. bitsandbytes' 8-bit
    step is one CUDA kernel per tensor that updates the codes, absmax and parameter in place
    (``optimizer_update_8bit_blockwise``; ``optimizer_update_32bit`` for the small fp32 ones):
    none. torchao's low-bit step is a compiled kernel per parameter (TORCHAO_LOW_BIT: the
    largest parameter's); its CPU offload steps on the host and copies the parameter back in place.
    """
    if w.mode != "train" or w.optimizer in ("none",) or trainable == 0:
        return 0, ""
    state_b = 4 if has_master_copy(w) else param_dtype_bytes(w)
    if w.optimizer in BNB_OPTIMIZERS:
        return 0, "bitsandbytes 8-bit updates in place (one fused kernel per tensor)"
    if w.optimizer == CPU_OFFLOAD:
        return 0, "CPU offload: the step runs on the host; the GPU's small parameters step with fused AdamW in place"
    if w.optimizer in TORCHAO_LOW_BIT:
        lay = per_tensor_states(spec, w.optimizer, state_b, w.method, tuple(w.lora_adapted), w.lora_rank,
                                fused_qkv=w.fused_qkv, virtual_tokens=w.vector_size)
        return lay.step_bytes, ("torchao's compiled step of the largest quantized parameter: "
                                "its fp32 moments before requantization and block maxima")
    if w.lora_fa:
        return lorafa_step_temporary(spec, w)
    if w.optimizer in ("adamw", "adam", "paged-adamw") and w.optimizer_impl == "foreach":
        if w.method == "full":
            one = summarize(spec).param_bytes_at.get(state_b, round_up(trainable * state_b, BLOCK))
        else:
            one = _adapters(spec, w, state_b)
        return one, "foreach Adam: sqrt(exp_avg_sq) for every parameter at once"
    if w.optimizer in ("sgd", "sgd-momentum"):
        return 0, "SGD updates in place"
    # per-tensor updates hold state-sized temporaries of a single tensor at a time: the largest one's
    if w.method == "full":
        largest = round_up(summarize(spec).largest_param_numel * state_b, BLOCK)
    elif w.method in OWN_TENSOR_METHODS:
        largest = largest_vector(spec, w, state_b)
    else:
        largest = _largest_adapter(trained_lora_shape(spec, tuple(w.lora_adapted), w.fused_qkv), w.lora_rank, state_b, w.dora)
    if w.optimizer in ("adamw", "adam", "paged-adamw"):
        if w.optimizer_impl == "fused":
            return 0, "fused Adam updates in place"
        if w.optimizer_impl == "transformers":
            # transformers' AdamW (optimization.py, removed in transformers 5): ``denom = exp_avg_sq.sqrt().add_(eps)``,
            # then ``p.addcdiv_(exp_avg, denom, ...)``: one temporary
            return largest, "transformers' AdamW: sqrt(exp_avg_sq) of the largest parameter"
        # torch.optim's per-tensor path (torch/optim/adam.py ``_single_tensor_adam``, foreach=False):
        # ``denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)`` holds the square root and its
        # quotient together (transformers' removed AdamW, ``exp_avg_sq.sqrt().add_(eps)``, held one)
        return 2 * largest, "per-tensor Adam: sqrt(exp_avg_sq) and its quotient for the largest parameter"
    return largest, "per-tensor update: one temporary the size of the largest parameter"


def adalora_allocator_bytes(spec: ModelSpec, w: Workload) -> int:
    """AdaLoRA's RankAllocator state (src/peft/tuners/adalora/layer.py ``RankAllocator.update_ipt``, peft 0.21.2 and
    d787f51b): for every trained ``lora_`` parameter (A, E, B) ``ipt``, ``exp_avg_ipt`` and ``exp_avg_unc``, each
    ``torch.zeros_like(p)`` at the first ``update_and_allocate`` and rebuilt in the parameter's dtype at every step;
    kept across steps, beside the optimizer's states."""
    if w.method != "adalora" or not w.training:
        return 0
    return 3 * _adapters(spec, w, param_dtype_bytes(w))


def lorafa_step_temporary(spec: ModelSpec, w: Workload) -> tuple[int, str]:
    """What peft's ``LoraFAOptimizer.step`` (src/peft/optimizers/lorafa.py, peft 0.21.2) holds at once for the
    adapter with the widest B (n, r), in a Python loop over the parameters, A and B paired by name.

    Per pair: ``AA_T = A @ A.T`` (r, r), ``torch.eye(r)`` moved to the device, ``delta * eye`` and their sum, and
    ``AA_T_inv = torch.linalg.pinv(...)`` (r, r each, fp32); ``grad_B = (1 / s**2) * (B.grad @ AA_T_inv)`` under
    bf16 autocast (the half casts of B.grad and AA_T_inv, the product and its scaled copy: (n, r) in bf16) and
    ``grad_B.to(B.grad.dtype)``; ``denom_B = exp_avg_sq_B.sqrt().add_(eps)``. The loop's locals keep the
    previous pair's ``grad_B`` and ``denom_B`` until they are rebound: when the widest B's ``denom_B`` is made,
    its ``grad_B`` (the adapters' dtype), its ``denom_B`` and the previous pair's ``denom_B`` (bounded by the
    widest's) are alive, with AA_T and AA_T_inv."""
    shape = trained_lora_shape(spec, tuple(w.lora_adapted), w.fused_qkv)
    r = w.lora_rank
    b = param_dtype_bytes(w)
    n = max((lin.out_features for lin in shape.targets), default=0)
    if not n:
        return 0, ""
    rr = round_up(4 * r * r, BLOCK)
    at_denom = 3 * round_up(b * n * r, BLOCK) + 2 * rr
    # at the projection: B.grad's bf16 cast and the product (or the product and its scaled copy), AA_T_inv's
    # cast, AA_T and AA_T_inv, with the previous pair's grad_B and denom_B (bounded by the widest's)
    at_matmul = 2 * round_up(2 * n * r, BLOCK) + round_up(2 * r * r, BLOCK) + 2 * round_up(b * n * r, BLOCK) + 2 * rr
    return max(at_denom, at_matmul), ("LoRA-FA's step (peft LoraFAOptimizer, one parameter at a time): B's "
                                      "projected gradient and sqrt(exp_avg_sq_B) of the widest B")


def largest_gradient_bytes(spec: ModelSpec, w: Workload) -> int:
    """The largest single gradient: what optimizer-in-backward holds at once (full: the largest
    parameter; LoRA: the largest adapter matrix, r x max(in, out), or DoRA magnitude, in the adapters' dtype)."""
    if w.method == "full":
        return round_up(summarize(spec).largest_param_numel * param_dtype_bytes(w), BLOCK)
    if w.method in OWN_TENSOR_METHODS:
        return largest_vector(spec, w, param_dtype_bytes(w))
    return _largest_adapter(trained_lora_shape(spec, tuple(w.lora_adapted), w.fused_qkv), w.lora_rank, param_dtype_bytes(w), w.dora)


def one_parameter_step_temporary(spec: ModelSpec, w: Workload) -> tuple[int, str]:
    """The step temporary when each parameter has its own optimizer (optimizer in backward):
    ``optimizer_step_temporary`` over a one-tensor list, i.e. the largest parameter's; foreach
    Adam's ``_foreach_sqrt(exp_avg_sqs)`` is then one state-sized tensor."""
    if w.optimizer in ("adamw", "adam", "paged-adamw") and w.optimizer_impl == "foreach":
        state_b = 4 if has_master_copy(w) else param_dtype_bytes(w)
        if w.method == "full":
            return (round_up(summarize(spec).largest_param_numel * state_b, BLOCK),
                    "optimizer in backward: foreach Adam's sqrt(exp_avg_sq) of one parameter, the largest")
        return largest_gradient_bytes(spec, w), "optimizer in backward: sqrt(exp_avg_sq) of the largest adapter matrix"
    tmp, formula = optimizer_step_temporary(spec, w, 1)
    return tmp, "optimizer in backward: " + formula
