"""The causal-LM losses of training stacks, run on the real module's hidden states.

* ``chunked_cross_entropy``: torchtune's chunked output (``TransformerDecoder`` with
  ``num_output_chunks``: the output projection runs on ``h.chunk(n, dim=1)``, a list of logits
  chunks) and ``CEWithChunkedOutputLoss`` (torchtune/modules/loss/ce_chunked_output_loss.py: per
  chunk ``F.cross_entropy(logits.float(), labels, reduction="sum")``), labels shifted as
  torchtune's recipes do (``hstack(labels[..., 1:], ignore_index)``).
* ``fused_linear_cross_entropy``: the allocations of Liger's ``fused_linear_cross_entropy_forward``
  (liger_kernel/ops/fused_linear_cross_entropy.py): ``grad_weight = zeros_like(weight)`` (when the
  weight trains), ``grad_input = zeros_like(input)``, an fp32 loss per token; per chunk of
  ``next_power_of_2(ceil(BT / ceil(V / H)))`` tokens the logits ``chunk @ weight.t()`` in the
  compute dtype, overwritten in place with their gradient by a Triton kernel (here: in-place
  torch ops, whose only other tensors are a few per-row scalars), ``grad_input[chunk] = logits @
  weight`` and ``addmm(out=grad_weight)``; both gradients are saved for backward and returned by
  it. Liger itself needs Triton (CUDA); this transcription allocates what it allocates.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100


def liger_chunk_size(tokens: int, hidden: int, vocab: int) -> int:
    """Liger's chunk: ``next_power_of_2(cdiv(BT, cdiv(V, H)))`` tokens (the logits chunk ~ the input's size)."""
    inc = -(-vocab // hidden)
    n = -(-tokens // inc)
    return 1 << max(0, (n - 1).bit_length())


def _decoder_and_head(model: torch.nn.Module) -> tuple[Any, Any]:
    m: Any = model  # a transformers or peft model: untyped
    hf = m.get_base_model() if hasattr(m, "get_base_model") else m
    return hf.base_model, hf.get_output_embeddings()


def through_root(model: torch.nn.Module, loss_fn: Callable[[], torch.Tensor]) -> torch.Tensor:
    """``loss_fn()`` run as the root module's forward, so that its hooks fire around it.

    The chunked and fused losses call the decoder and the output layer (or its weight) directly, as
    Liger's ``lce_forward`` and torchtune's chunked output do inside the model's own forward. Under
    FSDP2 the root's parameters (embedding, final norm, output layer) are unsharded by the root's
    forward pre-hook and their gradients reduce-scattered by the hooks it registers on its output
    (torch/distributed/fsdp/_fully_shard/_fsdp_state.py ``_pre_forward`` / ``_post_forward``); called
    from outside, the embedding sees its sharded DTensor (``aten.embedding got mixed torch.Tensor and
    DTensor``). Calling the module with ``forward`` swapped for ``loss_fn`` runs the same hooks.
    """
    saved = model.__dict__.get("forward")
    model.forward = lambda: loss_fn()  # type: ignore[method-assign]
    try:
        out = model()
    finally:
        if saved is None:
            del model.forward
        else:
            model.forward = saved  # type: ignore[method-assign]
    assert isinstance(out, torch.Tensor)  # loss_fn's loss, returned by the hooks unchanged
    return out


def _shifted(labels: torch.Tensor) -> torch.Tensor:
    pad = torch.full((labels.shape[0], 1), IGNORE_INDEX, dtype=labels.dtype, device=labels.device)
    return torch.hstack((labels[..., 1:], pad))


def chunked_cross_entropy(model: torch.nn.Module, input_ids: torch.Tensor, labels: torch.Tensor,
                          chunks: int, upcast: bool = True, held: list[Any] | None = None) -> torch.Tensor:
    """torchtune's chunked output and loss (each chunk upcast to fp32); ``upcast=False``: LitGPT's
    ``chunked_cross_entropy``, ``F.cross_entropy`` on each chunk in the logits' dtype.

    ``held`` (--output-upcast): Lightning Fabric's ``convert_output`` first makes every chunk's fp32 copy while
    the half chunks are still listed, and the loop holds the copies: they replace the previous step's in
    ``held`` once all exist (LitGPT's ``logits = model(...)`` rebinding), and the caller drops them."""
    decoder, head = _decoder_and_head(model)
    hidden = decoder(input_ids=input_ids).last_hidden_state
    logits = [head(h) for h in hidden.chunk(chunks, dim=1)]
    del hidden
    if held is not None:
        logits = [lg.float() for lg in logits]  # apply_to_collection: the new list, then the half one goes
        held.clear()
        held.append(logits)
    targets = [t.reshape(-1) for t in _shifted(labels).chunk(chunks, dim=1)]
    total: torch.Tensor | float = 0.0
    for lg, t in zip(logits, targets):
        flat = lg.reshape(-1, lg.size(-1))
        total = total + F.cross_entropy(flat.float() if upcast else flat, t, ignore_index=IGNORE_INDEX,
                                        reduction="sum")
    assert isinstance(total, torch.Tensor)  # chunks >= 1 (Tensor.chunk refuses 0)
    return total / labels.numel()


class _FusedLinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, target, chunk):  # x (BT, H), weight (V, H), target (BT,)
        bt = x.shape[0]
        grad_w = torch.zeros_like(weight) if weight.requires_grad else None
        grad_x = torch.zeros_like(x)
        loss = torch.zeros(bt, dtype=torch.float32, device=x.device)
        for start in range(0, bt, chunk):
            end = min(start + chunk, bt)
            xc = x[start:end]
            logits = xc @ weight.t()  # (chunk, V)
            # the kernel: log-sum-exp per row into the loss, softmax - one_hot written over the logits
            m = logits.amax(-1, keepdim=True)
            logits.sub_(m).exp_()
            z = logits.sum(-1, keepdim=True)
            loss[start:end] = z.log().squeeze(-1).float()
            logits.div_(z)
            idx = target[start:end].clamp(min=0).unsqueeze(1)
            logits.scatter_add_(1, idx, torch.full_like(idx, -1, dtype=logits.dtype))
            grad_x[start:end] = logits @ weight
            if grad_w is not None:
                torch.addmm(grad_w, logits.t(), xc, out=grad_w)
            del logits
        ctx.save_for_backward(grad_x, grad_w)
        return loss.sum() / bt

    @staticmethod
    def backward(ctx, grad_out):
        grad_x, grad_w = ctx.saved_tensors
        # Liger scales both in place (element_mul_kernel) unless grad_out is 1, as it is for loss.backward()
        return grad_x, grad_w, None, None


def fused_linear_cross_entropy(model: torch.nn.Module, input_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    decoder, head = _decoder_and_head(model)
    hidden = decoder(input_ids=input_ids).last_hidden_state
    x = hidden.reshape(-1, hidden.shape[-1])
    del hidden
    target = _shifted(labels).reshape(-1)
    chunk = liger_chunk_size(x.shape[0], x.shape[1], head.weight.shape[0])
    return _FusedLinearCrossEntropy.apply(x, head.weight, target, chunk)
