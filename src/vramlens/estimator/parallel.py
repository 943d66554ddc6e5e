"""Spreading a workload over GPUs: ZeRO/FSDP sharding, tensor and pipeline parallelism, offload.

* ZeRO (Rajbhandari et al. 2020, Table 1): stage 1 shards optimizer states (master weights
  included) over the N data-parallel ranks, stage 2 also gradients, stage 3 also parameters.
  FSDP full sharding is stage 3 (Zhao et al. 2023), shard-grad-op stage 2, and hybrid sharding
  stage 3 within one node (GPUS_PER_NODE ranks) with replicas across nodes.
* Tensor parallelism (Shoeybi et al. 2019): attention heads and the MLP's inner dimension are
  split over t ranks; embeddings and the output layer are vocabulary-parallel; norms replicate.
* Pipeline parallelism (Narayanan et al. 2021): under 1F1B the first stage holds min(p, m)
  micro-batches' activations in flight, under GPipe all m, under interleaved 1F1B (v stages per
  rank) the count :func:`stage_micro_batches_in_flight` derives from torch.distributed.pipelining's
  schedule; the embedding sits on the first stage and the output layer on the last; the
  most-loaded stage decides.
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
    #: (stage, micro-batch) pairs whose activations this rank holds at its peak; each stage holds
    #: ``layers / stages_per_rank`` of the rank's blocks
    micro_batches_in_flight: int
    has_head: bool
    has_embedding: bool
    stages_per_rank: int = 1


#: torchtitan 9dec370 torchtitan/parallelisms/pipelining_utils.py ``generate_split_points``: a
#: ``PipelineScheduleMulti`` (Interleaved1F1B) gets 2 stages per rank, a ``PipelineScheduleSingle`` one
INTERLEAVED_STAGES_PER_RANK = 2


def stage_micro_batches_in_flight(schedule: str, pp: int, m: int, v: int = INTERLEAVED_STAGES_PER_RANK) -> int:
    """(stage, micro-batch) pairs whose activations pipeline rank 0 (the most-loaded one) holds at its peak,
    with ``m`` micro-batches over ``pp`` ranks.

    From torch.distributed.pipelining/schedules.py (torch 2.13; the same warm-up formula since
    torch 2.5): ``Schedule1F1B`` runs ``min(m, num_stages - stage_index)`` forwards, then alternates
    one backward, one forward (1B1F: the backward first), so stage 0 peaks at min(m, pp);
    ``ScheduleGPipe`` runs every forward before any backward: m. ``ScheduleInterleaved1F1B`` (``v``
    stages per rank) runs ``_get_warmup_ops`` = min((v - 1) * mpr + 2 * (pp - 1 - rank), m * v)
    forwards, mpr = m // max(1, m // pp) micro-batches per round, then its 1F1B phase appends each
    step's forward before its backward (``_get_1f1b_rank_ops``): one more, unless the warm-up
    already ran all m * v.
    """
    if pp <= 1:
        return 1
    if schedule == "gpipe":
        return m
    if schedule == "interleaved-1f1b":
        per_round = m // max(1, m // pp)
        warmup = min((v - 1) * per_round + 2 * (pp - 1), m * v)
        return min(warmup + 1, m * v)
    return min(pp, m)
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


@identity_cache
def _replicated_params(spec: ModelSpec) -> int:
    """Parameters every tensor-parallel rank holds whole: the norms' weights (Megatron replicates them;
    torchtitan's ``SequenceParallel`` norms keep ``Replicate()`` weights, parallelize.py ``apply_tp``)."""
    return sum(t.numel for t in spec.tensors if t.role == "norm")


def tp_share(spec: ModelSpec, tp: int) -> float:
    """The fraction of the parameters one of ``tp`` tensor-parallel ranks holds: every matrix (and
    the embedding and output layer, over the vocabulary) split ``tp`` ways, the norms replicated."""
    if tp <= 1:
        return 1.0
    total = max(1, _param_numel(spec))
    rep = _replicated_params(spec)
    return ((total - rep) / tp + rep) / total


@identity_cache
def _param_numel(spec: ModelSpec) -> int:
    return sum(t.numel for t in spec.tensors if t.role != "buffer")


def tp_embedding_gradient_extra(spec: ModelSpec, w: Workload) -> int:
    """Elements of the input embedding's gradient a tensor-parallel rank holds beyond its V/tp rows.

    The embedding is ``RowwiseParallel`` (vocabulary-sharded weight, torchtitan's plan), but DTensor
    has no row-sharded strategy for its backward (torch/distributed/tensor/_ops/_embedding_ops.py
    ``embedding_dense_backward_strategy``: the weight gradient is ``Shard(1)`` or ``Partial()``): the
    gradient comes out ``Partial`` over the whole (V, h) and is kept ``Replicate()`` after its
    all-reduce, V x h elements on every rank (measured by vramlens.trace.tp). A tied output layer's
    ``Shard(0)`` gradient is accumulated with it into one gradient of V/tp rows (measured: no extra).

    Under FSDP2 over the TP ranks there is no extra either: before its reduce-scatter FSDP2 redistributes
    each DTensor gradient to its parameter's TP placements (torch/distributed/fsdp/_fully_shard/_fsdp_param.py
    ``FSDPParam._get_grad_inner_tensor``, torch 2.13: ``grad.redistribute(placements=...)``), so the whole
    gradient is a temporary of the root's post-backward and the kept one the usual V/(tp x dp) rows
    (measured by vramlens.trace.fsdp on a 2-D mesh).
    """
    if w.tp <= 1 or not w.training or w.method != "full" or spec.tied_embeddings or w.fsdp:
        return 0
    emb = sum(t.numel for t in spec.tensors if t.role == "embedding" and t.layer is None)
    return emb - emb // w.tp


def tp_embedding_gradient_whole(spec: ModelSpec, w: Workload) -> int:
    """Elements of the input embedding's whole gradient on a tensor-parallel rank (V x h, see
    :func:`tp_embedding_gradient_extra`); 0 where that gradient is sharded or absent."""
    if not tp_embedding_gradient_extra(spec, w):
        return 0
    return sum(t.numel for t in spec.tensors if t.role == "embedding" and t.layer is None)


def pipeline_in_flight(w: Workload, m: int) -> tuple[int, bool]:
    """(the (stage, micro-batch) pairs rank 0 holds, whether it runs a forward after its first backward) for ``w``'s
    schedule with ``m`` micro-batches: what the split and the train state read of the micro-batch count."""
    v = INTERLEAVED_STAGES_PER_RANK if w.pp > 1 and w.pp_schedule == "interleaved-1f1b" else 1
    n = stage_micro_batches_in_flight(w.pp_schedule, w.pp, m)
    return n, w.pp > 1 and n < m * v


def pipelined_fsdp(w: Workload) -> bool:
    """FSDP2 on each pipeline stage, as torchtitan runs it under torch.distributed.pipelining.

    torchtitan 9dec370 (torchtitan/parallelisms/parallelize_llama.py ``apply_fsdp``, lines 326-339) passes
    ``reshard_after_forward=False`` to every block and the root when pipeline parallelism is on, and the
    pipeline stage's backward (torch/distributed/pipelining/stage.py ``backward_maybe_with_nosync``, the same
    from torch 2.5 to 2.13) calls ``set_reshard_after_backward(False)`` and ``set_requires_gradient_sync(False)``
    before every micro-batch's backward, reduce-scattering and resharding only after the last one. So the rank's
    blocks stay unsharded from their first all-gather to the end of the step, and their gradients accumulate
    unsharded, in ``reduce_dtype`` under a mixed-precision policy (_fsdp_param_group.py ``post_backward`` with
    ``reduce_grads`` off: ``to_accumulated_grad_if_needed`` casts the gradient to fp32 and keeps it).
    """
    return w.training and w.fsdp and w.pp > 1


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
    frac *= tp_share(spec, tp)
    wf = frac / dp if stage >= 3 else frac
    gf = frac / dp if stage >= 2 else frac
    of = frac / dp if stage >= 1 else frac
    v = INTERLEAVED_STAGES_PER_RANK if pp > 1 and w.pp_schedule == "interleaved-1f1b" else 1
    return Split(
        weights=wf, gradients=gf, optimizer=of, layers=layers,
        micro_batches_in_flight=stage_micro_batches_in_flight(w.pp_schedule, pp, w.grad_accum),
        has_head=has_head or pp == 1, has_embedding=has_emb or pp == 1, stages_per_rank=v,
    )


#: DeepSpeed's ZeRO defaults (deepspeed/runtime/zero/config.py, DeepSpeedZeroConfig: reduce_bucket_size 5e8,
#: stage3_prefetch_bucket_size 5e7, stage3_max_live_parameters 1e9, stage3_max_reuse_distance 1e9,
#: stage3_param_persistence_threshold 1e5, contiguous_gradients True), checked in v0.19.8
DS_REDUCE_BUCKET_SIZE = 500_000_000
DS_PREFETCH_BUCKET_SIZE = 50_000_000
DS_MAX_LIVE_PARAMETERS = 1_000_000_000
DS_PARAM_PERSISTENCE_THRESHOLD = 100_000


def ds_reduce_bucket_size(spec: ModelSpec, w: Workload) -> int:
    """reduce_bucket_size in elements: DeepSpeed's default 5e8, or under ``zero_buckets="auto"`` what
    transformers' Trainer writes for "auto" (integrations/deepspeed.py
    ``HfTrainerDeepSpeedConfig.trainer_config_finalize``: hidden_size * hidden_size)."""
    return spec.hidden_size * spec.hidden_size if w.zero_buckets == "auto" else DS_REDUCE_BUCKET_SIZE


def deepspeed_ipg_bucket(param_elem_bytes: int, reduce_bucket_size: int = DS_REDUCE_BUCKET_SIZE) -> int:
    """DeepSpeed ZeRO-3's gradient bucket on each GPU.

    deepspeed/runtime/zero/stage3.py ``DeepSpeedZeroOptimizer_Stage3.__init__`` (checked in v0.19.8,
    the same in the v0.8-era ``__ipg_bucket_flat_buffer``): with ``contiguous_gradients`` (the
    default) it allocates ``torch.empty(self.reduce_bucket_size, dtype, device=<current GPU>)`` once,
    before the first step, whatever the model's size, with or without ``offload_optimizer``/
    ``offload_param``; the dtype is the trainable parameters' (fp32 when the model is not cast to
    fp16/bf16; v0.19 keeps one such bucket per trainable dtype, ``self.ipg_buckets``: vramlens counts one).
    Every gradient is copied into it before its reduce-scatter (``__reduce_and_partition_ipg_grads``).
    The fp32 gradient partitions (``grad_partitions_flat_buffer``) are in host RAM under
    ``offload_optimizer`` and otherwise the sharded gradients vramlens already counts.
    """
    return reduce_bucket_size * param_elem_bytes


def comm_buffer_bytes(spec: ModelSpec, w: Workload, grad_bytes_full: int, param_elem_bytes: int, trainable: int,
                      weight_elem_bytes: int) -> tuple[int, str]:
    """Communication buffers on each GPU.

    * DDP (torch/nn/parallel/distributed.py, ``gradient_as_bucket_view=False`` default): the
      reducer's flat buckets hold a second copy of every gradient.
    * ZeRO-1/2 (DeepSpeed defaults ``reduce_bucket_size=5e8`` elements): one reduce bucket.
    * ZeRO-3 (DeepSpeed): the contiguous-gradients bucket (``deepspeed_ipg_bucket``); its gathered
      parameters are counted in the phases with FSDP2's current + prefetched block model.
    * FSDP: the unsharded parameters of the current and the prefetched block
      (all-gather), plus one block's unsharded gradients (reduce-scatter).
    """
    if not w.training:
        return 0, ""
    ds_bucket, ds_text = 0, ""
    if w.zero == 3:
        bucket = ds_reduce_bucket_size(spec, w)
        ds_bucket = deepspeed_ipg_bucket(param_elem_bytes, bucket)
        ds_text = (f"DeepSpeed ZeRO-3 contiguous-gradients (IPG) bucket: torch.empty(reduce_bucket_size="
                   f"{bucket:,}) in the parameters' dtype ({param_elem_bytes} B), allocated at initialisation "
                   "whatever the trainable count (stage3.py DeepSpeedZeroOptimizer_Stage3.__init__, DeepSpeed 0.19.8)")
        if w.dp <= 1 or w.shard_degree <= 1:
            return ds_bucket, ds_text
    if w.offload != "none" and w.shard_stage >= 2 and (w.dp <= 1 or w.shard_degree <= 1):
        # ZeRO-Offload on one rank: gradients still leave the GPU through the reduce bucket
        elems = min(ds_reduce_bucket_size(spec, w), trainable)
        return min(elems * param_elem_bytes, grad_bytes_full), (
            f"ZeRO-Offload: gradients pass through the GPU reduce bucket (reduce_bucket_size="
            f"{ds_reduce_bucket_size(spec, w):,} elements)")
    if w.dp <= 1 or (w.shard_degree <= 1 and w.shard_stage):
        return 0, ""
    stage = w.shard_stage
    if stage == 0:
        return grad_bytes_full, "DDP gradient buckets: a second copy of the gradients"
    if stage in (1, 2):
        elems = min(ds_reduce_bucket_size(spec, w), trainable)
        return min(elems * param_elem_bytes, grad_bytes_full), (
            f"ZeRO reduce bucket (reduce_bucket_size={ds_reduce_bucket_size(spec, w):,} elements)")
    block, root, reduce = fsdp_buffers(spec, w, weight_elem_bytes)
    if pipelined_fsdp(w):
        # the stage's parameters, unsharded all step (R, blocks included: see pipelined_fsdp) beside one group's flat
        # all-gather output (and its param_dtype input) in the first micro-batch's forward, or one block's
        # reduce-scatter input after the last backward
        cast_in = cast_all_gather_input(w, block) if reduce != block else 0
        part = root - split(spec, w).layers * block  # the stage's root part (embedding, or norm and output layer)
        return ds_bucket + root + max(max(part, block) + cast_in, reduce), (
            f"FSDP2 on a pipeline stage (torchtitan: reshard_after_forward=False, no resharding or reduce-scatter "
            f"until the last micro-batch's backward): the stage's unsharded {w.run_dtype if reduce != block else ''} "
            "parameters, its blocks' and its root part's, all step, plus one group's all-gather or one block's "
            "reduce-scatter input: R + max(max(R_root, B) + B/N, B_reduce)")
    if w.fsdp and w.fsdp_version == 1:
        cast_in = cast_all_gather_input(w, block)
        if w.fsdp_strategy == "shard-grad-op":  # every block gathered from its forward to its post-backward
            return root + cast_in, (
                "FSDP1 (FullyShardedDataParallel) SHARD_GRAD_OP: the padded unsharded flat parameters of the root "
                "and of every block, gathered from their forward until their post-backward hook: R" +
                (f", and the {w.run_dtype} copy of a shard (_mp_shard): +B/N" if cast_in else ""))
        return root + 2 * block + cast_in, (
            "FSDP1 (FullyShardedDataParallel): the root's padded unsharded flat parameter (embedding, head, final "
            "norm), kept gathered from forward to the end of backward, and in backward the current and the "
            "prefetched block's (BACKWARD_PRE): R+2B" + (f", and the {w.run_dtype} copy of the prefetched shard "
                                                         "(_mp_shard): +B/N" if cast_in else ""))
    emb, head = separate_units(spec, w, weight_elem_bytes if not w.fsdp_mixed_precision else DTYPE_BYTES[w.run_dtype])
    # the embedding's and output layer's own units (Workload.fsdp_units; see separate_units): each gathered beside
    # the unit before it's flat all-gather output
    later = 3 * head if w.loss_chunks > 1 else 0  # a later call of the output layer (one per loss chunk)
    units = max(2 * emb, emb + 2 * block, block + 2 * head, later) + root if head else 0
    units_text = (", or the embedding's and output layer's units of their own (fsdp_units) gathered beside the flat "
                  "output of the unit before (the output layer's previous call's under a chunked loss): "
                  "max(2E, E+2B, B+2H, 3H)+R" if head else "")
    if w.fsdp_mixed_precision:
        cast_in = cast_all_gather_input(w, block)
        return ds_bucket + max(2 * (block + root), 2 * block + reduce + root + cast_in, units), (
            f"FSDP2 MixedPrecisionPolicy(param_dtype={w.run_dtype}, reduce_dtype=fp32): the root's unsharded "
            f"{w.run_dtype} parameters (embedding, head, final norm) plus the current and prefetched block's "
            f"{w.run_dtype} all-gather and one block's fp32 reduce-scatter input, and the all-gather's "
            f"{w.run_dtype} copy of the prefetched shard: max(2(B+R), 2B+B_fp32+R+B/N)" + units_text)
    gathered = ("the root's unsharded parameters (embedding, head, final norm) and its flat all-gather output, or "
                "the root's plus the current and prefetched block's all-gather and one block's reduce-scatter input "
                "(under LoRA the adapters' gradients alone): max(2(B+R), 2B+B_reduce+R)")
    if ds_bucket:
        return ds_bucket + max(2 * (block + root), 2 * block + reduce + root), (
            f"{ds_text}; and, as FSDP2's model (DeepSpeed's prefetch and live-parameter limits are not modelled), "
            + gathered)
    return max(2 * (block + root), 2 * block + reduce + root, units), "FSDP2/ZeRO-3: " + gathered + units_text


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
        reduce = gathered_sizes(spec, w, 4)[0]
    else:
        block, root = gathered_sizes(spec, w, weight_elem_bytes)
        reduce = block
    if w.fsdp and w.method != "full" and not pipelined_fsdp(w):
        # the frozen base weights have no gradient: FSDPParamGroup.post_backward (_fsdp_param_group.py, torch 2.13)
        # hands foreach_reduce only the parameters whose ``unsharded_accumulated_grad`` or ``.grad`` exists, and
        # foreach_reduce (_fsdp_collectives.py) sizes its reduce-scatter input by their padded unsharded numels:
        # under LoRA/QLoRA one block's adapters (the largest block's), in reduce_dtype (fp32 under a policy)
        n = max(1, w.shard_degree)
        rs_b = 4 if w.fsdp_mixed_precision else DTYPE_BYTES[w.lora_dtype]
        reduce = max(_group_adapter_shard_numels(spec, w, n)[1], default=0) * n * rs_b
    return block, root, reduce


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
    # the embedding and the output layer in units of their own (Workload.fsdp_units): the root keeps the rest
    root -= sum(separate_units(spec, w, weight_elem_bytes))
    if pipelined_fsdp(w):
        # this stage's root part (the embedding on the first, the final norm's and output layer's on the last) and
        # every block of the rank, gathered all step (see pipelined_fsdp)
        sp = split(spec, w)
        root = ((emb if sp.has_embedding else 0) + (head if sp.has_head else 0)) // w.tp * weight_elem_bytes
        return block, root + sp.layers * block
    if w.fsdp and w.fsdp_strategy == "shard-grad-op":
        # reshard_after_forward=False: every block stays gathered from its forward to its backward
        root += inside // w.tp * weight_elem_bytes
    return block, root


def separate_units(spec: ModelSpec, w: Workload, weight_elem_bytes: int) -> tuple[int, int]:
    """(E, H): the unsharded bytes of the input embedding's and the output layer's own FSDP2 units, (0, 0) when
    the root keeps them (``fsdp_units="blocks"``, or a model without an untied output layer).

    torchtune's training.shard_model (torchtune/training/_distributed.py at 30b8519e) with
    ``custom_sharded_layers=['tok_embeddings', 'output']`` calls ``fully_shard(m, reshard_after_forward=True)`` on
    each block and on those two modules, then on the root, which keeps the final norm alone. In FSDP2
    (torch/distributed/fsdp/_fully_shard, torch 2.13) each unit's pre-forward hook all-gathers it (a flat output,
    then the unsharded parameters copied out of it, ``FSDPParamGroup.unshard`` / ``wait_for_unshard``), its
    post-forward hook reshards it, and the flat output stays held (``FSDPCommContext.all_gather_state``) until the
    next unit's copy-out; the output layer runs once per loss chunk, so it is gathered once per chunk, in forward
    and again in backward (its pre-backward hook on each call's logits), while the embedding is gathered again in
    backward only when its output needs a gradient (full fine-tuning).
    """
    if not (w.fsdp and w.fsdp_units == "blocks+embed+output") or spec.tied_embeddings:
        return 0, 0
    emb = sum(t.numel for t in spec.tensors if t.layer is None and t.role == "embedding")
    head = sum(t.numel for t in spec.tensors if t.layer is None and t.role == "lm_head")
    if not head:
        return 0, 0
    b = DTYPE_BYTES[w.run_dtype] if w.fsdp_mixed_precision else weight_elem_bytes
    return emb * b, head * b


@identity_cache
def _group_shard_numels(spec: ModelSpec, n: int, tp: int) -> tuple[int, tuple[int, ...]]:
    """(the root's, each block's) sharded numel over ``n`` ranks: FSDP2 pads each parameter's dim 0
    to a multiple of ``n`` (_fsdp_common.py ``_get_dim0_padded_size``), rank 0 holds ceil(dim0 / n) rows."""
    blocks: dict[int, int] = {}
    root = 0
    for t in spec.tensors:
        if t.role == "buffer":
            continue
        dim0 = t.shape[0] if t.shape else 1
        shard = -(-dim0 // n) * (t.numel // max(1, dim0)) // tp
        if t.layer is None:
            root += shard
        else:
            blocks[t.layer] = blocks.get(t.layer, 0) + shard
    return root, tuple(blocks[k] for k in sorted(blocks))


def stage_group_shard_numels(spec: ModelSpec, w: Workload, n: int) -> tuple[int, tuple[int, ...]]:
    """:func:`_group_shard_numels` for the FSDP groups this rank holds: under pipeline parallelism its stage's
    root part (the embedding, or the final norm and output layer) and its ``Split.layers`` blocks."""
    root, blocks = _group_shard_numels(spec, n, w.tp)
    if w.pp <= 1:
        return root, blocks
    sp = split(spec, w)
    root = 0
    for t in spec.tensors:
        if t.role == "buffer" or t.layer is not None:
            continue
        dim0 = t.shape[0] if t.shape else 1
        is_head = t.role == "lm_head" or "lm_head" in t.name or t.name.startswith(("score", "classifier"))
        if (sp.has_head if is_head else sp.has_embedding):
            root += -(-dim0 // n) * (t.numel // max(1, dim0)) // w.tp
    return root, blocks[:sp.layers]


def _group_adapter_shard_numels(spec: ModelSpec, w: Workload, n: int) -> tuple[int, tuple[int, ...]]:
    """(the root's, each block's) sharded numel of the LoRA adapters (and DoRA's magnitudes): the only
    parameters with gradients under LoRA/QLoRA, so the only reduce-scatters. A is (r, k), B (n_out, r),
    dim 0 padded to a multiple of ``n`` as :func:`_group_shard_numels` does."""
    from vramlens.estimator.inventory import lora_shape

    r = w.lora_rank
    blocks = [0] * spec.n_layers
    root = 0
    for lin in lora_shape(spec, tuple(w.lora_adapted), w.fused_qkv).targets:
        shard = lin.count * (-(-r // n) * lin.in_features + -(-lin.out_features // n) * r
                             + (-(-lin.out_features // n) if w.dora else 0))
        if lin.layer is None:
            root += shard
        else:
            blocks[lin.layer] += shard
    return root, tuple(blocks)


def fsdp1_unit_shard_numels(spec: ModelSpec, n: int) -> tuple[int, tuple[int, ...]]:
    """(the root's, each block's) FlatParameter shard numel over ``n`` ranks under FSDP1, one unit per block and
    the rest in the root: torch/distributed/fsdp/_flat_param.py ``FlatParamHandle._get_shard`` (torch 2.13,
    :1122-1139) chunks the flat parameter ``n`` ways and pads each rank's chunk to ``ceil(numel / n)``; rank 0's is
    the first chunk (with ``use_orig_params=False``, the default, nothing else pads the flat parameter: the
    alignment and world-size padding of ``_init_flat_param_and_metadata``, :755-776, needs ``use_orig_params``)."""
    root, blocks = _group_shard_numels(spec, 1, 1)  # the unsharded per-unit numels
    return -(-root // n), tuple(-(-b // n) for b in blocks)


def fsdp_stream_pools(spec: ModelSpec, w: Workload, weight_elem_bytes: int) -> tuple[int, int]:
    """(all-gather copy-in stream's, reduce-scatter stream's) reserved bytes under FSDP2.

    The caching allocator keeps a freed block for the stream it was allocated on (a block is
    reused only by a request on the same stream), so what FSDP2 allocates on its side streams
    stays reserved beside the default stream's pool all step; ``max_memory_reserved`` is their sum.
    From torch/distributed/fsdp/_fully_shard (torch 2.13; the same streams since 2.4):

    * all-gather copy-in stream: ``foreach_all_gather`` (_fsdp_collectives.py:336-361) allocates,
      inside ``device_handle.stream(all_gather_copy_in_stream)``, the ``param_dtype`` copy of the
      group's shard (``_get_param_all_gather_inputs``, :419, under a mixed-precision policy) and the
      flat all-gather output (:352); ``get_all_gather_streams`` (_fsdp_param_group.py:116-126) picks
      that stream for every implicit-prefetch all-gather (forward and pre-backward). In forward the
      previous group's output is freed only after the next copy-out (``wait_for_unshard``, :430-432
      and :483), the last one at the root's post-forward (_fsdp_state.py:335-342); in backward
      each output is freed right after its copy-out. The root (embedding, final norm, output layer)
      is gathered first and stays unsharded through backward (not re-gathered).
    * reduce-scatter stream: ``foreach_reduce`` allocates the reduce-scatter output inside
      ``device_handle.stream(reduce_scatter_stream)`` (_fsdp_collectives.py:611-615); it becomes
      the sharded ``.grad`` (as_strided views, :700-754: "The RS output is allocated in the RS
      stream and used in the default stream (for optimizer)"), one flat tensor per FSDP group, alive
      until ``zero_grad`` frees it; with gradient accumulation later outputs are added in and freed.
      Only parameters with a gradient are reduced: under LoRA/QLoRA the adapters alone
      (``FSDPParamGroup.post_backward`` gathers the params whose ``unsharded_accumulated_grad`` or
      ``.grad`` exists; the frozen base weights have none).

    The two patterns are replayed through the simulator (allocator.simulator, under the run's
    PYTORCH_CUDA_ALLOC_CONF, Workload.alloc_conf: with expandable segments each stream's pool is one
    segment grown page by page) for two steps, and each pool's peak reserve taken.
    """
    if w.fsdp_version == 1:
        return fsdp1_stream_pools(spec, w, weight_elem_bytes)
    n = max(1, w.shard_degree)
    mp = w.fsdp_mixed_precision
    ag_b = DTYPE_BYTES[w.run_dtype] if mp else weight_elem_bytes
    rs_b = 4 if mp else weight_elem_bytes  # reduce_dtype fp32 over fp32 parameters: no cast back
    adapters = None
    if w.method != "full":
        adapters = _group_adapter_shard_numels(spec, w, n)
        rs_b = 4 if mp else DTYPE_BYTES[w.lora_dtype]
    # Beyond the second micro-batch the reduce-scatter pattern cannot grow the reserve: each later micro-batch
    # allocates and frees every group's gradient in turn, and a freed block merges back into the free block it was
    # split from, so each (alloc, free) pair leaves the pool as it found it, and every size it asks for was already
    # served from the cache in the micro-batch before (tests/estimator/test_fsdp_streams.py replays both)
    if pipelined_fsdp(w):
        # the stage's groups only, all kept gathered, and one reduce-scatter per step after the last micro-batch
        # (see pipelined_fsdp)
        stage = stage_group_shard_numels(spec, w, n)
        if adapters is not None:
            adapters = (adapters[0], adapters[1][:split(spec, w).layers])
        return (_all_gather_pool(spec, n, w.tp, ag_b, mp, True, stage=stage, alloc_conf=w.alloc_conf),
                _reduce_scatter_pool(spec, n, w.tp, rs_b, w.optimizer_in_backward or w.offload != "none", 1,
                                     adapters, stage=stage, alloc_conf=w.alloc_conf))
    units = None
    emb, head = separate_units(spec, w, ag_b)
    if head:
        # the embedding's and output layer's own groups (separate_units): rank 0's shards, dim 0 padded as the blocks'
        rows = {t.role: -(-t.shape[0] // n) * (t.numel // max(1, t.shape[0])) for t in spec.tensors
                if t.layer is None and t.role in ("embedding", "lm_head") and t.shape}
        units = (rows.get("embedding", 0), rows.get("lm_head", 0), max(1, w.loss_chunks))
    return (_all_gather_pool(spec, n, w.tp, ag_b, mp, w.fsdp_strategy == "shard-grad-op", alloc_conf=w.alloc_conf,
                             units=units),
            _reduce_scatter_pool(spec, n, w.tp, rs_b, w.optimizer_in_backward or w.offload != "none",
                                 min(2, max(1, w.grad_accum)), adapters, alloc_conf=w.alloc_conf))


@identity_cache
def _all_gather_pool(spec: ModelSpec, n: int, tp: int, ag_b: int, mp: bool, kept: bool,
                     stage: tuple[int, tuple[int, ...]] | None = None, alloc_conf: str | None = None,
                     units: tuple[int, int, int] | None = None) -> int:
    """The all-gather copy-in stream's peak reserve over two steps (see fsdp_stream_pools); ``stage``, the
    (root's, blocks') shard numels when the rank holds a pipeline stage's only; ``units``, the embedding's and the
    output layer's shard numels and the output layer's calls per step when they are groups of their own
    (Workload.fsdp_units: the embedding gathered after the root, the output layer once per call after the last
    block, each beside the previous group's flat output)."""
    from vramlens.allocator.events import ALLOC, FREE
    from vramlens.allocator.simulator import simulate
    from vramlens.estimator.reserve import allocator_config

    root, blocks = stage or _group_shard_numels(spec, n, tp)
    groups = [root, *blocks]  # forward order
    if units is not None:
        emb, head, calls = units
        groups = [root - emb - head, emb, *blocks, *[head] * calls]
    ag: list[tuple[str, object, int]] = []
    for step in range(2):
        prev: object = None
        for i, shard in enumerate(groups):  # forward: implicit prefetch holds the previous output
            if mp:
                ag.append((ALLOC, ("in", step, i), shard * ag_b))
            ag.append((ALLOC, ("out", step, i), shard * n * ag_b))
            if mp:
                ag.append((FREE, ("in", step, i), 0))
            if prev is not None:
                ag.append((FREE, prev, 0))
            prev = ("out", step, i)
        ag.append((FREE, prev, 0))
        if not kept:  # backward re-gathers each block (the root stays gathered); freed after copy-out
            for i in range(len(groups) - 1, 0, -1):
                if mp:
                    ag.append((ALLOC, ("bin", step, i), groups[i] * ag_b))
                ag.append((ALLOC, ("bout", step, i), groups[i] * n * ag_b))
                if mp:
                    ag.append((FREE, ("bin", step, i), 0))
                ag.append((FREE, ("bout", step, i), 0))
    return simulate(ag, allocator_config(alloc_conf), max_points=2).peak_reserved_bytes


@identity_cache
def _reduce_scatter_pool(spec: ModelSpec, n: int, tp: int, rs_b: int, one_at_a_time: bool, grad_accum: int,
                         adapters: tuple[int, tuple[int, ...]] | None = None,
                         stage: tuple[int, tuple[int, ...]] | None = None, alloc_conf: str | None = None) -> int:
    """The reduce-scatter stream's peak reserve over two steps of ``grad_accum`` micro-batches (see
    fsdp_stream_pools); 0 when nothing is reduced. ``stage`` as in :func:`_all_gather_pool`."""
    from vramlens.allocator.events import ALLOC, FREE
    from vramlens.allocator.simulator import simulate
    from vramlens.estimator.reserve import allocator_config

    root, blocks = stage or _group_shard_numels(spec, n, tp)
    # what each group reduce-scatters: every parameter, or under LoRA the adapters alone
    grads = [root, *blocks] if adapters is None else [adapters[0], *adapters[1]]
    rs: list[tuple[str, object, int]] = []
    for step in range(2):
        for micro in range(grad_accum):  # backward: blocks last to first, then the root
            for i in [*range(len(grads) - 1, 0, -1), 0]:
                if not grads[i]:
                    continue
                rs.append((ALLOC, ("g", step, micro, i), grads[i] * rs_b))
                if micro or one_at_a_time:  # accumulated into the kept gradient, or stepped/offloaded
                    rs.append((FREE, ("g", step, micro, i), 0))
        if not one_at_a_time:  # zero_grad(set_to_none=True) at the next step's start
            rs.extend((FREE, ("g", step, 0, i), 0) for i in range(len(grads)) if grads[i])
    return simulate(rs, allocator_config(alloc_conf), max_points=2).peak_reserved_bytes if rs else 0


def fsdp1_stream_pools(spec: ModelSpec, w: Workload, weight_elem_bytes: int) -> tuple[int, int]:
    """(unshard and pre-unshard streams', post-backward stream's) reserved bytes under FSDP1.

    From torch/distributed/fsdp (torch 2.13; the same streams since 2.0), ``use_orig_params=False``:

    * unshard stream: ``_runtime_utils._unshard`` (:277-306) runs ``FlatParamHandle.unshard`` inside
      ``stream(unshard_stream)``: ``_alloc_padded_unsharded_flat_param`` (_flat_param.py:1395-1409) resizes
      ``_full_param_padded`` (``ceil(numel / N) * N`` elements, in ``param_dtype`` under a mixed-precision
      policy) and the all-gather writes into it; the module's parameters are views of it. ``reshard``
      (:1766-1782) frees it (``_free_storage``, after ``record_stream`` on the default stream). Forward
      gathers one block at a time (``forward_prefetch=False``, the default) and frees it at its post-forward
      (``_post_forward_reshard``, _runtime_utils.py:486-500); the root is not freed after forward; backward
      gathers a block in its pre-backward hook and prefetches the next one (``BACKWARD_PRE``, the default,
      ``_prefetch_handle``), and frees it in its post-backward hook before the reduce-scatter
      (``_post_backward_reshard``). Under a mixed-precision policy ``pre_unshard`` first allocates the
      ``param_dtype`` copy of the shard (``_use_low_precision_shard``, :1342-1357) on the pre-unshard stream
      (:293-294), freed in ``post_unshard``: counted with this pool.
    * post-backward stream: ``_post_backward_hook`` (_runtime_utils.py:701-780) runs inside
      ``stream(post_backward_stream)``: under ``reduce_dtype`` the unsharded gradient is cast (``.to``), then
      ``_get_reduce_scatter_tensors`` (:890-903) pads it (``F.pad``, a copy, only when ``N`` does not divide
      the unit's numel) and allocates the sharded gradient (``torch.empty_like(chunks[0])``), which becomes
      ``_saved_grad_shard`` and then ``.grad``, kept until ``zero_grad``; with gradient accumulation a later
      one is added in (``_accumulate_sharded_grad``) and freed. Only units with a gradient are reduced: under
      LoRA the adapters' (torchtune's ``lora_fsdp_wrap_policy`` wraps them in units of their own).

    ``record_stream`` delays the reuse of a freed flat parameter until the default stream is past the block
    that used it, and the rate limiter (``limit_all_gathers``) bounds how many wait (_fsdp1_unshard_pool). The
    simulator replays the patterns for two steps and takes each pool's peak reserve.
    """
    n = max(1, w.shard_degree)
    mp = w.fsdp_mixed_precision
    ag_b = DTYPE_BYTES[w.run_dtype] if mp else weight_elem_bytes
    root_n, block_ns = _group_shard_numels(spec, 1, 1)  # each unit's FlatParameter before sharding
    root_s, block_s = fsdp1_unit_shard_numels(spec, n)
    kept = w.fsdp_strategy == "shard-grad-op"
    # the gradients each unit reduces: every parameter's, or under LoRA the adapters' alone
    rs_b = 4 if mp else weight_elem_bytes
    if w.method != "full":
        a_root, a_blocks = _group_adapter_shard_numels(spec, w, n)
        units = [(a_root * n, a_root), *((a * n, a) for a in a_blocks)]
        rs_b = 4 if mp else DTYPE_BYTES[w.lora_dtype]
        grad_b = DTYPE_BYTES[w.run_dtype] if mp else DTYPE_BYTES[w.lora_dtype]
    else:
        units = [(root_n, root_s), *zip(block_ns, block_s, strict=True)]
        grad_b = ag_b
    return (_fsdp1_unshard_pool(root_s, block_s, n, ag_b, mp, kept, w.alloc_conf),
            _fsdp1_post_backward_pool(tuple(units), n, rs_b, grad_b if mp else 0,
                                      w.optimizer_in_backward or w.offload != "none", min(2, max(1, w.grad_accum)),
                                      w.alloc_conf))


#: torch/distributed/fsdp/_limiter_utils.py ``_FreeEventQueue._max_num_inflight_all_gathers`` (torch 2.13; 2 since
#: the rate limiter came in, torch 1.13): ``limit_all_gathers=True`` (the default) makes an unshard wait for the
#: oldest free when this many are in flight
FSDP1_MAX_INFLIGHT_ALL_GATHERS = 2


@identity_cache
def _fsdp1_unshard_pool(root: int, blocks: tuple[int, ...], n: int, ag_b: int, mp: bool, kept: bool,
                        alloc_conf: str | None = None) -> int:
    """The unshard (and pre-unshard) streams' peak reserve over two steps (see fsdp1_stream_pools).

    A block's freed flat parameter is ``record_stream``-ed on the default stream (_flat_param.py:1805-1821):
    its memory is reusable once the default stream is past the block's compute. With the CPU ahead of the GPU
    (what the rate limiter is there for) that is when ``_unshard`` synchronises on it: ``dequeue_if_needed``
    (_limiter_utils.py) pops the oldest free event once ``FSDP1_MAX_INFLIGHT_ALL_GATHERS`` are queued, so one
    freed block at most waits beside the live ones; replayed so, the frees left waiting at the step's end
    released then."""
    from vramlens.allocator.events import ALLOC, FREE
    from vramlens.allocator.simulator import simulate
    from vramlens.estimator.reserve import allocator_config

    ev: list[tuple[str, object, int]] = []
    waiting: list[object] = []  # _FreeEventQueue: freed flat parameters not yet reusable

    def gather(key: object, shard: int, limited: bool = True) -> None:
        if limited and len(waiting) >= FSDP1_MAX_INFLIGHT_ALL_GATHERS:
            ev.append((FREE, waiting.pop(0), 0))  # event.synchronize(): the oldest free is done
        if mp:  # pre_unshard's param_dtype shard, freed in post_unshard
            ev.append((ALLOC, ("mp", key), shard * ag_b))
        ev.append((ALLOC, key, shard * n * ag_b))
        if mp:
            ev.append((FREE, ("mp", key), 0))

    for step in range(2):
        gather(("root", step), root)
        for i, shard in enumerate(blocks):  # forward: one block at a time
            gather(("f", step, i), shard)
            if not kept:
                waiting.append(("f", step, i))
        last = len(blocks) - 1
        if not kept:  # backward: the root's pre-backward prefetches the last block; each block the one before
            if last >= 0:
                gather(("b", step, last), blocks[last])
            for i in range(last, -1, -1):
                if i:
                    gather(("b", step, i - 1), blocks[i - 1])
                waiting.append(("b", step, i))
        else:  # shard-grad-op: freed in the post-backward hooks, with no all-gather left to wait on them
            waiting.extend(("f", step, i) for i in range(last, -1, -1))
        ev.extend((FREE, k, 0) for k in waiting)
        waiting.clear()
        ev.append((FREE, ("root", step), 0))
    return simulate(ev, allocator_config(alloc_conf), max_points=2).peak_reserved_bytes


@identity_cache
def _fsdp1_post_backward_pool(units: tuple[tuple[int, int], ...], n: int, rs_b: int, cast_from: int,
                              one_at_a_time: bool, grad_accum: int, alloc_conf: str | None = None) -> int:
    """The post-backward stream's peak reserve over two steps of ``grad_accum`` micro-batches (see
    fsdp1_stream_pools): per unit with a gradient (``units``: (unsharded numel, shard numel), root first), the
    ``reduce_dtype`` cast of the unsharded gradient when its dtype differs (``cast_from`` > 0), the padded copy
    when ``n`` does not divide it, and the kept sharded gradient; 0 when nothing is reduced."""
    from vramlens.allocator.events import ALLOC, FREE
    from vramlens.allocator.simulator import simulate
    from vramlens.estimator.reserve import allocator_config

    ev: list[tuple[str, object, int]] = []
    order = [*range(len(units) - 1, 0, -1), 0]  # blocks last to first, then the root
    for step in range(2):
        for micro in range(grad_accum):
            for i in order:
                numel, shard = units[i]
                if not shard:
                    continue
                if cast_from:
                    ev.append((ALLOC, ("cast", step, micro, i), numel * rs_b))
                if shard * n != numel:
                    ev.append((ALLOC, ("pad", step, micro, i), shard * n * rs_b))
                ev.append((ALLOC, ("g", step, micro, i), shard * rs_b))
                if shard * n != numel:
                    ev.append((FREE, ("pad", step, micro, i), 0))
                if cast_from:
                    ev.append((FREE, ("cast", step, micro, i), 0))
                if micro or one_at_a_time:  # added into _saved_grad_shard, or stepped/offloaded
                    ev.append((FREE, ("g", step, micro, i), 0))
        if not one_at_a_time:  # zero_grad(set_to_none=True) at the next step's start
            ev.extend((FREE, ("g", step, 0, i), 0) for i in range(len(units)) if units[i][1])
    return simulate(ev, allocator_config(alloc_conf), max_points=2).peak_reserved_bytes if ev else 0
