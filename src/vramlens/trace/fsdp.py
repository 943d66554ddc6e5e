"""FSDP2 traced per rank: ``fully_shard`` on the real engine, simulated on one process.

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

One unrecorded warm-up step runs first (DTensor's first call of each op propagates shardings
on full-size temporaries, and FSDP2 initialises lazily); the optimizer's state is then
cleared, so the recorded step 1 shows the state being created and step 2 the steady state.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Callable
from typing import Any, TypeVar

from vramlens.errors import InputError, TraceError, VramlensError
from vramlens.trace.common import (
    name_of,
    phase_max,
    quiet_third_party,
    resolve_workload,
    runner_layers,
    simulated_reserved,
)
from vramlens.trace.events import TAG_COMPONENT, summarize
from vramlens.trace.result import TraceResult, make_trace_breakdown
from vramlens.workload import Workload

T = TypeVar("T")


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
    if wl.tp > 1 or wl.pp > 1 or wl.zero:
        raise TraceError(f"only plain FSDP (full shard) is traced; tp={wl.tp} pp={wl.pp} zero={wl.zero}: "
                         "use `vramlens estimate`")
    if wl.method == "qlora" or wl.quant is not None:
        raise TraceError("quantized weights cannot be traced under FSDP: use `vramlens estimate`")
    if wl.offload != "none":
        raise TraceError(f"offload={wl.offload} (FSDP CPU offload) is not traced: use `vramlens estimate`")
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


@contextlib.contextmanager
def fake_process_group(world_size: int, rank: int = 0):
    """A fake process group of ``world_size`` ranks playing ``rank``, and a CPU device mesh;
    destroyed on exit."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if not dist.is_available():
        raise TraceError("this build of torch has no torch.distributed: FSDP cannot be traced")
    if dist.is_initialized():
        raise TraceError("a torch.distributed process group is already initialised in this process: "
                         "trace FSDP in a fresh process")
    dist.init_process_group("fake", rank=rank, world_size=world_size, store=FakeStore())
    try:
        yield init_device_mesh("cpu", (world_size,))
    finally:
        dist.destroy_process_group()


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
        def wrapped(*a, **k):
            if not live[0]:
                return fn(*a, **k)
            prev, rec.tag_new = rec.tag_new, "comm_buffer"
            try:
                return fn(*a, **k)
            finally:
                rec.tag_new = prev

        return wrapped

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

    from vramlens.trace.build import TORCH_DTYPES

    if wl.fsdp_mixed_precision and wl.amp is not None:
        return MixedPrecisionPolicy(param_dtype=TORCH_DTYPES[wl.amp], reduce_dtype=TORCH_DTYPES["fp32"])
    return MixedPrecisionPolicy()


def _shard(built, mesh, wl: Workload) -> int:
    """``fully_shard`` each block, then the root; shard-grad-op is ``reshard_after_forward=False``
    (parameters stay gathered from forward to backward)."""
    from torch.distributed.fsdp import fully_shard

    reshard_after_forward = wl.fsdp_strategy != "shard-grad-op"
    mp = mixed_precision_policy(wl)
    blocks = _blocks(built.model)
    if not blocks:
        raise TraceError(f"{type(built.model).__name__}: no transformer blocks found to shard "
                         "(no _no_split_modules, no ModuleList)")
    for b in blocks:
        for m in _odd_dtype_modules(b):
            fully_shard(m, mesh=mesh, reshard_after_forward=reshard_after_forward, mp_policy=mp)
        fully_shard(b, mesh=mesh, reshard_after_forward=reshard_after_forward, mp_policy=mp)
    for m in _odd_dtype_modules(built.model):
        fully_shard(m, mesh=mesh, reshard_after_forward=reshard_after_forward, mp_policy=mp)
    fully_shard(built.model, mesh=mesh, reshard_after_forward=reshard_after_forward, mp_policy=mp)
    return len(blocks)


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


def trace_fsdp(model: Any, workload: Workload | None = None, *, world_size: int | None = None, steps: int = 2,
               rank: int = 0, backend: str = "fake", layers: int | None = None, progress=None, top: int = 20,
               alloc_conf: str | None = None, input_shape=None, **workload_kwargs: Any) -> TraceResult:
    """Trace one rank of FSDP2 (``fully_shard`` per block, then the root) over ``world_size`` ranks.

    Args:
        model: a ModelSpec, a config.json dict, a catalog name or path (a transformers model).
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
    with fake_process_group(n, rank) as mesh:
        built = build_hf(cfg, wl, meta_only=True)
        n_blocks = materialize(runner, built, lambda b: _shard(b, mesh, wl), "fully_shard")
        rec, params, trainable = record_rank(runner, built, _fsdp_tags(runner.rec, live))
        del built
        gc.collect()
    events = rec.events()
    summary = summarize(events, top=top, component_of=TAG_COMPONENT)
    notes = list(runner.notes) + [
        f"FSDP2 per rank: rank {rank} of {n} (fake process group), fully_shard on each of {n_blocks} blocks "
        "and the root; every rank runs the same program on equal shards, rank 0's the largest (padding of "
        "dim 0 falls on the last ranks), so rank 0 is representative",
        "one unrecorded warm-up step ran first (DTensor's first calls and FSDP's lazy init); optimizer state "
        "cleared after it, so step 1 creates the state",
    ]
    if wl.fsdp_mixed_precision:
        notes.append(f"FSDP2 MixedPrecisionPolicy(param_dtype={wl.amp}, reduce_dtype=fp32) over fp32 sharded "
                     "parameters (torchtitan's default), no autocast")
    return rank_result(runner, model, wl, events, summary, notes, alloc_conf=alloc_conf, steps=steps,
                       params=params, trainable=trainable, t0=t0)


def materialize(runner, built, apply: Callable[[Any], T], plan: str, *, tie: Callable[[], None] | None = None) -> T:
    """``apply(built)`` (a parallel plan on the meta-built model), then fake storages for its tensors (``to_empty``
    inside the runner's fake mode) and its tied weights tied again (``tie``, or build.retie); what the plan
    returns. A plan refusing the model is one line naming ``plan``."""
    from vramlens.trace.build import retie

    try:
        out = apply(built)
        assert runner.fake_mode is not None  # Runner(mode="fake")
        with runner.fake_mode:
            built.model.to_empty(device="cpu")
            if tie is not None:
                tie()
            else:
                retie(built.model)
        return out
    except VramlensError:
        raise
    except Exception as e:  # noqa: BLE001 - a plan refusing the model: one clear line
        raise TraceError(f"{plan} failed on {type(built.model).__name__}: {type(e).__name__}: {e}") from e


def warm_up_step(runner, built, opt) -> None:
    """One unrecorded training step on a sharded or parallelized rank (the Runner's ``before_record``):
    DTensor's first call of each op makes temporaries the steady state does not; the optimizer's state is
    cleared after it, so the recorded step 1 creates it as a real first step does."""
    from vramlens.trace.recorder import Recorder
    from vramlens.trace.runner import InBackwardOptimizer

    in_backward = isinstance(opt, InBackwardOptimizer)
    if in_backward:  # its hooks step during backward: their marks go to a recorder that is thrown away
        opt.rec, kept = Recorder(), opt.rec
    inputs = runner._inputs(built, runner.wl.seq)
    with runner._autocast():
        if runner.wl.activation_offload:
            out, loss = runner._offloaded_forward(built, inputs)
        else:
            out = runner._forward(built, inputs)
            loss = runner._loss(out)
    del out
    loss.backward()
    if runner.wl.activation_offload:
        runner.offloader.end_backward()
    del loss, inputs
    if in_backward:
        opt.rec = kept
        for one in opt.per_param.values():
            one.state.clear()
    elif opt is not None:
        opt.step()
        opt.zero_grad(set_to_none=True)
        opt.state.clear()
    for p in built.model.parameters():
        p.grad = None
    gc.collect()


def record_rank(runner, built, around) -> tuple[Any, int, int]:
    """Record ``built`` inside the context ``around``: (recorder, parameters, trainable parameters), any
    failure inside torch as one TraceError line. DTensor.numel() is the global (unsharded) count."""
    from vramlens.trace.runner import describe_failure

    try:
        with around:
            rec = runner.run(built)
    except VramlensError:
        raise
    except Exception as e:  # noqa: BLE001 - any failure inside torch becomes one clear line
        raise TraceError(describe_failure(runner.rec, e)) from e
    ps = list(built.model.parameters())
    return rec, sum(p.numel() for p in ps), sum(p.numel() for p in ps if p.requires_grad)


def rank_result(runner, model, wl: Workload, events, summary, notes: list[str], *, alloc_conf, steps: int,
                params: int, trainable: int, t0: float) -> TraceResult:
    """The TraceResult of one traced rank (FSDP2, or tensor parallelism in training or inference)."""
    reserved = simulated_reserved(events, notes, alloc_conf)
    bd = make_trace_breakdown(summary, training=wl.training, source="trace", notes=notes,
                              phases=phase_max(summary.phase_peaks), peak_reserved=reserved, workload=wl)
    return TraceResult(
        breakdown=bd, summary=summary, events=tuple(events), workload=wl, model_name=name_of(model),
        params=params, trainable_params=trainable, backend="fake", steps=steps,
        step_peaks=summary.step_peaks, phase_peaks=summary.phase_peaks, n_layers=runner_layers(runner, model),
        seconds=time.perf_counter() - t0,
    )
