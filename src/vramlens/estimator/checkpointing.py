"""Activation checkpointing of the transformer blocks: what each mode keeps and recomputes.

Modes (``Workload.checkpointing``):

* ``full``: each block is wrapped in ``torch.utils.checkpoint`` (non-reentrant): it keeps its
  input (saved by ``_NoopSaveInputs``) and is recomputed when its backward starts.
* ``selective``: Megatron's selective recomputation of the attention core (Korthikanti et al.
  2022, §4.2); computed in :func:`vramlens.estimator.activations.layer_activations`.
* ``selective-op``: torchtitan's per-op selective activation checkpointing
  (torchtitan/distributed/activation_checkpoint.py ``_apply_op_sac``, v0.2.2): every block is
  checkpointed with a ``create_selective_checkpoint_contexts`` policy
  (torch/utils/checkpoint.py) that marks MUST_SAVE the outputs of the ops in
  ``_op_sac_save_list`` (torchtitan/models/llama3/infra/parallelize.py: ``aten.mm``, the SDPA
  kernels ``_scaled_dot_product_{flash,efficient,cudnn}_attention``,
  ``_c10d_functional.reduce_scatter_tensor``, ``aten.max``, flex attention), except every
  second ``aten.mm`` of the block (a per-block counter: the 1st, 3rd, 5th ... mm are saved),
  and recomputes the rest. A block keeps its input and those outputs.
* ``every:N``: torchtitan's ``selective_ac_option="N"`` (``_apply_layer_sac``): a counter over
  the blocks (1-based, in model order) checkpoints block i in full when ``i % N == 0``; the
  others keep all their activations.

Which linears are ``aten.mm``: ``F.linear`` without a bias decomposes into ``matmul`` and
``mm``; with a bias it runs ``addmm`` (aten/src/ATen/native/Linear.cpp ``linear``, the fused
path for contiguous input), and GPT-2's Conv1D calls ``addmm`` itself; grouped MoE experts run
``_grouped_mm``: none of these count. peft's LoRA linear runs its base layer, then ``lora_A``
and ``lora_B`` (two more ``mm``); peft's VeRA linear its base layer, then ``F.linear`` with the sliced
vera_A and vera_B (two more). The order is the block's forward order, which is the
inventory's order of its first block.
"""

from __future__ import annotations

from dataclasses import dataclass

from vramlens.estimator.linears import linear_group
from vramlens.estimator.masks import padded_mask, repeats_kv
from vramlens.estimator.memo import identity_cache
from vramlens.models.peft_targets import VERA_TARGETS
from vramlens.models.spec import ModelSpec
from vramlens.units import DTYPE_BYTES
from vramlens.units import block_bytes as _r  # one allocation's bytes, in 512-byte blocks
from vramlens.workload import Workload

#: Leaf names of the key and value projections of a cross-attention (they read the encoder's tokens).
_KV_LEAVES = frozenset({"k", "v", "k_proj", "v_proj", "key", "value"})


def whole_blocks(w: Workload) -> bool:
    """Whether blocks are wrapped in ``torch.utils.checkpoint`` (full, selective-op, every:N).

    transformers' ``activation_checkpointing_enable`` then also makes the embeddings' output
    require a gradient (``enable_input_require_grads``), so under LoRA the first block's frozen
    part is tracked as well."""
    return w.training and (w.checkpointing in ("full", "selective-op") or w.checkpoint_every is not None)


def first_block_checkpointed(w: Workload) -> bool:
    """Whether the first block is checkpointed (full, selective-op; every:N's counter starts at
    block 1, which it checkpoints only for N = 1, that is full): it keeps its input, which is then
    the embeddings' output."""
    return w.training and w.checkpointing in ("full", "selective-op")


def last_block_checkpointed(spec: ModelSpec, w: Workload) -> bool:
    """Whether the last block is checkpointed (its backward is a recomputation's, not its own)."""
    return any(checkpointed(spec, w)) and not any(trailing_uncheckpointed(spec, w))


def stack_sizes(spec: ModelSpec) -> tuple[int, ...]:
    """Blocks per stack, in model order (encoder first)."""
    if spec.kind == "encoder-decoder":
        return (spec.n_encoder_layers, spec.n_decoder_layers)
    return (spec.n_layers,)


def checkpointed(spec: ModelSpec, w: Workload) -> tuple[int, ...]:
    """Checkpointed blocks per stack (stack_sizes' order)."""
    sizes = stack_sizes(spec)
    if not w.training or w.checkpointing in ("none", "selective"):
        return tuple(0 for _ in sizes)
    n = w.checkpoint_every
    if n is None:  # full, selective-op: every block
        return sizes
    out, before = [], 0
    for size in sizes:
        # torchtitan's counter runs over all blocks: block i (1-based) is checkpointed when i % N == 0
        out.append((before + size) // n - before // n)
        before += size
    return tuple(out)


def trailing_uncheckpointed(spec: ModelSpec, w: Workload) -> tuple[int, ...]:
    """Per stack, the blocks after the last checkpointed one (backward frees them before the
    first recomputation); 0 per stack when nothing or everything is checkpointed."""
    sizes = stack_sizes(spec)
    n = w.checkpoint_every
    total = sum(sizes)
    if n is None or not w.training or total // n == 0:
        return tuple(0 for _ in sizes)
    left = total % n  # the last blocks, from the end of the last stack backwards
    out = []
    for size in reversed(sizes):
        take = min(size, left)
        out.append(take)
        left -= take
    return tuple(reversed(out))


@dataclass(frozen=True, slots=True)
class MmCall:
    """One ``aten.mm`` of a block: its output's features and whether it reads the encoder's tokens."""

    out_features: int
    in_features: int
    cross: bool
    adapter: bool  # a LoRA matrix (fp32 output without autocast)
    row_parallel: bool
    kept: bool  # a later op saves this output for backward anyway (it is one of the block's saved tensors)


@identity_cache
def _block_linears(spec: ModelSpec, stack: str | None) -> tuple[tuple[str, str, int, int, bool, str], ...]:
    """The first block's linear-like weights of ``stack`` in inventory (forward) order:
    (path, leaf name, out_features, in_features, has a bias, role)."""
    layers = [t.layer for t in spec.tensors if t.layer is not None and (stack is None or t.stack == stack)]
    if not layers:
        return ()
    first = min(layers)
    mine = [t for t in spec.tensors if t.layer == first and (stack is None or t.stack == stack)]
    biased = {t.name.removesuffix(".bias") for t in mine if t.role == "bias"}
    out = []
    for t in mine:
        if t.role in ("linear", "conv1d", "router", "expert") and t.name.endswith("weight"):
            path = t.name.removesuffix(".weight")
            out.append((path, t.module, t.out_features, t.in_features, path in biased, t.role))
    return tuple(out)


def _adapted(path: str, leaf: str, w: Workload) -> bool:
    if w.method == "full":
        return False
    targets = tuple(w.lora_adapted)
    return "all-linear" in targets or leaf in targets or any(path.endswith("." + x) for x in targets)


def block_mms(spec: ModelSpec, w: Workload, stack: str | None) -> tuple[MmCall, ...]:
    """The ``aten.mm`` calls of one block, in order (see the module docstring)."""
    out: list[MmCall] = []
    for path, leaf, out_f, in_f, bias, role in _block_linears(spec, stack):
        if role in ("conv1d", "expert"):
            continue  # Conv1D: addmm; grouped experts: _grouped_mm
        low = path.lower()
        cross = leaf in _KV_LEAVES and ("encdec" in low or "cross" in low or "encoder_attn" in low)
        group = "router" if role == "router" else linear_group(path, leaf)
        row = group in ("attn_out", "mlp_out")  # tensor parallelism: row-parallel (the others column-parallel)
        if not bias:
            out.append(MmCall(out_f, in_f, cross, False, row, _kept(spec, w, leaf, group)))
        if role == "linear" and _adapted(path, leaf, w):
            out.append(MmCall(w.lora_rank, in_f, cross, True, False, True))   # lora_A (lora_B keeps it)
            out.append(MmCall(out_f, w.lora_rank, cross, True, row, False))   # lora_B (added to the base)
        if role == "linear" and w.method == "vera" and leaf in VERA_TARGETS.get(spec.model_type, ()):
            # peft's VeRA: F.linear(x, sliced_A) and F.linear(lambda_d * ., sliced_B), both outputs kept by the
            # vectors' multiplications (activations.vera_saved)
            out.append(MmCall(w.vera_rank, in_f, cross, True, False, True))
            out.append(MmCall(out_f, w.vera_rank, cross, True, row, True))
    return tuple(out)


#: Leaf names of query and key projections (rotary embeddings replace their outputs by new tensors).
_QK_LEAVES = frozenset({"q_proj", "k_proj", "q", "k", "query", "key"})


def _kept(spec: ModelSpec, w: Workload, leaf: str, group: str) -> bool:
    """Whether autograd keeps this linear's output anyway: what reads it saves it (attention its
    q, k, v; the MLP's activation and product their inputs); not an output that is added to the
    residual (o, down), the router's logits, rotated queries and keys, or keys and values that eager
    or fp32 SDPA attention expands for grouped-query attention (the copy is kept, not this)."""
    if group in ("attn_out", "mlp_out", "router"):
        return False
    if group == "qkv":
        if leaf in _QK_LEAVES and spec.position == "rotary":
            return False
        # the same rule as layer_activations: eager, and SDPA with a mask (a padded batch's) or in fp32, expand
        # GQA keys/values
        expands = repeats_kv(spec, w.attention, padded_mask(spec, w), DTYPE_BYTES[w.compute_dtype])
        if leaf in _KV_LEAVES and spec.n_kv_heads != spec.n_heads and expands:
            return False
    return True


def saved_matmul_share(spec: ModelSpec, w: Workload) -> float:
    """Of a block's matmul FLOPs (its linear weights, the experts at top-k of n), the share whose
    output the per-op policy saves (not recomputed in backward); stacks weighted by their blocks."""
    num = den = 0.0
    stacks = ("encoder", "decoder") if spec.kind == "encoder-decoder" else (None,)
    for stack, n in zip(stacks, stack_sizes(spec)):
        den += n * _block_matmul_params(spec, stack)
        num += n * sum(mm.out_features * mm.in_features for i, mm in enumerate(block_mms(spec, w, stack), 1)
                       if i % 2 and not mm.adapter)
    return min(1.0, num / den) if den else 0.0


@identity_cache
def _block_matmul_params(spec: ModelSpec, stack: str | None) -> float:
    """Weights a token multiplies by in the first block of ``stack`` (experts: top-k of n, or all of them)."""
    layers = [t.layer for t in spec.tensors if t.layer is not None and (stack is None or t.stack == stack)]
    if not layers:
        return 0.0
    first = min(layers)
    total = 0.0
    for t in spec.tensors:
        if t.layer != first or (stack is not None and t.stack != stack):
            continue
        if t.role in ("linear", "conv1d", "router") and t.name.endswith("weight"):
            total += t.numel
        elif t.role == "expert":
            # Llama 4 runs every expert on every token (ModelSpec.experts_see_all_tokens)
            share = 1 if spec.experts_see_all_tokens else max(1, spec.experts_per_token) / max(1, spec.n_experts)
            total += t.numel * share
    return total


def sac_saved(spec: ModelSpec, w: Workload, b: int, s: int, *, cross_s: int = 0, tp: int = 1,
              stack: str | None = None) -> tuple[int, int]:
    """What torchtitan's per-op policy saves in one block: the 1st, 3rd, ... mm outputs, the SDPA
    kernel's output and fp32 log-sum-exp per attention, and under tensor parallelism the
    reduce-scatter outputs (sequence parallel) after the row-parallel linears.

    Returns:
        (bytes saved, of which the bytes that are also among the block's saved tensors without
        checkpointing: the recomputation reuses them instead of making them again).
    """
    c = DTYPE_BYTES[w.compute_dtype]
    t = b * s
    total = shared = 0
    mms = block_mms(spec, w, stack)
    for i, mm in enumerate(mms, 1):
        if i % 2 == 0:
            continue  # torchtitan: "Saves output of all compute ops, except every second mm"
        tokens = b * cross_s if mm.cross else t
        out_b = c if (w.autocast or not mm.adapter) else 4  # peft keeps adapters in fp32
        features = mm.out_features if (mm.row_parallel or mm.adapter) else max(1, mm.out_features // tp)
        n = _r(out_b * features * tokens)
        total += n
        shared += n if mm.kept else 0
    if tp > 1:
        rows = sum(1 for mm in mms if mm.row_parallel and not mm.adapter)
        total += rows * _r(c * spec.hidden_size * t // tp)
    if w.attention != "eager":
        a = max(1, spec.n_heads // tp)
        attentions = 2 if cross_s else 1
        # flash / memory-efficient attention: out (b, a, s, d) and logsumexp (b, a, s) fp32
        kernel = attentions * (_r(c * a * spec.head_dim * t) + _r(4 * b * a * s))
        total += kernel
        shared += kernel
    return total, shared
