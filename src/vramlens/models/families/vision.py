"""Vision encoders over image patches: ViT, CLIP's vision tower and SigLIP's.

Layouts from transformers 5.24 (``transformers/models/{vit,clip,siglip}/modeling_*.py``), checked
against ``named_parameters()`` on the meta device (tests/models/test_vision.py):

* ViT (``ViTEmbeddings``, modeling_vit.py:72-160): ``cls_token`` (1, 1, h), ``position_embeddings``
  (1, N+1, h) with N = (image_size // patch_size)^2, ``patch_embeddings.projection`` a Conv2d
  (h, C, p, p) of stride p with a bias; pre-norm ``ViTLayer`` blocks (modeling_vit.py:257-286):
  ``attention.{q,k,v}_proj`` (bias ``qkv_bias``), ``attention.o_proj`` (biased), ``layernorm_before``,
  ``layernorm_after``, ``mlp.fc1``/``mlp.fc2`` (biased, ``hidden_act``, GELU in the released models),
  residual dropouts of ``hidden_dropout_prob``; then ``layernorm`` over every token and, on
  ``ViTModel`` only, ``pooler.dense`` (h -> pooler_output_size, tanh). ``ViTForImageClassification``
  (modeling_vit.py:514-546) builds ``ViTModel(add_pooling_layer=False)`` and a biased ``classifier``
  (h -> num_labels) on the first token's final-norm output.
* CLIP's vision tower (``CLIPVisionEmbeddings``, modeling_clip.py:138-218): ``class_embedding`` (h),
  ``patch_embedding`` a Conv2d without bias, ``position_embedding`` (N+1, h) and the int64 buffer
  ``position_ids`` (1, N+1); ``pre_layrnorm`` before the blocks; ``encoder.layers.i`` with
  ``self_attn.{k,v,q,out}_proj`` (biased), ``layer_norm1``, ``mlp.fc1``/``fc2``, ``layer_norm2``
  (quick_gelu); ``post_layernorm`` on the class token only (modeling_clip.py:640-641).
  ``CLIPVisionModelWithProjection`` adds ``visual_projection`` (h -> projection_dim, no bias).
* SigLIP's vision tower (``SiglipVisionEmbeddings``, modeling_siglip.py:116-185): a biased Conv2d,
  ``position_embedding`` (N, h) and ``position_ids`` (1, N): no class token; blocks as CLIP's
  (gelu_pytorch_tanh); ``post_layernorm`` over every token, then, with ``vision_use_head`` (default
  true), the attention-pooling head (``SiglipMultiheadAttentionPoolingHead``, modeling_siglip.py:621-642:
  ``probe`` (1, 1, h), an ``nn.MultiheadAttention`` with fused ``in_proj_weight`` (3h, h), a
  LayerNorm and an MLP).

A wrapping ``clip``/``siglip`` config is read as its ``vision_config`` (UNWRAP): the vision tower
alone is counted, not the text tower or the contrastive projections and logit scale.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vramlens.errors import ModelSourceError
from vramlens.models._reader import ConfigReader
from vramlens.models._tensors import Tensors, num_labels
from vramlens.models.defaults import DEFAULTS
from vramlens.models.families._common import Built, modelled_head, torch_dtype
from vramlens.models.spec import Vision

MODEL_TYPES = ("vit", "clip_vision_model", "siglip_vision_model")

NOTE = "a CLIP/SigLIP checkpoint: its vision tower (vision_config) is counted, not the text tower"


def _vision_config(config: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The ``vision_config`` of a ``clip``/``siglip`` config, as a ``<type>_vision_model`` config."""
    vc = config.get("vision_config")
    if not isinstance(vc, Mapping):
        raise ModelSourceError(f"{where}: a {config.get('model_type')} config needs a vision_config object")
    out = dict(vc)
    out["model_type"] = f"{config.get('model_type')}_vision_model"
    out.setdefault("architectures", ["CLIPVisionModel" if config.get("model_type") == "clip"
                                     else "SiglipVisionModel"])
    if "torch_dtype" in config or "dtype" in config:
        out.setdefault("torch_dtype", config.get("torch_dtype", config.get("dtype")))
    return out


UNWRAP = {"clip": _vision_config, "siglip": _vision_config}


def _int_or_pair(r: ConfigReader, key: str, default: int) -> int:
    """A square side (transformers' vision configs hold one int; a pair must be square here)."""
    v = r.raw.get(key, default)
    if isinstance(v, list | tuple) and len(v) == 2 and v[0] == v[1]:
        v = v[0]
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 65_536:
        r.problem(f"{key}={v!r} must be a whole number of pixels from 1 to 65,536")
        return default
    return v


def build_vision(r: ConfigReader, architecture: str) -> Built:
    """ViT / CLIP vision / SigLIP vision inventory and facts."""
    mt = r.model_type
    dflt = DEFAULTS[mt]
    raw = {**dflt, **r.raw}
    rr = r
    h, L, a = rr.get_int("hidden_size"), rr.get_int("num_hidden_layers"), rr.get_int("num_attention_heads")
    f = rr.get_int("intermediate_size")
    rr.divisible("hidden_size", h, "num_attention_heads", a)
    act = r.get_str("hidden_act")
    size = _int_or_pair(r, "image_size", dflt["image_size"])
    p = _int_or_pair(r, "patch_size", dflt["patch_size"])
    C = rr.get_int("num_channels")
    if p > size:
        r.problem(f"patch_size={p} is larger than image_size={size}")
    dtype = torch_dtype(r)
    r.check()
    n = (size // p) ** 2
    t = Tensors()
    if mt == "vit":
        head = modelled_head(r, architecture, {"base", "image_cls"})
        pre = "" if head == "base" else "vit."
        e = f"{pre}embeddings."
        t.add(f"{e}cls_token", (1, 1, h), "position_embedding")
        t.add(f"{e}position_embeddings", (1, n + 1, h), "position_embedding")
        t.add(f"{e}patch_embeddings.projection.weight", (h, C, p, p), "other")
        t.add(f"{e}patch_embeddings.projection.bias", (h,), "bias")
        qkv_bias = r.get_bool("qkv_bias")
        for i in range(L):
            b = f"{pre}layers.{i}."
            for proj in ("q_proj", "k_proj", "v_proj"):
                t.linear(f"{b}attention.{proj}", h, h, qkv_bias)
            t.linear(f"{b}attention.o_proj", h, h, True)
            t.norm(f"{b}layernorm_before", h)
            t.norm(f"{b}layernorm_after", h)
            t.linear(f"{b}mlp.fc1", f, h, True)
            t.linear(f"{b}mlp.fc2", h, f, True)
        t.norm(f"{pre}layernorm", h)
        if head == "base":
            t.linear("pooler.dense", rr.get_int("pooler_output_size", h), h, True, role="other")
        else:
            t.linear("classifier", num_labels(r.raw), h, True, role="other")
        class_token, pre_norm, final_all = True, False, True
        positions = n + 1
    else:
        clip = mt == "clip_vision_model"
        head = modelled_head(r, architecture, {"base", "projection"} if clip else {"base"})
        pre = "vision_model." if head == "projection" else ""
        e = f"{pre}embeddings."
        if clip:
            t.add(f"{e}class_embedding", (h,), "position_embedding")
            t.add(f"{e}patch_embedding.weight", (h, C, p, p), "other")
        else:
            t.add(f"{e}patch_embedding.weight", (h, C, p, p), "other")
            t.add(f"{e}patch_embedding.bias", (h,), "bias")
        positions = n + 1 if clip else n
        t.embedding(f"{e}position_embedding", positions, h, role="position_embedding")
        if clip:
            t.norm(f"{pre}pre_layrnorm", h)
        for i in range(L):
            b = f"{pre}encoder.layers.{i}."
            if not clip:
                t.norm(f"{b}layer_norm1", h)
            for proj in ("k_proj", "v_proj", "q_proj", "out_proj"):
                t.linear(f"{b}self_attn.{proj}", h, h, True)
            if clip:
                t.norm(f"{b}layer_norm1", h)
            else:
                t.norm(f"{b}layer_norm2", h)
            t.linear(f"{b}mlp.fc1", f, h, True)
            t.linear(f"{b}mlp.fc2", h, f, True)
            if clip:
                t.norm(f"{b}layer_norm2", h)
        t.norm(f"{pre}post_layernorm", h)
        if not clip and r.get_bool("vision_use_head"):
            t.add("head.probe", (1, 1, h), "other")
            t.add("head.attention.in_proj_weight", (3 * h, h), "other")
            t.add("head.attention.in_proj_bias", (3 * h,), "bias")
            t.linear("head.attention.out_proj", h, h, True, role="other")
            t.norm("head.layernorm", h)
            t.linear("head.mlp.fc1", f, h, True, role="other")
            t.linear("head.mlp.fc2", h, f, True, role="other")
        if head == "projection":
            t.linear("visual_projection", rr.get_int("projection_dim"), h, False, role="other")
        t.buffer(f"{e}position_ids", (1, positions), dtype="int64")
        class_token, pre_norm, final_all = clip, clip, not clip
    attn_drop = float(raw.get("attention_probs_dropout_prob", raw.get("attention_dropout", 0.0)) or 0.0)
    hid_drop = float(raw.get("hidden_dropout_prob", 0.0) or 0.0)
    facts = dict(
        kind="encoder", hidden_size=h, n_heads=a, n_kv_heads=a, head_dim=h // a, ffn_size=f, vocab_size=0,
        n_encoder_layers=L, max_position=positions, activation=act, gated_mlp=False, norm="layernorm",
        position="learned", norm_placement="pre", torch_dtype=dtype,
        head="image-classification" if mt == "vit" and head != "base" else "embedding",
        classifier="first", head_dropout=0.0,
        block_dropouts=2 if hid_drop > 0 else 0,
        vision=Vision(image_size=size, patch_size=p, channels=C, class_token=class_token, pre_norm=pre_norm,
                      final_norm_all_tokens=final_all, attention_dropout=attn_drop,
                      input_cast_held=mt == "vit"),
    )
    return Built(facts, t.items)


BUILDERS = {mt: build_vision for mt in MODEL_TYPES}
