"""The batch-independent part of a training estimate, and the phase arithmetic on top of it.

:func:`train_state` computes what does not depend on the micro-batch (weights, gradients,
optimizer states, their sharding and offload, the allocator's reserve for them, the runtime);
:func:`train_phases` adds the activations of one micro-batch and gives each phase's live
total; :func:`reserved_total` turns the peak into ``max_memory_reserved`` and the nvidia-smi
total. :func:`vramlens.estimator.core.estimate_spec` and the advisor's memoized search
(:mod:`vramlens.advise.fastmem`) both use these, so their figures are the same by construction.

Phases (steady state, step 2 onwards, when the optimizer states exist; step 1 is never
higher because its states are created inside its optimizer step):

* forward / loss: persistent + activations of all local blocks + the loss' logits peak
  (+ the gradients when they accumulate, ``grad_accum > 1``, or are zeroed but kept,
  ``zero_grad(set_to_none=False)``) + autocast's weight copies
  (kept through backward by autograd, except under checkpointing);
* backward: it starts with every activation alive plus the loss' two fp32 gradient buffers
  (``nll_loss_backward`` and ``_log_softmax_backward_data``, b*s*V each), then the output
  layer's backward (the logits' gradient and its weight gradient); under checkpointing (full,
  selective-op, every:N) the head's and the final norm's saved tensors are gone before the last
  checkpointed block is recomputed, and the first block is recomputed before its own gradients
  exist; under FSDP2 the gathered, prefetched and reduce-scatter buffers come on top (see
  train_phases);
* optimizer: persistent + gradients + the optimizer's temporaries (autocast copies are gone);
  with an fp32 master copy, the gradients' fp32 copies the step runs on.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from vramlens.estimator import optimizer as O
from vramlens.estimator import weights as Wt
from vramlens.estimator.heads import has_lm_head
from vramlens.estimator.memo import identity_cache
from vramlens.estimator.ondevice import torchtune_nf4_setup_peak
from vramlens.estimator.parallel import (
    Split,
    cast_all_gather_input,
    comm_buffer_bytes,
    deepspeed_ipg_bucket,
    ds_reduce_bucket_size,
    fsdp_buffers,
    fsdp_stream_pools,
    pipeline_in_flight,
    pipelined_fsdp,
    separate_units,
    split,
    stage_group_shard_numels,
    tp_embedding_gradient_extra,
    tp_embedding_gradient_whole,
)
from vramlens.estimator.reserve import persistent_part_reserve
from vramlens.estimator.runtime import runtime
from vramlens.hardware.gpu import GPU
from vramlens.models.spec import ModelSpec
from vramlens.units import BLOCK, DTYPE_BYTES, human_bytes, round_up
from vramlens.workload import Workload

#: Roles whose tensors autocast casts to the lower precision for matmuls (F.linear / addmm /
#: the output layer, their biases too); norms run in fp32 and embeddings are looked up, not cast.
AUTOCAST_ROLES = ("linear", "conv1d", "expert", "lm_head", "bias", "router")


@identity_cache
def _autocast_numels(spec: ModelSpec) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(numel of every tensor autocast casts, numel of the linear weights alone)."""
    cast = [t.numel for t in spec.tensors if t.role in AUTOCAST_ROLES]
    if spec.tied_embeddings:  # the output layer multiplies by the (tied) embedding matrix
        cast += [t.numel for t in spec.tensors if t.role == "embedding"][:1]
    weights = [t.numel for t in spec.tensors if t.role in ("linear", "conv1d", "expert", "lm_head")]
    if spec.tied_embeddings:
        weights += [t.numel for t in spec.tensors if t.role == "embedding"][:1]
    return tuple(cast), tuple(weights)


def autocast_copies(spec: ModelSpec, w: Workload) -> tuple[int, int]:
    """(autocast's cached half copies of trainable weights, half copies of frozen weights saved for backward).

    ``at::autocast::cached_cast`` (aten/src/ATen/autocast_mode.cpp) caches the cast of a leaf
    tensor that requires grad, for as long as autocast is on; autograd keeps the copy until the
    matmul's backward. Frozen weights (LoRA's base) are cast at every call instead, and
    ``F.linear`` keeps the cast weight for the input gradient.
    """
    if not (w.training and w.autocast) or w.amp is None:
        return 0, 0
    half = DTYPE_BYTES[w.amp]
    cast, weights = _autocast_numels(spec)
    if w.method == "full":
        return sum(round_up(n * half, BLOCK) for n in cast), 0
    from vramlens.estimator.inventory import lora_shape

    shape = lora_shape(spec, tuple(w.lora_adapted), w.fused_qkv)
    # adapters already in the autocast dtype (--lora-dtype bf16 under --amp bf16) are not cast
    adapters = 0 if w.lora_dtype == w.amp else sum(
        lin.count * (round_up(w.lora_rank * lin.in_features * half, BLOCK)
                     + round_up(w.lora_rank * lin.out_features * half, BLOCK)) for lin in shape.targets)
    if w.method == "loha" and w.lora_dtype != w.amp:
        # HadaWeight.forward's factor products cast each fp32 factor (a leaf that requires grad): cached
        from vramlens.estimator.inventory import own_tensor_numels

        adapters = sum(round_up(n * half, BLOCK) for n in own_tensor_numels(spec, w))
    elif w.method == "lokr" and w.lora_dtype != w.amp:
        # LoKr: only a w2 built as lokr_w2_a @ lokr_w2_b runs an autocast op on factors (torch.kron is none)
        from vramlens.estimator.activations import delta_dims
        from vramlens.models.peft_targets import lokr_shapes

        adapters = 0
        for _, n, k in delta_dims(spec, w):
            _, (b, d), low_rank = lokr_shapes(n, k, w.lora_rank, w.decompose_factor)
            if low_rank:
                adapters += spec.n_layers * (round_up(b * w.lora_rank * half, BLOCK)
                                             + round_up(w.lora_rank * d * half, BLOCK))
    frozen = sum(round_up(n * half, BLOCK) for n in weights)
    # the first block's frozen linears up to the first adapter see inputs that need no gradient
    from vramlens.estimator.activations import linear_groups, untracked_before_first_adapter

    _, early = untracked_before_first_adapter(spec, w, 1, 1)
    if early:
        sizes = _numel_by_path(spec)
        # OFT rotates an adapted linear's input before its base layer, so that input needs a gradient there too
        rotated = w.lora_targets if w.method == "oft" else ()
        for g in early:
            frozen -= sum(round_up(sizes.get(path, 0) * half, BLOCK) for path, leaf in linear_groups(spec).get(g, ())
                          if not ("all-linear" in rotated or leaf in rotated))
    return adapters, max(0, frozen)


@identity_cache
def _head_numel(spec: ModelSpec) -> int:
    """Numel of the output layer's weight (the tied embedding's when tied), 0 without one."""
    if not has_lm_head(spec):
        return 0
    role = "embedding" if spec.tied_embeddings else "lm_head"
    return next((t.numel for t in spec.tensors if t.role == role), 0)


def frozen_head_cast(spec: ModelSpec, w: Workload, has_head: bool) -> int:
    """The frozen output layer's weight cast to the autocast dtype, which ``F.linear`` saves for its input's
    gradient: c*V*h/tp bytes (one call; a chunked loss' further calls are activations.frozen_head_recasts); 0
    without autocast or an output layer on this GPU, or when the output layer trains (autocast caches that cast,
    counted in :func:`autocast_copies`' first figure)."""
    if not (w.training and w.autocast and w.amp is not None and has_head and w.method != "full"
            and _head_numel(spec)):
        return 0
    return round_up(DTYPE_BYTES[w.amp] * spec.vocab_size * spec.hidden_size // max(1, w.tp), BLOCK)


def head_recasts(spec: ModelSpec, w: Workload, has_head: bool) -> int:
    """A chunked loss' further casts of the frozen output layer: torchtune's ``TransformerDecoder.forward`` calls
    ``self.chunked_output`` on each of ``h.chunk(num_output_chunks, dim=1)`` (vramlens.trace.losses
    ``chunked_cross_entropy`` does the same), and ``at::autocast::cached_cast`` (aten/src/ATen/autocast_mode.cpp)
    caches only the casts of leaves that require grad: each call casts the frozen weight again and its ``F.linear``
    saves that cast for the input's gradient until the chunk's backward. (calls - 1) x :func:`frozen_head_cast`."""
    head = frozen_head_cast(spec, w, has_head)
    if not head or w.loss != "cross-entropy" or w.loss_chunks <= 1:
        return 0
    from vramlens.estimator.losses import seq_chunks

    return (seq_chunks(w.seq, w.loss_chunks)[1] - 1) * head


def recompute_casts(spec: ModelSpec, w: Workload) -> tuple[int, int]:
    """Under autocast, the casts a checkpointed block's recomputation makes again and keeps until its backward.

    torch.utils.checkpoint (torch 2.13: ``CheckpointFunction.backward`` and the non-reentrant ``recompute_fn``)
    recomputes under the forward's autocast state. The forward's cached casts went with the cache when its
    autocast context exited, so the recomputed linears cast their weights again: a frozen weight (LoRA's base) at
    every call, a trainable one (full fine-tuning, the adapters) once into the cache, which the recomputation's own
    autocast context clears on exit; either way the matmul saves the cast for the input's gradient, held by the
    recomputed graph until the block's backward uses it. The last block's (every weight's input needs a gradient
    there), in the autocast dtype, per tensor-parallel rank: (the frozen weights' casts, the trainable weights'
    cached casts). The tracer tags the cached ones as autocast's copies (master_weights, whose own peak is the
    forward's), so only the frozen ones are temporaries; both are in the backward's peak (TrainState.recompute_cached).
    """
    if not (w.training and w.autocast and w.amp is not None) or spec.n_layers <= 0:
        return 0, 0
    half = DTYPE_BYTES[w.amp]
    layers = [t.layer for t in spec.tensors if t.layer is not None and t.role != "buffer"]
    if not layers:
        return 0, 0
    last = max(layers)
    roles = AUTOCAST_ROLES if w.method == "full" else ("linear", "conv1d", "expert")
    casts = sum(round_up(t.numel * half // max(1, w.tp), BLOCK) for t in spec.tensors
                if t.layer == last and t.role in roles)
    if w.method == "full":
        return 0, casts
    return casts, autocast_copies(spec, w)[0] // spec.n_layers  # one block's share of the adapters' cached casts


@identity_cache
def _first_block_and_embedding(spec: ModelSpec) -> tuple[int, int]:
    """(numel of the first block's parameters, of the input embeddings when untied from the head)."""
    layers = [t.layer for t in spec.tensors if t.layer is not None and t.role != "buffer"]
    first = min(layers) if layers else None
    block = sum(t.numel for t in spec.tensors if t.layer is not None and t.layer == first and t.role != "buffer")
    emb = 0 if spec.tied_embeddings else sum(t.numel for t in spec.tensors if t.layer is None and t.role == "embedding")
    return block, emb


def block_share(spec: ModelSpec) -> tuple[int, int]:
    """(the first block's parameters, all parameters): one block's share of the gradients."""
    return _first_block_and_embedding(spec)[0], max(1, _param_numel(spec))


def last_gradients(spec: ModelSpec, w: Workload, grads: int) -> int:
    """Of ``grads``, the gradients made only when backward reaches the first block (its own
    parameters' and untied input embeddings'): they do not exist while that block is recomputed."""
    if not w.training or grads <= 0:
        return 0
    if w.method != "full":
        return grads // max(1, spec.n_layers)  # the adapters of one block
    block, emb = _first_block_and_embedding(spec)
    total = max(1, _param_numel(spec))
    return min(grads, grads * (block + emb) // total)


@identity_cache
def _param_numel(spec: ModelSpec) -> int:
    return sum(t.numel for t in spec.tensors if t.role != "buffer")


@identity_cache
def _numel_by_path(spec: ModelSpec) -> dict[str, int]:
    return {t.name.removesuffix(".weight"): t.numel for t in spec.tensors}


@dataclass(frozen=True, slots=True)
class TrainState:
    """Per-GPU bytes that do not depend on the micro-batch (see the module docstring)."""

    sp: Split
    weights: int
    master: int           # fp32 master copy (DeepSpeed-style mixed precision)
    autocast: int         # autocast's cached half copies of trainable weights (forward and backward)
    frozen_casts: int     # half copies of frozen weights saved for backward (LoRA under autocast)
    grads: int
    opt: int
    opt_tmp: int
    comm: int
    host: int
    head_grad: int
    trainable: int
    pbytes: int
    workspace: int
    outside: int
    reserve_base: int      # the allocator's reserve for the persistent tensors
    reserve_floor: int     # their bytes rounded to the allocator's blocks
    reserve_persistent: int
    #: of frozen_casts, the output layer's (frozen_head_cast): saved outside every checkpointed block, so kept from
    #: forward to the output layer's backward whatever the checkpointing
    head_casts: int = 0
    #: under autocast, one recomputed block's cached casts of trainable weights (recompute_casts), in the backward's
    #: peak when a block is checkpointed
    recompute_cached: int = 0
    gather_block: int = 0  # FSDP2/ZeRO-3: one block's unsharded parameters (B)
    gather_root: int = 0   # FSDP2/ZeRO-3: the root's unsharded parameters (R)
    reduce_block: int = 0  # FSDP2/ZeRO-3: one block's reduce-scatter input (B, or fp32 under a mixed-precision policy)
    gather_input: int = 0  # FSDP2 mixed precision: the all-gather's param_dtype copy of one block's shard
    ds_bucket: int = 0     # DeepSpeed ZeRO-3: the contiguous-gradients bucket, alive from initialisation (comm)
    gather_kept: bool = False  # FSDP2 shard-grad-op: every block stays gathered from forward to backward
    root_resharded: bool = False  # FSDP2: the root resharded after its forward and gathered again in backward
    gather_embed: int = 0  # FSDP2 with fsdp_units="blocks+embed+output": the embedding's unit, unsharded (E)
    gather_head: int = 0   # ... and the output layer's (H); the root (gather_root) then keeps the final norm alone
    loss_chunks: int = 1   # the output layer's calls per step (Workload.loss_chunks): one all-gather each
    fsdp1: bool = False        # FSDP1 (FullyShardedDataParallel): flat parameters, no forward prefetch
    grad_block: int = 0        # FSDP1: one block's unsharded flat gradient (0 when its weights are frozen)
    gathers_aside: bool = False  # FSDP1, the default stream's view: the gathered flat parameters are the unshard
                                 # stream's (parallel.fsdp1_stream_pools), not counted in its phases
    keep_grads: bool = False   # zero_grad(set_to_none=False): gradients alive through the next forward
    master_grads: int = 0      # fp32 copies of the gradients for the fp32 master weights, made for the step
    in_backward: bool = False  # optimizer in backward: grads and opt_tmp are one parameter's, stepped in backward
    last_grads: int = 0        # of grads, those made only when backward reaches the first block (last_gradients)
    in_backward_addend: int = 0  # ... and a tied head's: one of its two summed gradients, alive through its step
    paged: int = 0             # paged optimizer states in CUDA unified memory (in ``outside``, not in ``opt``)
    pp_grads: int = 0          # FSDP2 stages under pipeline parallelism: the rank's gradients, unsharded and accumulated
                               # over the micro-batches until the last backward's reduce-scatter (parallel.pipelined_fsdp)
    pp_grads_fwd: int = 0      # ... of them, what a forward holds (one after rank 0's first backward)
    stream_pools: int = 0      # FSDP2: reserve of the all-gather and reduce-scatter streams' pools (the sharded
                               # gradients live in the latter; parallel.fsdp_stream_pools), beside the default's
    alloc_conf: str | None = None  # PYTORCH_CUDA_ALLOC_CONF the reserve is computed under (Workload.alloc_conf)
    setup_reserve: int = 0     # reserved by a set-up that quantized on the GPU and kept its segments (torchtune's 2024
                               # QLoRA: ondevice.torchtune_nf4_setup_peak): a floor under the run's peak reserved
    notes: tuple[str, ...] = ()
    explain: dict[str, str] = field(default_factory=dict, compare=False)
    runtime_explain: str = ""


def train_state(spec: ModelSpec, w: Workload, gpu: GPU | None) -> TrainState:
    """The batch-independent part of a training (or inference) estimate."""
    sp = split(spec, w)
    explain: dict[str, str] = {}
    notes: list[str] = []
    base_w, base_formula = Wt.base_weight_bytes(spec, w)
    adapters = Wt.adapter_bytes(spec, w)
    legacy = Wt.legacy_block_buffer_bytes(spec, w) * sp.layers  # buffers are not sharded: the blocks on this GPU
    kernel_buffers = Wt.gptq_kernel_buffer_bytes(spec, w)  # one set per GPU
    weights = int(base_w * sp.weights) + adapters + legacy + kernel_buffers
    what = {"ia3": f"IA3 vectors {w.lora_dtype}", "ln-tuning": f"LN tuning's norm copies {w.dtype}",
            "vera": f"VeRA vectors {w.lora_dtype} and shared fp32 projections (r={w.vera_rank})",
            "adalora": f"AdaLoRA adapters {w.lora_dtype} (A, E, B at init_r={w.lora_rank}; ranknum)",
            "loha": f"LoHa factors {w.lora_dtype}", "lokr": f"LoKr factors {w.lora_dtype}",
            "oft": f"OFT rotations {w.lora_dtype} and their index buffers",
            "boft": f"BOFT rotations and scales {w.lora_dtype}"}.get(
        w.method, f"LoRA adapters {w.lora_dtype}{' with DoRA magnitudes' if w.dora else ''}")
    explain["weights"] = base_formula + (f" + {what} ({adapters:,} B)" if adapters else "")
    if legacy:
        explain["weights"] += (f" + transformers {w.transformers_version}'s per-block buffers (causal masks, "
                               f"rotary caches: {legacy:,} B)")
    if kernel_buffers:
        explain["weights"] += f" + AutoGPTQ exllama's temp_dq and temp_state buffers ({kernel_buffers:,} B)"
    if sp.weights != 1:
        explain["weights"] += f", x{sp.weights:.4g} on this GPU"
    if Wt.quantizes_head(spec, w) and spec.tied_embeddings:
        notes.append(f"quant_head: the output layer is tied to the input embedding; quantizing it replaces the "
                     f"module's weight, which unties them: the embedding stays in {Wt.weight_dtype_bytes(w)}-byte "
                     f"elements and the output layer is a {w.quantized} copy of its own")

    trainable = Wt.trainable_params(spec, w)
    pbytes = O.param_dtype_bytes(w)
    grads_full = O.gradient_bytes(spec, w, trainable)
    grads = int(grads_full * sp.gradients)
    tp_emb_grad = 0
    if sp.has_embedding and (extra := tp_embedding_gradient_extra(spec, w)):
        # torch's DTensor keeps the RowwiseParallel embedding's gradient whole (V x h) on each TP rank
        tp_emb_grad = extra * pbytes // (w.shard_degree if w.shard_stage >= 2 else 1)
        grads += tp_emb_grad
    master = int(O.master_bytes(spec, w, trainable) * sp.optimizer)
    # mixed precision with an fp32 master copy: the optimizer steps on fp32 gradients, converted
    # from the half ones for the step (DeepSpeed's fp32 gradient partition, apex's master grads)
    master_grads = master
    opt_full, opt_formula = O.optimizer_state_bytes(spec, w, trainable)
    opt = int(opt_full * sp.optimizer)
    opt_tmp_full, opt_tmp_formula = O.optimizer_step_temporary(spec, w, trainable)
    opt_tmp = int(opt_tmp_full * sp.optimizer)
    in_bwd = w.training and w.optimizer_in_backward and trainable > 0
    if in_bwd:
        # torchtune optimizer_in_bwd (training/memory.py register_optim_in_bwd_hooks): a
        # post-accumulate-grad hook steps the parameter's own optimizer and zero_grad()s it, so one
        # parameter's gradient and that one step's temporary exist at a time (the largest of each)
        grads = int(O.largest_gradient_bytes(spec, w) * sp.gradients)
        if tp_emb_grad:
            # under TP the input embedding's gradient comes whole (V x h) before its hook frees it
            grads = max(grads, tp_embedding_gradient_whole(spec, w) * pbytes)
        opt_tmp_full, opt_tmp_formula = O.one_parameter_step_temporary(spec, w)
        opt_tmp = int(opt_tmp_full * sp.optimizer)
    comm, comm_formula = comm_buffer_bytes(spec, w, grads_full, pbytes, trainable, Wt.weight_dtype_bytes(w))
    # FSDP2 stages under torch.distributed.pipelining (parallel.pipelined_fsdp): each micro-batch's gradients are
    # accumulated unsharded, in reduce_dtype (fp32 under a mixed-precision policy over fp32 shards, the dtype of
    # grads_full), for the rank's TP shard of its stage, until the last micro-batch's backward reduce-scatters them
    pp_grads = 0
    if pipelined_fsdp(w) and not in_bwd:
        if w.method == "full":
            root_part, stage_blocks = stage_group_shard_numels(spec, w, 1)
            pp_grads = (root_part + sum(stage_blocks)) * pbytes
        else:  # the adapters' share of the stage
            pp_grads = int(grads_full * sp.gradients * w.shard_degree)
    # ... and a forward holds them when the schedule runs one after rank 0's first backward (1F1B's steady phase:
    # fewer (stage, micro-batch) pairs in flight than it runs)
    pp_grads_fwd = pp_grads if pipeline_in_flight(w, w.grad_accum)[1] else 0
    autocast, frozen_casts = autocast_copies(spec, w)
    autocast = int(autocast * sp.weights) if w.method == "full" else autocast
    frozen_casts = int(frozen_casts * sp.weights)
    head_casts = min(frozen_casts, frozen_head_cast(spec, w, sp.has_head)) if frozen_casts else 0
    recompute_cached = recompute_casts(spec, w)[1]
    host = 0
    if w.training and w.offload in ("optimizer", "all"):
        # ZeRO-Offload (Ren et al. 2021): fp32 master weights, optimizer states and (stage >= 2)
        # the fp32 gradient partition live in host RAM; DeepSpeed's CPU Adam needs no GPU temporary
        host += (opt + master) * w.gpus
        if w.shard_stage >= 2:
            host += int(trainable / max(1, w.shard_degree) * 4) * w.gpus
            grads = 0  # only the reduce bucket (comm_buffers) stays on the GPU
        notes.append(f"optimizer states and master weights offloaded to the host ({human_bytes(opt + master)} per GPU)")
        opt = master = opt_tmp = 0
    if w.training and w.optimizer == O.CPU_OFFLOAD and trainable:
        # torchao CPUOffloadOptimizer: pinned parameter and gradient copies and the AdamW states in host RAM
        off_b = 4 if O.has_master_copy(w) or w.method != "full" else pbytes
        off = O.per_tensor_states(spec, w.optimizer, off_b, w.method, tuple(w.lora_adapted), w.lora_rank,
                                  fused_qkv=w.fused_qkv, virtual_tokens=w.vector_size)
        off_host = int(off.host_bytes * sp.optimizer)  # this rank's slice under tensor/pipeline parallelism
        host += off_host * w.gpus
        notes.append(f"CPUOffloadOptimizer: {human_bytes(off_host)} of host RAM per GPU (pinned parameter "
                     "and gradient copies, each a power of two, and the AdamW states)")
    if (boft_p := Wt.boft_host_permutations(spec, w)):
        host += boft_p * w.gpus
        notes.append(f"BOFT's permutation matrices stay in host RAM ({human_bytes(boft_p)}; copied to the GPU in "
                     "each forward)")
    paged = 0
    if opt:
        # bitsandbytes' paged optimizers: the large tensors' states live in CUDA unified memory, outside
        # the caching allocator (not in max_memory_allocated/reserved); resident, nvidia-smi counts them
        paged_alloc, paged_full = O.paged_state_bytes(spec, w)
        if paged_full:
            opt -= int(paged_alloc * sp.optimizer)
            paged = int(paged_full * sp.optimizer)
            notes.append(f"paged optimizer: {human_bytes(paged)} of its states are in CUDA unified memory "
                         "(cudaMallocManaged), outside PyTorch's allocator: not in max_memory_allocated or "
                         "reserved, but in nvidia-smi while resident; under memory pressure the driver pages them "
                         "to host RAM instead of failing, and each step then reads them over PCIe")
    if w.training and w.offload == "all":
        host += weights * w.gpus
        weights = int(weights * 2 / max(1, spec.n_layers))  # only the blocks being computed are on the GPU
        notes.append("parameters offloaded: the GPU holds the gathered blocks only")
    head_grad = 0
    sharded3 = w.training and w.shard_stage == 3 and w.shard_degree > 1
    if w.training and w.method == "full" and sp.has_head and has_lm_head(spec):
        # under FSDP2/ZeRO-3 the root's gradient is unsharded until its reduce-scatter at the end
        # (under a mixed-precision policy that unsharded gradient is in param_dtype); over tensor
        # parallelism "unsharded" is the rank's TP shard: torchtitan's ColwiseParallel output layer holds
        # ceil(V / tp) rows (Shard(0) of the (V, h) weight), and FSDP2 all-gathers and reduce-scatters only
        # the dp dimension (torch/distributed/fsdp/_fully_shard/_fsdp_param.py ``_get_grad_inner_tensor``
        # hands on the TP-local gradient; measured by vramlens.trace.fsdp on a 2-D mesh)
        gb = DTYPE_BYTES[w.run_dtype] if sharded3 else pbytes
        if sharded3:
            head_grad = round_up(-(-spec.vocab_size // w.tp) * spec.hidden_size * gb, BLOCK)
        else:
            head_grad = round_up(int(spec.vocab_size * spec.hidden_size * gb * sp.gradients), BLOCK)
    gather_block, gather_root, reduce_block = (fsdp_buffers(spec, w, Wt.weight_dtype_bytes(w)) if sharded3
                                               else (0, 0, 0))
    units = (separate_units(spec, w, DTYPE_BYTES[w.run_dtype] if w.fsdp_mixed_precision else Wt.weight_dtype_bytes(w))
             if sharded3 else (0, 0))
    rt = runtime(gpu, w)
    # persistent tensors, for the allocator's reserve
    full_params = w.method == "full" and not w.quantized
    wb = Wt.weight_dtype_bytes(w)
    state_b = O.state_dtype_bytes(w)
    # FSDP2 allocates the all-gather buffers and the sharded gradients on its own streams, whose
    # freed blocks the default stream cannot reuse: those pools are reserved beside the default's
    stream_pools = sum(fsdp_stream_pools(spec, w, wb)) if sharded3 and w.fsdp else 0
    default_grads = 0 if stream_pools else grads
    # FSDP1 gathers its flat parameters on the unshard stream (parallel.fsdp1_stream_pools): not the default's
    default_comm = 0 if stream_pools and w.fsdp_version == 1 else comm
    parts = [
        (wb, weights, full_params and sp.weights == 1),
        # under optimizer_in_backward one gradient is alive at a time (grads is the largest), not one per parameter
        (pbytes, default_grads, full_params and sp.gradients == 1 and not in_bwd),
        (4, master, full_params and sp.optimizer == 1),
        (state_b, opt, False),
        (1, default_comm, False),
        (pbytes, pp_grads, False),
    ]
    n_states = O.STATES_PER_PARAM.get(w.optimizer, 0)
    if full_params and sp.optimizer == 1 and opt and n_states and not paged:
        # Adam's, SGD's and Lion's states are parameter-shaped (torch.zeros_like(p)), one tensor each
        parts[3] = (state_b, opt, True)
        parts.extend([(state_b, opt, True)] * (n_states - 1))
    reserve_base, reserve_floor = persistent_part_reserve(spec, tuple(parts), w.alloc_conf)
    explain["master_weights"] = (
        "fp32 master copy (4 B/param) kept by the mixed-precision optimizer" if master else
        (f"autocast's cached {w.amp} copies of the trainable weights, alive through backward" if autocast else
         ("offloaded to CPU" if w.offload != "none" and w.amp else "no mixed precision"))
    )
    explain["gradients"] = (f"optimizer in backward: one gradient at a time, the largest ({grads:,} B)" if in_bwd else
                            f"{trainable:,} trainable params x {pbytes} B") if grads else (
        "gradient partition offloaded to CPU" if w.training else "no training")
    if grads and tp_emb_grad and not in_bwd:
        explain["gradients"] += (f" on this rank's share, + {tp_emb_grad:,} B: the input embedding's gradient is "
                                 "whole (V x h) on every tensor-parallel rank (DTensor's embedding backward)")
    explain["optimizer_states"] = opt_formula if opt or paged else (
        "offloaded to CPU" if w.offload != "none" else "no optimizer")
    if paged:
        explain["optimizer_states"] += (f"; {paged:,} B of them paged (CUDA unified memory, outside the allocator: "
                                        "tensors of at least 1e5 elements)")
    if pp_grads:
        explain["gradients"] += (f"; under pipeline parallelism ({pp_grads:,} B until the step's last backward): the "
                                 "stage's gradients unsharded, accumulated over the micro-batches in FSDP2's "
                                 "reduce_dtype, reduce-scattered after the last one (torch.distributed.pipelining's "
                                 "FSDP stages, torchtitan)")
    explain["comm_buffers"] = comm_formula or "single GPU: none"
    explain["optimizer_step"] = opt_tmp_formula
    setup_reserve = torchtune_nf4_setup_peak(spec, w) or 0
    if setup_reserve:
        notes.append(f"quantized on the GPU (torchtune's 2024 QLoRA set-up): building, deep-copying and loading the "
                     f"NF4 weights reserve {human_bytes(setup_reserve)}, kept through training (no empty_cache): "
                     "the peak reserved is at least that")
    return TrainState(
        sp=sp, weights=weights, master=master, autocast=autocast, frozen_casts=frozen_casts, head_casts=head_casts, recompute_cached=recompute_cached,
        grads=grads, opt=opt,
        opt_tmp=opt_tmp, comm=comm, host=host, head_grad=head_grad, trainable=trainable, pbytes=pbytes,
        workspace=rt.workspace_bytes, outside=rt.outside_allocator_bytes + paged, paged=paged,
        reserve_base=reserve_base,
        reserve_floor=reserve_floor, reserve_persistent=weights + master + opt + default_comm + default_grads + pp_grads,
        pp_grads=pp_grads, pp_grads_fwd=pp_grads_fwd,
        stream_pools=stream_pools, setup_reserve=setup_reserve, alloc_conf=w.alloc_conf,
        gather_block=gather_block, gather_root=gather_root, reduce_block=reduce_block,
        gather_input=cast_all_gather_input(w, gather_block) if sharded3 else 0,
        ds_bucket=(deepspeed_ipg_bucket(pbytes, ds_reduce_bucket_size(spec, w))
                   if sharded3 and w.zero == 3 else 0),
        gather_kept=sharded3 and w.fsdp and (w.fsdp_strategy == "shard-grad-op" or pipelined_fsdp(w)),
        gather_embed=units[0], gather_head=units[1], loss_chunks=w.loss_chunks,
        root_resharded=(sharded3 and w.fsdp and w.fsdp_version == 2 and w.fsdp_strategy != "shard-grad-op"
                        and not pipelined_fsdp(w)),
        keep_grads=w.keep_grads,
        fsdp1=sharded3 and w.fsdp and w.fsdp_version == 1,
        grad_block=gather_block if sharded3 and w.fsdp and w.fsdp_version == 1 and w.method == "full" else 0,
        in_backward=in_bwd, in_backward_addend=head_grad if in_bwd and spec.tied_embeddings else 0,
        last_grads=0 if in_bwd else last_gradients(spec, w, grads),
        master_grads=master_grads if (w.training and w.offload == "none") else 0,
        notes=tuple(notes), explain=explain, runtime_explain=rt.explain,
    )


def train_phases(st: TrainState, acts: int, loss_tmp: int, head_saved: int, grad_accum: int,
                 logits: int = 0, later_pass: int = 0, *, recompute: int = 0, recompute_after: int = 0,
                 uncheckpointed: tuple[int, int] = (1, 1), block_kept: int = 0, block_backward: int = 0,
                 loss_backward: int | None = None, loss_backward_over: int | None = None,
                 head_backward: int | None = None, head_grads: int = 1, head_backward_later: int = 0,
                 head_grad_in_forward: bool = False, final_norm_backward: int = 0, dequant_forward: int = 0,
                 dequant_backward: int = 0, dequant_temporary: int = 0,
                 mlp_backward: int = 0, kept_inputs: int = 0,
                 kept_next: bool = False, held_at_loss: bool = False, head_dequant_forward: int = 0,
                 head_dequant_backward: int = 0, loss_outside_model: bool = False,
                 offloaded_block: tuple[int, int, int] = (0, 0, 0),
                 tied_last: int | None = None, logits_held: int = 0) -> tuple[tuple[str, int], ...]:
    """Live bytes at each phase's peak (workspaces included); see the module docstring.

    Args:
        acts: saved activations of all local blocks, plus inputs and the head's saved tensors.
        recompute: what a checkpointed block's recomputation and backward add (0 when no block is
            checkpointed; vramlens.estimator.core.BlockFigures).
        recompute_after: what backward has freed by the first recomputation's peak: the final norm's
            tensors, under every:N the blocks after the last checkpointed one, under selective-op the
            saved outputs the recomputation hands back and nothing else keeps.
        uncheckpointed: (blocks not checkpointed, all blocks): the share of autocast's weight copies
            autograd keeps through backward.
        block_kept: what one block keeps for backward (FSDP: freed before the next block's backward).
        block_backward: what a block's backward holds above its saved tensors (its MLP's gradients).
        loss_tmp: the loss' transient beyond what it saves (logits and their fp32 upcast).
        head_saved: what the loss saves for backward (the fp32 log_softmax output).
        logits: the logits' bytes in the compute dtype (their gradient enters the output layer's backward).
        later_pass: with several forwards per step (the embedding case's text columns), what is alive
            besides every gradient when the first column's backward starts (core.activation_totals).
        loss_backward: the loss' backward transient (default: two fp32 b*s*V gradients, 2 x head_saved).
        loss_backward_over: what of it is live beyond ``acts`` at its peak (default: all of it;
            less when the loss frees a saved tensor first: activations.LossBackward).
        head_backward: the logits' gradient entering the output layer's backward (default: ``logits``).
        head_grads: output-layer weight gradients alive at once in its later backwards (3 with chunked
            logits: two addends and their sum), with ``head_backward_later`` bytes of logits' gradients.
        head_grad_in_forward: the output layer's weight gradient is made in forward (Liger's fused loss).
        final_norm_backward: the final norm's backward with its incoming gradient (chunked or fused loss).
        tied_last: an output layer tied to the input embedding (vramlens.estimator.state.tied_last): what is
            alive beyond the gradients when the embedding's backward adds its weight gradient to the output
            layer's; None when untied.
        dequant_forward, dequant_backward: a transient inside a block's forward / backward on top of the
            blocks' saved activations (4-bit weights dequantized for a matmul, DoRA's weight norm;
            core.activation_totals), counted with every block's activations alive (an upper bound by
            what the last block has not saved yet).
        dequant_temporary: of those, the temporary a checkpointed block's recomputation adds on top of
            ``recompute`` (its 4-bit matmuls dequantize again).
        mlp_backward: the last block's MLP backward transient, once the head's saved tensors are gone
            (activations.mlp_backward_bytes): the backward peak of models whose head is small. A
            candidate of its own beside ``dequant_backward``'s and the recomputation's, never
            added to them (0 when the last block is checkpointed: ``recompute`` covers it).
        kept_inputs: what bitsandbytes < 0.43.2's 4-bit matmuls keep on their autograd nodes
            (activations.bnb_kept_input_bytes, all blocks), and the (key, value) tuples an older release
            returns to a loop that holds them (losses.presents_held): in ``acts`` too, but not freed by
            backward, so alive until the graph (or the output holding them) goes (Workload.bnb_inputs).
        kept_next: the loop keeps the step's output, so the graph and ``kept_inputs``, through the
            optimizer step and until the next forward returns (before its loss).
        held_at_loss: ... and the loss runs inside that forward (transformers' loss with labels under
            --holds-outputs), so the previous step's output is still alive at the loss' peak.
        loss_outside_model: FSDP2 with the loss run after the model's forward returns (torchtune's
            recipe, under activation offloading): nothing is gathered while it runs forward and backward.
        offloaded_block: FSDP2 under activation offloading, (blocks on this GPU, one block's sharded
            gradients, a block's input norm's backward with its brought-back fp32 input): the candidates
            of a block's backward when its saved tensors come back from the host.
        head_dequant_forward, head_dequant_backward: a 4-bit output layer's matmul in forward / backward
            (``quant_head``: its weight dequantized with the logits or their gradients,
            activations.head_dequant_transients), on top of the blocks' saved activations.
        logits_held: of ``head_saved``, what the loop holds beyond the loss' backward (LitGPT's fp32 logits after
            Lightning Fabric's output cast, losses.fabric_upcast_chunks): alive in every later candidate of backward.
    """
    freed = head_saved - logits_held  # what the loss' backward frees
    loss_bwd = 2 * head_saved if loss_backward is None else loss_backward
    if loss_backward_over is not None:
        loss_bwd = loss_backward_over
    head_in = logits if head_backward is None else head_backward
    head_fwd = st.head_grad if head_grad_in_forward else 0
    # gradients exist during forward when they accumulate, or when zero_grad keeps them (set_to_none=False)
    gfwd = st.grads if (grad_accum > 1 or st.keep_grads) else 0
    if st.pp_grads:
        # a pipeline stage's gradients accumulate unsharded over the micro-batches (parallel.pipelined_fsdp): the
        # forwards after rank 0's first backward (1F1B's steady phase) hold them; the sharded ones exist after the
        # step's last backward only
        gfwd = st.pp_grads_fwd
    ckpt = recompute > 0
    rec = recompute + dequant_temporary + st.recompute_cached if ckpt else 0  # a recomputed block's figure with its dequantization
    # autocast's copies: all of them during forward; through backward only when autograd keeps
    # them (in the blocks not checkpointed); a checkpointed block's saved tensors go to the
    # checkpoint's hooks, not autograd, so its copies go with the autocast cache when the
    # forward's autocast context exits
    kept_n, all_n = uncheckpointed
    # the output layer's frozen casts are saved by autograd outside any checkpointed block (TrainState.head_casts)
    head_casts = min(st.head_casts, st.frozen_casts)
    block_casts = (st.frozen_casts - head_casts) * kept_n // all_n
    fwd_casts = st.autocast + head_casts + block_casts
    bwd_casts = st.autocast * kept_n // all_n + head_casts + block_casts
    if st.gather_block or st.gather_root:
        # FSDP2/ZeRO-3 (see parallel.gathered_sizes): the root stays gathered from its forward to
        # the end of backward; forward holds the current and prefetched block; backward's first
        # blocks hold the current, the prefetched and one reduce-scatter input; everything is
        # resharded before the optimizer step (no gathered buffers then)
        # (DeepSpeed's ZeRO-3 also holds its gradient bucket throughout: parallel.deepspeed_ipg_bucket)
        sh = st.weights + st.master + st.opt + st.ds_bucket
        B, R = st.gather_block, st.gather_root
        if st.gathers_aside:  # FSDP1's gathered flat parameters, as the default stream's pool sees them: none
            B = R = 0
        # blocks in flight besides R: forward's current + prefetched, backward's current +
        # prefetched + reduce-scatter input; under shard-grad-op the blocks are already in R and
        # only one flat all-gather / reduce-scatter buffer is in flight
        Br = st.reduce_block or B
        gathers = B if st.gather_kept else 2 * B  # current + prefetched all-gathers
        # ... and one reduce-scatter input; under a mixed-precision policy the prefetch's cast input
        bufs = gathers + Br + st.gather_input
        # forward: a block runs with its unsharded parameters and the flat all-gather output it was
        # copied from, which FSDP2 holds (FSDPCommContext.all_gather_state) until the next
        # all-gather; at the loss only the last block's flat output is still held
        prev = kept_inputs if kept_next else 0  # the previous step's held outputs, until this forward returns
        fwd = sh + gfwd + R + fwd_casts + max(gathers + acts - head_saved + prev,
                                              B + acts + loss_tmp + (prev if held_at_loss else 0))
        root_at_loss, block_at_loss = R, B
        if st.root_resharded:
            # fully_shard(root, reshard_after_forward=True), as torchtune's shard_model, torchtitan's apply_fsdp and
            # vramlens' tracer pass it: given explicitly, FSDPState._lazy_init (_fsdp_state.py, torch 2.13) keeps the
            # root's post_forward_mesh_info (_auto_reshard_after_forward is False), so the root reshards after its
            # forward like a block. Forward starts with the root's flat all-gather output held
            # (FSDPCommContext.all_gather_state) beside its unsharded parameters until block 0's all-gather is copied
            # out: 2R and block 0's; backward starts by gathering the root again (its pre-backward hook on the
            # forward's output) with every saved activation alive: 2R again, the flat output freed at copy-out
            fwd = max(fwd, sh + gfwd + fwd_casts + 2 * R + gathers)
        E, H = st.gather_embed, st.gather_head
        if H:
            # the embedding and the output layer in units of their own (parallel.separate_units), resharded after
            # each forward: the embedding's flat output and unsharded parameters (2E), then block 0's beside the
            # embedding's flat output (E+2B); the output layer, once per loss chunk: its first call beside the last
            # block's flat output (B+2H), each later one beside the previous call's flat output and the logits of
            # the chunks before (3H + logits); the loss runs with the output layer's flat output held, not the last
            # block's
            later = H + logits - logits // st.loss_chunks if st.loss_chunks > 1 else 0
            fwd = max(fwd, sh + gfwd + fwd_casts + 2 * R + max(2 * E, E + gathers),
                      sh + gfwd + fwd_casts + R + acts - head_saved + 2 * H + max(B, later))
            block_at_loss = H
        if st.fsdp1:
            # FSDP1 (parallel.fsdp1_stream_pools): forward gathers one block at a time (no forward prefetch) and
            # frees it at the block's post-forward, so the loss runs with the root alone gathered (under
            # shard-grad-op every block stays gathered, in R). In backward a block's gradients come out of the
            # split of its flat parameter into views: the parameters' gradients wait in the input buffer of
            # autograd's SplitWithSizesBackward while the block's backward runs (up to one block's, beside the
            # current and the prefetched block, BACKWARD_PRE), and once all are made it cats them into one
            # unsharded flat gradient (traced: cat.default of one block's size), both alive with the block's own
            # saved tensors freed; the post-backward hook then frees the flat gradient (nothing is held to the
            # next block, as FSDP2's reduce-scatter input is)
            fwd = sh + gfwd + R + fwd_casts + max((0 if st.gather_kept else B) + acts - head_saved + prev,
                                                  acts + loss_tmp + (prev if held_at_loss else 0))
            if st.gather_kept:  # shard-grad-op: the blocks are in R until their post-backward, none gathered again
                gathers = block_at_loss = 0
            bufs = gathers + st.grad_block + (0 if st.gathers_aside else st.gather_input)
        if loss_outside_model and not st.gather_kept:
            # torchtune's recipe calls the loss on the logits the model returned: the root's post-forward
            # hook has resharded it (fully_shard(..., reshard_after_forward=True), as torchtune's
            # shard_model passes) and freed the last block's all-gather output, and the root gathers
            # again only when the logits' gradient reaches its pre-backward hook: the loss' forward and
            # backward run with nothing gathered. The forward's peak is then its start: until block 0's
            # all-gather is copied out, the root's flat all-gather output (FSDPCommContext.all_gather_state)
            # is held beside the root's unsharded parameters and block 0's
            root_at_loss = block_at_loss = 0
            fwd = max(sh + gfwd + fwd_casts + 2 * R + gathers,
                      sh + gfwd + R + fwd_casts + gathers + acts - head_saved, sh + gfwd + fwd_casts + acts + loss_tmp)
        # the output layer's unsharded gradient, until the root's reduce-scatter at the end of backward; in a unit
        # of its own it is reduce-scattered after the output layer's backward, before the blocks'
        head = max(gfwd, 0 if st.gather_head else st.head_grad)
        grads_bwd = st.grads - st.last_grads
        # the last block's backward runs before any reduce-scatter; each later block's starts with
        # the previous block's reduce-scatter input still held (foreach_reduce's input is kept until
        # the next reduce-scatter) and that block's activations freed. A block's backward holds its
        # MLP's gradients above what it saved (the recomputation's figure includes them)
        work = recompute or block_backward
        pp_freed = pp_start = 0
        if st.pp_grads:
            # every backward holds them, counted whole from the first backward on
            head = grads_bwd = st.pp_grads
            if not st.pp_grads_fwd:
                # ... and where no forward follows a backward (1F1B with m <= pp), they are whole only once the
                # first micro-batch's backward is done, which has freed its block inputs on the stage (block 0's,
                # recomputed last, aside); the backward starts with every input alive and no gradient
                pp_freed = block_kept * max(0, st.sp.layers // st.sp.stages_per_rank - 1)
                pp_start = sh + R + gathers + bwd_casts + acts - freed - recompute_after + work
        bwd = max(sh + gfwd + root_at_loss + block_at_loss + bwd_casts + acts + loss_bwd,
                  sh + head + R + gathers + bwd_casts + acts - freed - recompute_after + work - pp_freed,
                  sh + head + R + bufs + bwd_casts + acts - freed - block_kept + work - pp_freed,
                  sh + grads_bwd + R + (B + 2 * st.grad_block + st.gather_input if st.fsdp1 else bufs + work),
                  pp_start)
        if st.root_resharded and not loss_outside_model:
            bwd = max(bwd, sh + gfwd + bwd_casts + acts + 2 * R)
        if H:
            # the output layer gathered again in backward (its pre-backward hook on a call's logits: the flat
            # output beside the unsharded parameters) with the logits' gradient; under full fine-tuning autograd
            # sums its weight's gradients over the chunks (as on one GPU: head_backward_later, head_grads) with the
            # unsharded parameters and the last block's prefetched flat output alive, before the one reduce-scatter;
            # there the other chunks' logit gradients, which one GPU's backward holds at the second chunk
            # (losses.loss_figures: (n-2) chunks), are already consumed in the traced order (vramlens.trace.fsdp:
            # each call's pre-backward hook runs that chunk's output-layer backward in turn). Then, under full
            # fine-tuning, the embedding is gathered again after block 0's backward (its output needs a gradient)
            bwd = max(bwd, sh + gfwd + bwd_casts + R + 2 * H + acts - freed + head_in)
            if st.head_grad:
                pending = logits * max(0, st.loss_chunks - 2) // st.loss_chunks
                bwd = max(bwd, sh + gfwd + bwd_casts + R + H + B + acts - freed + max(0, head_backward_later - pending)
                          + head_grads * st.head_grad)
            if st.head_grad:
                # block 0's backward prefetches the embedding (E, not a block) beside its own parameters and block
                # 1's reduce-scatter input, with the other blocks' saved tensors freed
                rest = max(0, st.sp.layers - 1) * block_kept
                bwd = max(bwd, sh + grads_bwd + R + B + E + Br + bwd_casts + acts - freed - rest + work,
                          sh + grads_bwd + R + 3 * E + Br)
        if st.fsdp1:  # SplitWithSizesBackward's cat: the flat gradient beside the parameters' gradients
            bwd = max(bwd, sh + head + R + gathers + 2 * st.grad_block + st.gather_input + bwd_casts + acts - freed
                      - block_kept)
        n_blocks, g, norm_bwd = offloaded_block
        if loss_outside_model and norm_bwd and not st.gather_kept:
            # a block's input norm's backward, the block's saved tensors offloaded: its unsharded gradients
            # (B, all made by then) and the norm's fp32 backward with the input brought back from the host;
            # the root still gathered and its output layer's gradient unsharded (the root's reduce-scatter
            # runs last). The first block in backward holds its gathered parameters and the prefetched
            # block's; a middle one also the previous block's reduce-scatter input; block 0 its own
            # parameters and block 1's reduce-scatter input, with every other block's sharded gradients
            base = sh + head + R + bwd_casts + B + norm_bwd
            cands = [base + gathers, base + B + Br + (n_blocks - 1) * g]
            if n_blocks >= 3:
                cands.append(base + gathers + Br + (n_blocks - 2) * g)
            bwd = max(bwd, *cands)
        optim = sh + _step(st) + prev
    else:
        persistent = st.weights + st.master + st.opt + st.comm
        held = kept_inputs if kept_next else 0  # the previous step's, until this forward returns
        fwd = persistent + max(gfwd, head_fwd) + fwd_casts + max(acts + loss_tmp + (held if held_at_loss else 0),
                                                                 acts - head_saved + dequant_forward + held,
                                                                 acts - head_saved + head_dequant_forward + held)
        # the loss' backward holds two fp32 b*s*V gradients; once they are done (and what the loss
        # saved is freed), the output layer's backward holds the logits' gradient (compute dtype)
        # and allocates its weight gradient
        if head_backward is None:
            bwd_start = persistent + gfwd + bwd_casts + acts + max(loss_bwd, logits + st.head_grad - head_saved)
        else:
            # a chunked or fused loss has freed what it saved before the output layer's backward
            bwd_start = persistent + max(gfwd, head_fwd) + bwd_casts + max(
                acts + loss_bwd, acts - freed + head_in + st.head_grad - head_fwd,
                acts - freed + head_backward_later + head_grads * st.head_grad - head_fwd,
                acts - freed + final_norm_backward + st.head_grad - head_fwd)
        if ckpt:
            # the head's saved tensors (and under every:N the trailing blocks' activations) are
            # freed before the last checkpointed block is recomputed; its 4-bit matmuls dequantize again
            recompute_peak = persistent + max(gfwd, st.head_grad) + acts - freed - recompute_after + rec
            # the first block is recomputed before its own (and the embeddings') gradients exist
            bwd = max(bwd_start, recompute_peak, persistent + st.grads - st.last_grads + rec)
        else:
            bwd = max(bwd_start, persistent + st.grads + kept_inputs,
                      persistent + gfwd + bwd_casts + acts - freed + dequant_backward if dequant_backward else 0)
        if mlp_backward:
            bwd = max(bwd, persistent + max(gfwd, st.head_grad) + bwd_casts + acts - freed + mlp_backward)
        if head_dequant_backward:
            bwd = max(bwd, persistent + gfwd + bwd_casts + acts - freed + head_dequant_backward)
        if later_pass:
            bwd = max(bwd, persistent + st.grads + later_pass)
        if tied_last is not None and st.head_grad and not st.in_backward:
            # the last op of backward: the output layer's weight gradient waited in the shared leaf's
            # InputBuffer, the embedding's is made beside it, and the two are added out of place
            bwd = max(bwd, persistent + st.grads + 2 * st.head_grad + tied_last + kept_inputs)
        optim = persistent + _step(st) + held
        if st.in_backward:
            # each parameter's step runs inside backward on its own gradient: an untied output
            # layer's first, while the activations are alive; a tied one's last, on the sum of the
            # head's and the embedding's gradients (autograd's InputBuffer adds them), one addend
            # still alive during the step; nothing is left for the optimizer phase
            head_step = 0 if st.in_backward_addend else persistent + bwd_casts + acts + st.head_grad + st.opt_tmp
            bwd = max(bwd, head_step, persistent + st.grads + st.in_backward_addend + st.opt_tmp + rec)
            optim = persistent
    ws = st.workspace
    return (("forward", fwd + ws), ("backward", bwd + ws), ("optimizer", optim + ws))


def tied_last(spec: ModelSpec, has_head: bool) -> int | None:
    """For train_phases' ``tied_last``: None unless the output layer is tied to the input embedding (BERT's and
    DistilBERT's masked-LM decoders, GPT-2, tied decoders; Whisper's has its own figure, the encoder's backward
    coming after: vramlens.estimator.core); else what is held then beside the gradients, the two addends and
    ``kept_inputs`` (``--loss logits-sum``'s outputs are there): nothing."""
    if not (spec.tied_embeddings and has_head) or spec.audio is not None:
        return None
    return 0


def _step(st: TrainState) -> int:
    """Gradients and temporaries alive in the optimizer step. With an fp32 master copy the half
    gradients are converted to fp32 first (both alive), then the step runs on the fp32 ones."""
    if st.master_grads:
        return max(st.grads + st.master_grads, st.master_grads + st.opt_tmp)
    return st.grads + st.opt_tmp


def default_stream_state(st: TrainState) -> TrainState:
    """``st`` as the default stream's pool sees it: under FSDP2 the sharded gradients are the
    reduce-scatter stream's (parallel.fsdp_stream_pools), under FSDP1 also the gathered flat parameters
    the unshard stream's (parallel.fsdp1_stream_pools), so phases computed from this state give
    the default stream's live bytes; ``st`` itself when nothing is on another stream."""
    if not st.stream_pools:
        return st
    # FSDP1 allocates the unsharded flat parameters (and the param_dtype shard copies) on its unshard streams
    return replace(st, grads=0, last_grads=0, gathers_aside=st.fsdp1)


def reserved_total(st: TrainState, peak: int, *, extra_persistent: int = 0,
                   default_peak: int | None = None, loss_tensor: int | None = None) -> tuple[int, int]:
    """(max_memory_reserved, nvidia-smi total) for a peak of ``peak`` allocated bytes.

    Under FSDP2 ``default_peak`` is the default stream's peak (phases of default_stream_state);
    the side streams' pools (TrainState.stream_pools) are reserved on top of its reserve.
    ``loss_tensor``: a training step's, the loss' largest tensor (activations.largest_loss_tensor), which
    sets the short-lived tensors' allowance; None (inference) keeps the share of the short-lived bytes
    (allocator.analytic).
    """
    from vramlens.estimator.reserve import transient_reserve

    p = peak if default_peak is None or not st.stream_pools else default_peak
    t = max(0, p - st.reserve_persistent - extra_persistent)
    reserved = max(st.reserve_base + extra_persistent + transient_reserve(t, st.alloc_conf, loss_tensor), st.reserve_floor + extra_persistent + t,
                   p) + st.stream_pools
    reserved = max(reserved, peak, st.setup_reserve)
    return reserved, reserved + st.outside
