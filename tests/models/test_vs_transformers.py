"""Every catalog entry and a set of layout variants, against transformers on the meta device.

The inventory must equal ``named_parameters()`` (names, shapes, order; tied weights once)
and ``named_buffers()`` (names, shapes, integer dtypes) of the class in architectures[0].
"""

from __future__ import annotations

import json
from importlib import resources

import pytest

from vramlens.models import spec_from_config

transformers = pytest.importorskip("transformers", reason="the reference inventory comes from transformers")
pytest.importorskip("torch", reason="the reference model is built with torch on the meta device")

from _hf_meta import hf_tensors, ours  # noqa: E402

CATALOG = json.loads(resources.files("vramlens.models").joinpath("data", "catalog.json").read_text())["models"]

_LLAMA = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, vocab_size=100)
_BERT = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, vocab_size=100)
_GPT2 = dict(n_embd=64, n_layer=2, n_head=4, vocab_size=100, n_positions=32)
_T5 = dict(d_model=64, d_ff=96, num_layers=2, num_heads=4, d_kv=8, vocab_size=100)


def _v(model_type: str, arch: str, **kw) -> dict:
    return {"model_type": model_type, "architectures": [arch], **kw}


#: Layout switches that no catalog entry exercises: biases, ties, heads, fused layers...
VARIANTS = {
    "llama-gqa": _v("llama", "LlamaForCausalLM", **_LLAMA, num_key_value_heads=2),
    "llama-biases-tied-head_dim": _v("llama", "LlamaForCausalLM", **_LLAMA, attention_bias=True, mlp_bias=True,
                                     tie_word_embeddings=True, head_dim=32),
    "llama-base": _v("llama", "LlamaModel", **_LLAMA),
    "llama-seq-cls-3": _v("llama", "LlamaForSequenceClassification", **_LLAMA,
                          id2label={"0": "a", "1": "b", "2": "c"}),
    "mistral-head_dim": _v("mistral", "MistralForCausalLM", **_LLAMA, num_key_value_heads=2, head_dim=8),
    "qwen2-tied": _v("qwen2", "Qwen2ForCausalLM", **_LLAMA, num_key_value_heads=2, tie_word_embeddings=True),
    "qwen2-base": _v("qwen2", "Qwen2Model", **_LLAMA, num_key_value_heads=4),
    "qwen2_moe-sparse-step": _v("qwen2_moe", "Qwen2MoeForCausalLM", **{**_LLAMA, "num_hidden_layers": 4},
                                num_key_value_heads=2, num_experts=4, num_experts_per_tok=2,
                                moe_intermediate_size=32, shared_expert_intermediate_size=48,
                                decoder_sparse_step=2, mlp_only_layers=[3]),
    "qwen3-head_dim": _v("qwen3", "Qwen3ForCausalLM", **_LLAMA, num_key_value_heads=2, head_dim=32),
    "qwen3_moe": _v("qwen3_moe", "Qwen3MoeForCausalLM", **_LLAMA, num_key_value_heads=2, num_experts=4,
                    num_experts_per_tok=2, moe_intermediate_size=32, head_dim=16),
    "phi3-gqa": _v("phi3", "Phi3ForCausalLM", **_LLAMA, num_key_value_heads=2, pad_token_id=0),
    "phi3-seq-cls": _v("phi3", "Phi3ForSequenceClassification", **_LLAMA, pad_token_id=0),
    "gemma-mqa": _v("gemma", "GemmaForCausalLM", **_LLAMA, num_key_value_heads=1, head_dim=32),
    "gemma2-seq-cls": _v("gemma2", "Gemma2ForSequenceClassification", **_LLAMA, num_key_value_heads=2,
                         head_dim=32),
    # Gemma 3: local/global layers from the pattern or layer_types decide the rotary buffers
    "gemma3-pattern-2": _v("gemma3_text", "Gemma3ForCausalLM", **{**_LLAMA, "num_hidden_layers": 4},
                           num_key_value_heads=2, head_dim=16, sliding_window=8, sliding_window_pattern=2),
    "gemma3-all-sliding-untied": _v("gemma3_text", "Gemma3ForCausalLM", **_LLAMA, num_key_value_heads=1, head_dim=16,
                                    layer_types=["sliding_attention"] * 2, tie_word_embeddings=False),
    "gemma3-default-pattern": _v("gemma3_text", "Gemma3ForCausalLM", **{**_LLAMA, "num_hidden_layers": 7},
                                 num_key_value_heads=2, head_dim=16),
    "gemma3-nested-text-config": _v("gemma3", "Gemma3ForConditionalGeneration", text_config=dict(
        model_type="gemma3_text", **_LLAMA, num_key_value_heads=2, head_dim=16)),
    # Llama 4: MoE every other block (dense MLP of intermediate_size_mlp between), NoPE every second block,
    # explicit moe_layers / no_rope_layers, a biased attention, the multimodal wrapper
    "llama4-interleaved": _v("llama4_text", "Llama4ForCausalLM", **{**_LLAMA, "num_hidden_layers": 4},
                             num_key_value_heads=2, head_dim=16, intermediate_size_mlp=128, num_local_experts=4,
                             interleave_moe_layer_step=2, no_rope_layer_interval=2, attention_chunk_size=8),
    "llama4-explicit-lists-bias": _v("llama4_text", "Llama4ForCausalLM", **{**_LLAMA, "num_hidden_layers": 3},
                                     num_key_value_heads=1, head_dim=16, intermediate_size_mlp=64,
                                     num_local_experts=2, moe_layers=[1], no_rope_layers=[1, 0, 1],
                                     attention_bias=True, use_qk_norm=False),
    "llama4-nested-text-config": _v("llama4", "Llama4ForConditionalGeneration", text_config=dict(
        model_type="llama4_text", **_LLAMA, num_key_value_heads=2, head_dim=16, intermediate_size_mlp=64,
        num_local_experts=2)),
    "olmo2-gqa-bias": _v("olmo2", "Olmo2ForCausalLM", **_LLAMA, num_key_value_heads=2, attention_bias=True,
                         pad_token_id=0, eos_token_id=1),
    # DeepSeek: q through a low-rank q_a/q_b (V3) or one q_proj (V2-Lite), dense first blocks
    "deepseek_v3-q-lora": _v("deepseek_v3", "DeepseekV3ForCausalLM", **{**_LLAMA, "num_hidden_layers": 3},
                             moe_intermediate_size=32, n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2,
                             n_group=2, topk_group=1, first_k_dense_replace=1, q_lora_rank=48, kv_lora_rank=32,
                             qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, num_key_value_heads=4,
                             attention_bias=True),
    "deepseek_v2-no-q-lora-biases": _v("deepseek_v2", "DeepseekV2ForCausalLM", **{**_LLAMA, "num_hidden_layers": 3},
                                       moe_intermediate_size=32, n_routed_experts=4, n_shared_experts=2,
                                       num_experts_per_tok=2, first_k_dense_replace=2, q_lora_rank=None,
                                       kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
                                       mlp_bias=True),
    "deepseek_v3-seq-cls": _v("deepseek_v3", "DeepseekV3ForSequenceClassification", **_LLAMA,
                              moe_intermediate_size=32, n_routed_experts=4, num_experts_per_tok=2, n_group=2,
                              topk_group=1, first_k_dense_replace=1, kv_lora_rank=32, qk_nope_head_dim=16,
                              qk_rope_head_dim=8, v_head_dim=16, q_lora_rank=48, num_key_value_heads=4),
    "mixtral-seq-cls": _v("mixtral", "MixtralForSequenceClassification", **_LLAMA, num_key_value_heads=2,
                          num_local_experts=4),
    "gpt2-seq-cls-n_inner": _v("gpt2", "GPT2ForSequenceClassification", **_GPT2, n_inner=80),
    "gpt2-base-untied": _v("gpt2", "GPT2Model", **_GPT2, tie_word_embeddings=False),
    "gpt2-untied": _v("gpt2", "GPT2LMHeadModel", **_GPT2, tie_word_embeddings=False),
    "bigcode-mha-untied": _v("gpt_bigcode", "GPTBigCodeForCausalLM", **_GPT2, multi_query=False, n_inner=80,
                             tie_word_embeddings=False),
    "bigcode-seq-cls": _v("gpt_bigcode", "GPTBigCodeForSequenceClassification", **_GPT2),
    "opt-proj-postnorm": _v("opt", "OPTForCausalLM", hidden_size=64, ffn_dim=96, num_hidden_layers=2,
                            num_attention_heads=4, vocab_size=100, max_position_embeddings=32,
                            word_embed_proj_dim=32, do_layer_norm_before=False),
    "opt-nobias-noaffine-seq-cls": _v("opt", "OPTForSequenceClassification", hidden_size=64, ffn_dim=96,
                                      num_hidden_layers=2, num_attention_heads=4, vocab_size=100,
                                      max_position_embeddings=32, enable_bias=False,
                                      layer_norm_elementwise_affine=False, tie_word_embeddings=False),
    "opt-base": _v("opt", "OPTModel", hidden_size=64, ffn_dim=96, num_hidden_layers=2, num_attention_heads=4,
                   vocab_size=100, max_position_embeddings=32),
    "bloom-n_embed-untied": _v("bloom", "BloomForCausalLM", n_embed=64, n_layer=2, num_attention_heads=4,
                               vocab_size=100, tie_word_embeddings=False),
    "bloom-seq-cls": _v("bloom", "BloomForSequenceClassification", hidden_size=64, n_layer=2, n_head=4,
                        vocab_size=100),
    "falcon-new-arch-untied": _v("falcon", "FalconForCausalLM", hidden_size=64, num_hidden_layers=2,
                                 num_attention_heads=8, num_kv_heads=2, new_decoder_architecture=True,
                                 vocab_size=100, tie_word_embeddings=False),
    "falcon-new-arch-one-ln": _v("falcon", "FalconForCausalLM", hidden_size=64, num_hidden_layers=2,
                                 num_attention_heads=8, num_kv_heads=2, new_decoder_architecture=True,
                                 num_ln_in_parallel_attn=1, vocab_size=100),
    "falcon-rw-alibi-sequential": _v("falcon", "FalconForCausalLM", hidden_size=64, num_hidden_layers=2,
                                     num_attention_heads=4, multi_query=False, parallel_attn=False, bias=True,
                                     alibi=True, vocab_size=100, ffn_hidden_size=80),
    "falcon-seq-cls": _v("falcon", "FalconForSequenceClassification", hidden_size=64, num_hidden_layers=2,
                         num_attention_heads=4, vocab_size=100),
    "neox-rotary_pct": _v("gpt_neox", "GPTNeoXForCausalLM", **_LLAMA, rotary_pct=0.5),
    "neox-nobias-tied": _v("gpt_neox", "GPTNeoXForCausalLM", **_LLAMA, attention_bias=False,
                           tie_word_embeddings=True),
    "neox-seq-cls": _v("gpt_neox", "GPTNeoXForSequenceClassification", **_LLAMA),
    "phi-partial-0.4": _v("phi", "PhiForCausalLM", **_LLAMA, partial_rotary_factor=0.4),
    "phi-qk-ln-gqa-tied": _v("phi", "PhiForCausalLM", **_LLAMA, num_key_value_heads=2, qk_layernorm=True,
                             tie_word_embeddings=True),
    "phi-seq-cls": _v("phi", "PhiForSequenceClassification", **_LLAMA),
    "bert-untied": _v("bert", "BertForMaskedLM", **_BERT, tie_word_embeddings=False),
    "roberta-untied": _v("roberta", "RobertaForMaskedLM", **_BERT, tie_word_embeddings=False,
                         type_vocab_size=1),
    "t5-relu-unequal-stacks": _v("t5", "T5ForConditionalGeneration", **_T5, num_decoder_layers=3),
    "t5-encoder-gated": _v("t5", "T5EncoderModel", **_T5, feed_forward_proj="gated-gelu"),
    "t5-base-model": _v("t5", "T5Model", **_T5),
    "mt5-untied-config": _v("mt5", "MT5ForConditionalGeneration", d_model=64, d_ff=96, num_layers=2,
                            num_heads=4, vocab_size=100, tie_word_embeddings=False),
}
_DISTIL = dict(dim=64, hidden_dim=96, n_layers=2, n_heads=4, vocab_size=100)
_DEBERTA_V3 = dict(_BERT, relative_attention=True, position_buckets=8, norm_rel_ebd="layer_norm", share_att_key=True,
                   pos_att_type="p2c|c2p", max_relative_positions=-1, position_biased_input=False, type_vocab_size=0)
# ModernBERT's token ids must fall inside the tiny vocabulary (nn.Embedding's padding_idx)
_MODERNBERT = dict(_BERT, pad_token_id=0, bos_token_id=0, eos_token_id=0, cls_token_id=0, sep_token_id=0)
VARIANTS.update({
    "distilbert-untied-sinusoidal": _v("distilbert", "DistilBertForMaskedLM", **_DISTIL, tie_word_embeddings=False,
                                       sinusoidal_pos_embds=True),
    "xlm-roberta-untied": _v("xlm-roberta", "XLMRobertaForMaskedLM", **_BERT, tie_word_embeddings=False),
    "xlm-roberta-causal": _v("xlm-roberta", "XLMRobertaForCausalLM", **_BERT),
    "electra-same-width": _v("electra", "ElectraForPreTraining", **_BERT, embedding_size=64),
    "electra-generator-untied": _v("electra", "ElectraForMaskedLM", **_BERT, embedding_size=32,
                                   tie_word_embeddings=False),
    "deberta-v3-new-lm-head": _v("deberta-v2", "DebertaV2ForMaskedLM", **_DEBERTA_V3, legacy=False),
    "deberta-v3-embed-proj-untied": _v("deberta-v2", "DebertaV2ForMaskedLM", **_DEBERTA_V3, embedding_size=32,
                                       tie_word_embeddings=False),
    # DeBERTa-v2 xlarge-style: separate position projections, absolute positions, token types, conv
    "deberta-v2-pos-proj-conv": _v("deberta-v2", "DebertaV2Model", **{
        **_DEBERTA_V3, "share_att_key": False, "position_biased_input": True, "type_vocab_size": 2,
        "norm_rel_ebd": "none", "position_buckets": -1, "max_relative_positions": 16, "conv_kernel_size": 3,
        "embedding_size": 32}),
    "deberta-v1-style-c2p-list": _v("deberta-v2", "DebertaV2Model", **_BERT, pos_att_type=["c2p"],
                                    relative_attention=True),
    "modernbert-untied-biases-every-2": _v("modernbert", "ModernBertForMaskedLM",
                                           **{**_MODERNBERT, "num_hidden_layers": 4}, tie_word_embeddings=False,
                                           decoder_bias=False, norm_bias=True, global_attn_every_n_layers=2),
    "modernbert-all-sliding-biased": _v("modernbert", "ModernBertModel", **_MODERNBERT, attention_bias=True,
                                        mlp_bias=True, layer_types=["sliding_attention", "sliding_attention"]),
})
for _stem, _mt, _kw in (("DistilBert", "distilbert", _DISTIL), ("XLMRoberta", "xlm-roberta", _BERT),
                        ("Electra", "electra", {**_BERT, "embedding_size": 32}),
                        ("DebertaV2", "deberta-v2", _DEBERTA_V3), ("ModernBert", "modernbert", _MODERNBERT)):
    for _head in ("Model", "ForMaskedLM", "ForSequenceClassification", "ForTokenClassification",
                  "ForQuestionAnswering", "ForMultipleChoice"):
        VARIANTS[_stem + _head] = _v(_mt, _stem + _head, **_kw)
VARIANTS["ElectraForPreTraining"] = _v("electra", "ElectraForPreTraining", **_BERT, embedding_size=32)
for _arch in ("BertModel", "BertForPreTraining", "BertLMHeadModel", "BertForSequenceClassification",
              "BertForTokenClassification", "BertForQuestionAnswering", "BertForNextSentencePrediction",
              "BertForMultipleChoice"):
    VARIANTS[_arch] = _v("bert", _arch, **_BERT)
for _arch in ("RobertaModel", "RobertaForCausalLM", "RobertaForSequenceClassification",
              "RobertaForTokenClassification", "RobertaForQuestionAnswering", "RobertaForMultipleChoice"):
    VARIANTS[_arch] = _v("roberta", _arch, **_BERT)

_VISION = dict(hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=2, image_size=32,
               patch_size=8)
VARIANTS["ViTModel"] = _v("vit", "ViTModel", **_VISION)
VARIANTS["ViTForImageClassification-3"] = _v("vit", "ViTForImageClassification", **_VISION, num_labels=3)
VARIANTS["ViT-no-qkv-bias"] = _v("vit", "ViTForImageClassification", **_VISION, qkv_bias=False)
VARIANTS["CLIPVisionModel"] = _v("clip_vision_model", "CLIPVisionModel", **_VISION)
VARIANTS["CLIPVisionModelWithProjection"] = _v("clip_vision_model", "CLIPVisionModelWithProjection", **_VISION,
                                               projection_dim=12)
VARIANTS["SiglipVisionModel"] = _v("siglip_vision_model", "SiglipVisionModel", **_VISION)
VARIANTS["SiglipVisionModel-no-head"] = _v("siglip_vision_model", "SiglipVisionModel", **_VISION,
                                           vision_use_head=False)

_WHISPER = dict(d_model=64, encoder_layers=2, decoder_layers=3, encoder_attention_heads=4, decoder_attention_heads=4,
                encoder_ffn_dim=96, decoder_ffn_dim=96, vocab_size=1000, num_mel_bins=80, pad_token_id=0, bos_token_id=0,
                eos_token_id=0, decoder_start_token_id=1)
VARIANTS["WhisperForConditionalGeneration"] = _v("whisper", "WhisperForConditionalGeneration", **_WHISPER)
VARIANTS["WhisperModel"] = _v("whisper", "WhisperModel", **_WHISPER)
VARIANTS["Whisper-128-mels"] = _v("whisper", "WhisperForConditionalGeneration", **{**_WHISPER, "num_mel_bins": 128},
                                  max_source_positions=750, max_target_positions=100)


def _check(config: dict) -> None:
    spec = spec_from_config(config)
    # a wrapping config (gemma3) is modelled as its text tower: the reference is that part's class;
    # config.json may lack architectures
    ref_params, ref_buffers = hf_tensors(spec.config, spec.architecture)
    got_params, got_buffers = ours(spec)
    assert dict(got_params) == dict(ref_params), "names or shapes differ"
    assert got_params == ref_params, "same tensors, different order"
    assert got_buffers == ref_buffers
    assert spec.params == sum(_numel(s) for _, s in ref_params)


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


@pytest.mark.parametrize("entry", CATALOG, ids=[e["id"] for e in CATALOG])
def test_catalog_entry_matches_transformers(entry):
    _check(entry["config"])


@pytest.mark.parametrize("config", list(VARIANTS.values()), ids=list(VARIANTS))
def test_layout_variant_matches_transformers(config):
    _check(config)
