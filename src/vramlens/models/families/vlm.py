"""Vision-language models: a vision tower, a projector and a text decoder in one checkpoint.

Layouts from transformers 5.24, checked against ``named_parameters()`` on the meta device
(tests/models/test_vlm.py):

* LLaVA-1.5 (``LlavaForConditionalGeneration``, modeling_llava.py): ``model.vision_tower`` is
  ``AutoModel.from_config(vision_config)`` (a CLIPVisionModel: every one of its layers and its
  ``post_layernorm`` are built and run; ``vision_feature_layer=-2`` only picks which hidden state
  the projector reads), ``model.multi_modal_projector`` (``linear_1``: vision hidden ->
  text hidden, ``projector_hidden_act``, ``linear_2``: text -> text, biased with
  ``multimodal_projector_bias``, default true), ``model.language_model`` (the text config's base
  model) and ``lm_head``. The "default" feature strategy drops the class token: 576 tokens per
  336x336 image at patch 14, each replacing one ``<image>`` token in input_ids.
* LLaVA-NeXT (``LlavaNextForConditionalGeneration``, modeling_llava_next.py): LLaVA's tower and projector,
  ``model.image_newline`` (a text-width vector, LlavaNextModel's own parameter) and ``image_grid_pinpoints``:
  the tower runs over 1 + tiles crops an image, the text gets the unpadded tiles, newlines and the base crop
  (spec.AnyRes).
* Gemma 3 multimodal (``Gemma3ForConditionalGeneration``, modeling_gemma3.py): a SigLIP tower
  (``vision_use_head`` false), ``Gemma3MultiModalProjector``
  (``mm_input_projection_weight`` (vision hidden, text hidden), ``mm_soft_emb_norm`` a Gemma
  RMSNorm over the vision hidden size; the 64x64 patches avg-pooled to ``mm_tokens_per_image``
  = 256 tokens), the Gemma 3 text model (tied output layer: no ``lm_head`` parameter).

The facts the formulas read are on :class:`~vramlens.models.spec.VLM`; the text model's facts
stay the spec's own, so the decoder formulas see a plain decoder at seq + image tokens.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vramlens.errors import ModelSourceError
from vramlens.models._tensors import Tensors, layer_index
from vramlens.models.families.gemma3 import text_tower

#: transformers' LlavaConfig defaults for a missing vision_config (configuration_llava.py):
#: CLIP ViT-L/14 at 336
LLAVA_VISION_DEFAULT = {"model_type": "clip_vision_model", "hidden_size": 1024, "intermediate_size": 4096,
                        "patch_size": 14, "image_size": 336, "num_hidden_layers": 24, "num_attention_heads": 16,
                        "vocab_size": 32000, "projection_dim": 768}

#: LlamaConfig's defaults for the dimensions (configuration_llama.py), which LlavaConfig's text_config inherits
LLAMA_CONFIG_DEFAULTS = {"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                         "num_attention_heads": 32}

#: MistralConfig's defaults for the dimensions (configuration_mistral.py): llava-v1.6-mistral-7b-hf's text_config
#: omits hidden_size, the depth and the heads
MISTRAL_CONFIG_DEFAULTS = {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                           "num_attention_heads": 32, "num_key_value_heads": 8}

#: text_config.model_type -> the defaults its config class fills in
TEXT_CONFIG_DEFAULTS = {"llama": LLAMA_CONFIG_DEFAULTS, "mistral": MISTRAL_CONFIG_DEFAULTS}


@dataclass(frozen=True, slots=True)
class Parts:
    """A VLM config split into the configs of its text model and its vision tower, and the
    projector and image-token facts of the wrapper."""

    text: dict[str, Any]
    vision: dict[str, Any]
    projector: str
    image_token_id: int
    image_tokens: int | None  # None: from the tower's patches
    drop_class_token: bool
    projector_act: str
    projector_bias: bool
    #: the tower's hidden state the projector reads (LLaVA's vision_feature_layer); None: the last, normed
    feature_layer: int | None = None
    #: LLaVA-NeXT's image_grid_pinpoints ((height, width) pairs); None: one crop an image, no image_newline
    pinpoints: tuple[tuple[int, int], ...] | None = None


def _int(config: Mapping[str, Any], key: str, default: int, where: str) -> int:
    v = config.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 1 << 31:
        raise ModelSourceError(f"{where}: {key}={v!r} must be a whole number from 0 to 2**31")
    return v


def _vision(config: Mapping[str, Any], default: Mapping[str, Any] | None, where: str) -> dict[str, Any]:
    vc = config.get("vision_config", default)
    if not isinstance(vc, Mapping):
        raise ModelSourceError(f"{where}: a {config.get('model_type')} config needs a vision_config object")
    out = dict(vc)
    out.setdefault("model_type", "clip_vision_model")
    out["architectures"] = ["CLIPVisionModel" if out["model_type"] == "clip_vision_model" else "SiglipVisionModel"]
    for key in ("torch_dtype", "dtype"):
        if key in config:
            out.setdefault(key, config[key])
    return out


def llava_parts(config: Mapping[str, Any], where: str) -> Parts:
    """LlavaConfig: ``text_config`` (a Llama by default), ``vision_config`` (CLIP ViT-L/14-336 by default)."""
    text = config.get("text_config", {"model_type": "llama"})
    if not isinstance(text, Mapping):
        raise ModelSourceError(f"{where}: a llava config needs its language model under \"text_config\"")
    t = {k: v for k, v in text.items() if k != "architectures"}
    t.setdefault("model_type", "llama")
    # LlavaConfig builds CONFIG_MAPPING[model_type](**text_config): that config's own defaults fill what the
    # checkpoint's text_config omits (llava-1.5-7b-hf lists only vocab_size and a few others)
    for key, value in TEXT_CONFIG_DEFAULTS.get(t["model_type"], {}).items():
        t.setdefault(key, value)
    # the stem only names the family: the head is lm_head below
    t["architectures"] = [TEXT_ARCHITECTURES.get(t["model_type"], "LlamaForCausalLM")]
    for key in ("tie_word_embeddings", "torch_dtype", "dtype"):
        if key in config:
            t.setdefault(key, config[key])
    strategy = config.get("vision_feature_select_strategy", "default")
    if strategy not in ("default", "full"):
        raise ModelSourceError(f"{where}: vision_feature_select_strategy={strategy!r} must be \"default\" or \"full\"")
    layer = config.get("vision_feature_layer", -2)
    if not isinstance(layer, int) or isinstance(layer, bool):
        raise ModelSourceError(f"{where}: vision_feature_layer={layer!r}: only one feature layer (an int) is "
                               "modelled")
    act = config.get("projector_hidden_act", "gelu")
    return Parts(text=t, vision=_vision(config, LLAVA_VISION_DEFAULT, where), projector="mlp2",
                 image_token_id=_int(config, "image_token_index", _int(config, "image_token_id", 32000, where), where),
                 image_tokens=None, drop_class_token=strategy == "default", projector_act=str(act),
                 projector_bias=bool(config.get("multimodal_projector_bias", True)), feature_layer=layer)


#: the text models a LLaVA(-NeXT) checkpoint wraps, by text_config.model_type
TEXT_ARCHITECTURES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM"}

#: LlavaNextConfig's image_grid_pinpoints default (configuration_llava_next.py)
LLAVA_NEXT_PINPOINTS = ((336, 672), (672, 336), (672, 672), (1008, 336), (336, 1008))

#: the (height, width) of a LLaVA-NeXT image when --image-size is not given: 672x672, the largest square of the
#: default pinpoints, whose best resolution is itself (the 2x2 grid: 5 crops in the tower, 2,928 image tokens at
#: 336/14), the high-resolution case the anyres tiling was built for; a smaller photo is upscaled to the same grid
ANYRES_DEFAULT_IMAGE = (672, 672)


def llava_next_parts(config: Mapping[str, Any], where: str) -> Parts:
    """LlavaNextConfig: LlavaConfig's fields, ``image_grid_pinpoints`` and the ``image_newline`` parameter
    (modeling_llava_next.py LlavaNextModel: one text-width vector, always built)."""
    parts = llava_parts(config, where)
    raw = config.get("image_grid_pinpoints") or LLAVA_NEXT_PINPOINTS
    crop = _int(parts.vision, "image_size", 336, f"{where} vision_config")
    pins: list[tuple[int, int]] = []
    for p in raw if isinstance(raw, list | tuple) else [raw]:
        if (not isinstance(p, list | tuple) or len(p) != 2 or not all(isinstance(x, int) and not isinstance(x, bool)
                                                                       and 0 < x <= 1 << 20 for x in p)):
            raise ModelSourceError(f"{where}: image_grid_pinpoints entry {p!r} must be a [height, width] pair of "
                                   "positive whole numbers")
        if p[0] % crop or p[1] % crop:
            raise ModelSourceError(f"{where}: image_grid_pinpoints entry {list(p)} must be multiples of the "
                                   f"tower's image_size={crop}")
        pins.append((int(p[0]), int(p[1])))
    from dataclasses import replace
    return replace(parts, pinpoints=tuple(pins))


def gemma3_parts(config: Mapping[str, Any], where: str) -> Parts:
    """Gemma3Config: ``text_config`` (gemma3_text), a SigLIP ``vision_config``, ``mm_tokens_per_image``."""
    vision = _vision(config, None, where)
    vision.setdefault("vision_use_head", False)  # Gemma3Config's SigLIP default (configuration_gemma3.py)
    return Parts(text=text_tower(config, where), vision=vision, projector="pool_norm_matmul",
                 image_token_id=_int(config, "image_token_index", 262_144, where),
                 image_tokens=_int(config, "mm_tokens_per_image", 256, where), drop_class_token=False,
                 projector_act="none", projector_bias=False)


#: model_type -> the reader that splits a VLM config into its parts
PARTS = {"llava": llava_parts, "gemma3": gemma3_parts, "llava_next": llava_next_parts}

#: model_type -> the transformers class of the whole VLM
ARCHITECTURES = {"llava": "LlavaForConditionalGeneration", "gemma3": "Gemma3ForConditionalGeneration",
                 "llava_next": "LlavaNextForConditionalGeneration"}


def projector_tensors(parts: Parts, vision_hidden: int, text_hidden: int) -> Tensors:
    """The multi-modal projector's parameters, named as the VLM class names them."""
    t = Tensors()
    p = "model.multi_modal_projector."
    if parts.projector == "mlp2":
        # nn.Linear modules: peft's "all-linear" adapts them (only the output layer is left out)
        t.linear(f"{p}linear_1", text_hidden, vision_hidden, parts.projector_bias)
        t.linear(f"{p}linear_2", text_hidden, text_hidden, parts.projector_bias)
    else:
        t.add(f"{p}mm_input_projection_weight", (vision_hidden, text_hidden), "other")
        t.add(f"{p}mm_soft_emb_norm.weight", (vision_hidden,), "norm")
    if parts.pinpoints is not None:
        t.add("model.image_newline", (text_hidden,), "other")  # LLaVA-NeXT's row separator
    return t


def rename_text(name: str) -> str:
    """A text model's tensor name as the VLM class names it (``model.X`` -> ``model.language_model.X``)."""
    return "model.language_model." + name[len("model."):] if name.startswith("model.") else name


def outside_loss(parts: Parts, tower_layers: int, tower_names: list[str]) -> tuple[str, ...]:
    """The tower's parameters the loss does not reach, which get no gradient and no optimizer state:
    with LLaVA's ``vision_feature_layer`` (hidden_states[k] of the L + 1 the tower returns: the
    embeddings' output, then each block's), the blocks after the k-th and ``post_layernorm`` (CLIP runs it
    on the class token's pooled output only, which LLaVA does not read)."""
    if parts.feature_layer is None:
        return ()
    k = parts.feature_layer
    used = tower_layers + 1 + k if k < 0 else k
    out = []
    for name in tower_names:
        idx = layer_index(name)
        if (idx is not None and idx >= used) or ".post_layernorm." in name:
            out.append(name)
    return tuple(out)
