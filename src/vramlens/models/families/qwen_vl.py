"""Qwen2.5-VL: a dynamic-resolution vision tower with window attention, a 2x2 patch merger and a Qwen2 text model.

Layout from transformers 5.24 (``transformers/models/qwen2_5_vl/modeling_qwen2_5_vl.py``), checked against
``named_parameters()`` and ``named_buffers()`` on the meta device (tests/models/test_qwen_vl.py):

* ``model.visual`` (``Qwen2_5_VisionTransformerPretrainedModel``): ``patch_embed.proj`` a Conv3d without
  bias, kernel and stride (``temporal_patch_size``, p, p), weight (h, C, 2, p, p); ``rotary_pos_emb`` (axial
  2-D rope: ``inv_freq`` and ``original_inv_freq``, non-persistent fp32 buffers of ceil(d/4) entries:
  ``arange(0, d // 2, 2)``); ``blocks.i`` (``Qwen2_5_VLVisionBlock``): ``norm1``/``norm2`` RMSNorms,
  ``attn.qkv`` (h -> 3h, biased), ``attn.proj`` (h -> h, biased), ``mlp.{gate,up,down}_proj`` (biased,
  gated ``hidden_act``, SiLU in the released models); the blocks in ``fullatt_block_indexes`` attend over
  all patches of an image, the others within windows of ``window_size`` pixels (112: 8x8 patches);
  ``merger`` (``Qwen2_5_VLPatchMerger``): ``ln_q`` an RMSNorm over h, then ``mlp.0`` (4h -> 4h, biased),
  GELU, ``mlp.2`` (4h -> ``out_hidden_size``, biased) over each 2x2 group of patches.
* ``model.language_model`` (``Qwen2_5_VLTextModel``): a Qwen2 decoder (q/k/v biased, o not), with mrope
  (its ``rotary_emb`` buffers as Qwen2's); ``lm_head`` unless ``tie_word_embeddings``.

The text fields sit at the top level of the released config.json files (transformers' Qwen2_5_VLConfig
moves them into ``text_config`` when that is absent); ``vision_config`` carries ``model_type: qwen2_5_vl``
in the released files (the config class renames it ``qwen2_5_vl_vision``).

The processor (``Qwen2VLImageProcessor``, image_processing_qwen2_vl.py ``smart_resize``) resizes each image
to multiples of 28 (patch 14 x merge 2) with its pixel count within [``min_pixels``, ``max_pixels``] (56*56
and 28*28*1280 by default): (H'/14)*(W'/14) patches enter the tower, a quarter of them leave the merger as
image tokens in the text sequence.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from vramlens.errors import ModelSourceError
from vramlens.limits import MAX_LAYERS
from vramlens.models._reader import ConfigReader
from vramlens.models._tensors import Tensors
from vramlens.models.defaults import DEFAULTS
from vramlens.models.families._common import Built, torch_dtype
from vramlens.models.spec import DynamicImages, Vision

#: the tower's own model_type, as transformers' Qwen2_5_VLVisionConfig names it
TOWER_TYPE = "qwen2_5_vl_vision"

#: Qwen2_5_VLVisionConfig's field defaults (models.defaults, checked against transformers)
VISION_DEFAULTS: dict[str, Any] = DEFAULTS[TOWER_TYPE]

#: the image size vramlens assumes when --image-size is not given: 448x448 = 256*28*28 pixels, the lower end of
#: the "token range of 256-1280" the Qwen2-VL/Qwen2.5-VL model cards' example sets (``min_pixels = 256*28*28``,
#: ``max_pixels = 1280*28*28``); a multiple of 28 that smart_resize keeps as is: 32x32 patches, 256 image tokens
DEFAULT_IMAGE_SIDE = 448

#: the model_type of the whole VLM and its transformers class
MODEL_TYPE = "qwen2_5_vl"
ARCHITECTURE = "Qwen2_5_VLForConditionalGeneration"


def _int(vc: Mapping[str, Any], key: str, where: str, limit: int = 1 << 20) -> int:
    v = vc.get(key, VISION_DEFAULTS.get(key))
    if isinstance(v, list | tuple) and len(v) == 2 and v[0] == v[1] and key == "patch_size":
        v = v[0]
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= limit:
        raise ModelSourceError(f"{where}: vision_config.{key}={v!r} must be a whole number from 1 to {limit:,}")
    return v


def build_tower(r: ConfigReader, architecture: str) -> Built:
    """The vision tower of Qwen2.5-VL (``model.visual`` without its prefix), merger included."""
    raw = {**VISION_DEFAULTS, **{k: v for k, v in r.raw.items() if v is not None}}
    if "in_channels" not in r.raw and "in_chans" in r.raw:
        raw["in_channels"] = r.raw["in_chans"]  # the released files' legacy spelling
    where = r.where
    h, L, a = _int(raw, "hidden_size", where), _int(raw, "depth", where, MAX_LAYERS), _int(raw, "num_heads", where)
    f, out = _int(raw, "intermediate_size", where), _int(raw, "out_hidden_size", where)
    p, tp, m = _int(raw, "patch_size", where), _int(raw, "temporal_patch_size", where), \
        _int(raw, "spatial_merge_size", where)
    C, win = _int(raw, "in_channels", where), _int(raw, "window_size", where)
    r.divisible("hidden_size", h, "num_heads", a)
    full = r.list_int("fullatt_block_indexes") if "fullatt_block_indexes" in r.raw \
        else list(VISION_DEFAULTS["fullatt_block_indexes"])
    if any(i >= L for i in full):
        r.problem(f"fullatt_block_indexes={full} names a block past depth={L}")
    act = str(raw.get("hidden_act", "silu"))
    dtype = torch_dtype(r)
    if win % (p * m):
        r.problem(f"window_size={win} is not a multiple of patch_size*spatial_merge_size={p * m}")
    r.check()
    d = h // a
    t = Tensors()
    t.add("patch_embed.proj.weight", (h, C, tp, p, p), "other")
    n_freq = len(range(0, d // 2, 2))
    t.buffer("rotary_pos_emb.inv_freq", (n_freq,))
    t.buffer("rotary_pos_emb.original_inv_freq", (n_freq,))
    for i in range(L):
        b = f"blocks.{i}."
        t.norm(f"{b}norm1", h, bias=False)
        t.norm(f"{b}norm2", h, bias=False)
        t.linear(f"{b}attn.qkv", 3 * h, h, True)
        t.linear(f"{b}attn.proj", h, h, True)
        t.linear(f"{b}mlp.gate_proj", f, h, True)
        t.linear(f"{b}mlp.up_proj", f, h, True)
        t.linear(f"{b}mlp.down_proj", h, f, True)
    t.norm("merger.ln_q", h, bias=False)
    # nn.Linear modules (peft's all-linear adapts them), outside the blocks: ``mlp.0`` is no block index
    t.linear("merger.mlp.0", h * m * m, h * m * m, True)
    t.linear("merger.mlp.2", out, h * m * m, True)
    items = [replace(x, layer=None) if x.name.startswith("merger.") else x for x in t.items]
    facts = dict(
        kind="encoder", hidden_size=h, n_heads=a, n_kv_heads=a, head_dim=d, ffn_size=f, vocab_size=0,
        n_encoder_layers=L, max_position=1 << 20, activation=act, gated_mlp=True, norm="rmsnorm",
        position="rotary", norm_placement="pre", torch_dtype=dtype, head="embedding", classifier="first",
        head_dropout=0.0, block_dropouts=0,
        # apply_rotary_pos_emb_vision: q.float(), k.float() rotated by fp32 cos/sin, cast back
        rotary_fp32=True, rotary_tables_fp32=True,
        # pixel_values arrive as (patches, C * temporal_patch_size * p * p) fp32: the processor repeats a still
        # image temporal_patch_size times, so C * temporal_patch_size values per pixel
        vision=Vision(image_size=DEFAULT_IMAGE_SIDE, patch_size=p, channels=C * tp, class_token=False,
                      pre_norm=False, final_norm_all_tokens=False),
    )
    return Built(facts, items)


def split(config: Mapping[str, Any], where: str) -> tuple[dict[str, Any], dict[str, Any], int]:
    """A Qwen2_5_VLConfig as (the Qwen2 text config, the tower's config, image_token_id)."""
    vc = config.get("vision_config", {})
    if not isinstance(vc, Mapping):
        raise ModelSourceError(f"{where}: a qwen2_5_vl config needs a vision_config object")
    text_src = config.get("text_config")
    if text_src is None:
        text = {k: v for k, v in config.items() if k not in ("vision_config", "architectures", "model_type")}
    elif isinstance(text_src, Mapping):
        text = {k: v for k, v in text_src.items() if k != "architectures"}
    else:
        raise ModelSourceError(f"{where}: text_config must be an object")
    text["model_type"] = "qwen2"
    text["architectures"] = ["Qwen2ForCausalLM"]
    for key in ("tie_word_embeddings", "torch_dtype", "dtype"):
        if key in config:
            text.setdefault(key, config[key])
    if config.get("tie_word_embeddings") is True:
        text["tie_word_embeddings"] = True  # Qwen2_5_VLConfig ties when either level asks
    vision = dict(vc)
    vision["model_type"] = TOWER_TYPE
    vision["architectures"] = ["Qwen2_5_VisionTransformerPretrainedModel"]
    for key in ("torch_dtype", "dtype"):
        if key in config:
            vision[key] = config[key]  # the model is loaded in one dtype: the top level's
    token = config.get("image_token_id", 151_655)
    if isinstance(token, bool) or not isinstance(token, int) or token < 0:
        raise ModelSourceError(f"{where}: image_token_id={token!r} must be a whole number")
    return text, vision, token


def dynamic(vision: Mapping[str, Any], where: str) -> DynamicImages:
    """The tower's dynamic-resolution facts from its config (read after build_tower checked it)."""
    raw = {**VISION_DEFAULTS, **{k: v for k, v in vision.items() if v is not None}}
    p, m, win = _int(raw, "patch_size", where), _int(raw, "spatial_merge_size", where), \
        _int(raw, "window_size", where)
    full = raw.get("fullatt_block_indexes") or []
    return DynamicImages(patch=p, merge=m, window=win // (p * m),
                         full_blocks=tuple(sorted({int(i) for i in full})),
                         temporal_patch=_int(raw, "temporal_patch_size", where))


BUILDERS = {TOWER_TYPE: build_tower}
