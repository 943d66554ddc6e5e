"""The facts the decoder families set on ModelSpec (windows, norms, MLA, MoE layout), from config.json fields."""

from __future__ import annotations

import pytest

from vramlens.errors import ModelSourceError
from vramlens.models import load_model, spec_from_config
from vramlens.models.spec import MLA

_SMALL = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4, vocab_size=100)


def _spec(model_type: str, **kw):
    return spec_from_config({"model_type": model_type, **_SMALL, **kw})


def test_gemma3_local_and_global_layers():
    # gemma-3-1b-it: 26 blocks, sliding_window_pattern 6: blocks 5, 11, 17, 23 are global
    g = load_model("gemma-3-1b-it")
    assert g.sliding_window == 512 and g.n_sliding_layers == 26 - 4
    assert set(range(26)) - set(g.sliding_layer_ids) == {5, 11, 17, 23}
    assert (g.norm_placement, g.qk_norm, g.norm_weight_fp32, g.rotary_tables) == ("sandwich", "head", True, 2)
    # the multimodal checkpoints' text_config omits the pattern: the class default, 6
    g4 = load_model("gemma-3-4b-it")
    assert (g4.n_decoder_layers, g4.n_sliding_layers, g4.sliding_window) == (34, 34 - 5, 1024)
    assert g4.architecture == "Gemma3ForCausalLM" and g4.config["model_type"] == "gemma3_text"
    assert g4.vocab_size == 262_208  # Gemma3TextConfig's default: the text_config does not say
    assert any("vision tower" in a for a in g4.assumed)


def test_window_layouts_of_the_config_classes():
    assert _spec("gemma3_text", layer_types=["sliding_attention", "full_attention"] * 2).sliding_layer_ids == (0, 2)
    assert _spec("gemma3_text", sliding_window_pattern=2).sliding_layer_ids == (0, 2)
    assert _spec("gemma2").sliding_layer_ids == (0, 2)  # (i + 1) % 2: even blocks slide
    assert _spec("mistral", num_key_value_heads=2, sliding_window=16).sliding_layer_ids == (0, 1, 2, 3)
    assert _spec("mistral", num_key_value_heads=2, sliding_window=None).n_sliding_layers == 0
    # Qwen2: the window only with use_sliding_window, and only from max_window_layers on
    assert _spec("qwen2", num_key_value_heads=2, sliding_window=16).n_sliding_layers == 0
    assert _spec("qwen2", num_key_value_heads=2, sliding_window=16, use_sliding_window=True,
                 max_window_layers=1).sliding_layer_ids == (1, 2, 3)
    assert load_model("mistral-7b-v0.1").n_sliding_layers == 32


def test_layer_types_must_cover_every_block():
    with pytest.raises(ModelSourceError) as e:
        _spec("gemma3_text", layer_types=["sliding_attention"])
    assert "layer_types has 1 entries for num_hidden_layers=4: give one type per layer" in str(e.value)


def test_olmo2_post_norms_and_full_width_qk_norm():
    o = load_model("olmo-2-1124-13b")
    assert (o.norm_placement, o.qk_norm, o.norm_weight_fp32) == ("post", "full", True)
    names = {t.name for t in o.tensors if t.layer == 0}
    assert "model.layers.0.input_layernorm.weight" not in names
    q_norm = next(t for t in o.tensors if t.name == "model.layers.0.self_attn.q_norm.weight")
    assert q_norm.shape == (40 * 128,)


def test_deepseek_v3_facts():
    d = load_model("deepseek-v3")
    assert d.mla == MLA(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)
    assert d.kv_latent == 576  # kv_lora_rank + qk_rope_head_dim per token and layer
    assert (d.head_dim, d.rotary_dim, d.n_experts, d.experts_per_token) == (192, 64, 256, 8)
    assert d.dense_layer_ids == (0, 1, 2) and d.dense_ffn_size == 18_432
    assert (d.ffn_size, d.shared_expert_ffn, d.router) == (2048, 2048, "sigmoid_grouped")
    lite = load_model("deepseek-v2-lite")
    assert lite.mla is not None and lite.mla.q_lora_rank is None and lite.router == "softmax_fp32"
    assert lite.dense_layer_ids == (0,) and lite.shared_expert_ffn == 2 * 1408
    # the full V2 compresses the query too (q_lora_rank 1536), where Lite projects it directly
    v2 = load_model("deepseek-v2")
    assert v2.mla == MLA(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)
    assert (v2.n_experts, v2.experts_per_token, v2.dense_layer_ids, v2.dense_ffn_size) == (160, 6, (0,), 12_288)
    assert (v2.ffn_size, v2.shared_expert_ffn, v2.router) == (1536, 2 * 1536, "softmax_fp32")


def test_deepseek_config_problems_are_named():
    with pytest.raises(ModelSourceError) as e:
        spec_from_config({"model_type": "deepseek_v2", **_SMALL, "moe_intermediate_size": 8, "kv_lora_rank": 8,
                          "qk_nope_head_dim": 8, "qk_rope_head_dim": 7, "v_head_dim": 8, "n_routed_experts": 4})
    msg = str(e.value)
    assert "qk_rope_head_dim=7 must be even" in msg
    assert "missing field 'num_experts_per_tok' (deepseek configs need it)" in msg


def test_qwen2_moe_shared_expert_and_dense_layers():
    q = load_model("qwen1.5-moe-a2.7b")
    assert q.shared_expert_ffn == 5632 and q.dense_layer_ids == ()
