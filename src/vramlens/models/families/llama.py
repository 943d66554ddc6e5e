"""Llama-style decoders: pre-norm RMSNorm blocks, rotary positions, gated (SwiGLU/GeGLU) MLP.

Covers llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, phi3, gemma, gemma2,
gemma3_text, olmo2, and the generic fallback for unknown model types. The differences between them are
traits (biases, fused projections, extra norms, MoE layout), each read from
``transformers/models/<type>/modeling_<type>.py`` (transformers 5.x):

- llama: ``attention_bias`` on q/k/v/o, ``mlp_bias`` on the MLP.
- qwen2: bias on q/k/v only (``bias=True`` hard-coded); qwen2_moe the same via ``qkv_bias``.
- qwen3(_moe): ``attention_bias`` on q/k/v/o, plus per-head RMSNorms ``q_norm``/``k_norm``.
- gemma(2): ``head_dim`` independent of hidden_size / heads, a scaled embedding with an
  ``embed_scale`` buffer; gemma2 adds ``pre_``/``post_feedforward_layernorm``. Gemma's RMSNorm
  multiplies by ``(1 + weight)`` in fp32 before casting back (``Gemma2RMSNorm.forward``).
- gemma3_text: gemma2's sandwich norms plus per-head ``q_norm``/``k_norm``; local (sliding) and
  global layers from ``layer_types`` or ``sliding_window_pattern`` (every 6th global,
  configuration_gemma3.py ``__post_init__``); one rotary table per layer type, registered as
  ``{layer_type}_inv_freq`` and ``{layer_type}_original_inv_freq`` (``Gemma3RotaryEmbedding``).
- olmo2: post-norm blocks (``post_attention_layernorm`` and ``post_feedforward_layernorm`` on
  the branch outputs, no input norms) and ``q_norm``/``k_norm`` over all heads (a*d, n_kv*d);
  ``Olmo2RMSNorm`` multiplies by its weight in fp32 before casting back; its rotary cos/sin
  stay fp32 (``Olmo2RotaryEmbedding.forward``).
- phi3: fused ``qkv_proj`` (q, k, v stacked) and ``gate_up_proj``; o_proj registered first.
- MoE (transformers >= 5 stores experts fused): ``experts.gate_up_proj`` (E, 2f, h) and
  ``experts.down_proj`` (E, h, f); the router ``gate.weight`` (E, h). Mixtral lists the
  router first, qwen3_moe last; qwen2_moe adds a shared expert and its sigmoid gate.
"""

from __future__ import annotations

from typing import TypedDict

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


class _Traits(TypedDict, total=False):
    """One model_type's traits: a bias is a config flag's name or a constant; absent means no."""

    qkv_bias: bool | str
    o_bias: bool | str
    mlp_bias: bool | str
    moe: str  # the MoE layout: "mixtral", "qwen2_moe" or "qwen3_moe"
    qk_norm: str  # "head" (per head) or "full" (over all heads)
    embed_scale: bool
    sandwich: bool
    post_norm: bool
    fused: bool
    norm_fp32: bool  # the norm multiplies by its weight in fp32 (Gemma, OLMo 2)
    rope_per_type: bool  # one rotary table per layer type (Gemma 3)
    rotary_tables_fp32: bool  # cos/sin returned in fp32 (OLMo 2)


#: Per model_type: which config flag (or constant) gives the q/k/v and o biases, and the
#: structural traits. ``None`` for a flag means "no bias".
_TRAITS: dict[str, _Traits] = {
    "llama": {"qkv_bias": "attention_bias", "o_bias": "attention_bias", "mlp_bias": "mlp_bias"},
    "mistral": {},
    "mixtral": {"moe": "mixtral"},
    "qwen2": {"qkv_bias": True},
    "qwen2_moe": {"qkv_bias": "qkv_bias", "moe": "qwen2_moe"},
    "qwen3": {"qkv_bias": "attention_bias", "o_bias": "attention_bias", "qk_norm": "head"},
    "qwen3_moe": {"qkv_bias": "attention_bias", "o_bias": "attention_bias", "qk_norm": "head",
                  "moe": "qwen3_moe"},
    "gemma": {"qkv_bias": "attention_bias", "o_bias": "attention_bias", "embed_scale": True, "norm_fp32": True},
    "gemma2": {"qkv_bias": "attention_bias", "o_bias": "attention_bias", "embed_scale": True,
               "sandwich": True, "norm_fp32": True},
    "gemma3_text": {"qkv_bias": "attention_bias", "o_bias": "attention_bias", "embed_scale": True,
                    "sandwich": True, "norm_fp32": True, "qk_norm": "head", "rope_per_type": True},
    "olmo2": {"qkv_bias": "attention_bias", "o_bias": "attention_bias", "post_norm": True, "norm_fp32": True,
              "qk_norm": "full", "rotary_tables_fp32": True},
    "phi3": {"fused": True},
}
_GENERIC: _Traits = {"qkv_bias": "attention_bias", "o_bias": "attention_bias", "mlp_bias": "mlp_bias"}

MODEL_TYPES = tuple(_TRAITS)
#: model types built as generic decoders whose eager attention takes an fp32 softmax (their modeling files)
_GENERIC_FP32_SOFTMAX = frozenset({"starcoder2", "olmo", "cohere", "granite"})


def _flag(r: ConfigReader, spec: bool | str | None) -> bool:
    if isinstance(spec, str):
        return r.get_bool(spec, False)
    return bool(spec)


def build_llama_like(r: ConfigReader, architecture: str, *, generic: bool = False) -> Built:
    """Inventory and facts of a llama-style decoder (see the module docstring for traits)."""
    mt = r.model_type
    traits = _GENERIC if generic else _TRAITS[mt]
    h = r.get_int("hidden_size")
    L = r.get_int("num_hidden_layers")
    a = r.get_int("num_attention_heads")
    V = r.get_int("vocab_size")
    f = r.get_int("intermediate_size")
    n_kv = r.opt_int("num_key_value_heads") or a
    explicit_hd = r.opt_int("head_dim")
    if explicit_hd is None:
        r.divisible("hidden_size", h, "num_attention_heads", a, "set head_dim or fix the config")
    d = explicit_hd or h // max(a, 1)
    r.divisible("num_attention_heads", a, "num_key_value_heads", n_kv)
    tied = r.get_bool("tie_word_embeddings", False)
    qkv_bias, o_bias = _flag(r, traits.get("qkv_bias")), _flag(r, traits.get("o_bias"))
    mlp_bias = _flag(r, traits.get("mlp_bias"))
    moe = traits.get("moe", "")
    n_experts = top_k = 0
    sparse_layers: set[int] = set()
    moe_f = shared_f = 0
    if moe:
        n_experts = r.get_int("num_local_experts" if moe == "mixtral" else "num_experts")
        top_k = r.get_int("num_experts_per_tok")
        if top_k > n_experts:
            r.problem(f"num_experts_per_tok={top_k} is more than the {n_experts} experts: fix the config")
        if moe == "mixtral":
            sparse_layers = set(range(L))
            moe_f = f
        else:
            step = r.get_int("decoder_sparse_step")
            dense_only = set(r.list_int("mlp_only_layers"))
            sparse_layers = {i for i in range(L) if i not in dense_only and (i + 1) % step == 0}
            moe_f = r.get_int("moe_intermediate_size")
            if moe == "qwen2_moe":
                shared_f = r.get_int("shared_expert_intermediate_size")
    partial = rope_partial(r, POST_INIT_DEFAULTS.get((mt, "partial_rotary_factor"), 1.0))
    dtype = torch_dtype(r)
    window = _sliding_window(r)
    sliding = _sliding_layer_ids(r, L) if window else ()
    act_key = "hidden_activation" if mt in ("gemma2", "gemma3_text") else "hidden_act"
    activation = r.get_str(act_key, "silu")
    max_pos = r.get_int("max_position_embeddings", 2048)
    qk_norm = traits.get("qk_norm", "none")
    r.check()

    head = head_kind(architecture)
    p = decoder_prefix(head, "model.")
    t = Tensors()
    t.embedding(f"{p}embed_tokens", V, h)
    if traits.get("embed_scale"):
        # GemmaTextScaledWordEmbedding: embed_scale = sqrt(hidden_size), a float32 scalar buffer
        t.buffer(f"{p}embed_tokens.embed_scale", ())
    for i in range(L):
        b = f"{p}layers.{i}."
        if traits.get("fused"):
            t.linear(f"{b}self_attn.o_proj", h, a * d)
            t.linear(f"{b}self_attn.qkv_proj", a * d + 2 * n_kv * d, h)
        else:
            t.linear(f"{b}self_attn.q_proj", a * d, h, qkv_bias)
            t.linear(f"{b}self_attn.k_proj", n_kv * d, h, qkv_bias)
            t.linear(f"{b}self_attn.v_proj", n_kv * d, h, qkv_bias)
            t.linear(f"{b}self_attn.o_proj", h, a * d, o_bias)
        if qk_norm == "head":
            t.norm(f"{b}self_attn.q_norm", d, bias=False)
            t.norm(f"{b}self_attn.k_norm", d, bias=False)
        elif qk_norm == "full":
            t.norm(f"{b}self_attn.q_norm", a * d, bias=False)
            t.norm(f"{b}self_attn.k_norm", n_kv * d, bias=False)
        if i in sparse_layers:
            _moe_block(t, f"{b}mlp.", moe, n_experts, h, moe_f, shared_f)
        elif traits.get("fused"):
            t.linear(f"{b}mlp.gate_up_proj", 2 * f, h)
            t.linear(f"{b}mlp.down_proj", h, f)
        else:
            t.linear(f"{b}mlp.gate_proj", f, h, mlp_bias)
            t.linear(f"{b}mlp.up_proj", f, h, mlp_bias)
            t.linear(f"{b}mlp.down_proj", h, f, mlp_bias)
        if not traits.get("post_norm"):
            t.norm(f"{b}input_layernorm", h, bias=False)
        t.norm(f"{b}post_attention_layernorm", h, bias=False)
        if traits.get("sandwich"):
            t.norm(f"{b}pre_feedforward_layernorm", h, bias=False)
        if traits.get("sandwich") or traits.get("post_norm"):
            t.norm(f"{b}post_feedforward_layernorm", h, bias=False)
    t.norm(f"{p}norm", h, bias=False)
    rotary_tables = 1
    if traits.get("rope_per_type"):
        # Gemma3RotaryEmbedding: a pair of buffers per layer type, in sorted order of the types
        types = sorted({"sliding_attention" if i in sliding else "full_attention" for i in range(L)})
        for kind in types:
            n = (int(d * partial) + 1) // 2
            t.buffer(f"{p}rotary_emb.{kind}_inv_freq", (n,))
            t.buffer(f"{p}rotary_emb.{kind}_original_inv_freq", (n,))
        rotary_tables = len(types)
    else:
        t.rotary(f"{p}rotary_emb.", d, partial)
    decoder_head(t, r, head, architecture, h, V, tied)

    facts = dict(
        kind="decoder", hidden_size=h, n_heads=a, n_kv_heads=n_kv, head_dim=d,
        ffn_size=moe_f if moe else f, vocab_size=V, n_decoder_layers=L, max_position=max_pos,
        activation=activation, gated_mlp=True, norm="rmsnorm", position="rotary",
        tied_embeddings=tied, n_experts=n_experts, experts_per_token=top_k,
        sliding_window=window, torch_dtype=dtype, sliding_layer_ids=sliding,
        norm_placement="post" if traits.get("post_norm") else "sandwich" if traits.get("sandwich") else "pre",
        qk_norm=qk_norm, norm_weight_fp32=bool(traits.get("norm_fp32")), rotary_tables=rotary_tables,
        rotary_tables_fp32=bool(traits.get("rotary_tables_fp32")),
        # every family here copies Llama's eager attention (fp32 softmax); of the generic ones, those
        # transformers writes the same way
        softmax_fp32=not generic or mt in _GENERIC_FP32_SOFTMAX,
        dense_layer_ids=tuple(i for i in range(L) if i not in sparse_layers) if moe else (),
        dense_ffn_size=f if moe else 0, shared_expert_ffn=shared_f,
        legacy_logits_fp32=mt in LEGACY_LOGITS_FP32,
        # LlamaAttention's own LlamaRotaryEmbedding (transformers wheels 4.32.0, 4.37.2, 4.38.2 and 4.40.0,
        # modeling_llama.py: ``_set_cos_sin_cache`` / ``_cos_cached`` of (max_position_embeddings, head_dim) in
        # torch.get_default_dtype(); 4.41.2 keeps only inv_freq); the copies in other families are not read here
        legacy_rotary_cache_before=(4, 41) if mt == "llama" else None,
    )
    if mt in _SOFTCAP_DEFAULTS:
        # configuration_gemma2.py defaults attn_logit_softcapping 50.0 and final_logit_softcapping 30.0
        # (Gemma 3: None, None); a config's null turns either off. Gemma2PreTrainedModel sets
        # _supports_sdpa = False ("sdpa does not support softcapping"): it runs eager
        attn_cap, logit_cap = _SOFTCAP_DEFAULTS[mt]
        facts["attn_softcap"] = r.raw.get("attn_logit_softcapping", attn_cap) is not None
        facts["logit_softcap"] = r.raw.get("final_logit_softcapping", logit_cap) is not None
        facts["sdpa"] = mt != "gemma2"
    return Built(facts, t.items)


#: model_type -> (attn_logit_softcapping, final_logit_softcapping) defaults of its config class.
_SOFTCAP_DEFAULTS: dict[str, tuple[float | None, float | None]] = {
    "gemma2": (50.0, 30.0),
    "gemma3_text": (None, None),
}


def _moe_block(t: Tensors, b: str, moe: str, n_experts: int, h: int, f: int, shared_f: int) -> None:
    """One sparse MoE MLP in the fused-experts layout of transformers >= 5."""
    if moe != "qwen3_moe":
        t.add(f"{b}gate.weight", (n_experts, h), "router")
    t.add(f"{b}experts.gate_up_proj", (n_experts, 2 * f, h), "expert")  # (E, 2f, h)
    t.add(f"{b}experts.down_proj", (n_experts, h, f), "expert")  # (E, h, f)
    if moe == "qwen3_moe":
        t.add(f"{b}gate.weight", (n_experts, h), "router")
    if moe == "qwen2_moe":
        t.linear(f"{b}shared_expert.gate_proj", shared_f, h)
        t.linear(f"{b}shared_expert.up_proj", shared_f, h)
        t.linear(f"{b}shared_expert.down_proj", h, shared_f)
        t.linear(f"{b}shared_expert_gate", 1, h, role="router")


_QWEN = ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe")

#: The causal LMs whose forward upcast all its logits to fp32 (``logits = logits.float()`` after the
#: lm_head) in transformers 4.35 - 4.44 (LlamaForCausalLM already in the 4.32.0 wheel): LlamaForCausalLM and the classes copied from it (Mistral,
#: Mixtral, Qwen2, Gemma); transformers #31292 (4.45) upcasts only when labels are given (issue #30860)
LEGACY_LOGITS_FP32 = ("llama", "mistral", "mixtral", "qwen2", "gemma")


def _sliding_window(r: ConfigReader) -> int | None:
    """The attention window, None for full attention.

    Qwen2/Qwen3 configs carry a ``sliding_window`` that only applies when
    ``use_sliding_window`` is true (configuration_qwen2.py); Gemma 2 applies it to every
    other layer; Mistral v0.1 and Phi-3 to all layers.
    """
    if r.model_type in _QWEN and not r.get_bool("use_sliding_window", False):
        return None
    if r.model_type in ("llama", "gemma", "olmo2"):
        return None
    return r.opt_int("sliding_window")


def _sliding_layer_ids(r: ConfigReader, L: int) -> tuple[int, ...]:
    """The blocks that attend over the window, as each config class's ``__post_init__`` lays them out.

    ``layer_types`` when the config gives it; else Gemma 2 slides every other block
    (``(i + 1) % 2``, configuration_gemma2.py), Gemma 3 all but every ``sliding_window_pattern``-th
    (default 6, configuration_gemma3.py), Qwen2/Qwen3 the blocks from ``max_window_layers`` on
    (configuration_qwen2.py); a model with one window and no layout (Mistral v0.1, Phi-3) slides
    every block (cache_utils.get_layer_types_and_kwargs).
    """
    types = r.raw.get("layer_types")
    if isinstance(types, list) and types:
        if len(types) < L or not all(isinstance(x, str) for x in types):
            r.problem(f"layer_types has {len(types)} entries for num_hidden_layers={L}: give one type per layer")
            return ()
        return tuple(i for i in range(L) if "sliding" in types[i])
    mt = r.model_type
    if mt == "gemma2":
        return tuple(i for i in range(L) if (i + 1) % 2)
    if mt == "gemma3_text" or (r.has("sliding_window_pattern") and mt not in _QWEN):
        pattern = r.get_int("sliding_window_pattern", POST_INIT_DEFAULTS[("gemma3_text", "sliding_window_pattern")])
        return tuple(i for i in range(L) if (i + 1) % pattern)
    if mt in ("qwen2", "qwen3"):
        first = r.get_int("max_window_layers", minimum=0)
        return tuple(range(min(first, L), L))
    if mt == "qwen2_moe":  # configuration_qwen2_moe.py: odd-numbered blocks below max_window_layers
        last = r.get_int("max_window_layers", minimum=0)
        return tuple(i for i in range(min(last, L)) if (i + 1) % 2)
    return tuple(range(L))  # qwen3_moe has no layout: its one window applies to every block
