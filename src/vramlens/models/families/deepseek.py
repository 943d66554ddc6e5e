"""DeepSeek V2 and V3 (and R1, which is V3's architecture): multi-head latent attention and MoE.

Module layouts from ``transformers/models/deepseek_v3/modeling_deepseek_v3.py`` and
``deepseek_v2/modeling_deepseek_v2.py`` (transformers 5.x):

- attention (``DeepseekV3Attention``, MLA): ``q_proj`` (h -> a*(nope+rope)) when
  ``q_lora_rank`` is null (V2-Lite), else ``q_a_proj`` (h -> q_lora_rank, bias
  ``attention_bias``), ``q_a_layernorm`` and ``q_b_proj`` (q_lora_rank -> a*(nope+rope));
  ``kv_a_proj_with_mqa`` (h -> kv_lora_rank + rope, bias ``attention_bias``),
  ``kv_a_layernorm`` (kv_lora_rank), ``kv_b_proj`` (kv_lora_rank -> a*(nope+v)); ``o_proj``
  (a*v -> h, bias ``attention_bias``).
- MLP: blocks below ``first_k_dense_replace`` are dense (``intermediate_size``; V2 adds
  ``mlp_bias``); the others are MoE: fused ``experts.gate_up_proj`` (E, 2f, h) and
  ``experts.down_proj`` (E, h, f), the router ``gate.weight`` (E, h) kept in fp32
  (``_keep_in_fp32_modules_strict``), V3's ``gate.e_score_correction_bias`` buffer (E,), and
  ``shared_experts`` gate/up/down of width ``n_shared_experts * moe_intermediate_size``.
- the rotary embedding rotates ``qk_rope_head_dim`` (the config's ``head_dim`` after
  ``__post_init__``).
- V3's multi-token-prediction module (``num_nextn_predict_layers``, checkpoint layer 61) is
  not built by transformers (``_keys_to_ignore_on_load_unexpected``), so it is not counted:
  DeepSeek-V3 has 671,026,404,352 parameters without it.
"""

from __future__ import annotations

from vramlens.models._reader import ConfigReader
from vramlens.models._tensors import Tensors, head_kind
from vramlens.models.families._common import Built, decoder_head, decoder_prefix, torch_dtype
from vramlens.models.spec import MLA

MODEL_TYPES = ("deepseek_v2", "deepseek_v3")


def build_deepseek(r: ConfigReader, architecture: str) -> Built:
    """Inventory and facts of DeepSeek V2 / V3 (``DeepseekV2ForCausalLM``, ``DeepseekV3ForCausalLM``)."""
    v3 = r.model_type == "deepseek_v3"
    h = r.get_int("hidden_size")
    L = r.get_int("num_hidden_layers")
    a = r.get_int("num_attention_heads")
    V = r.get_int("vocab_size")
    f_dense = r.get_int("intermediate_size")
    f = r.get_int("moe_intermediate_size")
    n_kv = r.opt_int("num_key_value_heads") or a
    r.divisible("num_attention_heads", a, "num_key_value_heads", n_kv)
    q_lora = r.opt_int("q_lora_rank")
    kv_lora = r.get_int("kv_lora_rank")
    nope = r.get_int("qk_nope_head_dim")
    rope = r.get_int("qk_rope_head_dim")
    v_dim = r.get_int("v_head_dim")
    if rope % 2:
        r.problem(f"qk_rope_head_dim={rope} must be even: the rotary embedding rotates pairs")
    E = r.get_int("n_routed_experts")
    top_k = r.opt_int("num_experts_per_tok")
    if top_k is None:
        r.problem("missing field 'num_experts_per_tok' (deepseek configs need it)")
        top_k = 1
    elif top_k > E:
        r.problem(f"num_experts_per_tok={top_k} is more than the {E} experts: fix the config")
    n_shared = r.get_int("n_shared_experts", 0, minimum=0)
    k_dense = r.get_int("first_k_dense_replace", minimum=0)
    groups = r.opt_int("n_group")
    if v3 or r.get_str("topk_method", "greedy") == "group_limited_greedy":
        if groups:
            r.divisible("n_routed_experts", E, "n_group", groups, "the router splits the experts into n_group groups")
    attn_bias = r.get_bool("attention_bias")
    mlp_bias = False if v3 else r.get_bool("mlp_bias")
    tied = r.get_bool("tie_word_embeddings")
    max_pos = r.get_int("max_position_embeddings")
    act = r.get_str("hidden_act")
    dtype = torch_dtype(r)
    r.check()

    head = head_kind(architecture)
    p = decoder_prefix(head, "model.")
    qk = nope + rope
    t = Tensors()
    t.embedding(f"{p}embed_tokens", V, h)
    dense = tuple(i for i in range(min(k_dense, L)))
    for i in range(L):
        b = f"{p}layers.{i}."
        s = f"{b}self_attn."
        if q_lora is None:
            t.linear(f"{s}q_proj", a * qk, h)
        else:
            t.linear(f"{s}q_a_proj", q_lora, h, attn_bias)
            t.norm(f"{s}q_a_layernorm", q_lora, bias=False)
            t.linear(f"{s}q_b_proj", a * qk, q_lora)
        t.linear(f"{s}kv_a_proj_with_mqa", kv_lora + rope, h, attn_bias)
        t.norm(f"{s}kv_a_layernorm", kv_lora, bias=False)
        t.linear(f"{s}kv_b_proj", a * (nope + v_dim), kv_lora)
        t.linear(f"{s}o_proj", h, a * v_dim, attn_bias)
        m = f"{b}mlp."
        if i in dense:
            _gated(t, m, h, f_dense, mlp_bias)
        else:
            t.add(f"{m}experts.gate_up_proj", (E, 2 * f, h), "expert")  # (E, 2f, h)
            t.add(f"{m}experts.down_proj", (E, h, f), "expert")  # (E, h, f)
            t.add(f"{m}gate.weight", (E, h), "router")
            if v3:
                t.buffer(f"{m}gate.e_score_correction_bias", (E,))
            _gated(t, f"{m}shared_experts.", h, n_shared * f, mlp_bias)
        t.norm(f"{b}input_layernorm", h, bias=False)
        t.norm(f"{b}post_attention_layernorm", h, bias=False)
    t.norm(f"{p}norm", h, bias=False)
    t.rotary(f"{p}rotary_emb.", rope)
    decoder_head(t, r, head, architecture, h, V, tied)

    facts = dict(
        kind="decoder", hidden_size=h, n_heads=a, n_kv_heads=n_kv, head_dim=qk, ffn_size=f, vocab_size=V,
        n_decoder_layers=L, max_position=max_pos, activation=act, gated_mlp=True, norm="rmsnorm",
        position="rotary", tied_embeddings=tied, n_experts=E, experts_per_token=top_k, torch_dtype=dtype,
        mla=MLA(q_lora_rank=q_lora, kv_lora_rank=kv_lora, qk_nope_head_dim=nope, qk_rope_head_dim=rope,
                v_head_dim=v_dim),
        rotary_dim=rope, dense_layer_ids=dense, dense_ffn_size=f_dense, shared_expert_ffn=n_shared * f,
        router="sigmoid_grouped" if v3 else "softmax_fp32", softmax_fp32=True,
    )
    return Built(facts, t.items)


def _gated(t: Tensors, prefix: str, h: int, f: int, bias: bool) -> None:
    t.linear(f"{prefix}gate_proj", f, h, bias)
    t.linear(f"{prefix}up_proj", f, h, bias)
    t.linear(f"{prefix}down_proj", h, f, bias)


BUILDERS = {mt: build_deepseek for mt in MODEL_TYPES}
