"""Build the model a trace runs: a Hugging Face model from its config, or a user factory.

Hugging Face models are built from ``ModelSpec.config`` (the original config.json fields):
``AutoConfig.for_model(model_type, **config)`` and the class named by ``architectures[0]``.
Under fake tensors the model is built on ``meta``, LoRA is applied there, and then
``to_empty(device="cpu")`` runs inside the FakeTensorMode (``.to()`` on fake parameters
fails; see shared/TRACING.md); tied weights are tied again afterwards.

Factories (``package.module:factory``): the factory is called with no arguments, inside the
trace's tensor mode (so its parameters are fake in fake mode), and returns either

* ``(module, example_inputs)`` where ``example_inputs(batch, seq)`` returns the forward's
  arguments: a tuple (positional) or a dict (keywords) of tensors; or
* a module alone, with ``--input-shape`` (e.g. ``8x3x224x224``) giving one float input.

In training the loss is ``output.loss`` when the output has one, else the sum of the
(first) output tensor.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import math
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from vramlens.errors import InputError, TraceError
from vramlens.workload import AO_INFERENCE_QUANTS, Workload

TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}

#: config.json keys that name the number of blocks, by convention of each family.
LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
#: config.json keys that list the indices of some blocks (Bamba's attention blocks, LFM2's, Zamba2's hybrid
#: blocks, Qwen MoE's dense ones): a truncated config keeps the indices below its depth.
LAYER_INDEX_KEYS = ("attn_layer_indices", "full_attn_idxs", "hybrid_layer_ids", "mlp_only_layers")
#: config.json keys whose string has one letter per block (Nemotron-H's ``M`` Mamba2, ``*`` attention, ``-`` MLP,
#: ``E`` MoE): cut as the per-block lists are.
LAYER_PATTERN_KEYS = ("hybrid_override_pattern",)
#: config.json keys transformers' config classes do not take as attributes.
_DROP_KEYS = ("architectures", "transformers_version", "torch_dtype", "dtype", "_name_or_path",
              "auto_map", "quantization_config", "model_type")


@dataclass
class Built:
    """A model ready to run, and how to feed it."""

    model: nn.Module
    kind: str  # the head (vramlens.models.heads.Head: "causal-lm", "embedding", ...) or "factory"
    vocab_size: int = 0
    inputs: Callable[[int, int], Any] | None = None  # factory models
    is_hf: bool = True
    notes: list[str] = field(default_factory=list)
    n_layers: int = 0
    config: Any = None
    #: a vision encoder's input: (channels, height, width) of the pixel_values it is fed; None for text
    image: tuple[int, int, int] | None = None
    #: the image differs from the config's image_size: forward with interpolate_pos_encoding=True
    interpolate: bool = False
    #: a speech encoder-decoder's input side (Whisper: mel bins, 1,500 positions per 30-s window); None otherwise
    audio: Any = None
    #: a vision-language model fed images: (image token id, tokens per image, channels, side) of the
    #: input_ids' image tokens and the (b * images, C, side, side) pixel_values; None otherwise
    vlm_images: tuple[int, int, int, int] | None = None
    #: LLaVA-NeXT: (crops per image, height, width): pixel_values (b * images, crops, C, side, side) and
    #: image_sizes [[height, width]] * (b * images), as LlavaNextImageProcessor returns them; None otherwise
    vlm_anyres: tuple[int, int, int] | None = None
    #: Llama 4 (a tiled VLM): the tiles the tower runs per image, the prompt's special tokens per image
    #: (``<|image_start|>``, separators...), and pixel_values in the weights' dtype (its forward does not cast them)
    vlm_tiles: int = 1
    vlm_specials: int = 0
    vlm_pixels_cast: bool = False
    #: an older release's per-block (key, value) tuples that the loop holds (Workload.holds_presents): what each
    #: forward's emulation collects (_collect_legacy_presents), for the runner to hold with the outputs; None: none
    presents: list[torch.Tensor] | None = None


def config_layers(cfg: dict) -> int:
    """Number of blocks in a config dict (encoder-decoder: the encoder's)."""
    for k in LAYER_KEYS:
        if isinstance(cfg.get(k), int):
            return cfg[k]
    if isinstance(cfg.get("text_config"), dict):  # a VLM (LLaVA, Gemma 3): its text model's blocks
        return config_layers(_text_config(cfg))
    return 0


def _text_config(cfg: dict) -> dict:
    """A VLM's text_config with the defaults its config class fills in (LLaVA's Llama dimensions)."""
    from vramlens.models.families.vlm import PARTS

    text = dict(cfg["text_config"])
    parts = PARTS.get(str(cfg.get("model_type")))
    if parts is not None:
        filled = parts(cfg, "config").text
        text.update({k: filled[k] for k in LAYER_KEYS if isinstance(filled.get(k), int)})
    return text


def truncate_config(cfg: dict, k: int) -> dict:
    """The same config with only the first ``k`` blocks (per-layer lists cut to match).

    Raises:
        InputError: a config whose stacks differ in depth (cannot be scaled as one).
    """
    L = config_layers(cfg)
    out = dict(cfg)
    if isinstance(cfg.get("text_config"), dict) and not any(isinstance(cfg.get(key), int) for key in LAYER_KEYS):
        # a VLM: the text model's blocks are cut, the vision tower (the same in both truncated models) stays whole
        out["text_config"] = truncate_config(_text_config(cfg), k)
        return out
    for key in LAYER_KEYS:
        if isinstance(out.get(key), int):
            out[key] = k
    dec = cfg.get("num_decoder_layers")
    if isinstance(dec, int):
        if dec != L:
            raise InputError(
                f"num_decoder_layers={dec} differs from num_layers={L}: extrapolation scales both "
                "stacks together; trace the full model (omit --layers)"
            )
        out["num_decoder_layers"] = k
    for key, v in cfg.items():
        if isinstance(v, list) and len(v) == L and key not in ("architectures",) and L > 1 and key not in LAYER_INDEX_KEYS:
            out[key] = v[:k]
        elif key in LAYER_INDEX_KEYS and isinstance(v, list):
            out[key] = [i for i in v if isinstance(i, int) and i < k]
        elif key in LAYER_PATTERN_KEYS and isinstance(v, str) and len(v) == L:
            out[key] = v[:k]
    return out


def _hf_config(cfg: dict):
    from transformers import AutoConfig

    model_type = cfg.get("model_type")
    if not model_type:
        raise InputError("config has no model_type: trace needs the model's config.json fields")
    kwargs = {k: _special_floats(v) for k, v in cfg.items() if k not in _DROP_KEYS}
    errors: tuple[type[Exception], ...] = (ValueError, KeyError, TypeError, ArithmeticError, IndexError, AttributeError,
                                         *_strict_dataclass_errors())
    try:
        return AutoConfig.for_model(model_type, **kwargs)
    except errors as e:
        # ArithmeticError: Qwen3NextConfig divides by full_attention_interval (0 is a ZeroDivisionError)
        raise TraceError(
            f"transformers cannot build a config for model_type={model_type!r} ({' '.join(str(e).split()) or type(e).__name__}); "
            "use the analytic `vramlens estimate` instead"
        ) from None


def _special_floats(v):
    """A value of config.json with transformers' tagged non-finite floats decoded: ``save_pretrained`` writes
    ``float("inf")`` as ``{"__float__": "Infinity"}`` (configuration_utils.py ``_encode_special_floats``, e.g.
    Falcon-H1's ``time_step_limit``) and only ``from_json_file`` decodes it; vramlens reads the JSON itself."""
    if isinstance(v, dict):
        if set(v) == {"__float__"} and v["__float__"] in ("Infinity", "-Infinity", "NaN"):
            return float(v["__float__"].replace("Infinity", "inf"))
        return {k: _special_floats(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_special_floats(x) for x in v]
    return v


def _strict_dataclass_errors() -> tuple[type[Exception], ...]:
    """huggingface_hub's validation errors of transformers 5's strict config dataclasses (not ValueError)."""
    try:
        from huggingface_hub.errors import StrictDataclassError
    except ImportError:  # an older huggingface_hub: transformers 4's configs raise ValueError/TypeError
        return ()
    return (StrictDataclassError,)


def _arch_class(cfg: dict):
    import transformers

    archs = cfg.get("architectures") or []
    name = archs[0] if archs else None
    cls = getattr(transformers, name, None) if name else None
    if cls is None:
        raise TraceError(
            f"architecture {name!r} is not a class of transformers {transformers.__version__}; "
            "use a package.module:factory or the analytic `vramlens estimate`"
        )
    return cls


def with_task_architecture(cfg: dict, task: str | None) -> dict:
    """``cfg`` with ``architectures`` naming the class ``AutoModelFor<task>`` builds (the estimator's choice too).

    A config.json without ``architectures`` (DeBERTa-v3's) gets the family's default class, as
    :func:`vramlens.models.spec_from_config` assumes.
    """
    from vramlens.models.families import DEFAULT_ARCHITECTURES

    if task is None:
        mt = cfg.get("model_type") or ""
        if not cfg.get("architectures") and mt in DEFAULT_ARCHITECTURES:
            return {**cfg, "architectures": [DEFAULT_ARCHITECTURES[mt]]}
        return cfg
    from vramlens.models.heads import task_architecture

    mt = cfg.get("model_type") or ""
    archs = cfg.get("architectures") or []
    default = DEFAULT_ARCHITECTURES.get(mt)
    arch = task_architecture(mt, archs[0] if archs else default or "ForCausalLM", task, default)
    return {**cfg, "architectures": [arch]}


#: model_type -> why its forward cannot run under fake tensors (one line; the estimate is analytic for it)
UNTRACEABLE = {
    "qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration cannot be traced under fake tensors: its forward reads values "
                  "back from tensors (the grid_thw loops of get_rope_index and the vision window index, the tower's "
                  "cu_seqlens split sizes); use vramlens estimate (analytic, not cross-checked) or a real run",
}


def _device_ctx(device: str | None):
    return torch.device(device) if device else _nullctx()


def build_hf(cfg: dict, wl: Workload, *, fake_mode=None, layers: int | None = None, meta_only: bool = False,
             device: str | None = None) -> Built:
    """Build a transformers model from config fields for workload ``wl``.

    With ``fake_mode`` the model is built on meta and materialised as fake tensors; with
    ``meta_only`` it stays on meta (shapes and counts only); with ``device`` (a real run on
    "cuda") its weights are made and initialised there, not on the CPU first.
    """
    if meta_only:
        fake_mode = None
    mt = str(cfg.get("model_type"))
    if mt in UNTRACEABLE and not meta_only and device is None:
        raise TraceError(UNTRACEABLE[mt])
    if layers is not None:
        cfg = truncate_config(cfg, layers)
    cfg = with_task_architecture(cfg, wl.task)
    config = _hf_config(cfg)
    cls = _arch_class(cfg)
    notes: list[str] = []
    dtype = TORCH_DTYPES[wl.dtype]
    attn = "eager" if wl.attention == "eager" else "sdpa"
    if wl.attention == "flash":
        notes.append("--attention flash traced as sdpa with CUDA's flash kernel choice (flash-attn is CUDA-only)")
    presents = _legacy_presents(cfg, wl)
    if wl.legacy_score_clamp and attn == "eager" and (clamped := _clamped_eager_attention(cfg, presents)) is not None:
        attn = clamped
        notes.append(f"transformers {wl.transformers_version}: eager attention clamps the masked scores "
                     "(torch.max(scores + mask, finfo.min), OPTAttention before 4.49; emulated)")
    if attn == "sdpa" and (contiguous := _contiguous_sdpa_attention(cfg, wl, presents)) is not None:
        attn = contiguous
        notes.append(f"transformers {wl.transformers_version}: q, k and v made contiguous head-major before SDPA, so "
                     "the kernel's output is copied back (OPTAttention._shape before 4.49; emulated)")
    if attn == "eager" and (fp32 := _fp32_rotary_eager_attention(cfg, wl, presents)) is not None:
        attn = fp32
        notes.append(f"transformers {wl.transformers_version}: q and k leave the rotary embedding in fp32 and eager "
                     "attention keeps them so (GPTNeoXAttention before 4.49; emulated)")
    if wl.checkpointing == "selective":
        attn = _selective_attention(cls, attn)
    try:
        with torch.device("meta") if (fake_mode is not None or meta_only) else _device_ctx(device):
            model = cls._from_config(config, dtype=dtype, attn_implementation=attn)
    except ValueError as e:
        if "attn_implementation" in str(e) or "does not support" in str(e):
            notes.append(f"{cls.__name__} does not support attention={attn}; traced with eager")
            attn = "eager"
            with torch.device("meta") if (fake_mode is not None or meta_only) else _device_ctx(device):
                model = cls._from_config(config, dtype=dtype, attn_implementation=attn)
        else:
            raise TraceError(f"transformers cannot build {cls.__name__}: {e}") from None
    if wl.method in ("lora", "qlora"):
        model = apply_lora(model, wl)
    elif wl.method == "adalora":
        model = apply_adalora(model, wl)
    elif wl.method in ("ia3", "ln-tuning", "vera"):
        model = apply_vector_method(model, wl)
    elif wl.method in ("prompt-tuning", "prefix-tuning"):
        model = apply_prompt_tuning(model, wl)
    elif wl.method in ("loha", "lokr", "oft", "boft"):
        model = apply_delta_method(model, wl)
    # a prompt-learning PeftModel registers the input embedding a second time (``word_embeddings``): to_empty
    # would visit it twice and fail to swap its weight, so it is set aside and put back after
    shared = model._modules.pop("word_embeddings", None) if wl.method in ("prompt-tuning", "prefix-tuning") else None
    if fake_mode is not None:
        with fake_mode:
            model.to_empty(device="cpu")
            retie(model)
    if shared is not None:
        model.word_embeddings = model.get_base_model().get_input_embeddings()
    if (legacy := _add_legacy_buffers(model, cfg, wl, fake_mode)) is not None:
        notes.append(legacy)
    if presents is not None:
        _hook_legacy_presents(model, cfg, attn, presents)
        notes.append(f"transformers {wl.transformers_version}: each block returns its (key, value) tuple, held by the "
                     "loop's outputs until the next forward returns (emulated)")
    if wl.method == "qlora" and wl.quant_head:
        from vramlens.models.heads import head_of

        head = head_of(cls.__name__, "encoder-decoder" if getattr(config, "is_encoder_decoder", False) else "decoder")
        if head != "causal-lm" or "ForConditionalGeneration" in cls.__name__:
            raise TraceError(f"quant_head quantizes a causal LM's output layer (lm_head); {cls.__name__} runs {head}"
                             + (" with a vision or audio encoder" if head == "causal-lm" else "")
                             + ": drop --quant-head")
    if wl.method == "qlora" or (wl.method in ("oft", "boft", "vera") and wl.quantized is not None):
        # the weight is quantized from the model's dtype (fp16 under dequant_dtype="fp16") and the matmul runs in
        # Workload.quant_matmul_dtype (an fp16 model's bnb_compute_dtype): dequantized to the one, cast to the other
        src = "fp16" if wl.dequant_dtype == "fp16" else wl.compute_dtype
        quantize_nf4(model, fake_mode=fake_mode, meta_only=meta_only, double_quant=wl.quantized == "nf4-dq",
                     adapted_only=wl.quant_targets == "adapted", compute_dtype=TORCH_DTYPES[wl.quant_matmul_dtype],
                     include_head=wl.quant_head,
                     quant_dtype=TORCH_DTYPES[src] if src != wl.quant_matmul_dtype else None,
                     torchao=wl.nf4_impl == "torchao" and wl.quantized in ("nf4", "nf4-dq"))
        notes.append("qlora: frozen base linears hold packed NF4 (uint8) plus absmax constants; "
                     "matmuls dequantize on the fly (bitsandbytes 0.49 MatMul4Bit's memory behaviour)"
                     + ("; the output layer too (Lightning's BitsandbytesPrecision)" if wl.quant_head else "")
                     + ("; dequantized to fp16, then cast (bitsandbytes 0.42.0)" if wl.dequant_dtype == "fp16" else "")
                     + ("; dequantized by torchao's NF4Tensor.get_original_weight (int64 codes, bf16 halves)"
                        if wl.nf4_impl == "torchao" else ""))
        if wl.method == "vera":
            _bnb4bit_backend(model)
    if wl.quantized in AO_INFERENCE_QUANTS and not wl.training:
        from vramlens.estimator.weights import quant_group

        notes.append(quantize_ao(model, wl.quantized, quant_group(wl), TORCH_DTYPES[wl.dtype], fake_mode=fake_mode,
                                 meta_only=meta_only, include_head=wl.quant_head))
    if wl.quant_impl == "torchao-wo" and wl.quantized == "int8" and not wl.training:
        notes.append(quantize_int8_weight_only(model, fake_mode=fake_mode, meta_only=meta_only,
                                               include_head=wl.quant_head))
    if wl.training and wl.fp8:
        notes.append(convert_fp8(model, wl.fp8_recipe))
    if wl.training and (wl.checkpointing in ("full", "selective-op") or wl.checkpoint_every is not None):
        from vramlens.trace.checkpoint import apply
        try:
            apply(model, wl)
        except ValueError as e:
            raise TraceError(f"{cls.__name__}: {e}; use --checkpointing none") from None
    model.train(wl.training)
    if wl.training and hasattr(config, "use_cache") and not (wl.outputs_held and presents is None):
        # as fine-tuning scripts and the HF Trainer's step do, no KV cache outlives the step; a loop that holds
        # ``outputs`` (Workload.outputs_held) keeps the cache the config's use_cache returns (an older release's
        # tuples are emulated instead: _legacy_presents)
        config.use_cache = False
    n = config_layers(cfg)
    from vramlens.models.heads import head_of

    kind = head_of(cls.__name__, "encoder-decoder" if getattr(config, "is_encoder_decoder", False) else "decoder")
    image, interpolate = None, False
    if getattr(cls, "main_input_name", "input_ids") == "pixel_values":
        # ViT, CLIP's and SigLIP's vision towers: fed (b, C, H, W) fp32 pixels (their forward casts them)
        size = int(config.image_size)
        h, w = wl.image_size or (size, size)
        image, interpolate = (int(config.num_channels), h, w), (h, w) != (size, size)
    vlm_images = None
    vlm_anyres = None
    tiles, specials = 1, 0
    from vramlens.models.families.vlm import ARCHITECTURES as VLM_ARCHITECTURES

    if VLM_ARCHITECTURES.get(str(cfg.get("model_type"))) == cls.__name__:
        from vramlens.models import spec_from_config

        v = spec_from_config(cfg, multimodal=True).vlm
        assert v is not None and v.tower.vision is not None
        if wl.images:
            per_image = v.image_tokens
            if v.anyres is not None:
                hq, wq = wl.image_size or v.anyres.default_image
                per_image = v.anyres.tokens(hq, wq)
                vlm_anyres = (v.anyres.crops(hq, wq), hq, wq)
            vlm_images = (v.image_token_id, per_image, v.tower.vision.channels, v.image_size)
            _placeholder_mask_without_count(model, v.image_token_id)
    elif str(cfg.get("model_type")) == "llama4" and cls.__name__ == "Llama4ForConditionalGeneration":
        from vramlens.models import spec_from_config

        v = spec_from_config(cfg, multimodal=True).vlm
        assert v is not None and v.tower.vision is not None and v.tiled is not None
        if wl.images:
            hq, wq = wl.image_size or (v.image_size, v.image_size)
            per = v.tiled.image_tokens(hq, wq)
            vlm_images = (v.image_token_id, per, v.tower.vision.channels, v.image_size)
            tiles, specials = v.tiled.tiles(hq, wq), v.tiled.prompt_tokens(hq, wq) - per
            _placeholder_mask_without_count(model, v.image_token_id)
        _llama4_image_outputs(model)
    elif wl.images:
        raise TraceError(f"images={wl.images} applies to vision-language models (LLaVA, LLaVA-NeXT, Gemma 3 "
                         f"multimodal, Qwen2.5-VL); {cls.__name__} has no vision tower: drop --images")
    if image is None and vlm_images is None and wl.image_size is not None:
        raise TraceError(f"image_size={wl.image_size[0]}x{wl.image_size[1]} applies to vision encoders; "
                         f"{cls.__name__} takes token ids: drop --image-size")
    audio = None
    if getattr(cls, "main_input_name", "input_ids") == "input_features":
        # Whisper: log-mel frames, max_source_positions * 2 of them per window (WhisperEncoder.forward)
        from vramlens.models.spec import Audio

        audio = Audio(mel_bins=int(config.num_mel_bins), source_positions=int(config.max_source_positions),
                      target_positions=int(config.max_target_positions))
    elif wl.audio_seconds is not None:
        raise TraceError(f"audio_seconds={wl.audio_seconds:g} applies to speech encoder-decoders (Whisper); "
                         f"{cls.__name__} takes no audio: drop --audio-seconds")
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config  # a VLM's text model
    return Built(model=model, kind=kind, vocab_size=int(getattr(text_config, "vocab_size", 0) or 0), presents=presents,
                 notes=notes, n_layers=n, config=config, image=image, interpolate=interpolate, audio=audio,
                 vlm_images=vlm_images, vlm_anyres=vlm_anyres, vlm_tiles=tiles, vlm_specials=specials,
                 vlm_pixels_cast=cls.__name__ == "Llama4ForConditionalGeneration")


def _llama4_image_outputs(model) -> None:
    """Work around transformers 5.24's ``Llama4ForConditionalGeneration.forward``, which reads
    ``outputs.image_outputs`` from its language model's ``MoeCausalLMOutputWithPast`` (no such field: every call
    raises AttributeError, real tensors too): the language model's output gets the ``image_outputs`` the other VLMs
    return (``mm_encoder_outputs.get("image")``: the vision model's output, held by the model's output as LLaVA's
    and Gemma 3's hold theirs)."""
    slot: list = [None]
    get_features, lm_forward = model.get_image_features, model.language_model.forward

    def features(*args, **kwargs):
        slot[0] = get_features(*args, **kwargs)
        return slot[0]

    def forward(*args, **kwargs):
        out = lm_forward(*args, **kwargs)
        out.image_outputs, slot[0] = slot[0], None
        return out

    model.get_image_features = features
    model.language_model.forward = forward


def _placeholder_mask_without_count(model, token: int) -> None:
    """Give the VLM's ``get_placeholder_mask`` (modeling_llava.py, modeling_gemma3.py) the same mask without its
    count check: ``special_image_mask.sum()`` compared with the features is data-dependent, which fake tensors
    cannot evaluate. The mask, ``(input_ids == image_token_id).unsqueeze(-1)``, is what the real one returns
    (a bool (b, s, 1) tensor; the runner puts exactly images x tokens image ids in each row)."""
    def mask(input_ids, inputs_embeds=None, image_features=None, **_kw):
        return (input_ids == token).unsqueeze(-1)

    for module in model.modules():  # the VLM's inner model (LlavaModel, Gemma3Model), under peft's wrapper too
        if "get_placeholder_mask" in type(module).__dict__:
            module.get_placeholder_mask = mask


class _nullctx:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def _add_legacy_buffers(model: nn.Module, cfg: dict, wl: Workload, fake_mode) -> str | None:
    """The per-block buffers an older transformers release registered (ModelSpec.legacy_buffers_before and
    legacy_rotary_cache_before), added to each attention module of today's model under names of their own (today's
    forward never reads them): GPT-2's and GPT-NeoX's (1, 1, P, P) bool causal mask and scalar ``masked_bias``,
    GPT-NeoX's own rotary ``inv_freq`` and fp32 (P, dim) cos/sin caches, Llama's (before 4.41) ``inv_freq`` and
    (P, head_dim) cos/sin caches in the load dtype."""
    from contextlib import nullcontext

    if wl.transformers_release is None:
        return None
    spec = _family_facts(cfg)
    if spec is None:
        return None
    masks = wl.runs_before(spec.legacy_buffers_before)
    rotary = wl.runs_before(spec.legacy_rotary_cache_before)
    if not masks and not rotary:
        return None
    P, dim, d = spec.max_position, spec.legacy_rotary_cache_dim, spec.head_dim
    blocks = 0
    for m in model.modules():
        param = next(m.parameters(), None)
        if not type(m).__name__.endswith("Attention") or param is None:
            continue
        dev = param.device
        with fake_mode if fake_mode is not None else nullcontext():
            if masks:
                m.register_buffer("_legacy_bias", torch.ones((1, 1, P, P), dtype=torch.bool, device=dev),
                                  persistent=False)
                m.register_buffer("_legacy_masked_bias", torch.zeros((), dtype=TORCH_DTYPES[wl.dtype], device=dev),
                                  persistent=False)
                if dim:
                    m.register_buffer("_legacy_inv_freq", torch.zeros(dim // 2, device=dev), persistent=False)
                    for name in ("_legacy_cos_cached", "_legacy_sin_cached"):
                        m.register_buffer(name, torch.zeros((P, dim), dtype=torch.float32, device=dev),
                                          persistent=False)
            if rotary:
                m.register_buffer("_legacy_rotary_inv_freq", torch.zeros(d // 2, device=dev), persistent=False)
                for name in ("_legacy_rotary_cos", "_legacy_rotary_sin"):
                    m.register_buffer(name, torch.zeros((P, d), dtype=TORCH_DTYPES[wl.dtype], device=dev),
                                      persistent=False)
        blocks += 1
    what = ([f"a ({P}, {P}) bool causal-mask buffer" + (f" and fp32 rotary caches ({P}, {dim})" if dim else "")]
            if masks else []) + ([f"rotary cos/sin caches ({P}, {d}) in {wl.dtype}"] if rotary else [])
    return (f"transformers {wl.transformers_version}: each of the {blocks} attention modules holds "
            + " and ".join(what) + " (emulated)")


def _family_facts(cfg: dict) -> Any:
    """The ModelSpec of ``cfg`` for the older-release emulations, or None for a model_type vramlens does not model
    (traced as today's transformers runs it)."""
    from vramlens.errors import UnmodelledModelError
    from vramlens.models import spec_from_config

    try:
        return spec_from_config(cfg)
    except UnmodelledModelError:
        return None


def _legacy_presents(cfg: dict, wl: Workload) -> list[torch.Tensor] | None:
    """The list that emulates an older release's per-block (key, value) tuples held by the loop
    (Workload.holds_presents, ModelSpec.legacy_presents), filled during each forward by the hooks of
    :func:`_hook_legacy_presents` and the emulated eager attentions; None when not emulated."""

    if wl.transformers_release is None:  # today's transformers (and a model_type vramlens does not model)
        return None
    spec = _family_facts(cfg)
    lp = spec.legacy_presents if spec is not None else None
    if lp is None or not wl.holds_presents(lp.before) or str(cfg.get("model_type")) not in _PRESENTS_SOURCES:
        return None
    return []


#: the modules whose outputs an older release's per-block (key, value) tuple is or views (ModelSpec.legacy_presents):
#: GPT-2's c_attn output split in three and GPT-NeoX's query_key_value output (the value a view of it); OPT's
#: contiguous keys and values are made and held by its emulated attentions (_clamped_eager_attention,
#: _contiguous_sdpa_attention)
_PRESENTS_SOURCES = {"gpt2": ("attn.c_attn",), "gpt_neox": ("attention.query_key_value",), "opt": ()}


def _hook_legacy_presents(model: nn.Module, cfg: dict, attn: str, presents: list[torch.Tensor]) -> None:
    """Keep each block's storages its (key, value) tuple views in ``presents`` (``_PRESENTS_SOURCES``); with
    ``LegacyPresents.key_fp32`` (GPT-NeoX before 4.45) under SDPA also the fp32 key, (b, a, s, d) as 4.42's
    ``torch.cat`` of the fp32-rotated part and the rest makes it (under eager the emulated attention holds the
    fp32 key it keeps: _fp32_rotary_eager_attention)."""
    from vramlens.models import spec_from_config

    spec = spec_from_config(cfg)
    assert spec.legacy_presents is not None
    sources = _PRESENTS_SOURCES[str(cfg.get("model_type"))]
    fp32_key = spec.legacy_presents.key_fp32 > 0 and attn == "sdpa"
    a, d = spec.n_heads, spec.head_dim

    def hook(_module, _args, out):
        presents.append(out)
        if fp32_key:
            with torch.no_grad():  # GPTNeoXAttention's qkv is (b, s, a, 3d): the key is the middle d of each head
                key = out.view(*out.shape[:-1], a, 3 * d)[..., d:2 * d].transpose(1, 2)
                presents.append(key.to(torch.float32, memory_format=torch.contiguous_format))

    for name, m in model.named_modules():
        if sources and name.endswith(sources):
            m.register_forward_hook(hook)


def retie(model: nn.Module) -> None:
    tie = getattr(model, "tie_weights", None)
    if tie is None:
        base = getattr(model, "get_base_model", None)
        tie = getattr(base(), "tie_weights", None) if base else None
    if tie is not None:
        tie()


# ---- LoRA / QLoRA ---------------------------------------------------------------------------
def _peft() -> Any:
    """The peft package, or the one-line error naming the extra that brings it."""
    try:
        import peft
    except ImportError:
        from vramlens.errors import MissingExtraError

        raise MissingExtraError("peft", "trace") from None
    return peft


def _peft_targets(wl: Workload) -> Any:
    """peft's ``target_modules`` for ``lora_targets``: the names, or peft's ``"all-linear"`` shorthand."""
    return "all-linear" if "all-linear" in wl.lora_targets else list(wl.lora_targets)


def _peft_model(model: nn.Module, cfg: Any, wl: Workload, *, autocast: bool) -> nn.Module:
    """``get_peft_model(model, cfg)``; a target peft cannot adapt is one line naming ``lora_targets``."""
    try:
        return _peft().get_peft_model(model, cfg, autocast_adapter_dtype=autocast)
    except ValueError as e:
        raise InputError(f"lora_targets={','.join(wl.lora_targets)}: {e}") from None


def apply_lora(model: nn.Module, wl: Workload) -> nn.Module:
    peft = _peft()
    cfg = peft.LoraConfig(r=wl.lora_rank, lora_alpha=2 * wl.lora_rank, target_modules=_peft_targets(wl),
                          lora_dropout=wl.lora_dropout, use_dora=wl.dora)
    # peft's default (autocast_adapter_dtype=True) upcasts half adapters to fp32; otherwise the
    # adapters are made in the adapters' dtype, as torchtune builds them in the model's
    peft_model = _peft_model(model, cfg, wl, autocast=wl.lora_dtype == "fp32")
    dtype = TORCH_DTYPES[wl.lora_dtype]
    for name, p in peft_model.named_parameters():
        if p.requires_grad and p.dtype != dtype:  # on meta: a cast without data
            parent, _, leaf = name.rpartition(".")
            setattr(peft_model.get_submodule(parent), leaf, nn.Parameter(p.detach().to(dtype)))
    return peft_model


def apply_adalora(model: nn.Module, wl: Workload) -> nn.Module:
    """peft's AdaLoRA: ``AdaLoraConfig(init_r=lora_rank, target_modules=..., lora_dropout=...)`` with fp32 adapters
    (autocast_adapter_dtype). ``total_step`` (which AdaLoraConfig requires) and ``tinit`` only schedule the budget:
    the trace's steps fall inside the initial warm-up (no masking, whose threshold is a data-dependent ``.item()``),
    and update_and_allocate still builds the RankAllocator's state."""
    cfg = _peft().AdaLoraConfig(init_r=wl.lora_rank, target_r=min(8, wl.lora_rank), target_modules=_peft_targets(wl),
                                lora_dropout=wl.lora_dropout, tinit=100, tfinal=0, total_step=1000)
    peft_model = _peft_model(model, cfg, wl, autocast=True)
    # ``ranknum`` is made with requires_grad=False (AdaLoraLayer.update_layer), as PEFT's MetaMathQA run at d787f51b
    # counts it (18,353,664 trainable: A, E and B); peft 0.21.2 re-registers it trainable when it moves the adapters,
    # which would add its gradient and keep each adapter's (t, out) output for it (``... / ranknum``)
    for name, p in peft_model.named_parameters():
        if ".ranknum." in name:
            p.requires_grad_(False)
    return peft_model


def apply_vector_method(model: nn.Module, wl: Workload) -> nn.Module:
    """peft's IA3, LN tuning or VeRA with the config's defaults: the targets peft maps from the model's type
    (vramlens.models.peft_targets lists the same), IA3's vectors upcast to fp32 by autocast_adapter_dtype
    unless --lora-dtype says the model's dtype."""
    try:
        from peft import IA3Config, LNTuningConfig, VeraConfig, get_peft_model
    except ImportError:
        from vramlens.errors import MissingExtraError

        raise MissingExtraError("peft", "trace") from None
    # VeRA: VeraConfig(r=vera_rank) with the other defaults (projection_prng_key 0, save_projection True)
    cfg = (IA3Config() if wl.method == "ia3" else LNTuningConfig() if wl.method == "ln-tuning"
           else VeraConfig(r=wl.vera_rank))
    try:
        with warnings.catch_warnings():
            # peft's _get_in_out_features warns on any layer it cannot size, an RMSNorm among them (LN tuning
            # copies it all the same, as PEFT's own MetaMathQA run on Llama-3.2-3B does)
            warnings.filterwarnings("ignore", message="Unsupported layer type", category=UserWarning)
            return get_peft_model(model, cfg, autocast_adapter_dtype=wl.method in ("ia3", "vera")
                                  and wl.lora_dtype == "fp32")
    except ValueError as e:
        raise InputError(f"method={wl.method}: {e}") from None


def apply_delta_method(model: nn.Module, wl: Workload) -> nn.Module:
    """peft's LoHa, LoKr or OFT on ``lora_targets``: LoHa and LoKr with rank ``lora_rank`` (LoKr's
    ``decompose_factor``; alpha and the dropouts at the config's defaults: they change no shape), OFT in blocks of
    ``oft_block_size`` (r 0; Cayley-Neumann with peft's 5 terms), the factors upcast to fp32 by autocast_adapter_dtype as
    PEFT's MetaMathQA runs them, or left in the weights' dtype (``lora_dtype`` bf16 / fp16)."""
    try:
        from peft import BOFTConfig, LoHaConfig, LoKrConfig, OFTConfig, get_peft_model
    except ImportError:
        from vramlens.errors import MissingExtraError

        raise MissingExtraError("peft", "trace") from None
    targets = _peft_targets(wl)
    try:
        cfg = (LoHaConfig(r=wl.lora_rank, target_modules=targets) if wl.method == "loha"
               else LoKrConfig(r=wl.lora_rank, target_modules=targets, decompose_factor=wl.decompose_factor)
               if wl.method == "lokr" else OFTConfig(r=0, oft_block_size=wl.oft_block_size, target_modules=targets)
               if wl.method == "oft" else BOFTConfig(boft_block_size=wl.boft_block_size, target_modules=targets))
        with warnings.catch_warnings():
            # OFT moves a block size that does not divide in_features to a divisor and warns; vramlens.models.oft_block
            # makes the same move
            warnings.filterwarnings("ignore", message="Invalid `oft_block_size`", category=UserWarning)
            # BOFT tries to build its CUDA block-diagonal extension and falls back to torch.block_diag (the same
            # tensors) with boft_n_butterfly_factor 1, the value vramlens models, when it cannot
            warnings.filterwarnings("ignore", message="Failed to load the CUDA extension", category=UserWarning)
            warnings.filterwarnings("ignore", message="Setting boft_n_butterfly_factor to 1", category=UserWarning)
            # --lora-dtype bf16 / fp16 (the weights' dtype): autocast_adapter_dtype=False leaves the factors there
            return get_peft_model(model, cfg, autocast_adapter_dtype=wl.lora_dtype == "fp32")
    except ValueError as e:
        raise InputError(f"method={wl.method}: {e}") from None


def apply_prompt_tuning(model: nn.Module, wl: Workload) -> nn.Module:
    """peft's prompt tuning: ``PromptTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=n)``, random init (the
    default), its fp32 embedding beside the frozen model; or prefix tuning's ``PrefixTuningConfig``."""
    try:
        from peft import PrefixTuningConfig, PromptTuningConfig, get_peft_model
    except ImportError:
        from vramlens.errors import MissingExtraError

        raise MissingExtraError("peft", "trace") from None
    if wl.method == "prefix-tuning":
        # PrefixTuningConfig's defaults (prefix_projection False): an fp32 (n, layers x 2 x kv width) embedding
        return get_peft_model(model, PrefixTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=wl.num_virtual_tokens))
    return get_peft_model(model, PromptTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=wl.num_virtual_tokens))


class NF4Linear(nn.Module):
    """A frozen linear stored as bitsandbytes stores NF4 (Params4bit), for tracing.

    Storage (bitsandbytes/functional.py ``quantize_4bit``, blocksize 64): the packed weight,
    two 4-bit codes per byte, ``ceil(out*in/2)`` uint8; one absmax per 64-element block, fp32,
    or with double quantization (``compress_statistics``) uint8 absmax plus one fp32 absmax per
    256 blocks and an fp32 offset. The matmul dequantizes the whole weight to the input's
    dtype (a transient), and saves nothing for backward beyond the packed weight.
    """

    def __init__(self, in_features: int, out_features: int, bias: torch.Tensor | None, double_quant: bool = True,
                 blocksize: int = 64, compute_dtype: torch.dtype | None = None,
                 quant_dtype: torch.dtype | None = None, torchao: bool = False):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.compute_dtype = compute_dtype
        # the dtype the weight had when quantized, which dequantize_4bit returns (quant_state.dtype):
        # None, the matmul's own; fp16 under bitsandbytes 0.42.0 / Lightning's _NF4Linear (Workload.dequant_dtype)
        self.quant_dtype = quant_dtype
        self.torchao = torchao  # torchao's NF4Tensor dequantizes (torchtune's linear_nf4), Workload.nf4_impl
        n = in_features * out_features
        blocks = math.ceil(n / blocksize)
        self.weight = nn.Parameter(torch.empty((n + 1) // 2, 1, dtype=torch.uint8), requires_grad=False)
        if double_quant:
            self.register_buffer("absmax", torch.empty(blocks, dtype=torch.uint8))
            self.register_buffer("absmax2", torch.empty(math.ceil(blocks / 256), dtype=torch.float32))
            self.register_buffer("offset", torch.empty((), dtype=torch.float32))
        else:
            self.register_buffer("absmax", torch.empty(blocks, dtype=torch.float32))
        self.bias = None if bias is None else nn.Parameter(bias.detach(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # bitsandbytes Linear4bit.forward: the input in the compute dtype, the output back in the input's
        inp_dtype = x.dtype
        if self.compute_dtype is not None:
            x = x.to(self.compute_dtype)
        bias = None if self.bias is None else self.bias.to(x.dtype)
        if x.numel() == x.shape[-1] and not (torch.is_grad_enabled() and x.requires_grad):
            # bitsandbytes 0.49 matmul_4bit: one token without grad takes gemv_4bit (no dequantized weight)
            out = x.new_empty((*x.shape[:-1], self.out_features))
            out = out if bias is None else out + bias
        else:
            out = _NF4Matmul.apply(x, self.weight, bias, self.out_features, self.in_features, self.quant_dtype,
                                   self.torchao)
        return out.to(inp_dtype)

    # peft's dequantize_module_weight (utils/integrations.py), which DoRA calls on its base layer,
    # dequantizes a module with ``W_q`` through ``module.dequantize()``: one (out, in) tensor in
    # the compute dtype, as ``dequantize_bnb_weight`` returns for bitsandbytes' Params4bit
    @property
    def W_q(self) -> torch.Tensor:  # noqa: N802 - the attribute name peft looks for
        return self.weight

    def dequantize(self) -> torch.Tensor:
        return _dequantize(self.weight, self.out_features, self.in_features, self.compute_dtype or torch.bfloat16)


def _dequantize(packed: torch.Tensor, out_f: int, in_f: int, dtype) -> torch.Tensor:
    return packed.new_empty((out_f, in_f), dtype=dtype)


def _dequantize_to(packed: torch.Tensor, out_f: int, in_f: int, quant_dtype, dtype, torchao: bool = False) -> torch.Tensor:
    """bitsandbytes ``dequantize_4bit(B, quant_state).to(dtype)``: the weight in the dtype it was quantized
    from, then its copy in ``dtype`` (the first a temporary freed when ``.to`` returns); one tensor when
    the two dtypes agree. ``torchao``: :func:`_torchao_get_original_weight`."""
    if torchao:
        return _torchao_get_original_weight(packed, out_f, in_f, dtype)
    if quant_dtype is None or quant_dtype == dtype:
        return _dequantize(packed, out_f, in_f, dtype)
    return _dequantize(packed, out_f, in_f, quant_dtype).to(dtype)


def _torchao_get_original_weight(packed: torch.Tensor, out_f: int, in_f: int, dtype) -> torch.Tensor:
    """torchao ``NF4Tensor.get_original_weight``'s tensors, op for op (torchao/dtypes/nf4tensor.py, v0.1 on;
    torchtune's ``linear_nf4`` calls it through ``weight.to(input.dtype)`` in forward and backward): the
    two nibbles' codes as int64, each looked up in the 16-entry table, the bf16 scalers (one per 64 weights)
    repeated per half block, the two products, stacked and reshaped; every local alive until it returns."""
    flat = packed.reshape(-1)
    first_elements = (flat >> 4).to(torch.long)
    second_elements = (flat & 0b1111).to(torch.long)
    nf4 = flat.new_empty(16, dtype=dtype)  # the table (a buffer of the NF4Tensor in torchao)
    dequantized_first = nf4[first_elements]
    dequantized_second = nf4[second_elements]
    scalers = flat.new_empty(math.ceil(out_f * in_f / 64), dtype=torch.bfloat16)
    repeated = scalers.unsqueeze(-1).expand(scalers.size(0), 32)
    scaled_first = dequantized_first * repeated.flatten()[: flat.numel()]
    scaled_second = dequantized_second * repeated.flatten()[: flat.numel()]
    stacked = torch.stack([scaled_first.unsqueeze(-1).transpose(0, 1), scaled_second.unsqueeze(-1).transpose(0, 1)],
                          dim=-1)
    return stacked.reshape(-1)[: out_f * in_f].view(out_f, in_f)


class _NF4Matmul(torch.autograd.Function):
    """bitsandbytes ``MatMul4Bit``: forward ``F.linear(A, dequantize_4bit(B).to(A.dtype).t(), bias)``,
    backward ``grad_output @ dequantize_4bit(B).to(grad_output.dtype)``: the whole weight each call."""

    @staticmethod
    def forward(ctx, x, packed, bias, out_f, in_f, quant_dtype=None, torchao=False):
        ctx.packed, ctx.shape, ctx.quant_dtype, ctx.torchao = packed, (out_f, in_f), quant_dtype, torchao
        w = _dequantize_to(packed, out_f, in_f, quant_dtype, x.dtype, torchao)
        return torch.nn.functional.linear(x, w, None if bias is None else bias.to(x.dtype))

    @staticmethod
    def backward(ctx, grad):
        w = _dequantize_to(ctx.packed, *ctx.shape, ctx.quant_dtype, grad.dtype, ctx.torchao)
        return grad @ w, None, None, None, None, None, None


def _bnb4bit_backend(model: nn.Module) -> None:
    """peft 0.21.2 resolves a layer's ``quantization_backend`` from its base layer when it wraps it
    (utils/quantization_utils.py ``resolve_quantization_backend``: ``Bnb4bitBackend`` for bitsandbytes' Linear4bit);
    the NF4 stand-in replaced the base layers after, so each layer that has one gets bitsandbytes 4-bit's, whose
    ``maybe_clone_base_result`` VeRA's forward runs (a clone of the base output)."""
    from peft.utils.quantization_utils import Bnb4bitBackend

    for mod in model.modules():
        if hasattr(mod, "quantization_backend") and isinstance(getattr(mod, "base_layer", None), NF4Linear):
            setattr(mod, "quantization_backend", Bnb4bitBackend())  # noqa: B010 - a plain attribute, not a submodule


def quantize_nf4(model: nn.Module, *, fake_mode=None, double_quant: bool = True, meta_only: bool = False,
                 adapted_only: bool = False, compute_dtype: torch.dtype | None = None, include_head: bool = False,
                 quant_dtype: torch.dtype | None = None, torchao: bool = False) -> None:
    """Replace frozen linears by NF4Linear: all but the output head, as transformers' BitsAndBytesConfig
    does, or with ``adapted_only`` only the base layers of LoRA's adapted linears (torchtune 0.1 - 0.2).

    ``include_head``: the output layer too, as Lightning Fabric's ``BitsandbytesPrecision._convert_layers``
    replaces every ``nn.Linear`` (LitGPT's QLoRA). Called after ``retie``: a tied output layer gets a
    module of its own, which unties it (the input embedding keeps its weight). ``quant_dtype``: the dtype
    the weights were quantized from (fp16 under bitsandbytes 0.42.0, NF4Linear). ``torchao``: the matmuls
    dequantize as torchao's NF4Tensor does (torchtune's QLoRA, Workload.nf4_impl).
    """
    skip = () if include_head else _output_head_names(model)
    todo = []
    for name, mod in model.named_modules():
        for child_name, child in mod.named_children():
            full = f"{name}.{child_name}" if name else child_name
            if type(child) is not nn.Linear or any(full.endswith(s) for s in skip) or "lora_" in full:
                continue
            if adapted_only and child_name != "base_layer":  # peft wraps an adapted linear as <name>.base_layer
                continue
            todo.append((mod, child_name, child))
    ctx = torch.device("meta") if meta_only else fake_mode if fake_mode is not None else _nullctx()
    with ctx:
        for parent, child_name, lin in todo:
            setattr(parent, child_name, NF4Linear(lin.in_features, lin.out_features, lin.bias, double_quant,
                                                  compute_dtype=compute_dtype, quant_dtype=quant_dtype,
                                                  torchao=torchao))


#: The bit each uintx shard's values start at, by (shards, bit width) (torchao/dtypes/uintx/bitpacking.py ``shifts``
#: at b4d076813b)
_UINTX_SHIFTS = {(1, 1): (0,), (1, 2): (0,), (2, 3): (0, 2), (1, 4): (0,), (2, 5): (0, 4), (2, 6): (0, 4),
                 (3, 7): (0, 4, 6)}


class AOWeightOnlyLinear(nn.Module):
    """A frozen linear stored in one of torchao's other weight-only layouts, for tracing (torchao 0.18 no longer has
    them, and their kernels are CUDA only): each tensor the layout keeps, with torchao's shape and dtype
    (vramlens.estimator.weights names the source of each), and the forward's allocations.

    * fp6 (FpxTensorCoreAQTLayout, b4d076813b): ``packed_fpx_data`` uint8 (n, k/8*6), ``scale`` fp16 (n).
    * uint1..uint7 (UintxAQTLayout over a UintxTensor, b4d076813b): one uint8 (n, k*part/8) shard per 4-, 2- and
      1-bit part, ``scale`` (n, k/g) in the weight's dtype, ``zero_point`` int32 (n, k/g).
    * int4-sparse-marlin (MarlinSparseAQTLayout, 65d86c6c26): ``int_data`` int32 (k/32, 2n), ``meta`` int16
      (k/32, 2n) (``meta.resize_`` of the (n, k/16) metadata), ``scale`` fp16 (k/g, n), ``zero_point`` bf16 (n, k/g).
    * w4a8-qqq (MarlinQQQAQTTensorImpl, 06e69f6a93): ``int_data`` int32 (k/16, 2n), ``s_group`` fp16 (k/g, n) or
      empty per channel, ``s_channel`` fp32 (1, n).

    The forward: FP6-LLM's, Sparse-Marlin's and QQQ's kernels write the (t, n) output from the packed weight (the
    Marlin kernels beside their int32 lock workspace, ``(n / 128) * 64`` ints; QQQ first quantizes the input per
    token, an int8 (t, k) and an fp32 scale (t)); uintx has no kernel: ``F.linear(x, weight.dequantize())``, the
    shards unpacked (bitpacking.py ``unpack``), then quant_primitives.py ``_dequantize_affine_no_dtype_check``.
    """

    def __init__(self, in_features: int, out_features: int, bias: torch.Tensor | None, quant: str, group: int,
                 dtype: torch.dtype):
        super().__init__()
        from vramlens.estimator.weights import UINTX_SHARDS

        self.in_features, self.out_features, self.quant, self.group, self.dtype = (in_features, out_features, quant,
                                                                                  group, dtype)
        n, k = out_features, in_features
        self.parts: tuple[int, ...] = ()
        if quant == "fp6":
            self.register_buffer("packed_fpx_data", torch.empty(n, k // 8 * 6, dtype=torch.uint8))
            self.register_buffer("scale", torch.empty(n, dtype=torch.float16))
        elif quant.startswith("uint"):
            self.parts = UINTX_SHARDS[int(quant[4:])]
            for i, part in enumerate(self.parts):
                self.register_buffer(f"shard{i}", torch.empty(n, k * part // 8, dtype=torch.uint8))
            self.register_buffer("scale", torch.empty(n, math.ceil(k / group), dtype=dtype))
            self.register_buffer("zero_point", torch.empty(n, math.ceil(k / group), dtype=torch.int32))
        elif quant == "int4-sparse-marlin":
            self.register_buffer("int_data", torch.empty(k // 32, 2 * n, dtype=torch.int32))
            self.register_buffer("meta", torch.empty(k // 32, 2 * n, dtype=torch.int16))
            self.register_buffer("scale", torch.empty(math.ceil(k / group), n, dtype=torch.float16))
            self.register_buffer("zero_point", torch.empty(n, math.ceil(k / group), dtype=torch.bfloat16))
        elif quant == "w4a8-qqq":
            self.register_buffer("int_data", torch.empty(k // 16, 2 * n, dtype=torch.int32))
            per_group = bool(group) and group < k
            self.register_buffer("s_group", torch.empty((k // group, n) if per_group else (0,), dtype=torch.float16))
            self.register_buffer("s_channel", torch.empty(1, n, dtype=torch.float32))
        else:
            raise ValueError(quant)
        self.bias = None if bias is None else nn.Parameter(bias.detach(), requires_grad=False)

    def _uintx_weight(self) -> torch.Tensor:
        """``AffineQuantizedTensor.dequantize`` of a uintx weight, op for op (torchao at b4d076813b)."""
        n, k = self.out_features, self.in_features
        shifted = []
        for i, part in enumerate(self.parts):
            shard = getattr(self, f"shard{i}")
            per_byte = 8 // part
            unpacked = shard.new_zeros(n, k)  # bitpacking.py _unpack
            for j in range(per_byte):  # the shifted and masked shard, a temporary freed by the copy
                unpacked.narrow(1, k * j // per_byte, k // per_byte).copy_((shard >> (part * j)) & ((1 << part) - 1))
            shifted.append(unpacked << _UINTX_SHIFTS[len(self.parts), sum(self.parts)][i])  # unpack: to their bits
            del unpacked
        data = functools.reduce(torch.bitwise_or, shifted)  # unpack's return: the shifted shards freed with its list
        del shifted
        scale, zero = self.scale, self.zero_point
        assert isinstance(scale, torch.Tensor) and isinstance(zero, torch.Tensor)
        g = k // scale.shape[1]
        dequant = data.view(n, -1, g).to(torch.int32, copy=True)
        dequant = dequant - zero.view(n, -1, 1).to(torch.int32)
        dequant = dequant.to(self.dtype)
        dequant = dequant * scale.view(n, -1, 1)
        return dequant.view(n, k).to(self.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = self.out_features
        bias = None if self.bias is None else self.bias.to(x.dtype)
        if self.parts:
            return torch.nn.functional.linear(x, self._uintx_weight(), bias)
        if self.quant == "w4a8-qqq":  # the per-token int8 input and its fp32 scale
            t = x.numel() // x.shape[-1]
            x_int8 = x.new_empty(t, x.shape[-1], dtype=torch.int8)
            x_scale = x.new_empty(t, dtype=torch.float32)
        if self.quant != "fp6":
            workspace = x.new_zeros(n // 128 * 64, dtype=torch.int32)
        out = x.new_empty((*x.shape[:-1], n))
        if self.quant == "w4a8-qqq":
            del x_int8, x_scale
        if self.quant != "fp6":
            del workspace
        return out if bias is None else out + bias


def quantize_ao(model: nn.Module, quant: str, group: int, dtype: torch.dtype, *, fake_mode=None,
                meta_only: bool = False, include_head: bool = False) -> str:
    """Replace every nn.Linear (the output layer too with ``include_head``) by AOWeightOnlyLinear, as torchao's
    ``quantize_`` with the format's config replaces each linear's weight; fp6 leaves a weight with in_features % 64
    or out_features % 256 alone, Sparse-Marlin and QQQ one whose in_features the group does not divide
    (weights.format_takes)."""
    from vramlens.estimator.weights import format_takes

    skip = () if include_head else _output_head_names(model)
    todo = []
    for name, mod in model.named_modules():
        for child_name, child in mod.named_children():
            full = f"{name}.{child_name}" if name else child_name
            if (type(child) is nn.Linear and not any(full.endswith(s) for s in skip)
                    and format_takes(quant, child.out_features, child.in_features, group)):
                todo.append((mod, child_name, child))
    ctx = torch.device("meta") if meta_only else fake_mode if fake_mode is not None else _nullctx()
    with ctx:
        for parent, child_name, lin in todo:
            setattr(parent, child_name, AOWeightOnlyLinear(lin.in_features, lin.out_features, lin.bias, quant, group,
                                                           dtype))
    return (f"{quant}: torchao's layout stood in for (its tensors' shapes and dtypes; no CPU kernels)"
            + ("; the output layer too" if include_head else ""))


def quantize_int8_weight_only(model: nn.Module, *, fake_mode=None, meta_only: bool = False,
                              include_head: bool = False) -> str:
    """torchao's own ``quantize_(model, Int8WeightOnlyConfig())`` on every nn.Linear (the output layer too with
    ``include_head``, which unties a tied one): int8 weights with a per-row scale whose eager linear casts the
    whole weight to the input's dtype at each call (torchao 0.18's ``Int8Tensor`` linear, the arithmetic of
    ``_linear_fp_act_int8_weight_impl`` at 317392d06b; Workload.quant_impl)."""
    try:
        from torchao.quantization import Int8WeightOnlyConfig, quantize_
    except Exception as e:  # noqa: BLE001 - any import failure of the optional dependency
        raise TraceError(f"quant_impl='torchao-wo' runs torchao's quantize_, which cannot be imported here "
                         f"({type(e).__name__}): pip install torchao") from None
    if meta_only:
        return "int8 weight-only (torchao): not applied on meta"
    skip = () if include_head else _output_head_names(model)

    def take(mod: nn.Module, fqn: str) -> bool:
        return type(mod) is nn.Linear and not any(fqn.endswith(s) for s in skip)

    with fake_mode if fake_mode is not None else _nullctx():
        quantize_(model, Int8WeightOnlyConfig(set_inductor_config=False), filter_fn=take)
    return ("int8 weight-only (torchao's quantize_ with Int8WeightOnlyConfig): each linear casts its whole weight "
            "to the compute dtype at every call" + ("; the output layer too" if include_head else ""))


def fp8_converts(module: nn.Module, fqn: str, heads: tuple[str, ...]) -> bool:
    """torchtitan's float8 module filter (torchtitan/components/quantization/float8.py ``module_filter_fn``)
    with ``filter_fqns = ["output"]``, as torchtitan's Llama 3 configs and float8 docs set it (the field's
    own default is empty): an nn.Linear, not the output layer, both dims multiples of 16 (the float8 GEMMs'
    requirement, torchao/float8/float8_linear_utils.py ``_auto_filter_for_tensorwise``)."""
    if not isinstance(module, nn.Linear):
        return False
    if any(fqn == h or fqn.endswith("." + h) for h in heads):
        return False
    n, k = module.weight.shape
    return n % 16 == 0 and k % 16 == 0


def convert_fp8(model: nn.Module, recipe: str = "tensorwise") -> str:
    """torchao's ``convert_to_float8_training`` on the real module with the recipe's config
    (``Float8LinearConfig.from_recipe_name``, torchao 0.18 float8/config.py; tensorwise is the default config,
    torchtitan's default recipe). It runs under fake tensors on the CPU as it is (``torch._scaled_mm`` has a fake
    implementation, rowwise scales included: torch/_meta_registrations.py ``meta_scaled_mm``), so ``emulate``
    stays False. MX training (mxfp8_*) is refused: torchao 0.18 has no MXLinear for dense linears (its
    prototype/mx_formats has the inference workflow; its MX training config, moe_training's MXFP8TrainingOpConfig,
    is for MoE experts)."""
    if recipe.startswith("mx"):
        raise TraceError(f"fp8_recipe={recipe} is not traced: the tracer runs torchao 0.18's float8 recipes, and 0.18 has "
                         "no MX training for nn.Linear (0.13's MXLinear): use `vramlens estimate` for it")
    try:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    except Exception as e:  # noqa: BLE001 - torchao fails to import in several ways
        raise TraceError(f"fp8 training comes from torchao, which cannot be imported here ({type(e).__name__}): "
                         "pip install torchao, or use `vramlens estimate` for it") from None
    heads = _output_head_names(model)
    convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name(recipe),
                               module_filter_fn=lambda m, fqn: fp8_converts(m, fqn, heads))
    scaling = {"tensorwise": "tensorwise dynamic scaling", "rowwise": "rowwise scaling",
               "rowwise_with_gw_hp": "rowwise scaling, grad_weight in bf16"}[recipe]
    return f"fp8: torchao Float8Linear ({scaling}) on every linear with dims multiple of 16 but the output layer"


def _output_head_names(model: nn.Module) -> tuple[str, ...]:
    # bitsandbytes keeps the output embedding in high precision (transformers' get_keys_to_not_convert)
    names = ["lm_head", "score", "classifier", "qa_outputs"]
    get = getattr(model, "get_output_embeddings", None)
    if get is not None:
        try:
            head = get()
        except Exception:  # noqa: BLE001
            head = None
        for n, m in model.named_modules():
            if m is head:
                names.append(n)
    return tuple(names)


def _register_attention(name: str, fn: Callable[..., Any], mask_like: str) -> str:
    """Register ``fn`` as transformers attention implementation ``name``, with the mask ``mask_like``'s
    ("eager" or "sdpa") builds (transformers' masking_utils returns no mask for a name it does not know)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    AttentionInterface.register(name, fn)
    AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS[mask_like])
    return name


def _clamped_eager_attention(cfg: dict, presents: list[torch.Tensor] | None = None) -> str | None:
    """Register eager attention as transformers before 4.49 ran it for a model with ``ModelSpec.score_clamp`` (OPT):
    keys and values made contiguous (``OPTAttention._shape``, modeling_opt.py line 121 of the v4.45.0 wheel; the
    matmuls keep them), the scores plus the mask clamped from below by ``torch.max`` with the dtype's minimum
    (lines 200-203 of the v4.48.0 wheel), then the fp32 softmax cast back, dropout and the product with the values.
    With ``presents`` (_legacy_presents) the keys and values go there too: the block's (key, value) tuple."""


    spec = _family_facts(cfg)
    if spec is None or not spec.score_clamp:
        return None

    def clamped(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
        key, value = key.contiguous(), value.contiguous()
        if presents is not None:
            presents.extend((key, value))
        scores = torch.matmul(query, key.transpose(-1, -2)) * scaling
        if attention_mask is not None:
            floor = torch.tensor(torch.finfo(scores.dtype).min, device=scores.device, dtype=scores.dtype)
            scores = torch.max(scores + attention_mask, floor)
        probs = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
        probs = nn.functional.dropout(probs, p=dropout, training=module.training)
        return torch.matmul(probs, value).transpose(1, 2).contiguous(), probs

    return _register_attention("vramlens_clamped_eager", clamped, "eager")


def _contiguous_sdpa_attention(cfg: dict, wl: Workload, presents: list[torch.Tensor] | None) -> str | None:
    """Register SDPA as OPT ran it before 4.49 (ModelSpec.legacy_output_copy_before): q, k and v made contiguous
    head-major (``_shape``'s ``.transpose(1, 2).contiguous()``, modeling_opt.py lines 128 and 408-440 of the v4.48.3
    wheel), so the kernel writes its output in that layout and the transpose back is a copy; then today's SDPA
    function. With ``presents`` (_legacy_presents) the keys and values go there too: the block's tuple."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward


    spec = _family_facts(cfg) if wl.transformers_release is not None else None
    if spec is None or not wl.runs_before(spec.legacy_output_copy_before):
        return None

    def contiguous(module, query, key, value, attention_mask, **kwargs):
        query, key, value = query.contiguous(), key.contiguous(), value.contiguous()
        if presents is not None:
            presents.extend((key, value))
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)

    return _register_attention("vramlens_contiguous_sdpa", contiguous, "sdpa")


def _fp32_rotary_eager_attention(cfg: dict, wl: Workload, presents: list[torch.Tensor] | None) -> str | None:
    """Register eager attention as GPT-NeoX ran it before 4.49 (ModelSpec.legacy_rotary_cache_dim): q and k leave the
    rotary embedding in fp32 (its fp32 cos/sin caches, then torch.cat with the fp16 rest), ``baddbmm`` into fp32
    zeros keeps them, the fp32 scores masked, softmax in fp32 cast back, dropout and the product with the values
    (modeling_gpt_neox.py lines 247-249 and 261-311 of the v4.42.4 wheel); today's q and k arrive in fp16 and are
    cast here. With ``presents`` (_legacy_presents) the fp32 key goes there too: the block's tuple holds it."""


    spec = _family_facts(cfg) if wl.transformers_release is not None else None
    if spec is None or not spec.legacy_rotary_cache_dim or not wl.runs_before(spec.legacy_buffers_before):
        return None

    def fp32_rotary(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
        b, a, s, d = query.shape
        q32, k32 = query.float(), key.float()
        if presents is not None:
            presents.append(k32)
        zeros = torch.zeros(b * a, s, k32.shape[-2], dtype=torch.float32, device=query.device)
        scores = torch.baddbmm(zeros, q32.view(b * a, s, d), k32.view(b * a, -1, d).transpose(1, 2), beta=1.0,
                               alpha=scaling).view(b, a, s, -1)
        if attention_mask is not None:
            scores = scores + attention_mask
        probs = nn.functional.softmax(scores, dim=-1).to(value.dtype)
        probs = nn.functional.dropout(probs, p=dropout, training=module.training)
        return torch.matmul(probs, value).transpose(1, 2).contiguous(), probs

    return _register_attention("vramlens_fp32_rotary_eager", fp32_rotary, "eager")


def _selective_attention(cls, attn: str) -> str:
    """Register an attention function that recomputes the attention core in backward.

    Selective recomputation (Korthikanti et al. 2022, section 4.2) drops the attention core's
    activations (scores, softmax, dropout mask: the 5 a s^2 b term) and recomputes them;
    here ``torch.utils.checkpoint`` wraps the model's own attention function.
    """
    from torch.utils.checkpoint import checkpoint
    from transformers import AttentionInterface

    if attn == "eager":
        mod = sys.modules.get(cls.__module__)
        inner = getattr(mod, "eager_attention_forward", None)
        if inner is None:
            return attn
    else:
        inner = AttentionInterface._global_mapping[attn]

    def selective(module, query, key, value, attention_mask, **kwargs):
        def core(q, k, v, m):
            return inner(module, q, k, v, m, **kwargs)

        return checkpoint(core, query, key, value, attention_mask, use_reentrant=False)

    name = f"vramlens_selective_{attn}"
    AttentionInterface.register(name, selective)
    return name


# ---- factories ------------------------------------------------------------------------------
def is_factory(name: Any) -> bool:
    return isinstance(name, str) and ":" in name and not name.endswith(".json") and "/" not in name.split(":")[0]


def load_factory(spec: str) -> Callable[[], Any]:
    mod_name, _, attr = spec.partition(":")
    try:
        mod = importlib.import_module(mod_name)
    except Exception as e:  # noqa: BLE001 - any import failure is the user's factory failing
        raise TraceError(f"cannot import {mod_name!r} for factory {spec!r}: {type(e).__name__}: {e}") from None
    fn = getattr(mod, attr, None)
    if fn is None or not callable(fn):
        raise TraceError(f"{mod_name!r} has no callable {attr!r} (factory {spec!r})")
    return fn


def build_factory(spec: str, *, input_shape: tuple[int, ...] | None, dtype, fake_mode=None) -> Built:
    fn = load_factory(spec)
    try:
        # The factory's floating tensors are made in the trace's dtype: .to(dtype) afterwards fails on
        # fake parameters (they can only be swapped, and the recorder holds weak references to them).
        with fake_mode if fake_mode is not None else _nullctx(), _default_dtype(dtype):
            made = fn()
    except Exception as e:  # noqa: BLE001
        raise TraceError(f"factory {spec!r} failed: {type(e).__name__}: {e}") from None
    inputs = None
    if isinstance(made, tuple) and len(made) == 2 and isinstance(made[0], nn.Module):
        module, inputs = made
        if not callable(inputs):
            raise TraceError(f"factory {spec!r} returned (module, {type(inputs).__name__}): "
                             "the second item must be example_inputs(batch, seq)")
    elif isinstance(made, nn.Module):
        module = made
        ex = getattr(module, "example_inputs", None)
        if callable(ex):
            inputs = ex
        elif input_shape:
            shape = tuple(input_shape)
            inputs = lambda batch, seq: (torch.randn(shape, dtype=dtype),)  # noqa: E731
        else:
            raise TraceError(f"factory {spec!r} returned a module without an input spec: give --input-shape "
                             "(e.g. 8x3x224x224) or return (module, example_inputs(batch, seq))")
    else:
        raise TraceError(f"factory {spec!r} returned {type(made).__name__}: return an nn.Module or "
                         "(module, example_inputs(batch, seq))")
    if any(t.is_floating_point() and t.dtype != dtype for t in (*module.parameters(), *module.buffers())):
        try:
            with fake_mode if fake_mode is not None else _nullctx():
                module = module.to(dtype)
        except RuntimeError as e:
            raise TraceError(f"factory {spec!r}: its module cannot be cast to {dtype} under fake tensors ({e}): "
                             "create its tensors without an explicit dtype, or trace with --dtype fp32") from None
    return Built(model=module, kind="factory", inputs=inputs, is_hf=False)


class _default_dtype:
    """``torch.set_default_dtype`` for a block (floating dtypes only), restored afterwards."""

    def __init__(self, dtype):
        self.dtype = dtype

    def __enter__(self):
        self.saved = torch.get_default_dtype()
        torch.set_default_dtype(self.dtype)

    def __exit__(self, *exc):
        torch.set_default_dtype(self.saved)
        return False


def accepts(model: nn.Module, name: str) -> bool:
    """Whether ``model.forward`` takes ``name`` (a peft model passes its keywords on to the base model's)."""
    base = getattr(model, "get_base_model", None)
    if callable(base):
        model = base()
    try:
        return name in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False
