"""Llama 4's vision tower and the whole multimodal checkpoint (``Llama4ForConditionalGeneration``).

Layout from transformers 5.24 (``transformers/models/llama4/modeling_llama4.py``), checked against
``named_parameters()`` and ``named_buffers()`` on the meta device (tests/models/test_llama4_vision.py):

* ``vision_model`` (``Llama4VisionModel``): ``patch_embedding.linear`` (``Llama4UnfoldConvolution``: an
  ``nn.Unfold`` of p x p patches, then a Linear C*p*p -> h without bias), ``class_embedding`` (h,),
  ``positional_embedding_vlm`` ((S/p)**2 + 1, h), ``rotary_embedding.freqs_ci`` (a non-persistent complex64
  buffer ((S/p)**2 + 1, 1, 2 * len(arange(0, d/2, 2)))), ``layernorm_pre`` and ``layernorm_post`` (LayerNorms
  over every token), ``model.layers.i`` (``Llama4VisionEncoderLayer``: ``self_attn.{q,k,v,o}_proj`` biased,
  ``mlp.fc1``/``mlp.fc2`` biased, GELU, ``input_layernorm``/``post_attention_layernorm`` LayerNorms), and
  ``vision_adapter.mlp`` (``Llama4VisionPixelShuffleMLP``: ``pixel_shuffle`` by ``pixel_shuffle_ratio`` 0.5
  folds 2x2 patches into one token of 4h, then ``fc1`` (``intermediate_size`` -> ``projector_input_dim``) and
  ``fc2`` (``projector_output_dim`` square), both without bias, GELU after each).
* ``multi_modal_projector.linear_1``: ``vision_output_dim`` -> the text hidden size, no bias.
* ``language_model``: ``Llama4ForCausalLM`` over ``text_config`` (families/llama4.py), named
  ``language_model.model.*`` and ``language_model.lm_head``.

Images (``Llama4ImageProcessorFast`` in image_processing_llama4.py, ``Llama4Processor`` in processing_llama4.py):
the processor picks a canvas of th x tw tiles of ``size`` (336) with th * tw <= ``max_patches`` (16 by default;
``find_supported_resolutions``, ``get_best_fit``), resizes and pads the image onto it and splits it into tiles;
when th * tw > 1 it adds a global tile (the whole image resized to 336x336). Each tile is (336/14)**2 = 576
patches (577 with the class token in the tower), pixel-shuffled to 144 image tokens. The prompt
(``_prompt_split_image``) is ``<|image_start|>``, then per tile row the tiles' 144 ``<|patch|>`` tokens separated by
``<|tile_x_separator|>`` and closed by ``<|tile_y_separator|>`` (when tiled), then ``<|image|>``, the global tile's
(or the single tile's) 144 patches and ``<|image_end|>``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vramlens.errors import ModelSourceError
from vramlens.limits import MAX_LAYERS
from vramlens.models._reader import ConfigReader
from vramlens.models._tensors import Tensors
from vramlens.models.defaults import DEFAULTS
from vramlens.models.families._common import Built, torch_dtype
from vramlens.models.families.llama4 import text_model
from vramlens.models.spec import Vision

#: the tower's model_type, as transformers' Llama4VisionConfig names it
TOWER_TYPE = "llama4_vision_model"
MODEL_TYPE = "llama4"
ARCHITECTURE = "Llama4ForConditionalGeneration"

#: Llama4VisionConfig's field defaults (their one home: vramlens.models.defaults)
VISION_DEFAULTS: dict[str, Any] = DEFAULTS[TOWER_TYPE]

#: Llama4Config's ``image_token_index`` default (``<|patch|>``, configuration_llama4.py)
IMAGE_TOKEN_ID = 200_092


def _int(vc: Mapping[str, Any], key: str, where: str, limit: int = 1 << 20) -> int:
    v = vc.get(key, VISION_DEFAULTS.get(key))
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= limit:
        raise ModelSourceError(f"{where}: vision_config.{key}={v!r} must be a whole number from 1 to {limit:,}")
    return v


def build_tower(r: ConfigReader, architecture: str) -> Built:
    """Llama 4's vision tower (``vision_model`` without its prefix), the pixel-shuffle adapter included."""
    raw = {**VISION_DEFAULTS, **{k: v for k, v in r.raw.items() if v is not None}}
    where = r.where
    h, L, a = _int(raw, "hidden_size", where), _int(raw, "num_hidden_layers", where, MAX_LAYERS), \
        _int(raw, "num_attention_heads", where)
    f, C, S, p = _int(raw, "intermediate_size", where), _int(raw, "num_channels", where), \
        _int(raw, "image_size", where), _int(raw, "patch_size", where)
    p_in, p_out = _int(raw, "projector_input_dim", where), _int(raw, "projector_output_dim", where)
    ratio = raw.get("pixel_shuffle_ratio")
    if ratio != 0.5:
        r.problem(f"pixel_shuffle_ratio={ratio!r}: only 0.5 (the released checkpoints') is modelled")
    r.divisible("hidden_size", h, "num_attention_heads", a)
    if S % p:
        r.problem(f"image_size={S} is not a multiple of patch_size={p}")
    if (S // p) % 2:
        r.problem(f"image_size/patch_size={S // p} must be even for the 2x2 pixel shuffle")
    if f != 4 * h:
        r.problem(f"intermediate_size={f} must be 4 * hidden_size={4 * h}: the adapter's fc1 takes the pixel-"
                  "shuffled tokens (4 patches of hidden_size) as intermediate_size inputs")
    if p_in != p_out:
        r.problem(f"projector_input_dim={p_in} must equal projector_output_dim={p_out}: the adapter's fc2 "
                  "(projector_output_dim square) reads fc1's output")
    act = str(raw.get("hidden_act", "gelu"))
    dtype = torch_dtype(r)
    r.check()
    d = h // a
    n = (S // p) ** 2 + 1
    t = Tensors()
    t.add("class_embedding", (h,), "other")
    t.add("positional_embedding_vlm", (n, h), "other")
    t.linear("patch_embedding.linear", h, C * p * p, False)
    # complex64 (n, 1, k): held as its fp32 view_as_real (n, 1, k, 2), which model.to(dtype) leaves alone
    k = 2 * len(range(0, d // 2, 2)[: d // 4])
    t.buffer("rotary_embedding.freqs_ci", (n, 1, k, 2), dtype="fp32")
    t.norm("layernorm_pre", h)
    t.norm("layernorm_post", h)
    for i in range(L):
        b = f"model.layers.{i}."
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            t.linear(f"{b}self_attn.{proj}", h, h, True)
        t.linear(f"{b}mlp.fc1", f, h, True)
        t.linear(f"{b}mlp.fc2", h, f, True)
        t.norm(f"{b}input_layernorm", h)
        t.norm(f"{b}post_attention_layernorm", h)
    t.linear("vision_adapter.mlp.fc1", p_in, f, False)
    t.linear("vision_adapter.mlp.fc2", p_out, p_out, False)
    facts = dict(
        kind="encoder", hidden_size=h, n_heads=a, n_kv_heads=a, head_dim=d, ffn_size=f, vocab_size=0,
        n_encoder_layers=L, max_position=n, activation=act, gated_mlp=False, norm="layernorm",
        position="rotary", norm_placement="pre", torch_dtype=dtype, head="embedding", classifier="first",
        head_dropout=0.0, block_dropouts=0,
        # vision_apply_rotary_emb: q.float(), k.float() as complex, times the complex64 freqs_ci, cast back
        rotary_fp32=True, rotary_tables_fp32=True,
        vision=Vision(image_size=S, patch_size=p, channels=C, class_token=True, pre_norm=True,
                      final_norm_all_tokens=True),
    )
    return Built(facts, t.items)


def split(config: Mapping[str, Any], where: str) -> tuple[dict[str, Any], dict[str, Any], int, int]:
    """A Llama4Config as (the llama4_text config, the tower's config, image_token_index, vision_output_dim)."""
    vc = config.get("vision_config")
    if not isinstance(vc, Mapping):
        raise ModelSourceError(f"{where}: a llama4 config needs a vision_config object to build the vision tower")
    vision = {k: v for k, v in vc.items() if k != "architectures"}
    vision["model_type"] = TOWER_TYPE
    vision["architectures"] = ["Llama4VisionModel"]
    for key in ("torch_dtype", "dtype"):
        if key in config:
            vision[key] = config[key]  # the model is loaded in one dtype: the top level's
    token = config.get("image_token_index", IMAGE_TOKEN_ID)
    if isinstance(token, bool) or not isinstance(token, int) or token < 0:
        raise ModelSourceError(f"{where}: image_token_index={token!r} must be a whole number")
    return text_model(config, where), vision, token, _int(vision, "vision_output_dim", where)


BUILDERS = {TOWER_TYPE: build_tower}
