"""FSDP traced per rank: ``fully_shard`` (FSDP2) or ``FullyShardedDataParallel`` (FSDP1) on the real
engine, simulated on one process.

PyTorch's fake process group (``dist.init_process_group("fake", ...)`` with a ``FakeStore``)
lets one process play rank 0 of N: collectives return at once and touch nothing, but every
buffer FSDP2 allocates for them is allocated exactly as on a real rank. The model is built on
``meta``, ``fully_shard`` is applied to every transformer block (the classes transformers
names in ``_no_split_modules``) and then to the root, and the sharded parameters are
materialised as fake CPU tensors (``to_empty`` inside the FakeTensorMode). The Runner then
runs the usual training steps under the Recorder.

What is recorded, per rank:

* weights: the sharded parameters (each a padded shard: FSDP2 pads dim 0 up to a multiple of
  N, rank 0 holds ``ceil(dim0 / N)`` rows) and the unsharded buffers;
* gradients: the sharded DTensor gradients (one flat reduce-scatter output per FSDP group);
* optimizer_states: the optimizer's state of the sharded parameters;
* comm_buffers: the all-gather buffers (the flat all-gather output, and the unsharded
  parameters FSDP2 re-allocates with ``untyped_storage().resize_()`` before a block runs and
  frees the same way after it) and the reduce-scatter input;
* activations and temporaries as in a single-GPU trace (the unsharded gradients autograd
  makes in backward, freed once copied into the reduce-scatter input, are temporaries).

Rank 0 is representative: every rank runs the same program on equal shards, and rank 0's
shards are the largest (the dim-0 padding falls on the last ranks).

FSDP over tensor parallelism (``--fsdp --tp T --gpus D*T``) runs as torchtitan's
``parallelize_llama`` does: a 2-D mesh ``(dp, tp)``, torchtitan's TP plan (vramlens.trace.tp
``apply_plan``) with ``parallelize_module`` on the "tp" dimension first, then ``fully_shard`` per
block and the root on the "dp" dimension; FSDP2 shards each TP-local shard again on dim 0 and
gathers and reduce-scatters over dp only. Before its reduce-scatter FSDP2 redistributes each
gradient to its parameter's TP placement (``FSDPParam._get_grad_inner_tensor``), so the input
embedding's whole (V, h) gradient that TP alone keeps (vramlens.estimator.parallel
``tp_embedding_gradient_extra``) is a temporary here.

FSDP1 (``fsdp_version=1``): ``FullyShardedDataParallel`` runs on the same fake process group and fake CPU
tensors with ``device_id=torch.device("cpu")`` (its CPU device handle has the streams' API) and
``sync_module_states=False``: the model is materialised first (``to_empty`` in the fake mode) and wrapped
after, each block a unit (under LoRA each adapter linear too) and the rest the root's. Its padded unsharded flat
parameters (``FlatParamHandle.unshard``), the ``param_dtype`` shard copies and a padded reduce-scatter input are
comm_buffer; the unsharded flat gradient autograd makes is a temporary. One fix for fake tensors:
``_catch_all_reshard`` compares ``data_ptr()``s, all 0 under fake tensors, so its check is made on the storages.

One unrecorded warm-up step runs first (DTensor's first call of each op propagates shardings
on full-size temporaries, and FSDP2 initialises lazily); the optimizer's state is then
cleared, so the recorded step 1 shows the state being created and step 2 the steady state.
"""

from __future__ import annotations

import contextlib
import gc
import time
from typing import Any

from vramlens.errors import InputError, TraceError
from vramlens.trace.common import quiet_third_party, resolve_workload
from vramlens.trace.events import TAG_COMPONENT, summarize
from vramlens.trace.ranks import fake_process_group, materialize, rank_result, record_rank, warm_up_step
from vramlens.trace.result import TraceResult
from vramlens.trace.tp import apply_plan, check_training_plan, divides, output_tie
from vramlens.workload import Workload


def _check(model: Any, wl: Workload, world_size: int, backend: str, layers) -> None:
    from vramlens.trace.build import is_factory

    if backend != "fake":
        raise TraceError(f"FSDP per rank is traced with fake tensors only (backend={backend!r} given)")
    if layers is not None:
        raise TraceError("--layers (extrapolation) is not supported with --fsdp: trace the whole model")
    if is_factory(model):
        raise TraceError("--fsdp traces transformers models (blocks sharded one by one); "
                         "a factory module cannot be traced with FSDP: use `vramlens estimate`")
    if not wl.training:
        raise TraceError("FSDP shards training state: trace --mode train with --fsdp")
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 2:
        raise InputError(f"world_size={world_size!r} must be a whole number >= 2")
    if wl.pp > 1 or wl.zero:
        raise TraceError(f"only FSDP (full shard), alone or over tensor parallelism, is traced; pp={wl.pp} "
                         f"zero={wl.zero}: use `vramlens estimate`")
    if wl.tp > 1:
        if world_size % wl.tp or world_size // wl.tp < 2:
            raise InputError(f"world_size={world_size} must be a multiple of tp={wl.tp} with at least 2 "
                             "data-parallel ranks for FSDP over tensor parallelism: set --gpus to dp x tp")
        check_training_plan(wl)
    if wl.method == "qlora" or wl.quant is not None:
        raise TraceError("quantized weights cannot be traced under FSDP: use `vramlens estimate`")
    if wl.offload != "none":
        raise TraceError(f"offload={wl.offload} (FSDP CPU offload) is not traced: use `vramlens estimate`")
    if wl.fsdp_version == 1 and wl.tp > 1:
        raise TraceError("FSDP1 (fsdp_version=1) over tensor parallelism is not traced: trace --fsdp-version 2, "
                         "or use `vramlens estimate`")
    if wl.fsdp_strategy == "hybrid":
        raise TraceError("fsdp_strategy=hybrid needs a 2-D device mesh, which is not traced yet: trace "
                         "--fsdp-strategy full over one node's GPUs, or use `vramlens estimate`")
    if wl.amp is not None and wl.amp == wl.dtype:
        raise TraceError("--amp equal to --dtype (fp32 master copies beside half weights) is not traced under "
                         "FSDP: use --dtype fp32 --amp bf16, or `vramlens estimate`")


def _shares_outside(model, module) -> bool:
    """Whether a parameter of ``module`` is also registered outside it (a tied weight: BERT's
    ``word_embeddings`` is the MLM decoder's weight)."""
    own = {id(p) for p in module.parameters()}
    inside = {id(m) for m in module.modules()}
    return any(id(p) in own for m in model.modules() if id(m) not in inside for p in m.parameters(recurse=False))


def _blocks(model) -> list:
    """The transformer blocks to shard one by one: outermost modules of a class transformers
    lists in ``_no_split_modules``; else the children of the longest ModuleList.

    A candidate holding a parameter tied to a module outside it stays with the root: FSDP2
    manages each parameter in one group (``fully_shard`` raises "shared with a parameter already
    managed by another FSDP group"), and the encoders list their embeddings (``BertEmbeddings``,
    ``RobertaEmbeddings``, ``ModernBertEmbeddings``) in ``_no_split_modules`` while their MLM head's
    decoder reuses the word embeddings. The root then holds both ends of the tie, as it holds a
    decoder's tied embedding and output layer (GPT-2, Qwen2.5), which the estimator's root term
    (vramlens.estimator.parallel.gathered_sizes: embedding, head, final norm) counts.
    """
    from torch import nn

    names = set(getattr(model, "_no_split_modules", None) or ())
    found: list[nn.Module] = []
    if names:
        inside: set[int] = set()
        for _n, m in model.named_modules():
            if id(m) in inside:
                continue
            if type(m).__name__ in names and m is not model and not _shares_outside(model, m):
                found.append(m)
                inside.update(id(x) for x in m.modules())
    if not found:
        lists = [m for m in model.modules() if isinstance(m, nn.ModuleList)]
        if lists:
            longest = max(lists, key=len)
            found = list(longest)
    return found


def _comm_region(fn, rec, live: list[bool]):
    """``fn`` with what it allocates tagged as comm_buffer while the trace is live (FSDP2's and FSDP1's
    all-gather and reduce-scatter functions)."""

    def wrapped(*a, **k):
        if not live[0]:
            return fn(*a, **k)
        prev, rec.tag_new = rec.tag_new, "comm_buffer"
        try:
            return fn(*a, **k)
        finally:
            rec.tag_new = prev

    return wrapped


@contextlib.contextmanager
def _fsdp_tags(rec, live: list[bool]):
    """Tag what FSDP2 allocates for its collectives as comm_buffer.

    The all-gather (flat output, and the cast copy-in under a mixed-precision policy) and the
    copy-out into the unsharded parameters run with the recorder's ``tag_new`` set; the
    reduce-scatter input is marked when ``foreach_reduce`` returns it (its output is the
    sharded gradient, marked as such by the runner).
    """
    import torch.distributed.fsdp._fully_shard._fsdp_param_group as pg

    saved = (pg.foreach_all_gather, pg.foreach_all_gather_copy_out, pg.foreach_reduce)

    def region(fn):
        return _comm_region(fn, rec, live)

    def reduce(*a, **k):
        out = saved[2](*a, **k)
        if live[0] and out and out[0] is not None:
            rec.mark((out[0],), "comm_buffer")
        return out

    pg.foreach_all_gather = region(saved[0])
    pg.foreach_all_gather_copy_out = region(saved[1])
    pg.foreach_reduce = reduce
    try:
        yield
    finally:
        pg.foreach_all_gather, pg.foreach_all_gather_copy_out, pg.foreach_reduce = saved


def mixed_precision_policy(wl: Workload):
    """FSDP2's ``MixedPrecisionPolicy`` for ``wl``: torchtitan's default (torchtitan/distributed/
    parallel_dims / ``apply_fsdp``: ``param_dtype=bf16, reduce_dtype=fp32``) when fp32 parameters
    are trained with ``amp``; the default policy (no casts) otherwise."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    dtypes = _mixed_precision_dtypes(wl)
    return MixedPrecisionPolicy() if dtypes is None else MixedPrecisionPolicy(*dtypes)


def _mixed_precision_dtypes(wl: Workload):
    """(param_dtype, reduce_dtype) of FSDP's mixed precision for ``wl`` (bf16 or fp16 compute over fp32 parameters,
    fp32 reduce), or None: the same for FSDP2's MixedPrecisionPolicy and FSDP1's MixedPrecision."""
    from vramlens.trace.build import TORCH_DTYPES

    if wl.fsdp_mixed_precision and wl.amp is not None:
        return TORCH_DTYPES[wl.amp], TORCH_DTYPES["fp32"]
    return None


def _blocks_to_shard(model, verb: str) -> list:
    """The model's transformer blocks (:func:`_blocks`), or one line saying there are none."""
    blocks = _blocks(model)
    if not blocks:
        raise TraceError(f"{type(model).__name__}: no transformer blocks found to {verb} "
                         "(no _no_split_modules, no ModuleList)")
    return blocks


def _shard(built, mesh, wl: Workload) -> int:
    """``fully_shard`` each block, then the root; shard-grad-op is ``reshard_after_forward=False``
    (parameters stay gathered from forward to backward)."""
    from torch.distributed.fsdp import fully_shard

    reshard_after_forward = wl.fsdp_strategy != "shard-grad-op"
    mp = mixed_precision_policy(wl)
    blocks = _blocks_to_shard(built.model, "shard")
    for b in blocks:
        for m in _odd_dtype_modules(b):
            fully_shard(m, mesh=mesh, reshard_after_forward=reshard_after_forward, mp_policy=mp)
        fully_shard(b, mesh=mesh, reshard_after_forward=reshard_after_forward, mp_policy=mp)
    if wl.fsdp_units == "blocks+embed+output":
        # torchtune's shard_model with custom_sharded_layers ['tok_embeddings', 'output'] (training/_distributed.py
        # at 30b8519e): fully_shard, with the blocks' reshard_after_forward, on the output layer and the input
        # embedding as well, before the root
        for m in _embedding_and_output(built.model):
            fully_shard(m, mesh=mesh, reshard_after_forward=reshard_after_forward, mp_policy=mp)
    for m in _odd_dtype_modules(built.model):
        fully_shard(m, mesh=mesh, reshard_after_forward=reshard_after_forward, mp_policy=mp)
    fully_shard(built.model, mesh=mesh, reshard_after_forward=reshard_after_forward, mp_policy=mp)
    return len(blocks)


def _embedding_and_output(model) -> tuple:
    """The output layer and the input embedding of a transformers (or peft-wrapped) causal LM, for units of their
    own; one line when the model has no output layer or ties it to the embedding (one parameter in two FSDP
    groups: ``fully_shard`` refuses it)."""
    hf = model.get_base_model() if hasattr(model, "get_base_model") else model
    emb, out = hf.get_input_embeddings(), hf.get_output_embeddings()
    if emb is None or out is None:
        raise TraceError(f"fsdp_units='blocks+embed+output': {type(hf).__name__} has no output layer beside its "
                         "input embedding: use --fsdp-units blocks")
    if out.weight is emb.weight or _shares_outside(model, emb):
        raise TraceError(f"fsdp_units='blocks+embed+output': {type(hf).__name__} ties its output layer to the input "
                         "embedding (one parameter cannot be in two FSDP units): use --fsdp-units blocks")
    return out, emb


def _parallelize_2d(built, cfg: dict, mesh, wl: Workload) -> int:
    """torchtitan's order (torchtitan/models/llama3/infra/parallelize.py ``parallelize_llama``): the TP plan
    (``apply_tp``) with ``parallelize_module`` on the mesh's "tp" dimension, then ``fully_shard`` per block and
    the root over its "dp" dimension (``apply_fsdp``); FSDP2 shards the local TP shards again on dim 0."""
    divides(cfg, wl.tp)
    apply_plan(built.model, mesh["tp"], loss_parallel=wl.loss_parallel, fp8=wl.fp8)
    return _shard(built, mesh["dp"], wl)


def _odd_dtype_modules(group) -> list:
    """Modules of ``group`` (not yet in an FSDP group) whose own parameters are not in the group's
    most common dtype, each to be its own FSDP group.

    FSDP2 all-gathers a group as one flat buffer of one dtype (_fsdp_param_group.py: "FSDP expects
    uniform original parameter dtype" when the policy sets no ``param_dtype``); transformers keeps
    some modules in fp32 under bf16 weights (``_keep_in_fp32_modules_strict``: DeepSeek V2/V3's
    router ``gate``). Nested ``fully_shard`` on such a module gives it its own all-gather, as
    torchtitan does for modules it shards apart (``apply_fsdp``: the MoE experts).
    """
    from collections import Counter

    from torch.distributed.fsdp import FSDPModule

    def free(m) -> bool:
        return all(not isinstance(x, FSDPModule) for x in m.modules()) or m is group

    counts: Counter = Counter()
    for m in group.modules():
        if m is group or not isinstance(m, FSDPModule):
            for p in m.parameters(recurse=False):
                counts[p.dtype] += p.numel()
    if len(counts) < 2:
        return []
    common = counts.most_common(1)[0][0]
    out = []
    for m in group.modules():
        own = list(m.parameters(recurse=False))
        if m is group or isinstance(m, FSDPModule) or not own or not free(m):
            continue
        dtypes = {p.dtype for p in own}
        if common in dtypes:
            if len(dtypes) > 1:
                raise TraceError(f"{type(m).__name__} holds parameters of dtypes {sorted(map(str, dtypes))}: "
                                 "FSDP2 all-gathers one dtype per group; use `vramlens estimate`")
            continue
        out.append(m)
    return out


@contextlib.contextmanager
def _fsdp1_tags(rec, live: list[bool]):
    """Tag what FSDP1 allocates for its collectives as comm_buffer: the padded unsharded flat parameter
    (``FlatParamHandle.unshard``: ``_alloc_padded_unsharded_flat_param`` then the all-gather into it), the
    ``param_dtype`` copy of the shard under a mixed-precision policy (``pre_unshard``: ``_mp_shard``), and the
    reduce-scatter's padded input when the unsharded gradient needs padding (``_get_reduce_scatter_tensors``:
    ``F.pad``); its output is the sharded gradient, marked as such by the runner."""
    import torch.distributed.fsdp._flat_param as fp
    import torch.distributed.fsdp._runtime_utils as ru

    H = fp.FlatParamHandle
    saved = (H.unshard, H.pre_unshard, ru._get_reduce_scatter_tensors, ru._catch_all_reshard)

    def region(fn):
        return _comm_region(fn, rec, live)

    def reduce_tensors(state, unsharded_grad):
        padded, sharded = saved[2](state, unsharded_grad)
        if live[0] and padded is not unsharded_grad:
            rec.mark((padded,), "comm_buffer")
        return padded, sharded

    def catch_all_reshard(state) -> None:
        # _runtime_utils._catch_all_reshard (torch 2.13, :1130-1163) decides "already resharded" by comparing
        # data_ptr()s, which are all 0 under fake tensors: a unit whose post-backward hook did not run (a frozen
        # block whose input needs no gradient, as block 0's under LoRA) would stay gathered into the optimizer
        # step and the next forward. The same test on the storages, then the same reshard.
        h = state._handle
        if h:
            flat = h.flat_param
            if (flat.untyped_storage()._cdata == flat._local_shard.untyped_storage()._cdata
                    and not h._skipped_use_sharded_views):
                return
            ru._reshard(state, h, ru._should_free_in_backward(state, h))

    H.unshard, H.pre_unshard = region(saved[0]), region(saved[1])  # type: ignore[method-assign]
    ru._get_reduce_scatter_tensors = reduce_tensors
    ru._catch_all_reshard = catch_all_reshard
    try:
        yield
    finally:
        H.unshard, H.pre_unshard = saved[0], saved[1]  # type: ignore[method-assign]
        ru._get_reduce_scatter_tensors, ru._catch_all_reshard = saved[2], saved[3]


def _shard_fsdp1(runner, built, wl: Workload) -> int:
    """FSDP1: ``FullyShardedDataParallel`` over the fake-materialised model, each transformer block a unit
    (as torchtune's recipes before 0.2 and accelerate's TRANSFORMER_BASED_WRAP; under LoRA each adapter linear
    too, as torchtune's ``lora_fsdp_wrap_policy``) and the rest the root's; ``device_id`` is the CPU (the fake device) and ``sync_module_states`` off (no broadcast
    under fake tensors); FULL_SHARD or SHARD_GRAD_OP; ``MixedPrecision(param_dtype, reduce_dtype=fp32)`` under
    the workload's mixed-precision policy, else none."""
    import torch
    from torch import nn
    from torch.distributed.fsdp import FullyShardedDataParallel, MixedPrecision, ShardingStrategy
    from torch.distributed.fsdp.wrap import CustomPolicy

    from vramlens.trace.build import retie

    blocks = _blocks_to_shard(built.model, "wrap")
    strategy = (ShardingStrategy.SHARD_GRAD_OP if wl.fsdp_strategy == "shard-grad-op"
                else ShardingStrategy.FULL_SHARD)
    dtypes = _mixed_precision_dtypes(wl)
    mp = None if dtypes is None else MixedPrecision(param_dtype=dtypes[0], reduce_dtype=dtypes[1])
    assert runner.fake_mode is not None  # Runner(mode="fake")
    try:
        with runner.fake_mode:
            built.model.to_empty(device="cpu")
            retie(built.model)
            kinds = tuple({type(b) for b in blocks})

            def unit(m: nn.Module) -> bool:
                # torchtune's lora_fsdp_wrap_policy (torchtune/utils/_distributed.py, 2024): each block, and each
                # adapter nn.Linear in a unit of its own (use_orig_params=False needs one requires_grad per unit)
                own = list(m.parameters())
                return isinstance(m, kinds) or (isinstance(m, nn.Linear) and bool(own)
                                                and all(p.requires_grad for p in own) and wl.method != "full")

            built.model = FullyShardedDataParallel(
                built.model, auto_wrap_policy=CustomPolicy(unit),
                sharding_strategy=strategy, mixed_precision=mp, device_id=torch.device("cpu"),
                sync_module_states=False)
    except Exception as e:  # noqa: BLE001 - FSDP1 refusing the model: one clear line
        raise TraceError(f"FullyShardedDataParallel failed on {type(built.model).__name__}: "
                         f"{type(e).__name__}: {e}") from e
    return len(blocks)


def trace_fsdp(model: Any, workload: Workload | None = None, *, world_size: int | None = None, steps: int = 2,
               rank: int = 0, backend: str = "fake", layers: int | None = None, progress=None, top: int = 20,
               alloc_conf: str | None = None, input_shape=None, **workload_kwargs: Any) -> TraceResult:
    """Trace one rank of FSDP2 (``fully_shard`` per block, then the root) over ``world_size`` ranks.

    With the workload's ``tp`` > 1 the ranks form a 2-D mesh (``world_size // tp`` data-parallel by ``tp``
    tensor-parallel), torchtitan's TP plan applied first and FSDP2 over the data-parallel dimension.

    Args:
        model: a ModelSpec, a config.json dict, a catalog name or path (a transformers model; a Llama-style
            causal LM under ``tp`` > 1).
        workload: the training run (``fsdp`` and ``gpus`` are set from ``world_size``); or give
            its fields as keyword arguments.
        world_size: number of ranks (default: the workload's ``gpus``).
        steps: recorded optimizer steps (after one unrecorded warm-up step).
        rank: the rank played (0, the representative one, by default).

    Returns:
        TraceResult whose breakdown is the memory of one rank.

    Raises:
        TraceError: the combination cannot be traced under FSDP, or the model fails.
    """
    wl = resolve_workload(workload, workload_kwargs)
    n = wl.gpus if world_size is None else world_size
    _check(model, wl, n, backend, layers)
    if not 0 <= rank < n:
        raise InputError(f"rank={rank} must be in 0..{n - 1}")
    if wl.gpus != n or not wl.fsdp:
        wl = wl.replace(gpus=n, fsdp=True)
    if steps < 1:
        raise InputError(f"steps={steps} must be a whole number >= 1")
    with quiet_third_party():
        return _trace(model, wl, n, rank=rank, steps=steps, progress=progress, top=top, alloc_conf=alloc_conf)


def _trace(model, wl: Workload, n: int, *, rank: int, steps: int, progress, top: int, alloc_conf) -> TraceResult:
    from vramlens.trace.build import build_hf
    from vramlens.trace.runner import Runner, config_of

    t0 = time.perf_counter()
    cfg = config_of(model)
    runner = Runner(wl, mode="fake", steps=steps, progress=progress)
    live = [False]

    def warm_up(built, opt) -> None:
        warm_up_step(runner, built, opt)
        live[0] = True

    runner.before_record = warm_up
    with fake_process_group(n, rank, wl.tp) as mesh:
        built = build_hf(cfg, wl, meta_only=True)
        if wl.fsdp_version == 1:
            n_blocks = _shard_fsdp1(runner, built, wl)
        elif wl.tp > 1:
            n_blocks = materialize(runner, built, lambda b: _parallelize_2d(b, cfg, mesh, wl),
                                   "torchtitan's TP plan then fully_shard", tie=output_tie(built))
        else:
            n_blocks = materialize(runner, built, lambda b: _shard(b, mesh, wl), "fully_shard")
        around = contextlib.ExitStack()
        around.enter_context((_fsdp1_tags if wl.fsdp_version == 1 else _fsdp_tags)(runner.rec, live))
        if wl.tp > 1 and wl.loss_parallel:
            from torch.distributed.tensor.parallel import loss_parallel

            around.enter_context(loss_parallel())
        rec, params, trainable = record_rank(runner, built, around)
        del built
        gc.collect()
    events = rec.events()
    summary = summarize(events, top=top, component_of=TAG_COMPONENT)
    dp = n // wl.tp
    wrap = (f"FSDP1 per rank: rank {rank} of {n} (fake process group), FullyShardedDataParallel with each of "
            f"{n_blocks} blocks a unit and the root" if wl.fsdp_version == 1 else
            f"FSDP2 per rank: rank {rank} of {n} (fake process group), fully_shard on each of {n_blocks} blocks"
            + (", the output layer, the input embedding " if wl.fsdp_units == "blocks+embed+output" else " ")
            + "and the root")
    notes = list(runner.notes) + [
        wrap + "; every rank runs the same program on equal shards, rank 0's the largest (padding of "
        "dim 0 falls on the last ranks), so rank 0 is representative",
        "one unrecorded warm-up step ran first (DTensor's first calls and FSDP's lazy init); optimizer state "
        "cleared after it, so step 1 creates the state",
    ]
    if wl.tp > 1:
        notes.append(f"2-D mesh (dp {dp}, tp {wl.tp}) as torchtitan's parallelize_llama: its TP plan (llama3 apply_tp) "
                     f"on the tp dimension first, then fully_shard over the {dp} dp ranks"
                     + (", the loss under loss_parallel (logits sharded over the vocabulary)" if wl.loss_parallel
                        else ", the logits gathered"))
    if wl.fsdp_mixed_precision:
        notes.append(f"FSDP2 MixedPrecisionPolicy(param_dtype={wl.amp}, reduce_dtype=fp32) over fp32 sharded "
                     "parameters (torchtitan's default), no autocast" if wl.fsdp_version == 2 else
                     f"FSDP1 MixedPrecision(param_dtype={wl.amp}, reduce_dtype=fp32) over fp32 flat parameters, "
                     "no autocast")
    return rank_result(runner, model, wl, events, summary, notes, alloc_conf=alloc_conf, steps=steps,
                       params=params, trainable=trainable, t0=t0)
