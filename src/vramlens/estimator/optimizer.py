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
* 8-bit Adam/AdamW (Dettmers et al. 2022, bitsandbytes ``Optimizer8bit``): two uint8 states plus
  one fp32 absmax per 256-element block (``blocksize=256``) each; tensors with fewer than
  4,096 elements (``min_8bit_size``) keep 32-bit states. Paged variants allocate the same bytes
  in CUDA unified memory, which the driver may evict to the host under pressure.
"""

from __future__ import annotations

from math import ceil

from vramlens.estimator.inventory import LoraShape, lora_rounded_bytes, lora_shape, summarize
from vramlens.estimator.memo import identity_cache
from vramlens.models.spec import ModelSpec
from vramlens.units import BLOCK, DTYPE_BYTES, round_up
from vramlens.workload import Workload

BNB_BLOCK = 256          # bitsandbytes Optimizer8bit blockwise quantization block

STATES_PER_PARAM = {"adamw": 2, "adam": 2, "paged-adamw": 2, "sgd": 0, "sgd-momentum": 1, "lion": 1, "none": 0}


def param_dtype_bytes(w: Workload) -> int:
    """Bytes of a trainable parameter (LoRA adapters: ``lora_dtype``, fp32 by default)."""
    if w.method != "full":
        return DTYPE_BYTES[w.lora_dtype]
    return DTYPE_BYTES[w.dtype]


def _adapters(spec: ModelSpec, w: Workload, b: int) -> int:
    """Bytes of one adapter-shaped tensor set (A, B, DoRA magnitudes) at b bytes per element."""
    return lora_rounded_bytes(lora_shape(spec, tuple(w.lora_targets)), w.lora_rank, b, w.dora)


def _largest_adapter(shape: LoraShape, r: int, b: int, dora: bool) -> int:
    """The largest single adapter tensor: A (r, k), B (n, r), or a DoRA magnitude (n,)."""
    return max((round_up(max(r * max(t.in_features, t.out_features), t.out_features if dora else 0) * b, BLOCK)
                for t in shape.targets), default=0)


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
    state_b = 4 if has_master_copy(w) else param_dtype_bytes(w)
    if opt in STATES_PER_PARAM:
        k = STATES_PER_PARAM[opt]
        if w.method == "full":
            one = summarize(spec).param_bytes_at.get(state_b, round_up(trainable * state_b, BLOCK))
        else:
            one = _adapters(spec, w, state_b)
        return k * one, f"{k} state(s) x {trainable:,} params x {state_b} B"
    if opt == "adafactor":
        if w.method == "full":
            total = _adafactor_bytes(spec, state_b)
        else:
            shape = lora_shape(spec, tuple(w.lora_targets))
            r = w.lora_rank
            # A is (r, k): rows r + columns k; B is (n, r): rows n + columns r
            total = sum(lin.count * (round_up(r * state_b, BLOCK) + round_up(lin.in_features * state_b, BLOCK)
                                     + round_up(lin.out_features * state_b, BLOCK) + round_up(r * state_b, BLOCK))
                        for lin in shape.targets)
            if w.dora:  # a 1-D magnitude keeps the full second-moment vector
                total += sum(lin.count * round_up(lin.out_features * state_b, BLOCK) for lin in shape.targets)
        return total, f"Adafactor: row + column second moments per matrix (n + k) at {state_b} B"
    if opt in ("adamw-8bit", "paged-adamw-8bit"):
        s = summarize(spec)
        if w.method == "full":
            small = s.small_param_numel
            big = trainable - small
        else:
            small, big = 0, trainable
        eight = 2 * (big + 4 * ceil(big / BNB_BLOCK))
        return eight + 2 * 4 * small, "2 uint8 states + fp32 absmax per 256 (blockwise 8-bit Adam)"
    raise ValueError(opt)


def optimizer_step_temporary(spec: ModelSpec, w: Workload, trainable: int) -> tuple[int, str]:
    """The largest transient allocation inside ``optimizer.step()``.

    CUDA's default for torch.optim is ``foreach=True`` (torch/optim/optimizer.py
    ``_default_to_fused_or_foreach``); ``_multi_tensor_adam`` computes
    ``exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs)``, a new list the size of all states
    of one dtype group: one more state-sized copy. SGD and Lion's foreach paths likewise build
    one parameter-sized temporary list (``_foreach_sign`` / the momentum update ``_foreach_add``).
    8-bit and Adafactor update in place per tensor; their temporaries are one tensor's worth.
    """
    if w.mode != "train" or w.optimizer in ("none",) or trainable == 0:
        return 0, ""
    state_b = 4 if has_master_copy(w) else param_dtype_bytes(w)
    if w.optimizer in ("adamw", "adam", "paged-adamw") and w.optimizer_impl == "foreach":
        if w.method == "full":
            one = summarize(spec).param_bytes_at.get(state_b, round_up(trainable * state_b, BLOCK))
        else:
            one = _adapters(spec, w, state_b)
        return one, "foreach Adam: sqrt(exp_avg_sq) for every parameter at once"
    if w.optimizer in ("sgd", "sgd-momentum"):
        return 0, "SGD updates in place"
    # fused kernels and per-tensor loops (``denom = exp_avg_sq.sqrt().add_(eps)``) hold one
    # state-sized temporary of a single tensor at a time: the largest one
    if w.method == "full":
        largest = round_up(summarize(spec).largest_param_numel * state_b, BLOCK)
    else:
        largest = _largest_adapter(lora_shape(spec, tuple(w.lora_targets)), w.lora_rank, state_b, w.dora)
    if w.optimizer_impl == "fused" and w.optimizer in ("adamw", "adam", "paged-adamw"):
        return 0, "fused Adam updates in place"
    return largest, "per-tensor update: one temporary the size of the largest parameter"


def largest_gradient_bytes(spec: ModelSpec, w: Workload) -> int:
    """The largest single gradient: what optimizer-in-backward holds at once (full: the largest
    parameter; LoRA: the largest adapter matrix, r x max(in, out), or DoRA magnitude, in the adapters' dtype)."""
    if w.method == "full":
        return round_up(summarize(spec).largest_param_numel * param_dtype_bytes(w), BLOCK)
    return _largest_adapter(lora_shape(spec, tuple(w.lora_targets)), w.lora_rank, param_dtype_bytes(w), w.dora)


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
