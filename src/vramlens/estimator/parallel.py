"""Spreading a workload over GPUs: ZeRO/FSDP sharding, tensor and pipeline parallelism, offload.

* ZeRO (Rajbhandari et al. 2020, Table 1): stage 1 shards optimizer states (master weights
  included) over the N data-parallel ranks, stage 2 also gradients, stage 3 also parameters.
  FSDP full sharding is stage 3 (Zhao et al. 2023), shard-grad-op stage 2, and hybrid sharding
  stage 3 within one node (GPUS_PER_NODE ranks) with replicas across nodes.
* Tensor parallelism (Shoeybi et al. 2019): attention heads and the MLP's inner dimension are
  split over t ranks; embeddings and the output layer are vocabulary-parallel; norms replicate.
* Pipeline parallelism (Narayanan et al. 2021, 1F1B): the first stage holds min(p, m)
  micro-batches' activations in flight; the embedding sits on the first stage and the output
  layer on the last; the most-loaded stage decides.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from vramlens.estimator.memo import identity_cache
from vramlens.models.spec import ModelSpec
from vramlens.units import DTYPE_BYTES
from vramlens.workload import Workload


@dataclass(frozen=True, slots=True)
class Split:
    """Fractions of each component a single GPU holds, for the most-loaded rank."""

    weights: float
    gradients: float
    optimizer: float
    layers: int                 # transformer blocks on this rank
    micro_batches_in_flight: int
    has_head: bool
    has_embedding: bool


@identity_cache
def _layer_params(spec: ModelSpec) -> tuple[int, int, int]:
    """(params inside the blocks, embedding-side params, head-side params)."""
    inside = emb = head = 0
    for t in spec.tensors:
        if t.role == "buffer":
            continue
        if t.layer is not None:
            inside += t.numel
        elif t.role in ("lm_head",) or "lm_head" in t.name or t.name.startswith(("score", "classifier")):
            head += t.numel
        else:
            emb += t.numel
    return inside, emb, head


def split(spec: ModelSpec, w: Workload) -> Split:
    tp, pp, dp = w.tp, w.pp, w.shard_degree
    stage = w.shard_stage if w.training else 0
    L = spec.n_layers
    layers = ceil(L / pp)
    inside, emb, head = _layer_params(spec)
    total = max(1, inside + emb + head)
    if pp > 1:
        per_layer = inside / max(1, L)
        first = layers * per_layer + emb + (head if spec.tied_embeddings else 0)
        last = (L - (pp - 1) * layers if L > (pp - 1) * layers else layers) * per_layer + head
        frac = max(first, last) / total
        has_emb, has_head = first >= last, last > first
    else:
        frac, has_emb, has_head = 1.0, True, True
    frac /= tp
    wf = frac / dp if stage >= 3 else frac
    gf = frac / dp if stage >= 2 else frac
    of = frac / dp if stage >= 1 else frac
    return Split(
        weights=wf, gradients=gf, optimizer=of, layers=layers,
        micro_batches_in_flight=min(pp, w.grad_accum) if pp > 1 else 1,
        has_head=has_head or pp == 1, has_embedding=has_emb or pp == 1,
    )


def comm_buffer_bytes(spec: ModelSpec, w: Workload, grad_bytes_full: int, param_elem_bytes: int, trainable: int,
                      weight_elem_bytes: int) -> tuple[int, str]:
    """Communication buffers on each GPU.

    * DDP (torch/nn/parallel/distributed.py, ``gradient_as_bucket_view=False`` default): the
      reducer's flat buckets hold a second copy of every gradient.
    * ZeRO-1/2 (DeepSpeed defaults ``reduce_bucket_size=5e8`` elements): one reduce bucket.
    * ZeRO-3 / FSDP: the unsharded parameters of the current and the prefetched block
      (all-gather), plus one block's unsharded gradients (reduce-scatter).
    """
    if not w.training:
        return 0, ""
    if w.offload != "none" and w.shard_stage >= 2 and (w.dp <= 1 or w.shard_degree <= 1):
        # ZeRO-Offload on one rank: gradients still leave the GPU through the reduce bucket
        elems = min(500_000_000, trainable)
        return min(elems * param_elem_bytes, grad_bytes_full), (
            "ZeRO-Offload: gradients pass through the GPU reduce bucket (reduce_bucket_size=5e8 elements)")
    if w.dp <= 1 or (w.shard_degree <= 1 and w.shard_stage):
        return 0, ""
    stage = w.shard_stage
    if stage == 0:
        return grad_bytes_full, "DDP gradient buckets: a second copy of the gradients"
    if stage in (1, 2):
        elems = min(500_000_000, trainable)
        return min(elems * param_elem_bytes, grad_bytes_full), "ZeRO reduce bucket (reduce_bucket_size=5e8 elements)"
    block, root, reduce = fsdp_buffers(spec, w, weight_elem_bytes)
    if reduce != block:
        cast_in = cast_all_gather_input(w, block)
        return max(2 * (block + root), 2 * block + reduce + root + cast_in), (
            f"FSDP2 MixedPrecisionPolicy(param_dtype={w.run_dtype}, reduce_dtype=fp32): the root's unsharded "
            f"{w.run_dtype} parameters (embedding, head, final norm) plus the current and prefetched block's "
            f"{w.run_dtype} all-gather and one block's fp32 reduce-scatter input, and the all-gather's "
            f"{w.run_dtype} copy of the prefetched shard: max(2(B+R), 2B+B_fp32+R+B/N)")
    return max(2 * (block + root), 3 * block + root), (
        "FSDP2/ZeRO-3: the root's unsharded parameters (embedding, head, final norm) plus the current and "
        "prefetched block's all-gather and one block's reduce-scatter: max(2(B+R), 3B+R)")


def cast_all_gather_input(w: Workload, block: int) -> int:
    """Under FSDP2's mixed-precision policy each all-gather first copies the fp32 shards into a
    ``param_dtype`` input (_fsdp_collectives.py ``_get_param_all_gather_inputs``, a flat tensor of
    the shard's size); without a policy the shard itself is the input."""
    return block // max(1, w.shard_degree) if w.fsdp_mixed_precision else 0


def fsdp_buffers(spec: ModelSpec, w: Workload, weight_elem_bytes: int) -> tuple[int, int, int]:
    """(B, R, B_reduce): one block's and the root's all-gathered parameter bytes, and one block's
    reduce-scatter input.

    Under FSDP2's ``MixedPrecisionPolicy(param_dtype, reduce_dtype=fp32)``
    (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py): ``foreach_all_gather`` copies the
    fp32 shards into a ``param_dtype`` all-gather input and gathers in ``param_dtype``, so the
    unsharded parameters are ``param_dtype``; ``foreach_reduce`` allocates the reduce-scatter input
    in ``reduce_dtype`` (the unsharded ``param_dtype`` gradients are copied in) and its output is
    the fp32 sharded gradient. Without a policy both are in the parameters' dtype.
    """
    if w.fsdp_mixed_precision:
        block, root = gathered_sizes(spec, w, DTYPE_BYTES[w.run_dtype])
        return block, root, gathered_sizes(spec, w, 4)[0]
    block, root = gathered_sizes(spec, w, weight_elem_bytes)
    return block, root, block


def gathered_sizes(spec: ModelSpec, w: Workload, weight_elem_bytes: int) -> tuple[int, int]:
    """(B, R): one block's and the root's (embedding, head, final norm) unsharded parameter bytes.

    FSDP2 (torch/distributed/fsdp/_fully_shard) all-gathers a block before its forward and
    backward and reshards it after; the root module is not resharded after forward, so its
    parameters stay unsharded until the end of backward. Under shard-grad-op
    (``reshard_after_forward=False``) every block stays gathered until its backward, which the
    root term then carries.
    """
    inside, emb, head = _layer_params(spec)
    block = inside // max(1, spec.n_layers) // w.tp * weight_elem_bytes
    root = (emb + head) // w.tp * weight_elem_bytes
    if w.fsdp and w.fsdp_strategy == "shard-grad-op":
        # reshard_after_forward=False: every block stays gathered from its forward to its backward
        root += inside // w.tp * weight_elem_bytes
    return block, root
