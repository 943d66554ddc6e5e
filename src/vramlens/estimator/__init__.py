"""The analytic estimator: pure functions from (ModelSpec, Workload, GPU) to a Breakdown."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vramlens.estimator.breakdown import COMPONENTS, Breakdown, Component, make_breakdown
from vramlens.estimator.core import DEFAULT_HEADROOM, Estimate, estimate_spec

if TYPE_CHECKING:  # only for annotations: the seam exports the estimator's names, not the inputs' types
    from vramlens.hardware.gpu import GPU
    from vramlens.models.spec import ModelSpec
    from vramlens.workload import Workload


def estimate(
    model: str | dict[str, Any] | ModelSpec | None = None,
    workload: Workload | None = None,
    *,
    gpu: str | GPU | None = None,
    params: str | int | None = None,
    headroom: float = DEFAULT_HEADROOM,
    **settings: Any,
) -> Estimate:
    """Estimate per-GPU memory of running ``model`` as described by the workload settings.

    Args:
        model: a catalog name or hub id, a config.json path or model folder, a parsed config
            dict, or a ModelSpec. May be None when ``params`` is given.
        workload: a Workload; or give its fields as keyword arguments (``mode="train"``, ``batch=4``).
        gpu: a GPU name from the catalog, a size such as ``"24GB"``, or a GPU.
        params: model size ("7B") for a generic decoder when ``model`` is None.
        headroom: fraction of the GPU kept free for the verdict (default 0.10).

    Returns:
        An Estimate with the Breakdown, the verdict and the advice.

    Raises:
        InputError: an unknown model or GPU, or a workload value that is out of range.
    """
    from vramlens.hardware.catalog import as_gpu
    from vramlens.models.spec import ModelSpec
    from vramlens.workload import make_workload

    check_api_types(workload, headroom)
    g = as_gpu(gpu)
    if isinstance(model, ModelSpec):
        spec = model
    else:
        from vramlens.models import load_model

        spec = load_model(model, params=params)
    w = workload.validated() if workload is not None else make_workload(**settings)
    if workload is not None and settings:
        w = w.replace(**settings)
    from vramlens.models.inventory import with_task

    spec = with_task(spec, w.task)
    check_workload(spec, w)
    return estimate_spec(spec, w, g, headroom=headroom)


def check_api_types(workload: Any, headroom: Any) -> None:
    """InputError for a ``workload`` that is not a Workload, or a ``headroom`` that is not a fraction in [0, 1)
    (the Python API's own arguments; a GPU is checked by :func:`vramlens.hardware.as_gpu`)."""
    from vramlens.errors import InputError
    from vramlens.limits import show
    from vramlens.workload import Workload

    if workload is not None and not isinstance(workload, Workload):
        raise InputError(f"workload={show(workload)} is not a Workload: build one with vramlens.make_workload(...), "
                         "or give its fields as keywords (mode='train', batch=8)")
    if isinstance(headroom, bool) or not isinstance(headroom, (int, float)) or not 0 <= headroom < 1:
        raise InputError(f"headroom={show(headroom)} must be in [0, 1): e.g. 0.1 keeps 10% free")


def _delta_target_problems(spec: ModelSpec, w: Workload) -> list[str]:
    """LoHa, LoKr, OFT and BOFT adapt the nn.Linear modules lora_targets names (peft raises on other layer types, GPT-2's Conv1D among
    them): every name must match one in the blocks."""
    from vramlens.models import delta_linears
    from vramlens.workload import DELTA_METHODS

    if w.method not in DELTA_METHODS:
        return []
    names = sorted({t.module for t in spec.tensors if t.role == "linear" and t.layer is not None})
    unknown = [t for t in w.lora_targets if t != "all-linear" and not delta_linears(spec, (t,))]
    if unknown or not delta_linears(spec, tuple(w.lora_targets)):
        return [f"lora_targets: {', '.join(unknown or w.lora_targets)} "
                f"{'matches' if len(unknown) == 1 else 'match'} no nn.Linear of {spec.name}'s blocks (method="
                f"{w.method}): choose from {', '.join(names) or 'none'} or all-linear"]
    from vramlens.estimator.activations import delta_dims

    if not any(g == "qkv" for g, _, _ in delta_dims(spec, w)):
        # what the first block keeps is modelled with its first adapter in the attention's input projections
        return [f"method={w.method} is modelled with lora_targets that include an attention input projection "
                f"(q_proj, k_proj, v_proj or all-linear); {','.join(w.lora_targets)} has none: add one"]
    if w.autocast and any(g == "mlp_in" for g, _, _ in delta_dims(spec, w)):
        # LoHa's and OFT's Linear.forward return result.to(previous_dtype): under autocast an adapted MLP input
        # projection hands the activation function fp32 (its input's dtype), which the MLP then keeps
        return [f"method={w.method} under autocast is modelled with the MLP's input projections frozen (an adapted "
                "one returns its fp32 input's dtype): adapt the attention's and the MLP's output projections, or "
                "drop --amp"]
    smallest = min(min(o, k) for o, k in delta_linears(spec, tuple(w.lora_targets)))
    if w.method == "boft" and (bad := sorted({k for _, k in delta_linears(spec, tuple(w.lora_targets))
                                              if k % w.boft_block_size}, reverse=True)):
        # BOFTLayer.update_layer raises: in_features must be divisible by boft_block_size
        return [f"boft_block_size={w.boft_block_size} does not divide in_features={bad[0]} of an adapted linear of "
                f"{spec.name} (peft raises): use a divisor of it"]
    if w.method == "loha" and w.lora_rank > smallest:  # LoKr trains w2 whole from r >= max(b, d) / 2 on
        return [f"lora_rank={w.lora_rank} exceeds the smaller side ({smallest}) of an adapted linear of {spec.name}: "
                f"use --lora-rank {smallest} or less"]
    return []


def check_workload(spec: ModelSpec, w: Workload) -> None:
    """Problems that depend on both the model and the workload (e.g. --tp must divide the heads)."""
    from vramlens.errors import ConfigError
    from vramlens.estimator.inventory import QKV_SLICES, lora_shape
    from vramlens.estimator.parallel import INTERLEAVED_STAGES_PER_RANK
    from vramlens.estimator.weights import shape_refusal
    from vramlens.models import peft_method_problem
    from vramlens.workload import LORA_METHODS

    p = []
    if w.images and spec.vlm is None:
        from vramlens.models.catalog import vlm_names

        p.append(f"images={w.images} applies to vision-language models ({', '.join(vlm_names())}); {spec.name} has no "
                 "vision tower: drop --images")
    if w.image_size is not None and spec.vision is None and spec.vlm is None:
        p.append(f"image_size={w.image_size[0]}x{w.image_size[1]} applies to vision encoders (ViT, CLIP and SigLIP "
                 f"vision towers); {spec.name} is a text model: drop --image-size and give --seq")
    if spec.vision is not None and w.training and spec.head == "embedding":
        p.append(f"training {spec.name} as an image embedding needs a contrastive loss over a text tower, which "
                 f"is not modelled: estimate inference, or fine-tune ViT with --task image-classification")
    if spec.vision is not None and w.new_tokens:
        p.append(f"new_tokens={w.new_tokens}: {spec.name} is a vision encoder and generates nothing: drop --new-tokens")
    if w.tp > 1 and spec.n_heads % w.tp:
        divisors = [d for d in range(2, 17) if spec.n_heads % d == 0][:4]
        p.append(f"tp={w.tp} must divide the {spec.n_heads} attention heads of {spec.name}: use "
                 + (f"a divisor such as {', '.join(map(str, divisors))}" if divisors else "--tp 1 (or --pp)"))
    elif w.tp > 1 and spec.n_kv_heads % w.tp and w.tp % spec.n_kv_heads:
        p.append(f"tp={w.tp} does not split the {spec.n_kv_heads} key-value heads of {spec.name}")
    if w.pp > spec.n_layers:
        p.append(f"pp={w.pp} exceeds the {spec.n_layers} layers of {spec.name}")
    elif w.training and w.pp > 1 and w.pp_schedule == "interleaved-1f1b" and w.pp * INTERLEAVED_STAGES_PER_RANK > spec.n_layers:
        p.append(f"pp_schedule='interleaved-1f1b' with pp={w.pp} needs {w.pp * INTERLEAVED_STAGES_PER_RANK} stages "
                 f"of at least one block; {spec.name} has {spec.n_layers}: use --pp-schedule 1f1b")
    if w.method in ("ia3", "ln-tuning", "vera", "prefix-tuning") and (why := peft_method_problem(spec, w.method)) is not None:
        p.append(why)
    p += _delta_target_problems(spec, w)
    if w.method in LORA_METHODS:
        names = sorted({t.module for t in spec.tensors if t.role in ("linear", "conv1d") and t.layer is not None})
        # LitGPT's parts of a fused q/k/v linear (inventory.qkv_slices) exist only under --fused-qkv
        targets = tuple(w.lora_adapted)
        parts = (" (q_proj, k_proj and v_proj name the parts of its fused q/k/v linear under --fused-qkv, LitGPT's "
                 "LoRAQKVLinear)" if not w.fused_qkv and set(targets) & set(QKV_SLICES)
                 and lora_shape(spec, targets, True).count > lora_shape(spec, targets).count else "")
        if lora_shape(spec, tuple(w.lora_adapted), w.fused_qkv).count == 0:
            p.append(f"lora_targets={','.join(w.lora_adapted)} match no linear layer of {spec.name}: "
                     f"choose from {', '.join(names)} or all-linear{parts}")
        else:
            # peft adapts what matches and ignores the rest silently: a typo would count as fewer adapters
            unknown = [t for t in w.lora_adapted if t != "all-linear" and lora_shape(spec, (t,), w.fused_qkv).count == 0]
            if unknown:
                p.append(f"lora_targets: {', '.join(unknown)} {'matches' if len(unknown) == 1 else 'match'} no "
                         f"linear layer of {spec.name}: choose from {', '.join(names)} or all-linear{parts}")
    if w.method in LORA_METHODS:
        smallest = min(lora_shape(spec, tuple(w.lora_adapted), w.fused_qkv).targets,
                       key=lambda lin: min(lin.in_features, lin.out_features), default=None)
        if smallest is not None and w.lora_rank > min(smallest.in_features, smallest.out_features):
            side = min(smallest.in_features, smallest.out_features)
            p.append(f"lora_rank={w.lora_rank} exceeds the smaller side of {smallest.module} "
                     f"({smallest.in_features}x{smallest.out_features}) of {spec.name}: a LoRA update's rank is at "
                     f"most min(in, out) = {side}; use --lora-rank {side} or less")
    if w.training and w.cp > 1 and (spec.kind != "decoder" or spec.vision is not None or spec.vlm is not None
                                    or spec.audio is not None or spec.mla is not None):
        # torch's ring attention balances the load only for causal attention (is_causal, _templated_ring_attention)
        p.append(f"cp={w.cp}: context parallelism is modelled for decoder-only causal LMs with standard attention "
                 f"(ring attention over causal SDPA); {spec.name} is not one: drop --cp")
    if w.padded and (spec.kind != "decoder" or spec.vision is not None or spec.vlm is not None
                     or spec.audio is not None):
        # the padding mask is modelled through create_causal_mask of a text decoder (masks.padded_mask)
        p.append(f"padded models a decoder-only text model's padding mask; {spec.name} is not one: drop --padded")
    if w.training and w.fsdp and w.fsdp_units != "blocks" and (spec.tied_embeddings or spec.head != "causal-lm"):
        # one parameter cannot be in two FSDP units (fully_shard refuses it), and the units are a causal LM's
        why = "ties its output layer to the input embedding" if spec.tied_embeddings else f"trains {spec.head}"
        p.append(f"fsdp_units={w.fsdp_units!r} makes a causal LM's embedding and output layer units of their own; "
                 f"{spec.name} {why}: use --fsdp-units blocks")
    if w.training and w.loss_parallel and spec.head != "causal-lm":
        p.append(f"loss_parallel shards a causal LM's logits; {spec.name} trains {spec.head}: drop --loss-parallel")
    if w.training and w.loss == "logits-sum" and spec.head not in ("causal-lm", "masked-lm"):
        p.append(f"loss=logits-sum sums a language model's logits; {spec.name} trains {spec.head}: drop --loss "
                 "or use --task causal-lm / masked-lm")
    if w.training and (w.loss_chunks > 1 or w.loss == "fused-linear") and spec.head != "causal-lm":
        p.append(f"loss={w.loss} loss_chunks={w.loss_chunks} apply to a causal LM's loss; {spec.name} trains "
                 f"{spec.head}: drop --loss/--loss-chunks or use --task causal-lm")
    if w.quant_head and w.quantized is not None and (spec.head != "causal-lm" or spec.vlm is not None
                                                     or spec.audio is not None):
        # the stacks that quantize the output layer (LitGPT, torchao, gpt-fast) are decoder-only causal
        # LMs; a classifier's score/classifier layer is tiny and kept in high precision by all of them
        p.append(f"quant_head quantizes a causal LM's output layer (lm_head); {spec.name} runs {spec.head}"
                 + (" with a vision or audio encoder" if spec.head == "causal-lm" else "")
                 + ": drop --quant-head")
    if (why := shape_refusal(spec, w)) is not None:
        p.append(why)
    if not w.training and w.cache in ("offloaded", "quantized") and spec.kind == "encoder-decoder":
        p.append(f"cache={w.cache} for an encoder-decoder model ({spec.name}) is not modelled: use --cache dynamic "
                 "or static")
    if not w.training and w.cache == "quantized" and spec.kind != "encoder":
        from vramlens.estimator.kv_cache import sliding_layers

        if sliding_layers(spec):
            p.append(f"cache=quantized: transformers' QuantizedCache takes full-attention layers only, and "
                     f"{spec.name} has {sliding_layers(spec)} sliding-window layers: use --cache dynamic or static")
    if not w.training and w.cache == "quantized" and spec.mla is not None:
        p.append(f"cache=quantized for multi-head latent attention ({spec.name} caches a latent, not K and V) is not "
                 "modelled: use --cache dynamic or static")
    if spec.kind == "encoder" and w.new_tokens:
        p.append(f"new_tokens={w.new_tokens}: {spec.name} is an encoder and does not generate")
    elif w.new_tokens and spec.head not in ("causal-lm", "seq2seq-lm"):
        p.append(f"new_tokens={w.new_tokens}: {spec.name} is built for {spec.head} ({spec.architecture}), which "
                 "does not generate: drop --new-tokens or use --task causal-lm")
    from vramlens.estimator.audio import audio_problems

    p += audio_problems(spec, w, "Whisper: whisper-tiny, -base, -small, -medium, -large-v2, -large-v3, "
                                 "-large-v3-turbo, or any model_type whisper")
    if p:
        raise ConfigError(p)


__all__ = [
    "Breakdown",
    "COMPONENTS",
    "Component",
    "DEFAULT_HEADROOM",
    "Estimate",
    "check_api_types",
    "check_workload",
    "estimate",
    "estimate_spec",
    "make_breakdown",
]
