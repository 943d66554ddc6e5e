"""GPT-style decoders with LayerNorm: gpt2, gpt_bigcode, opt, bloom, falcon, gpt_neox, phi.

Module layouts follow ``transformers/models/<type>/modeling_<type>.py`` (transformers 5.x).
Things that matter for exact counts:

- gpt2 uses ``Conv1D`` (weight stored (in, out)); gpt_bigcode uses ``nn.Linear`` with a
  multi-query ``c_attn`` of h + 2 d_head outputs and a (n_positions, n_positions) bool
  causal-mask buffer.
- opt's learned positions have 2 extra rows (``OPTLearnedPositionalEmbedding.offset = 2``);
  ``word_embed_proj_dim`` != hidden adds ``project_in``/``project_out``; the final
  LayerNorm exists only with ``do_layer_norm_before`` (opt-350m has none).
- bloom (ALiBi, no position table) has a LayerNorm right after the embedding; transformers has no SDPA
  path for it (``_supports_sdpa`` False), so it runs eager whatever ``--attention`` asks.
- falcon has three layouts: ``new_decoder_architecture`` (GQA, ``ln_attn``/``ln_mlp``),
  ``multi_query`` (one k/v head), or full MHA; ``parallel_attn`` decides one or two norms.
  It builds a rotary embedding even when ``alibi`` is on.
- gpt_neox and phi rotate only part of each head (``rotary_pct`` / ``partial_rotary_factor``);
  phi's ``lm_head`` has a bias.
"""

from __future__ import annotations

from typing import Any

from vramlens.models._reader import ConfigReader
from vramlens.models._tensors import Tensors, head_kind
from vramlens.models.defaults import POST_INIT_DEFAULTS
from vramlens.models.families._common import (
    Built,
    decoder_head,
    decoder_prefix,
    rope_partial,
    torch_dtype,
)
from vramlens.models.spec import LegacyPresents

MODEL_TYPES = ("gpt2", "gpt_bigcode", "opt", "bloom", "falcon", "gpt_neox", "phi")


def _no_cross_attention(r: ConfigReader) -> None:
    if r.get_bool("add_cross_attention", False):
        r.problem("add_cross_attention=true (a decoder with cross-attention) is not supported: "
                  "use a config without it")


#: eager attention with an fp32 softmax cast back (modeling_<type>.py); GPT-2 and Falcon keep the compute dtype
_FP32_SOFTMAX = frozenset({"opt", "bloom", "phi", "gpt_bigcode", "gpt_neox"})


def _facts(r: ConfigReader, **kw: Any) -> dict[str, Any]:
    base = dict(kind="decoder", gated_mlp=False, norm="layernorm", torch_dtype=torch_dtype(r),
                softmax_fp32=r.model_type in _FP32_SOFTMAX)
    base.update(kw)
    return base


def build_gpt2(r: ConfigReader, architecture: str) -> Built:
    """GPT-2 (``GPT2LMHeadModel``) and GPT-BigCode / StarCoder (``GPTBigCodeForCausalLM``)."""
    bigcode = r.model_type == "gpt_bigcode"
    h, L, a = r.get_int("n_embd"), r.get_int("n_layer"), r.get_int("n_head")
    V, n_pos = r.get_int("vocab_size"), r.get_int("n_positions")
    inner = r.opt_int("n_inner") or 4 * h
    r.divisible("n_embd", h, "n_head", a)
    mq = bigcode and r.get_bool("multi_query")
    tied = r.get_bool("tie_word_embeddings")
    act = r.get_str("activation_function")
    _no_cross_attention(r)
    r.check()
    d = h // a
    head = head_kind(architecture)
    p = decoder_prefix(head, "transformer.")
    t = Tensors()
    t.embedding(f"{p}wte", V, h)
    t.embedding(f"{p}wpe", n_pos, h, role="position_embedding")
    for i in range(L):
        b = f"{p}h.{i}."
        t.norm(f"{b}ln_1", h)
        if bigcode:
            t.linear(f"{b}attn.c_attn", h + 2 * (d if mq else h), h, True)
            t.linear(f"{b}attn.c_proj", h, h, True)
        else:
            t.conv1d(f"{b}attn.c_attn", h, 3 * h)
            t.conv1d(f"{b}attn.c_proj", h, h)
        t.norm(f"{b}ln_2", h)
        if bigcode:
            t.linear(f"{b}mlp.c_fc", inner, h, True)
            t.linear(f"{b}mlp.c_proj", h, inner, True)
        else:
            t.conv1d(f"{b}mlp.c_fc", h, inner)
            t.conv1d(f"{b}mlp.c_proj", inner, h)
    t.norm(f"{p}ln_f", h)
    if bigcode:
        # modeling_gpt_bigcode.py: torch.tril(torch.ones((n_positions, n_positions), dtype=torch.bool))
        t.buffer(f"{p}bias", (n_pos, n_pos), dtype="bool")
    decoder_head(t, r, head, architecture, h, V, tied)
    return Built(_facts(
        r, hidden_size=h, n_heads=a, n_kv_heads=1 if mq else a, head_dim=d, ffn_size=inner,
        vocab_size=V, n_decoder_layers=L, max_position=n_pos, activation=act,
        position="learned", tied_embeddings=tied, qkv_views=True,
        # GPT2Attention.__init__ registers the causal mask ``bias`` (n_positions^2 bool) and ``masked_bias`` in
        # every block through transformers 4.57 (modeling_gpt2.py of the v4.42.0 and v4.57.0 wheels); 5.0 has
        # neither. GPT-BigCode keeps its model-level mask (the inventory's ``bias``)
        legacy_buffers_before=None if bigcode else (5, 0),
        # transformers < 4.52 GPT2Attention returns present = (key, value), views of c_attn's output split in three
        # (v4.42.4 wheel, modeling_gpt2.py lines 623-638; v4.51.3 lines 293-308; v4.52.4 updates a Cache): the
        # whole (b, s, 3h) output stays alive with them
        legacy_presents=None if (bigcode or not r.get_bool("use_cache", True)) else LegacyPresents((4, 52), (3 * h,)),
    ), t.items)


def build_opt(r: ConfigReader, architecture: str) -> Built:
    """OPT (``OPTForCausalLM``)."""
    h, L, a = r.get_int("hidden_size"), r.get_int("num_hidden_layers"), r.get_int("num_attention_heads")
    V, f = r.get_int("vocab_size"), r.get_int("ffn_dim")
    n_pos = r.get_int("max_position_embeddings")
    wdim = r.opt_int("word_embed_proj_dim") or h
    r.divisible("hidden_size", h, "num_attention_heads", a)
    pre_norm = r.get_bool("do_layer_norm_before")
    final_norm = pre_norm and not r.get_bool("_remove_final_layer_norm")
    affine = r.get_bool("layer_norm_elementwise_affine")
    bias = r.get_bool("enable_bias")
    tied = r.get_bool("tie_word_embeddings")
    act = r.get_str("activation_function")
    r.check()
    head = head_kind(architecture)
    p = {"base": "decoder."}.get(head, "model.decoder.")
    t = Tensors()
    t.embedding(f"{p}embed_tokens", V, wdim)
    # OPTLearnedPositionalEmbedding: num_embeddings + offset, offset = 2
    t.embedding(f"{p}embed_positions", n_pos + 2, h, role="position_embedding")
    if wdim != h:
        t.linear(f"{p}project_out", wdim, h)
        t.linear(f"{p}project_in", h, wdim)
    if final_norm and affine:
        t.norm(f"{p}final_layer_norm", h)
    for i in range(L):
        b = f"{p}layers.{i}."
        for proj in ("k_proj", "v_proj", "q_proj", "out_proj"):
            t.linear(f"{b}self_attn.{proj}", h, h, bias)
        if affine:
            t.norm(f"{b}self_attn_layer_norm", h)
        t.linear(f"{b}fc1", f, h, bias)
        t.linear(f"{b}fc2", h, f, bias)
        if affine:
            t.norm(f"{b}final_layer_norm", h)
    decoder_head(t, r, head, architecture, wdim, V, tied, score_in=wdim)
    return Built(_facts(
        r, hidden_size=h, n_heads=a, n_kv_heads=a, head_dim=h // a, ffn_size=f, vocab_size=V,
        n_decoder_layers=L, max_position=n_pos, activation=act, position="learned",
        tied_embeddings=tied, score_clamp=True,  # OPTAttention's torch.max clamp, transformers <= 4.48
        # transformers < 4.49 OPTAttention returns past_key_value = (key_states, value_states), each
        # ``_shape``'s ``.transpose(1, 2).contiguous()`` copy (v4.45.0 wheel, modeling_opt.py lines 121, 170;
        # OPTSdpaAttention of v4.46.0 line 440; v4.48.3 line 179; v4.49.0 updates a Cache)
        legacy_presents=LegacyPresents((4, 49), (h, h), eager_copies=False) if r.get_bool("use_cache", True) else None,
        legacy_output_copy_before=(4, 49),
    ), t.items)


def build_bloom(r: ConfigReader, architecture: str) -> Built:
    """BLOOM (``BloomForCausalLM``): ALiBi, so no position table and no max length."""
    h, L, a = r.get_int("hidden_size"), r.get_int("n_layer"), r.get_int("n_head")
    V = r.get_int("vocab_size")
    r.divisible("hidden_size", h, "n_head", a)
    tied = r.get_bool("tie_word_embeddings")
    if r.has("seq_length"):
        max_pos = r.get_int("seq_length")
    else:
        max_pos = 2048  # BLOOM paper (Le Scao et al. 2022, section 3.5): trained on 2048 tokens
        r.assume("max_position=2048 (BLOOM's training length; ALiBi has no hard limit)")
    r.check()
    head = head_kind(architecture)
    p = decoder_prefix(head, "transformer.")
    t = Tensors()
    t.embedding(f"{p}word_embeddings", V, h)
    t.norm(f"{p}word_embeddings_layernorm", h)
    for i in range(L):
        b = f"{p}h.{i}."
        t.norm(f"{b}input_layernorm", h)
        t.linear(f"{b}self_attention.query_key_value", 3 * h, h, True)
        t.linear(f"{b}self_attention.dense", h, h, True)
        t.norm(f"{b}post_attention_layernorm", h)
        t.linear(f"{b}mlp.dense_h_to_4h", 4 * h, h, True)
        t.linear(f"{b}mlp.dense_4h_to_h", h, 4 * h, True)
    t.norm(f"{p}ln_f", h)
    decoder_head(t, r, head, architecture, h, V, tied)
    return Built(_facts(
        r, hidden_size=h, n_heads=a, n_kv_heads=a, head_dim=h // a, ffn_size=4 * h, vocab_size=V,
        n_decoder_layers=L, max_position=max_pos, activation="gelu", position="alibi",
        # BloomPreTrainedModel sets no _supports_sdpa (False): BloomAttention's baddbmm with the ALiBi bias is
        # its only path, so transformers runs it eager whatever is asked (ModelSpec.sdpa)
        tied_embeddings=tied, sdpa=False,
    ), t.items)


def build_falcon(r: ConfigReader, architecture: str) -> Built:
    """Falcon (``FalconForCausalLM``) in its three attention layouts."""
    h, L, a = r.get_int("hidden_size"), r.get_int("num_hidden_layers"), r.get_int("num_attention_heads")
    V = r.get_int("vocab_size")
    r.divisible("hidden_size", h, "num_attention_heads", a)
    new_arch = r.get_bool("new_decoder_architecture")
    mq = r.get_bool("multi_query")
    parallel = r.get_bool("parallel_attn")
    bias = r.get_bool("bias")
    alibi = r.get_bool("alibi")
    n_ln = r.opt_int("num_ln_in_parallel_attn")
    if n_ln is None and new_arch:
        n_ln = 2  # FalconDecoderLayer.__init__
    f = r.opt_int("ffn_hidden_size") or 4 * h
    tied = r.get_bool("tie_word_embeddings")
    max_pos = r.get_int("max_position_embeddings")
    act = r.get_str("activation")
    n_kv_cfg = r.opt_int("num_kv_heads") or a
    if new_arch:
        r.divisible("num_attention_heads", a, "num_kv_heads", n_kv_cfg)
    r.check()
    d = h // a
    if new_arch:
        n_kv, qkv_out = n_kv_cfg, (2 * n_kv_cfg + a) * d
    elif mq:
        n_kv, qkv_out = 1, h + 2 * d
    else:
        n_kv, qkv_out = a, 3 * h
    head = head_kind(architecture)
    p = decoder_prefix(head, "transformer.")
    t = Tensors()
    t.embedding(f"{p}word_embeddings", V, h)
    for i in range(L):
        b = f"{p}h.{i}."
        t.linear(f"{b}self_attention.query_key_value", qkv_out, h, bias)
        t.linear(f"{b}self_attention.dense", h, h, bias)
        t.linear(f"{b}mlp.dense_h_to_4h", f, h, bias)
        t.linear(f"{b}mlp.dense_4h_to_h", h, f, bias)
        if not parallel:
            t.norm(f"{b}post_attention_layernorm", h)
            t.norm(f"{b}input_layernorm", h)
        elif n_ln == 2:
            t.norm(f"{b}ln_attn", h)
            t.norm(f"{b}ln_mlp", h)
        else:
            t.norm(f"{b}input_layernorm", h)
    t.norm(f"{p}ln_f", h)
    t.rotary(f"{p}rotary_emb.", d)
    decoder_head(t, r, head, architecture, h, V, tied)
    return Built(_facts(
        r, hidden_size=h, n_heads=a, n_kv_heads=n_kv, head_dim=d, ffn_size=f, vocab_size=V,
        n_decoder_layers=L, max_position=max_pos, activation=act,
        position="alibi" if alibi else "rotary", tied_embeddings=tied,
    ), t.items)


def build_gpt_neox(r: ConfigReader, architecture: str) -> Built:
    """GPT-NeoX / Pythia (``GPTNeoXForCausalLM``)."""
    h, L, a = r.get_int("hidden_size"), r.get_int("num_hidden_layers"), r.get_int("num_attention_heads")
    V, f = r.get_int("vocab_size"), r.get_int("intermediate_size")
    r.divisible("hidden_size", h, "num_attention_heads", a)
    attn_bias = r.get_bool("attention_bias")
    tied = r.get_bool("tie_word_embeddings")
    max_pos = r.get_int("max_position_embeddings")
    act = r.get_str("hidden_act")
    partial = rope_partial(r, POST_INIT_DEFAULTS[("gpt_neox", "rotary_pct")], legacy_key="rotary_pct")
    r.check()
    d = h // a
    head = head_kind(architecture)
    p = decoder_prefix(head, "gpt_neox.")
    t = Tensors()
    t.embedding(f"{p}embed_in", V, h)
    for i in range(L):
        b = f"{p}layers.{i}."
        t.norm(f"{b}input_layernorm", h)
        t.norm(f"{b}post_attention_layernorm", h)
        t.linear(f"{b}attention.query_key_value", 3 * h, h, attn_bias)
        t.linear(f"{b}attention.dense", h, h, attn_bias)
        t.linear(f"{b}mlp.dense_h_to_4h", f, h, True)
        t.linear(f"{b}mlp.dense_4h_to_h", h, f, True)
    t.norm(f"{p}final_layer_norm", h)
    t.rotary(f"{p}rotary_emb.", d, partial)
    decoder_head(t, r, head, architecture, h, V, tied)
    return Built(_facts(
        r, hidden_size=h, n_heads=a, n_kv_heads=a, head_dim=d, ffn_size=f, vocab_size=V,
        n_decoder_layers=L, max_position=max_pos, activation=act, position="rotary",
        tied_embeddings=tied, fused_qkv_kept=True,
        # GPTNeoXLayer.forward: use_parallel_residual (configuration_gpt_neox.py default True) feeds the block's
        # input to both input_layernorm and post_attention_layernorm
        parallel_norms_share_input=r.raw.get("use_parallel_residual", True) is not False,
        # apply_rotary_pos_emb (modeling_gpt_neox.py) builds q and k with torch.cat of the rotated and passed
        # parts: contiguous head-major, so the fused kernel's output comes back transposed and is copied
        attention_output_copy=True,
        # transformers < 4.49 GPTNeoXAttention.__init__ (v4.42.0 wheel, modeling_gpt_neox.py lines 112-115, 123-130,
        # and GPTNeoXRotaryEmbedding lines 589-613): the causal mask ``bias`` (P^2 bool) and ``masked_bias``, and a
        # rotary embedding of its own per block whose cos/sin caches are fp32 (P, int(head_dim * rotary_pct))
        legacy_buffers_before=(4, 49), legacy_rotary_cache_dim=int(d * partial),
        # transformers < 4.45 GPTNeoXAttention._attn_projections_and_rope returns present = (key, value) (v4.42.4
        # wheel, modeling_gpt_neox.py lines 224-257; v4.44.2 line 241; v4.45.0 updates a Cache): the key is
        # torch.cat of the part rotated by the fp32 cos/sin caches and the fp16 rest, so fp32 (b, a, s, d); the
        # value a view of query_key_value's (b, s, 3h) output, which stays alive with it
        legacy_presents=LegacyPresents((4, 45), (3 * h,), key_fp32=h) if r.get_bool("use_cache", True) else None,
    ), t.items)


def build_phi(r: ConfigReader, architecture: str) -> Built:
    """Phi-1 / Phi-1.5 / Phi-2 (``PhiForCausalLM``): biases everywhere, parallel block."""
    h, L, a = r.get_int("hidden_size"), r.get_int("num_hidden_layers"), r.get_int("num_attention_heads")
    V, f = r.get_int("vocab_size"), r.get_int("intermediate_size")
    n_kv = r.opt_int("num_key_value_heads") or a
    explicit_hd = r.opt_int("head_dim")
    if explicit_hd is None:
        r.divisible("hidden_size", h, "num_attention_heads", a, "set head_dim or fix the config")
    r.divisible("num_attention_heads", a, "num_key_value_heads", n_kv)
    qk_ln = r.get_bool("qk_layernorm")
    tied = r.get_bool("tie_word_embeddings")
    max_pos = r.get_int("max_position_embeddings")
    act = r.get_str("hidden_act")
    partial = rope_partial(r, POST_INIT_DEFAULTS[("phi", "partial_rotary_factor")])
    r.check()
    d = explicit_hd or h // a
    head = head_kind(architecture)
    p = decoder_prefix(head, "model.")
    t = Tensors()
    t.embedding(f"{p}embed_tokens", V, h)
    for i in range(L):
        b = f"{p}layers.{i}."
        t.linear(f"{b}self_attn.q_proj", a * d, h, True)
        t.linear(f"{b}self_attn.k_proj", n_kv * d, h, True)
        t.linear(f"{b}self_attn.v_proj", n_kv * d, h, True)
        t.linear(f"{b}self_attn.dense", h, a * d, True)
        if qk_ln:
            t.norm(f"{b}self_attn.q_layernorm", h // a)
            t.norm(f"{b}self_attn.k_layernorm", h // a)
        t.linear(f"{b}mlp.fc1", f, h, True)
        t.linear(f"{b}mlp.fc2", h, f, True)
        t.norm(f"{b}input_layernorm", h)
    t.rotary(f"{p}rotary_emb.", d, partial)
    t.norm(f"{p}final_layernorm", h)
    decoder_head(t, r, head, architecture, h, V, tied, lm_bias=True)
    return Built(_facts(
        r, hidden_size=h, n_heads=a, n_kv_heads=n_kv, head_dim=d, ffn_size=f, vocab_size=V,
        n_decoder_layers=L, max_position=max_pos, activation=act, position="rotary",
        tied_embeddings=tied,
    ), t.items)


BUILDERS = {
    "gpt2": build_gpt2,
    "gpt_bigcode": build_gpt2,
    "opt": build_opt,
    "bloom": build_bloom,
    "falcon": build_falcon,
    "gpt_neox": build_gpt_neox,
    "phi": build_phi,
}
