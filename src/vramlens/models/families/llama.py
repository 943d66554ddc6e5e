"""Llama-style decoders: pre-norm RMSNorm blocks, rotary positions, gated (SwiGLU/GeGLU) MLP.

Covers llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, phi3, gemma, gemma2,
and the generic fallback for unknown model types. The differences between them are
traits (biases, fused projections, extra norms, MoE layout), each read from
``transformers/models/<type>/modeling_<type>.py`` (transformers 5.x):

- llama: ``attention_bias`` on q/k/v/o, ``mlp_bias`` on the MLP.
- qwen2: bias on q/k/v only (``bias=True`` hard-coded); qwen2_moe the same via ``qkv_bias``.
- qwen3(_moe): ``attention_bias`` on q/k/v/o, plus per-head RMSNorms ``q_norm``/``k_norm``.
- gemma(2): ``head_dim`` independent of hidden_size / heads, a scaled embedding with an
  ``embed_scale`` buffer; gemma2 adds ``pre_``/``post_feedforward_layernorm``.
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
    qk_norm: bool
    embed_scale: bool
    sandwich: bool
    fused: bool


#: Per model_type: which config flag (or constant) gives the q/k/v and o biases, and the
#: structural traits. ``None`` for a flag means "no bias".
_TRAITS: dict[str, _Traits] = {
    "llama": {"qkv_bias": "attention_bias", "o_bias": "attention_bias", "mlp_bias": "mlp_bias"},
    "mistral": {},
    "mixtral": {"moe": "mixtral"},
    "qwen2": {"qkv_bias": True},
    "qwen2_moe": {"qkv_bias": "qkv_bias", "moe": "qwen2_moe"},
    "qwen3": {"qkv_bias": "attention_bias", "o_bias": "attention_bias", "qk_norm": True},
    "qwen3_moe": {"qkv_bias": "attention_bias", "o_bias": "attention_bias", "qk_norm": True,
                  "moe": "qwen3_moe"},
    "gemma": {"qkv_bias": "attention_bias", "o_bias": "attention_bias", "embed_scale": True},
    "gemma2": {"qkv_bias": "attention_bias", "o_bias": "attention_bias", "embed_scale": True,
               "sandwich": True},
    "phi3": {"fused": True},
}
_GENERIC: _Traits = {"qkv_bias": "attention_bias", "o_bias": "attention_bias", "mlp_bias": "mlp_bias"}

MODEL_TYPES = tuple(_TRAITS)


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
    act_key = "hidden_activation" if mt == "gemma2" else "hidden_act"
    activation = r.get_str(act_key, "silu")
    max_pos = r.get_int("max_position_embeddings", 2048)
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
        if traits.get("qk_norm"):
            t.norm(f"{b}self_attn.q_norm", d, bias=False)
            t.norm(f"{b}self_attn.k_norm", d, bias=False)
        if i in sparse_layers:
            _moe_block(t, f"{b}mlp.", moe, n_experts, h, moe_f, shared_f)
        elif traits.get("fused"):
            t.linear(f"{b}mlp.gate_up_proj", 2 * f, h)
            t.linear(f"{b}mlp.down_proj", h, f)
        else:
            t.linear(f"{b}mlp.gate_proj", f, h, mlp_bias)
            t.linear(f"{b}mlp.up_proj", f, h, mlp_bias)
            t.linear(f"{b}mlp.down_proj", h, f, mlp_bias)
        t.norm(f"{b}input_layernorm", h, bias=False)
        t.norm(f"{b}post_attention_layernorm", h, bias=False)
        if traits.get("sandwich"):
            t.norm(f"{b}pre_feedforward_layernorm", h, bias=False)
            t.norm(f"{b}post_feedforward_layernorm", h, bias=False)
    t.norm(f"{p}norm", h, bias=False)
    t.rotary(f"{p}rotary_emb.", d, partial)
    decoder_head(t, r, head, architecture, h, V, tied)

    facts = dict(
        kind="decoder", hidden_size=h, n_heads=a, n_kv_heads=n_kv, head_dim=d,
        ffn_size=moe_f if moe else f, vocab_size=V, n_decoder_layers=L, max_position=max_pos,
        activation=activation, gated_mlp=True, norm="rmsnorm", position="rotary",
        tied_embeddings=tied, n_experts=n_experts, experts_per_token=top_k,
        sliding_window=window, torch_dtype=dtype,
    )
    return Built(facts, t.items)


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


def _sliding_window(r: ConfigReader) -> int | None:
    """The attention window, None for full attention.

    Qwen2/Qwen3 configs carry a ``sliding_window`` that only applies when
    ``use_sliding_window`` is true (configuration_qwen2.py); Gemma 2 applies it to every
    other layer; Mistral v0.1 and Phi-3 to all layers.
    """
    if r.model_type in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe") and not r.get_bool("use_sliding_window", False):
        return None
    if r.model_type in ("llama", "gemma"):
        return None
    return r.opt_int("sliding_window")
