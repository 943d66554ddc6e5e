"""Activation checkpointing as torchtitan applies it, on transformers' blocks.

transformers wraps each block's ``forward`` in ``torch.utils.checkpoint`` when
``activation_checkpointing_enable`` is called (modeling_layers.py ``GradientCheckpointingLayer``:
FSDP2's hooks stay outside the checkpoint, as with torchtitan's ``checkpoint_wrapper`` applied
before ``fully_shard``). The tracer uses that seam with torchtitan's settings
(torchtitan/distributed/activation_checkpoint.py, v0.2.2; its ``ActivationCheckpoint`` config:
``early_stop=False``, ``preserve_rng_state=True``):

* ``selective-op`` (``_apply_op_sac``): every block checkpointed with ``context_fn`` =
  :func:`selective_op_context`, torchtitan's policy: MUST_SAVE the outputs of the ops in its
  save list (torchtitan/models/llama3/infra/parallelize.py ``_op_sac_save_list``) except every
  second ``aten.mm`` of a block; PREFER_RECOMPUTE for everything else.
* ``every:N`` (``_apply_layer_sac``): a counter over the blocks, 1-based in model order;
  block i is checkpointed when ``i % N == 0``.

The SDPA ops the policy lists are CUDA's; the tracer's ``cuda_like_attention`` calls those same
ops on the fake CPU device, so the policy sees what it sees on a GPU.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import torch
from torch import nn

from vramlens.workload import Workload

#: torchtitan's ``per_op_sac_force_recompute_mm_shapes_by_fqns`` default: mms with the shape of
#: these linears are recomputed rather than counted (its MoE router; no transformers module matches).
FORCE_RECOMPUTE_FQNS = ("moe.router.gate",)


def _op(namespace: str, name: str, overload: str = "default") -> Any:
    """``torch.ops.<namespace>.<name>.<overload>``, or None when this build of torch lacks it."""
    try:
        return getattr(getattr(getattr(torch.ops, namespace), name), overload)
    except (AttributeError, RuntimeError):
        return None


def save_list() -> frozenset:
    """torchtitan's ``_op_sac_save_list`` (llama3/infra/parallelize.py, v0.2.2), the ops this build has."""
    ops = [
        _op("aten", "mm"),
        _op("aten", "_scaled_dot_product_efficient_attention"),
        _op("aten", "_scaled_dot_product_flash_attention"),
        _op("aten", "_scaled_dot_product_cudnn_attention"),
        _op("aten", "_scaled_dot_product_attention_math"),
        _op("aten", "_scaled_dot_product_fused_attention_overrideable"),
        _op("_c10d_functional", "reduce_scatter_tensor"),
        # "for low precision training, it's useful to always save the result of max"
        _op("aten", "max"),
        _op("torch_attn", "_varlen_attn"),
    ]
    hops = torch._higher_order_ops
    ops += [getattr(hops, "flex_attention", None), getattr(hops, "inductor_compiled_code", None)]
    return frozenset(op for op in ops if op is not None)


def _forced_shapes(model: nn.Module) -> set[tuple[int, ...]]:
    shapes: set[tuple[int, ...]] = set()
    for fqn, mod in model.named_modules():
        if isinstance(mod, nn.Linear) and any(f in fqn for f in FORCE_RECOMPUTE_FQNS):
            out_f, in_f = mod.weight.shape
            shapes.add((in_f, out_f))
    return shapes


def selective_op_context(model: nn.Module):
    """torchtitan's ``selective_checkpointing_context_fn``: a fresh per-block counter for each checkpoint."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    saved_ops = save_list()
    mm = torch.ops.aten.mm.default
    to_copy = torch.ops.aten._to_copy.default
    forced = _forced_shapes(model)

    def policy_for(meta: dict[str, int]):
        def policy(ctx, func, *args, **kwargs):
            if (func == to_copy and "cuda" in str(args[0].device) and "device" in kwargs
                    and str(kwargs["device"]) == "cpu"):
                return CheckpointPolicy.MUST_SAVE  # device-to-host copies (offloading)
            key = f"{'recompute' if ctx.is_recompute else 'forward'}_mm_count"
            if func == mm:
                if tuple(args[1].shape) in forced:
                    return CheckpointPolicy.PREFER_RECOMPUTE
                meta[key] += 1
            # "Saves output of all compute ops, except every second mm"
            save = func in saved_ops and not (func == mm and meta[key] % 2 == 0)
            return CheckpointPolicy.MUST_SAVE if save else CheckpointPolicy.PREFER_RECOMPUTE

        return policy

    def context_fn():
        return create_selective_checkpoint_contexts(policy_for(defaultdict(int)))

    return context_fn


def blocks(model: nn.Module) -> list[Any]:
    """The blocks transformers can checkpoint, in model order."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    return [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]


def apply(model: Any, wl: Workload) -> None:
    """Checkpoint ``model``'s blocks as ``wl.checkpointing`` says (full as transformers does it)."""
    enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
    if wl.checkpointing == "full":
        enable({"use_reentrant": False})
        return
    kwargs: dict[str, Any] = {"use_reentrant": False, "early_stop": False, "preserve_rng_state": True}
    if wl.checkpointing == "selective-op":
        kwargs["context_fn"] = selective_op_context(model)
    enable(kwargs)
    n = wl.checkpoint_every
    if n is not None:
        for i, block in enumerate(blocks(model), 1):
            block.gradient_checkpointing = i % n == 0
