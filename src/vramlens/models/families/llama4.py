"""Llama 4 (meta-llama/Llama-4-Scout-17B-16E, Llama-4-Maverick-17B-128E): chunked local attention with
rotary on three blocks of four, global NoPE blocks, and an MoE with a shared expert whose experts see every
token scaled by its router score.

Module layouts from ``transformers/models/llama4/modeling_llama4.py`` and ``configuration_llama4.py``
(transformers 5.24):

- the checkpoints are multimodal (``Llama4ForConditionalGeneration``: a 34-layer vision tower, its
  ``vision_adapter``, ``multi_modal_projector`` and the text model under ``language_model``). vramlens
  models the text model (``Llama4ForCausalLM(Llama4TextConfig(**text_config))``, what text-only training and
  serving run); the vision tower and the projector are not counted, and ``assumed`` says so (:data:`NOTE`).
- attention (``Llama4TextAttention``): ``q_proj``/``k_proj``/``v_proj``/``o_proj`` with bias
  ``attention_bias`` (false). ``no_rope_layers[i]`` is 1 for a block with rotary and 0 for a NoPE block
  (``__post_init__``: ``int((i + 1) % no_rope_layer_interval != 0)``, interval 4: every fourth block is NoPE).
  ``layer_types`` (``__post_init__``): ``"chunked_attention"`` for the rotary blocks when ``attention_chunk_size``
  is set, else ``"full_attention"``. A chunked block's mask (masking_utils.create_chunked_causal_mask) lets a
  token see the tokens of its own chunk of ``attention_chunk_size`` only, and transformers' caches keep at most a
  chunk for it (cache_utils: ``"chunked_attention": DynamicSlidingWindowLayer`` with
  ``sliding_window=attention_chunk_size``, "sliding and chunked are the same [...] only the mask differs").
  vramlens carries the chunked blocks as ``sliding_layer_ids`` with ``sliding_window`` = the chunk (the cache and
  the SDPA mask are the same) and ``local_attention="chunked"``.
- ``use_qk_norm``: ``Llama4TextL2Norm`` (no weight: ``x.float() * rsqrt(mean(x^2) + eps)``, cast back) on q and
  k after the rotation, rotary blocks only (``qk_norm="l2"``); Maverick's config sets it false.
- ``attn_temperature_tuning`` on NoPE blocks: the query is multiplied by an fp32 (1, s, 1, 1) scale and cast
  back (``nope_layer_ids``).
- rotary (``Llama4TextRotaryEmbedding``): a complex64 ``freqs_cis`` (b, s, d/2) and ``apply_rotary_emb`` on fp32
  copies of q and k (``view_as_complex(xq.float()...)``), cast back (``type_as``); buffers ``inv_freq`` and
  ``original_inv_freq`` (d/2).
- MLP: blocks in ``moe_layers`` (default ``range(interleave_moe_layer_step - 1, L, step)``: every block for
  Scout, every second for Maverick) are ``Llama4TextMoe``: ``experts.gate_up_proj`` (E, h, 2f) and
  ``experts.down_proj`` (E, f, h) (stored (in, out): ``bmm(x, w)``), ``router`` (``Llama4Router``, an
  ``nn.Linear(h, E)`` without bias) and ``shared_expert`` (a gated MLP of ``intermediate_size``); the others are a
  ``Llama4TextMLP`` of ``intermediate_size_mlp``. ``named_parameters`` order: experts, router, shared_expert.
- ``Llama4Router``: top-k of the logits, the others -inf, ``sigmoid(scores.float())`` cast back: (t, E) scores,
  0 outside the top-k. ``Llama4TextMoe.forward`` repeats the tokens once per expert
  (``hidden_states.repeat(E, 1)``), scales them by their scores and runs every expert on every token
  (``torch.bmm`` over (E, t, h)): ``experts_see_all_tokens``.
- eager attention takes the softmax in the scores' dtype (no fp32 upcast: "llama4 doesn't cast attn weights to
  fp32"); ``_supports_flash_attn = False``, SDPA and flex are supported.
- ``Llama4ForCausalLM``: ``model.`` and ``lm_head``; ``tie_word_embeddings`` false in both checkpoints.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vramlens.errors import ModelSourceError
from vramlens.models._reader import ConfigReader
from vramlens.models._tensors import Tensors, head_kind, layer_index, leaf_module
from vramlens.models.families._common import (
    Built,
    decoder_head,
    decoder_prefix,
    kv_heads_and_head_dim,
    torch_dtype,
)
from vramlens.models.spec import TensorInfo

MODEL_TYPES = ("llama4_text",)

NOTE = ("llama4: the text model only (Llama4ForCausalLM over text_config); the vision tower (34 layers of 1408), "
        "its vision_adapter and the multi_modal_projector are not counted")

#: What the text model takes from the outer config when ``text_config`` does not set it.
_INHERITED = ("tie_word_embeddings", "torch_dtype", "dtype", "_name_or_path")


def build_llama4(r: ConfigReader, architecture: str) -> Built:
    """Inventory and facts of Llama 4's text model (``Llama4ForCausalLM``)."""
    h = r.get_int("hidden_size")
    L = r.get_int("num_hidden_layers")
    a = r.get_int("num_attention_heads")
    V = r.get_int("vocab_size")
    f = r.get_int("intermediate_size")
    f_mlp = r.get_int("intermediate_size_mlp")
    n_kv, d = kv_heads_and_head_dim(r, a, h)
    if d % 2:
        r.problem(f"head_dim={d} must be even: the rotary embedding rotates pairs")
    E = r.get_int("num_local_experts")
    top_k = r.get_int("num_experts_per_tok")
    if top_k > E:
        r.problem(f"num_experts_per_tok={top_k} is more than the {E} experts: fix the config")
    bias = r.get_bool("attention_bias")
    tied = r.get_bool("tie_word_embeddings")
    max_pos = r.get_int("max_position_embeddings")
    chunk = r.opt_int("attention_chunk_size")
    qk_norm = r.get_bool("use_qk_norm")
    tuning = bool(r.raw.get("attn_temperature_tuning", True))
    act = r.get_str("hidden_act")
    dtype = torch_dtype(r)
    rope = _rope_layers(r, L)
    moe = _moe_layers(r, L)
    r.check()

    head = head_kind(architecture)
    p = decoder_prefix(head, "model.")
    t = Tensors()
    t.embedding(f"{p}embed_tokens", V, h)
    for i in range(L):
        b = f"{p}layers.{i}."
        s = f"{b}self_attn."
        t.linear(f"{s}q_proj", a * d, h, bias)
        t.linear(f"{s}k_proj", n_kv * d, h, bias)
        t.linear(f"{s}v_proj", n_kv * d, h, bias)
        t.linear(f"{s}o_proj", h, a * d, bias)
        m = f"{b}feed_forward."
        if i in moe:
            # stored (E, in, out) for torch.bmm: logical_shape gives the (E, out, in) the estimator reads
            _expert(t, f"{m}experts.gate_up_proj", (E, h, 2 * f), (E, 2 * f, h))
            _expert(t, f"{m}experts.down_proj", (E, f, h), (E, h, f))
            t.linear(f"{m}router", E, h, role="router")
            _gated(t, f"{m}shared_expert.", h, f)
        else:
            _gated(t, m, h, f_mlp)
        t.norm(f"{b}input_layernorm", h, bias=False)
        t.norm(f"{b}post_attention_layernorm", h, bias=False)
    t.norm(f"{p}norm", h, bias=False)
    t.rotary(f"{p}rotary_emb.", d)
    decoder_head(t, r, head, architecture, h, V, tied)

    chunked = tuple(i for i in range(L) if rope[i]) if chunk else ()
    nope = tuple(i for i in range(L) if not rope[i])
    facts = dict(
        kind="decoder", hidden_size=h, n_heads=a, n_kv_heads=n_kv, head_dim=d, ffn_size=f, vocab_size=V,
        n_decoder_layers=L, max_position=max_pos, activation=act, gated_mlp=True, norm="rmsnorm",
        position="rotary", tied_embeddings=tied, n_experts=E, experts_per_token=top_k, torch_dtype=dtype,
        # chunked blocks: transformers' caches keep them as sliding layers of attention_chunk_size
        sliding_window=chunk, sliding_layer_ids=chunked, local_attention="chunked",
        nope_layer_ids=nope, attention_temperature=tuning,
        # Llama4TextL2Norm on the rotary blocks' q and k (no weight)
        qk_norm="l2" if qk_norm else "none",
        # eager_attention_forward: ``softmax(attn_weights, dim=-1)`` in the scores' dtype
        softmax_fp32=False,
        # Llama4TextRotaryEmbedding: one complex64 freqs_cis (1, s, d/2), 8 bytes an entry: the bytes of
        # fp32 cos and sin d/2 wide; apply_rotary_emb rotates fp32 complex copies of q and k
        rotary_tables_fp32=True, rotary_dim=d // 2, rotary_complex=True,
        dense_layer_ids=tuple(i for i in range(L) if i not in moe), dense_ffn_size=f_mlp, shared_expert_ffn=f,
        router="sigmoid_topk", experts_see_all_tokens=True,
        # SGLang model_config.py is_hybrid_swa_model lists Llama4ForConditionalGeneration (chunked layers as SWA)
        hybrid_swa_pool=chunk is not None,
    )
    return Built(facts, t.items)


def _gated(t: Tensors, prefix: str, h: int, f: int) -> None:
    t.linear(f"{prefix}gate_proj", f, h)
    t.linear(f"{prefix}up_proj", f, h)
    t.linear(f"{prefix}down_proj", h, f)


def _expert(t: Tensors, name: str, shape: tuple[int, int, int], logical: tuple[int, int, int]) -> None:
    t.items.append(TensorInfo(name=name, shape=shape, role="expert", module=leaf_module(name),
                              layer=layer_index(name), logical_shape=logical))


def _rope_layers(r: ConfigReader, L: int) -> list[int]:
    """``no_rope_layers`` (1: rotary, 0: NoPE), else every ``no_rope_layer_interval``-th block NoPE
    (configuration_llama4.py ``__post_init__``; an empty list counts as absent there too)."""
    given = r.raw.get("no_rope_layers")
    if isinstance(given, list) and given:
        if len(given) < L or not all(v in (0, 1) for v in given):
            r.problem(f"no_rope_layers={given!r} must list 0 or 1 for each of the {L} layers")
            return [1] * L
        return [int(v) for v in given[:L]]
    n = r.get_int("no_rope_layer_interval", 4)
    return [int((i + 1) % n != 0) for i in range(L)]


def _moe_layers(r: ConfigReader, L: int) -> set[int]:
    """``moe_layers``, else ``range(interleave_moe_layer_step - 1, L, step)`` (``__post_init__``)."""
    if r.raw.get("moe_layers") is not None:
        return {i for i in r.list_int("moe_layers") if i < L}
    step = r.get_int("interleave_moe_layer_step", 1)
    return set(range(step - 1, L, step))


def text_model(config: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The ``llama4_text`` config of a ``llama4`` checkpoint's language model.

    Raises:
        ModelSourceError: ``text_config`` is missing or not a JSON object.
    """
    text = config.get("text_config")
    if not isinstance(text, dict):
        raise ModelSourceError(f"{where}: a llama4 config needs its language model under \"text_config\" "
                               f"(a JSON object), not {text!r}")
    out = {k: v for k, v in text.items() if k not in ("architectures",)}
    out["model_type"] = "llama4_text"
    out["architectures"] = ["Llama4ForCausalLM"]
    for key in _INHERITED:
        if key not in out and key in config:
            out[key] = config[key]
    return out


BUILDERS = {mt: build_llama4 for mt in MODEL_TYPES}

#: model_type -> the function that reads the config of the part vramlens models.
UNWRAP = {"llama4": text_model}
