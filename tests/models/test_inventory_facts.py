"""Architecture facts, roles and module names of built specs, and config errors."""

from __future__ import annotations

import pytest

from vramlens.errors import ModelSourceError
from vramlens.models import load_model, spec_from_config

TINY_LLAMA = dict(
    model_type="llama", architectures=["LlamaForCausalLM"], hidden_size=64, intermediate_size=96,
    num_hidden_layers=2, num_attention_heads=4, vocab_size=100,
)


def _facts(name):
    s = load_model(name)
    return (s.kind, s.hidden_size, s.n_heads, s.n_kv_heads, s.head_dim, s.ffn_size, s.vocab_size,
            s.n_encoder_layers, s.n_decoder_layers, s.max_position, s.activation, s.gated_mlp, s.norm,
            s.position, s.tied_embeddings, s.n_experts, s.experts_per_token, s.sliding_window, s.torch_dtype)


@pytest.mark.parametrize("name,facts", [
    ("llama-3.1-8b", ("decoder", 4096, 32, 8, 128, 14_336, 128_256, 0, 32, 131_072, "silu", True, "rmsnorm",
                      "rotary", False, 0, 0, None, "bf16")),
    ("llama-3.2-1b", ("decoder", 2048, 32, 8, 64, 8192, 128_256, 0, 16, 131_072, "silu", True, "rmsnorm",
                      "rotary", True, 0, 0, None, "bf16")),
    ("mixtral-8x7b", ("decoder", 4096, 32, 8, 128, 14_336, 32_000, 0, 32, 32_768, "silu", True, "rmsnorm",
                      "rotary", False, 8, 2, None, "bf16")),
    ("qwen1.5-moe-a2.7b", ("decoder", 2048, 16, 16, 128, 1408, 151_936, 0, 24, 8192, "silu", True, "rmsnorm",
                           "rotary", False, 60, 4, None, "bf16")),
    ("mistral-7b", ("decoder", 4096, 32, 8, 128, 14_336, 32_000, 0, 32, 32_768, "silu", True, "rmsnorm",
                    "rotary", False, 0, 0, 4096, "bf16")),
    ("qwen2.5-7b", ("decoder", 3584, 28, 4, 128, 18_944, 152_064, 0, 28, 131_072, "silu", True, "rmsnorm",
                    "rotary", False, 0, 0, None, "bf16")),
    ("gemma-2-9b", ("decoder", 3584, 16, 8, 256, 14_336, 256_000, 0, 42, 8192, "gelu_pytorch_tanh", True,
                    "rmsnorm", "rotary", True, 0, 0, 4096, "fp32")),
    ("phi-3-mini", ("decoder", 3072, 32, 32, 96, 8192, 32_064, 0, 32, 4096, "silu", True, "rmsnorm",
                    "rotary", False, 0, 0, 2047, "bf16")),
    ("phi-2", ("decoder", 2560, 32, 32, 80, 10_240, 51_200, 0, 32, 2048, "gelu_new", False, "layernorm",
               "rotary", False, 0, 0, None, "fp16")),
    ("gpt2", ("decoder", 768, 12, 12, 64, 3072, 50_257, 0, 12, 1024, "gelu_new", False, "layernorm",
              "learned", True, 0, 0, None, None)),
    ("starcoder", ("decoder", 6144, 48, 1, 128, 24_576, 49_152, 0, 40, 8192, "gelu_pytorch_tanh", False,
                   "layernorm", "learned", True, 0, 0, None, "fp32")),
    ("falcon-7b", ("decoder", 4544, 71, 1, 64, 18_176, 65_024, 0, 32, 2048, "gelu", False, "layernorm",
                   "rotary", True, 0, 0, None, "bf16")),
    ("falcon-40b", ("decoder", 8192, 128, 8, 64, 32_768, 65_024, 0, 60, 2048, "gelu", False, "layernorm",
                    "rotary", True, 0, 0, None, "bf16")),
    ("bloom-560m", ("decoder", 1024, 16, 16, 64, 4096, 250_880, 0, 24, 2048, "gelu", False, "layernorm",
                    "alibi", True, 0, 0, None, None)),
    ("opt-350m", ("decoder", 1024, 16, 16, 64, 4096, 50_272, 0, 24, 2048, "relu", False, "layernorm",
                  "learned", True, 0, 0, None, "fp16")),
    ("bert-base-uncased", ("encoder", 768, 12, 12, 64, 3072, 30_522, 12, 0, 512, "gelu", False, "layernorm",
                           "learned", True, 0, 0, None, None)),
    ("roberta-base", ("encoder", 768, 12, 12, 64, 3072, 50_265, 12, 0, 512, "gelu", False, "layernorm",
                      "learned", True, 0, 0, None, None)),
    ("t5-small", ("encoder-decoder", 512, 8, 8, 64, 2048, 32_128, 6, 6, 512, "relu", False, "rmsnorm",
                  "relative", True, 0, 0, None, None)),
    ("t0_3b", ("encoder-decoder", 2048, 32, 32, 64, 5120, 32_128, 24, 24, 512, "gelu_new", True, "rmsnorm",
               "relative", True, 0, 0, None, "fp32")),
    # Llama 4: the text model; sliding_window is the attention chunk (the chunked layers cache like sliding ones)
    ("llama-4-scout", ("decoder", 5120, 40, 8, 128, 8192, 202_048, 0, 48, 262_144, "silu", True, "rmsnorm",
                       "rotary", False, 16, 1, 8192, "bf16")),
    ("llama-4-maverick", ("decoder", 5120, 40, 8, 128, 8192, 202_048, 0, 48, 1_048_576, "silu", True, "rmsnorm",
                          "rotary", False, 128, 1, 8192, "bf16")),
])
def test_architecture_facts(name, facts):
    assert _facts(name) == facts


def _by_name(spec):
    return {t.name: t for t in spec.tensors}


def test_roles_modules_and_layers_llama():
    t = _by_name(load_model("llama-2-7b"))
    q = t["model.layers.3.self_attn.q_proj.weight"]
    assert (q.role, q.module, q.layer, q.shape, q.in_features, q.out_features) == (
        "linear", "q_proj", 3, (4096, 4096), 4096, 4096)
    assert (t["lm_head.weight"].role, t["lm_head.weight"].module) == ("lm_head", "lm_head")
    assert (t["model.embed_tokens.weight"].role, t["model.embed_tokens.weight"].layer) == ("embedding", None)
    assert t["model.norm.weight"].role == "norm"
    inv = t["model.rotary_emb.inv_freq"]
    assert (inv.role, inv.dtype, inv.shape) == ("buffer", None, (64,))


def test_roles_gpt2_conv1d_and_tied_head():
    t = _by_name(load_model("gpt2"))
    c = t["transformer.h.0.attn.c_attn.weight"]
    assert (c.role, c.module, c.shape, c.in_features, c.out_features) == ("conv1d", "c_attn", (768, 2304), 768, 2304)
    assert t["transformer.h.0.attn.c_attn.bias"].role == "bias"
    assert t["transformer.wpe.weight"].role == "position_embedding"
    assert "lm_head.weight" not in t  # tied: named_parameters() lists the embedding once


def test_roles_moe():
    t = _by_name(load_model("mixtral-8x7b"))
    up = t["model.layers.0.mlp.experts.gate_up_proj"]
    down = t["model.layers.0.mlp.experts.down_proj"]
    assert (up.role, up.module, up.shape) == ("expert", "experts", (8, 2 * 14_336, 4096))
    assert (down.shape, down.in_features, down.out_features) == ((8, 4096, 14_336), 14_336, 4096)
    assert (t["model.layers.0.mlp.gate.weight"].role, t["model.layers.0.mlp.gate.weight"].shape) == (
        "router", (8, 4096))


def test_t5_stacks_and_relative_bias_only_in_block_0():
    spec = load_model("t5-small")
    t = _by_name(spec)
    wi = t["encoder.block.2.layer.1.DenseReluDense.wi.weight"]
    assert (wi.stack, wi.module, wi.layer) == ("encoder", "wi", 2)
    assert t["decoder.block.0.layer.1.EncDecAttention.q.weight"].stack == "decoder"
    rel = [n for n in t if "relative_attention_bias" in n]
    assert rel == ["encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
                   "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"]
    assert t[rel[0]].role == "position_embedding"
    assert {x.stack for x in spec.tensors if x.name != "shared.weight"} == {"encoder", "decoder"}
    assert "wi_0" in {x.module for x in load_model("mt5-base").tensors}


def test_bert_modules_and_int64_buffers():
    t = _by_name(load_model("bert-base-uncased"))
    assert t["bert.encoder.layer.0.attention.self.query.weight"].module == "query"
    assert t["bert.encoder.layer.0.attention.output.dense.weight"].module == "dense"
    pos = t["bert.embeddings.position_ids"]
    assert (pos.role, pos.dtype, pos.shape) == ("buffer", "int64", (1, 512))


def test_qwen2_has_qkv_bias_but_no_o_bias():
    names = set(_by_name(load_model("qwen2.5-0.5b")))
    assert {"model.layers.0.self_attn.q_proj.bias", "model.layers.0.self_attn.k_proj.bias",
            "model.layers.0.self_attn.v_proj.bias"} <= names
    assert "model.layers.0.self_attn.o_proj.bias" not in names
    assert "lm_head.weight" not in names  # Qwen2.5-0.5B ties its embeddings


def test_opt_position_offset_and_bigcode_mask_buffer():
    t = _by_name(load_model("opt-125m"))
    assert t["model.decoder.embed_positions.weight"].shape == (2048 + 2, 768)
    mask = _by_name(load_model("starcoderbase-1b"))["transformer.bias"]
    assert (mask.role, mask.dtype, mask.shape) == ("buffer", "bool", (8192, 8192))


def test_config_is_kept_and_quantization_read():
    cfg = {**TINY_LLAMA, "quantization_config": {"quant_method": "gptq", "bits": 4}}
    spec = spec_from_config(cfg)
    assert spec.config == cfg
    assert spec.quantization == {"quant_method": "gptq", "bits": 4}
    assert spec.source == "config"
    assert spec.name == "llama"


# ---- errors --------------------------------------------------------------------------------
def test_kv_heads_must_divide_heads():
    cfg = {**TINY_LLAMA, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 5}
    with pytest.raises(ModelSourceError) as e:
        spec_from_config(cfg, where="config.json")
    assert str(e.value) == ("config.json: num_attention_heads=32 is not divisible by num_key_value_heads=5: "
                            "fix the config")


def test_all_problems_reported_at_once():
    cfg = {k: v for k, v in TINY_LLAMA.items() if k != "vocab_size"}
    cfg.update(hidden_size="64", num_hidden_layers=0)
    with pytest.raises(ModelSourceError) as e:
        spec_from_config(cfg, where="my/config.json")
    assert str(e.value) == ("my/config.json: hidden_size='64' must be an integer; num_hidden_layers=0 must be "
                            ">= 1; missing field 'vocab_size' (llama configs need it)")


def test_hidden_not_divisible_by_heads_without_head_dim():
    with pytest.raises(ModelSourceError) as e:
        spec_from_config({**TINY_LLAMA, "num_attention_heads": 5})
    assert str(e.value) == ("config: hidden_size=64 is not divisible by num_attention_heads=5: set head_dim "
                            "or fix the config")
    assert spec_from_config({**TINY_LLAMA, "num_attention_heads": 5, "head_dim": 16}).head_dim == 16


def test_bad_types_and_values():
    with pytest.raises(ModelSourceError) as e:
        spec_from_config({**TINY_LLAMA, "tie_word_embeddings": "yes", "torch_dtype": "float42"})
    assert str(e.value) == ("config: tie_word_embeddings='yes' must be true or false; "
                            "torch_dtype='float42' is not a dtype: use e.g. \"bfloat16\" or \"float16\"")
    with pytest.raises(ModelSourceError) as e:
        spec_from_config({**TINY_LLAMA, "model_type": "mixtral", "num_key_value_heads": 2, "num_local_experts": 2,
                          "num_experts_per_tok": 3})
    assert str(e.value) == "config: num_experts_per_tok=3 is more than the 2 experts: fix the config"
    with pytest.raises(ModelSourceError) as e:
        spec_from_config({"model_type": "t5", "d_model": 8, "d_ff": 8, "num_layers": 1, "num_heads": 1,
                          "vocab_size": 10, "feed_forward_proj": "gated-gelu-x"})
    assert str(e.value) == ("config: feed_forward_proj='gated-gelu-x' is not 'gated-ACT' or 'ACT': "
                            "e.g. 'relu' or 'gated-gelu'")
    with pytest.raises(ModelSourceError) as e:
        spec_from_config({**TINY_LLAMA, "architectures": "LlamaForCausalLM"})
    assert str(e.value) == ("config: architectures='LlamaForCausalLM' must be a list of class names such as "
                            "[\"LlamaForCausalLM\"]")
    with pytest.raises(ModelSourceError) as e:
        spec_from_config([1, 2])  # type: ignore[arg-type]
    assert str(e.value) == "config: a config must be a JSON object, not list"


def test_model_type_inferred_from_architectures_or_named_in_error():
    cfg = {k: v for k, v in TINY_LLAMA.items() if k != "model_type"}
    assert spec_from_config({**cfg, "architectures": ["Qwen2ForCausalLM"], "num_key_value_heads": 2}).model_type == "qwen2"
    with pytest.raises(ModelSourceError) as e:
        spec_from_config({**cfg, "architectures": ["FooForCausalLM"]})
    assert str(e.value) == ("config: missing field 'model_type' (and architectures=['FooForCausalLM'] does not "
                            "name a known class): add e.g. \"model_type\": \"llama\"")


def test_missing_architectures_uses_the_default_class():
    cfg = {k: v for k, v in TINY_LLAMA.items() if k != "architectures"}
    spec = spec_from_config(cfg)
    assert spec.architecture == "LlamaForCausalLM"
    assert spec.assumed == ("architecture=LlamaForCausalLM (config.json has no 'architectures')",)


def test_unknown_model_type_falls_back_to_a_generic_decoder():
    spec = spec_from_config({**TINY_LLAMA, "model_type": "mything", "architectures": ["MyThingForCausalLM"]})
    assert spec.params == spec_from_config(TINY_LLAMA).params
    assert spec.assumed == ("model_type 'mything' is not known to vramlens: built as a generic Llama-style "
                            "decoder (RMSNorm, rotary, gated MLP) from the standard fields",)


def test_unknown_model_type_without_standard_fields():
    with pytest.raises(ModelSourceError) as e:
        spec_from_config({"model_type": "mamba", "hidden_size": 768, "num_hidden_layers": 24, "vocab_size": 50280})
    assert str(e.value) == (
        "config: model_type 'mamba' is not supported and the config lacks num_attention_heads, intermediate_size "
        "to build it as a generic decoder: supported model types are bert, bloom, clip, clip_vision_model, deberta-v2, deepseek_v2, "
        "deepseek_v3, distilbert, electra, falcon, gemma, gemma2, gemma3, gemma3_text, gpt2, gpt_bigcode, "
        "gpt_neox, gpt_oss, llama, llama4, llama4_text, llama4_vision_model, llava, llava_next, mistral, mixtral, modernbert, mt5, olmo2, opt, phi, "
        "phi3, qwen2, qwen2_5_vl, qwen2_5_vl_vision, "
        "qwen2_moe, qwen3, "
        "qwen3_moe, roberta, siglip, siglip_vision_model, t5, vit, whisper, xlm-roberta"
    )


def test_unmodelled_head_counts_the_base_model():
    spec = spec_from_config({**TINY_LLAMA, "architectures": ["LlamaForTokenClassification"]})
    base = spec_from_config({**TINY_LLAMA, "architectures": ["LlamaForSequenceClassification"]})
    assert spec.params == base.params - 2 * 64
    assert spec.assumed == ("LlamaForTokenClassification: this head is not modelled, only the base model is counted",)


def test_cross_attention_is_refused():
    with pytest.raises(ModelSourceError) as e:
        spec_from_config({"model_type": "gpt2", "n_embd": 64, "n_layer": 1, "n_head": 4, "vocab_size": 10,
                          "add_cross_attention": True})
    assert str(e.value) == ("config: add_cross_attention=true (a decoder with cross-attention) is not supported: "
                            "use a config without it")


def test_v5_style_config_fields():
    # transformers >= 5 writes "dtype" and "rope_parameters" instead of torch_dtype / rope_theta
    cfg = {"model_type": "phi", "architectures": ["PhiForCausalLM"], "hidden_size": 64, "intermediate_size": 96,
           "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 100, "dtype": "bfloat16",
           "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default", "partial_rotary_factor": 0.25}}
    spec = spec_from_config(cfg)
    assert spec.torch_dtype == "bf16"
    assert _by_name(spec)["model.rotary_emb.inv_freq"].shape == (2,)  # int(16 * 0.25) = 4 -> 2 frequencies


def test_llama4_layer_facts():
    """configuration_llama4.py __post_init__: no_rope_layers int((i + 1) % 4 != 0) (Scout writes it out), the
    rotary blocks chunked; moe_layers every block (Scout) or range(1, 48, 2) (Maverick's interleave step 2);
    use_qk_norm true for Scout, false for Maverick; the vision tower named as not counted."""
    scout, maverick = load_model("llama-4-scout"), load_model("llama-4-maverick")
    for s in (scout, maverick):
        assert s.nope_layer_ids == tuple(range(3, 48, 4))
        assert s.sliding_layer_ids == tuple(i for i in range(48) if (i + 1) % 4)
        assert s.local_attention == "chunked" and s.hybrid_swa_pool and s.experts_see_all_tokens
        assert s.router == "sigmoid_topk" and s.shared_expert_ffn == 8192 and s.dense_ffn_size == 16_384
        assert s.architecture == "Llama4ForCausalLM" and any("vision tower" in a for a in s.assumed)
    assert scout.dense_layer_ids == () and scout.qk_norm == "l2"
    assert maverick.dense_layer_ids == tuple(range(0, 48, 2)) and maverick.qk_norm == "none"


def test_bloom_has_no_sdpa_path():
    # transformers' BloomPreTrainedModel sets no _supports_sdpa: BLOOM runs eager whatever is asked
    assert load_model("bloom-7b1").sdpa is False
    assert load_model("llama-2-7b").sdpa is True


def test_gemma2_softcaps_and_runs_eager():
    # configuration_gemma2.py: attn_logit_softcapping 50.0, final_logit_softcapping 30.0; Gemma2PreTrainedModel
    # sets _supports_sdpa = False. Gemma 3's config defaults both to None and keeps SDPA
    g2 = load_model("gemma-2-9b")
    assert (g2.attn_softcap, g2.logit_softcap, g2.sdpa) == (True, True, False)
    g3 = load_model("gemma-3-1b-it")
    assert (g3.attn_softcap, g3.logit_softcap, g3.sdpa) == (False, False, True)


def test_a_null_softcap_is_off():
    from vramlens.models import spec_from_config
    from vramlens.models.catalog import find_config

    _, cfg = find_config("gemma-2-2b")
    off = spec_from_config({**cfg, "attn_logit_softcapping": None, "final_logit_softcapping": None})
    assert (off.attn_softcap, off.logit_softcap) == (False, False)
