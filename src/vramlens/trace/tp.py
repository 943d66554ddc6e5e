"""Tensor parallelism traced per rank: torchtitan's plan on a transformers Llama-style model (training),
transformers' own plan (inference).

The plan is torchtitan's (torchtitan/models/llama3/infra/parallelize.py ``apply_tp``), applied with
``parallelize_module`` on rank 0 of a fake process group of ``tp`` ranks (vramlens.trace.ranks
``fake_process_group``) under fake tensors:

* the input embedding ``RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1))``: the
  vocabulary sharded, its output reduce-scattered over the sequence;
* every norm ``SequenceParallel()``: the residual stream, the norms and their saved inputs hold s/tp
  tokens per rank;
* attention and MLP inputs all-gathered (``PrepareModuleInput``: Shard(1) -> Replicate());
  q/k/v and gate/up ``ColwiseParallel()`` (heads and the MLP width sharded), o and down
  ``RowwiseParallel(output_layouts=Shard(1))``;
* the output layer ``ColwiseParallel(input_layouts=Shard(1))``: its logits gathered
  (``Replicate()``) for a plain loss, or kept sharded over the vocabulary (``Shard(-1)``,
  ``use_local_output=False``) for a loss under ``loss_parallel()`` (``--loss-parallel``);
* with ``--fp8`` (torchao's Float8Linear, vramlens.trace.build ``convert_fp8``, before the plan as
  torchtitan converts before ``apply_tp``), torchao's float8 styles for the blocks, as torchtitan 9dec370's
  ``apply_tp(enable_float8=True)`` uses them: ``PrepareFloat8ModuleInput`` (the attention's and MLP's input
  cast to float8 before its all-gather), ``Float8ColwiseParallel``, ``Float8RowwiseParallel``.

transformers' decoder differs from torchtitan's in one place the plan must follow: it builds the
positions and the causal mask from the embedding's output, so that output stays a DTensor of the
global shape (``use_local_output=False``, and the same on o/down so the residual adds DTensors of one
layout); per rank each holds the same local s/tp rows torchtitan's local tensors hold. The attention
modules reshape with ``-1`` heads (``view(*input_shape, -1, head_dim)``), so the local head count
follows from the sharded projections without changing ``num_heads``.

Activation checkpointing runs as on one GPU (vramlens.trace.checkpoint), around the
parallelized blocks: the recomputation re-runs their DTensor collectives.

What is recorded, per rank: the weight shards (norm weights replicated), their gradients and
optimizer state, the activations and temporaries of rank 0, and the collectives' outputs (DTensor's
redistributions run as ordinary ops on the fake process group, their outputs counted where they live).
One unrecorded warm-up step runs first (DTensor's first call of each op propagates shardings on
full-size temporaries); the optimizer's state is then cleared, so step 1 creates it.

torchtune's full_finetune_distributed composes its TP plan with three techniques that do not change the
sharding, and they run here as on one GPU: the optimizer in backward (post-accumulate-grad hooks on the
DTensor shards; the input embedding's gradient arrives whole, V x h), activation offloading (saved-tensor
hooks) and the chunked cross-entropy (each chunk's logits gathered, as ``CEWithChunkedOutputLoss``
``full_tensor()``s them). LoRA is refused: torchtune's lora_finetune_distributed asserts
``tensor_parallel_dim == 1``.

Inference is transformers' own tensor parallelism instead (``from_pretrained(..., tp_plan="auto")``,
transformers/distributed/mixin.py ``maybe_distribute_model``): the class's ``_tp_plan`` and the config's
``base_model_tp_plan`` expanded per layer and applied by ``apply_tensor_parallelism`` on the meta-built
model, then the Runner's prefill and decode steps with the DynamicCache (``_tp_size`` set, as there).
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Callable
from typing import Any

from vramlens.errors import InputError, TraceError
from vramlens.trace.common import (
    quiet_third_party,
    resolve_workload,
)
from vramlens.trace.events import INFERENCE_COMPONENT, TAG_COMPONENT, summarize
from vramlens.trace.result import TraceResult
from vramlens.workload import Workload

#: The Llama-style module names the plan needs, per decoder block (transformers' LlamaDecoderLayer).
BLOCK_LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                 "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
BLOCK_NORMS = ("input_layernorm", "post_attention_layernorm")


def _check(model: Any, wl: Workload, backend: str, layers) -> None:
    from vramlens.trace.build import is_factory

    if backend != "fake":
        raise TraceError(f"tp={wl.tp}: tensor parallelism is traced with fake tensors only (backend={backend!r} given)")
    if layers is not None:
        raise TraceError(f"tp={wl.tp}: --layers (extrapolation) is not supported: trace the whole model")
    if is_factory(model):
        raise TraceError(f"tp={wl.tp}: --tp traces transformers Llama-style models (torchtitan's plan); a factory module "
                         "cannot be traced with --tp: use `vramlens estimate`")
    if wl.gpus != wl.tp or wl.pp > 1 or wl.zero or wl.fsdp:
        raise TraceError(f"only plain tensor parallelism over all GPUs is traced (gpus = tp); gpus={wl.gpus} "
                         f"tp={wl.tp} pp={wl.pp} zero={wl.zero} fsdp={wl.fsdp}: use `vramlens estimate`")
    if not wl.training:
        _check_inference(wl)
        return
    check_training_plan(wl)
    if wl.amp is not None and wl.amp != wl.dtype:
        raise TraceError(f"amp={wl.amp} under tp={wl.tp} is not traced (torchtitan runs TP alone in the weights' dtype): "
                         "use --dtype bf16, or `vramlens estimate`")


def check_training_plan(wl: Workload) -> None:
    """What torchtitan's TP plan is traced for in training, alone or under FSDP2 (vramlens.trace.fsdp)."""
    if wl.method != "full" or wl.quant is not None:
        raise TraceError(f"method={wl.method} under tp={wl.tp} is not traced: torchtune's lora_finetune_distributed "
                         "refuses tensor_parallel_dim > 1, and NeMo's Megatron LoRA (tensor_model_parallel_size > 1), "
                         "which does run it, is not modelled here: use `vramlens estimate`")
    if wl.offload != "none":
        raise TraceError(f"offload={wl.offload} is not traced with tp={wl.tp}: use `vramlens estimate`")
    if wl.loss == "fused-linear":
        raise TraceError(f"loss=fused-linear is not traced with tp={wl.tp} (the fused loss reads the output layer's "
                         "weight as a plain tensor, not a vocabulary shard): use `vramlens estimate`")


def _check_inference(wl: Workload) -> None:
    """Inference under TP is transformers' own (``from_pretrained(..., tp_plan="auto")``): its DynamicCache, the
    weights in their dtype."""
    if wl.method != "full" or wl.quant is not None:
        raise TraceError(f"method={wl.method} quant={wl.quant} under tp={wl.tp} in inference is not traced "
                         "(transformers' tp_plan shards unquantized weights here): use `vramlens estimate`")
    if wl.cache != "dynamic" or wl.kv_dtype is not None or wl.kv_block:
        raise TraceError(f"cache={wl.cache} kv_dtype={wl.kv_dtype} kv_block={wl.kv_block} under tp={wl.tp} is not "
                         "traced (transformers' DynamicCache only): use `vramlens estimate`")
    if wl.transformers_version is not None or wl.gqa_expand or wl.compile:
        raise TraceError(f"--transformers-version, --gqa-expand and --compile under tp={wl.tp} are not traced in "
                         "inference (the installed transformers' tp_plan runs as it is): use `vramlens estimate`")
    if wl.amp is not None and wl.amp != wl.dtype:
        raise TraceError(f"amp={wl.amp} under tp={wl.tp} is not traced (transformers' tp_plan runs in the weights' "
                         "dtype): use --dtype bf16, or `vramlens estimate`")


def _decoder(model) -> tuple[Any, Any]:
    """(the decoder, its blocks), or a TraceError naming what is missing from the plan's layout."""
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    missing = [n for n in ("embed_tokens", "norm") if not hasattr(inner, n)]
    if not hasattr(model, "lm_head"):
        missing.append("lm_head")
    if layers is None or missing:
        raise TraceError(f"{type(model).__name__}: --tp applies torchtitan's plan to Llama-style decoders "
                         f"(model.embed_tokens, model.layers, model.norm, lm_head); missing "
                         f"{', '.join(missing) or 'model.layers'}: use `vramlens estimate`")
    for i, block in enumerate(layers):
        names = dict(block.named_modules())
        gone = [n for n in (*BLOCK_LINEARS, *BLOCK_NORMS) if n not in names]
        if gone:
            raise TraceError(f"{type(model).__name__}: block {i} has no {', '.join(gone)}; --tp applies "
                             "torchtitan's Llama plan (q/k/v/o, gate/up/down, two norms): use `vramlens estimate`")
        extra = [n for n, m in names.items() if n and "." not in n and n not in ("self_attn", "mlp", *BLOCK_NORMS)]
        if extra:
            raise TraceError(f"{type(model).__name__}: block {i} has modules outside torchtitan's Llama plan "
                             f"({', '.join(extra)}): use `vramlens estimate`")
    return inner, layers


def divides(cfg: dict, tp: int) -> None:
    """torchtitan's plan shards whole heads and equal MLP columns: tp must divide both."""
    heads = cfg.get("num_attention_heads") or 0
    kv = cfg.get("num_key_value_heads") or heads
    if heads % tp or kv % tp:
        raise TraceError(f"tp={tp} must divide the {heads} attention heads and {kv} key-value heads "
                         "(ColwiseParallel shards whole heads): choose another --tp")
    ffn = cfg.get("intermediate_size") or 0
    if ffn % tp:
        raise TraceError(f"tp={tp} must divide intermediate_size={ffn} (the MLP's columns, sharded evenly): "
                         "choose another --tp, or use `vramlens estimate`")


def apply_plan(model, mesh, *, loss_parallel: bool, fp8: bool = False) -> int:
    """torchtitan's ``apply_tp`` on a transformers Llama-style model; returns the number of blocks."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    inner, layers = _decoder(model)
    colwise, rowwise, prepare = ColwiseParallel, RowwiseParallel, PrepareModuleInput
    if fp8:
        # torchtitan 9dec370 apply_tp with enable_float8: torchao's float8 styles, which cast the inputs to float8
        # before their all-gathers (torchao/float8/float8_tensor_parallel.py); they take only Float8Linear
        from torchao.float8.float8_linear import Float8Linear
        from torchao.float8.float8_tensor_parallel import (
            Float8ColwiseParallel,
            Float8RowwiseParallel,
            PrepareFloat8ModuleInput,
        )
        for i, block in enumerate(layers):
            plain = [n for n in BLOCK_LINEARS if not isinstance(block.get_submodule(n), Float8Linear)]
            if plain:
                raise TraceError(f"fp8 with tp: block {i}'s {', '.join(plain)} stayed nn.Linear (dims not multiples "
                                 "of 16) and torchao's Float8ColwiseParallel / Float8RowwiseParallel take only "
                                 "Float8Linear: drop --fp8, or use `vramlens estimate`")
        colwise, rowwise, prepare = Float8ColwiseParallel, Float8RowwiseParallel, PrepareFloat8ModuleInput

    tied = model.lm_head.weight is inner.embed_tokens.weight
    parallelize_module(inner, mesh, {
        "embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1), use_local_output=False),
        "norm": SequenceParallel(),
    })
    parallelize_module(model, mesh, {
        "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1) if loss_parallel else Replicate(),
                                   use_local_output=not loss_parallel),
    })
    if tied:  # both shard the (V, h) weight on dim 0: one DTensor, as the untraced model shares one tensor
        model.lm_head.weight = inner.embed_tokens.weight
    for block in layers:
        parallelize_module(block, mesh, {
            "input_layernorm": SequenceParallel(),
            "self_attn": prepare(input_kwarg_layouts={"hidden_states": Shard(1)},
                                 desired_input_kwarg_layouts={"hidden_states": Replicate()}),
            "self_attn.q_proj": colwise(),
            "self_attn.k_proj": colwise(),
            "self_attn.v_proj": colwise(),
            "self_attn.o_proj": rowwise(output_layouts=Shard(1), use_local_output=False),
            "post_attention_layernorm": SequenceParallel(),
            "mlp": prepare(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "mlp.gate_proj": colwise(),
            "mlp.up_proj": colwise(),
            "mlp.down_proj": rowwise(output_layouts=Shard(1), use_local_output=False),
        })
    return len(layers)


def output_tie(built) -> Callable[[], None] | None:
    """What ties a causal LM's output layer to its input embedding again after ``to_empty`` (None when untied);
    a TraceError when ``built`` is not a causal LM of the plan's Llama-style layout."""
    if built.kind != "causal-lm":
        raise TraceError(f"--tp traces causal LMs (torchtitan's plan); {type(built.model).__name__} trains "
                         f"{built.kind}: use `vramlens estimate`")
    hf: Any = built.model  # a transformers model: untyped
    inner, _layers = _decoder(hf)
    if hf.lm_head.weight is not inner.embed_tokens.weight:
        return None

    def tie() -> None:
        hf.lm_head.weight = inner.embed_tokens.weight

    return tie


def trace_tp(model: Any, workload: Workload | None = None, *, steps: int = 2, backend: str = "fake",
             layers: int | None = None, progress=None, top: int = 20, alloc_conf: str | None = None,
             **workload_kwargs: Any) -> TraceResult:
    """Trace rank 0 of ``tp``-way tensor parallelism (torchtitan's plan) on a Llama-style model.

    Args:
        model: a ModelSpec, a config.json dict, a catalog name or path (a transformers Llama-style model).
        workload: the training run (``tp`` ranks over ``gpus = tp`` GPUs; ``loss_parallel`` keeps the
            logits sharded); or give its fields as keyword arguments.
        steps: recorded optimizer steps (after one unrecorded warm-up step).

    Returns:
        TraceResult whose breakdown is the memory of one rank.

    Raises:
        TraceError: the model or the combination cannot be traced under tensor parallelism.
    """
    wl = resolve_workload(workload, workload_kwargs)
    if wl.tp < 2:
        raise InputError(f"tp={wl.tp} must be >= 2 for a tensor-parallel trace")
    _check(model, wl, backend, layers)
    if steps < 1:
        raise InputError(f"steps={steps} must be a whole number >= 1")
    with quiet_third_party():
        if not wl.training:
            return _trace_inference(model, wl, progress=progress, top=top, alloc_conf=alloc_conf)
        return _trace(model, wl, steps=steps, progress=progress, top=top, alloc_conf=alloc_conf)


def _trace(model, wl: Workload, *, steps: int, progress, top: int, alloc_conf) -> TraceResult:
    from torch.distributed.tensor.parallel import loss_parallel

    from vramlens.trace.build import build_hf
    from vramlens.trace.ranks import fake_process_group, materialize, rank_result, record_rank, warm_up_step
    from vramlens.trace.runner import Runner, config_of

    t0 = time.perf_counter()
    cfg = config_of(model)
    divides(cfg, wl.tp)
    runner = Runner(wl, mode="fake", steps=steps, progress=progress)
    lp = wl.loss_parallel

    runner.before_record = lambda built, opt: warm_up_step(runner, built, opt)  # no autocast under --tp
    with fake_process_group(wl.tp) as mesh:
        built = build_hf(cfg, wl, meta_only=True)
        n_blocks = materialize(runner, built, lambda b: apply_plan(b.model, mesh, loss_parallel=lp, fp8=wl.fp8),
                               "torchtitan's TP plan", tie=output_tie(built))
        rec, params, trainable = record_rank(runner, built, loss_parallel() if lp else contextlib.nullcontext())
        del built
        gc.collect()
    events = rec.events()
    summary = summarize(events, top=top, component_of=TAG_COMPONENT if wl.training else INFERENCE_COMPONENT)
    notes = list(runner.notes) + [
        f"tensor parallelism per rank: rank 0 of {wl.tp} (fake process group), torchtitan's plan "
        f"(llama3 apply_tp) on {n_blocks} blocks: q/k/v/gate/up ColwiseParallel, o/down RowwiseParallel, "
        + ("torchao's float8 styles (inputs cast to float8 before their all-gathers), " if wl.fp8 else "") +
        "norms SequenceParallel, embedding RowwiseParallel, output layer ColwiseParallel"
        + (" with loss_parallel (logits sharded over the vocabulary)" if lp else " (logits gathered)"),
        "one unrecorded warm-up step ran first (DTensor's first calls); optimizer state cleared after it, "
        "so step 1 creates the state",
    ]
    return rank_result(runner, model, wl, events, summary, notes, alloc_conf=alloc_conf, steps=steps,
                       params=params, trainable=trainable, t0=t0)


def transformers_plan(model, mesh, tp: int) -> dict[str, str]:
    """transformers' own tensor-parallel plan applied as ``from_pretrained(..., tp_plan="auto")`` applies it
    (transformers/distributed/mixin.py ``maybe_distribute_model``): the class's ``_tp_plan`` merged with the
    config's ``base_model_tp_plan``, expanded per layer (``_resolve_parallel_plans``), then
    ``apply_tensor_parallelism`` (parameters made DTensor placeholders on ``meta``, forwards wrapped);
    ``_tp_size`` set as there, so the model knows its per-rank key-value heads. Returns the expanded plan."""
    from transformers.distributed.configuration_utils import DistributedConfig
    from transformers.distributed.tensor_parallel import apply_tensor_parallelism

    if not getattr(model, "tp_plan", None):
        raise TraceError(f"{type(model).__name__} has no tensor-parallel plan in the installed transformers "
                         "(no base_model_tp_plan): from_pretrained(tp_plan='auto') refuses it; use `vramlens estimate`")
    plan, _ep, _fsdp = model._resolve_parallel_plans(DistributedConfig(tp_size=tp))
    apply_tensor_parallelism(model, mesh, plan)
    model._tp_size = tp
    return plan


def _trace_inference(model, wl: Workload, *, progress, top: int, alloc_conf) -> TraceResult:
    """Prefill and decode on rank 0 of ``tp`` under transformers' own plan (``tp_plan="auto"``), DynamicCache."""
    from vramlens.trace.build import build_hf
    from vramlens.trace.ranks import fake_process_group, materialize, rank_result, record_rank
    from vramlens.trace.runner import Runner, config_of

    t0 = time.perf_counter()
    cfg = config_of(model)
    divides(cfg, wl.tp)
    runner = Runner(wl, mode="fake", steps=1, progress=progress)
    runner.before_record = lambda built, _opt: _warm_up_inference(runner, built)
    with fake_process_group(wl.tp) as mesh:
        built = build_hf(cfg, wl, meta_only=True)
        if built.kind != "causal-lm":
            raise TraceError(f"--tp in inference traces causal LMs (transformers' generate); "
                             f"{type(built.model).__name__} is {built.kind}: use `vramlens estimate`")
        plan = materialize(runner, built, lambda b: transformers_plan(b.model, mesh, wl.tp),
                           "transformers' tp_plan")
        rec, params, trainable = record_rank(runner, built, contextlib.nullcontext())
        del built
        gc.collect()
    events = rec.events()
    summary = summarize(events, top=top, component_of=INFERENCE_COMPONENT)
    styles = sorted({f"{name.rsplit('.', 1)[-1]} {style}" for name, style in plan.items()
                     if not name.endswith((".weight", ".bias"))})
    notes = list(runner.notes) + [
        f"tensor parallelism per rank: rank 0 of {wl.tp} (fake process group), transformers' own plan "
        f"(from_pretrained(tp_plan='auto'): {', '.join(styles)}); every other module replicated",
        "one unrecorded prefill and decode step ran first (DTensor's first calls)",
    ]
    return rank_result(runner, model, wl, events, summary, notes, alloc_conf=alloc_conf, steps=1,
                       params=params, trainable=trainable, t0=t0)


def _warm_up_inference(runner, built) -> None:
    """One unrecorded prefill and decode step (the Runner's ``before_record``): DTensor's first call of each op
    propagates shardings on temporaries the steady state does not make."""
    import torch

    from vramlens.trace.build import accepts
    from vramlens.trace.runner import out_cache

    model = built.model
    ckey = "cache" if accepts(model, "cache") else "past_key_values"
    ids = torch.randint(0, max(2, built.vocab_size), (runner.wl.batch, 2))
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
        model(input_ids=ids[:, :1], **{ckey: out_cache(out)}, use_cache=True)
    del out
    gc.collect()
