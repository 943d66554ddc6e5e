"""transformers' defaults for the config fields vramlens reads, written down as data.

A config.json only holds what differs from its config class's defaults, so a missing
field means the default in ``transformers/models/<type>/configuration_<type>.py`` (the
dataclass field defaults of transformers 5.x; ``tests/models/test_defaults.py`` checks
every value here against the installed transformers). The essential dimensions (hidden
size, layers, heads, vocabulary, MLP size) are deliberately absent: a config.json without
them is broken, and :class:`~vramlens.models._reader.ConfigReader` says so.

Importing transformers at runtime is not allowed in the core (see DESIGN.md), hence data.
"""

from __future__ import annotations

from typing import Any

_ENCODER = {
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    "hidden_act": "gelu",
    "tie_word_embeddings": True,
    "add_cross_attention": False,
    "is_decoder": False,
}

DEFAULTS: dict[str, dict[str, Any]] = {
    "bert": dict(_ENCODER),
    "roberta": dict(_ENCODER),
    "xlm-roberta": dict(_ENCODER),
    "distilbert": {
        "max_position_embeddings": 512,
        "dropout": 0.1,
        "attention_dropout": 0.1,
        "activation": "gelu",
        "qa_dropout": 0.1,
        "seq_classif_dropout": 0.2,
        "tie_word_embeddings": True,
    },
    "electra": {
        **_ENCODER,
        "embedding_size": 128,
        "hidden_dropout_prob": 0.1,
    },
    "deberta-v2": {
        "max_position_embeddings": 512,
        "type_vocab_size": 0,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "relative_attention": False,
        "max_relative_positions": -1,
        "position_biased_input": True,
        "pos_att_type": None,
        "legacy": True,
        "tie_word_embeddings": True,
    },
    "modernbert": {
        "hidden_activation": "gelu",
        "max_position_embeddings": 8192,
        "norm_bias": False,
        "attention_bias": False,
        "mlp_bias": False,
        "decoder_bias": True,
        "classifier_bias": False,
        "classifier_pooling": "cls",
        "classifier_dropout": 0.0,
        "local_attention": 128,
        "layer_types": None,  # None means from global_attn_every_n_layers (3): __post_init__
        "tie_word_embeddings": True,
    },
    "gpt2": {
        "n_positions": 1024,
        "n_inner": None,  # None means 4 * n_embd (modeling_gpt2.py GPT2Block)
        "activation_function": "gelu_new",
        "tie_word_embeddings": True,
        "add_cross_attention": False,
    },
    "gpt_bigcode": {
        "n_positions": 1024,
        "n_inner": None,
        "activation_function": "gelu_pytorch_tanh",
        "multi_query": True,
        "tie_word_embeddings": True,
        "add_cross_attention": False,
    },
    "opt": {
        "max_position_embeddings": 2048,
        "do_layer_norm_before": True,
        "_remove_final_layer_norm": False,
        "word_embed_proj_dim": None,  # None means hidden_size
        "activation_function": "relu",
        "enable_bias": True,
        "layer_norm_elementwise_affine": True,
        "tie_word_embeddings": True,
    },
    "bloom": {
        "tie_word_embeddings": True,
    },
    "falcon": {
        "num_kv_heads": None,  # None means num_attention_heads
        "alibi": False,
        "new_decoder_architecture": False,
        "multi_query": True,
        "parallel_attn": True,
        "bias": False,
        "max_position_embeddings": 2048,
        "ffn_hidden_size": None,  # None means 4 * hidden_size
        "activation": "gelu",
        "num_ln_in_parallel_attn": None,
        "tie_word_embeddings": True,
    },
    "gpt_neox": {
        "max_position_embeddings": 2048,
        "hidden_act": "gelu",
        "attention_bias": True,
        "tie_word_embeddings": False,
    },
    "phi": {
        "num_key_value_heads": None,
        "hidden_act": "gelu_new",
        "max_position_embeddings": 2048,
        "qk_layernorm": False,
        "tie_word_embeddings": False,
    },
    "phi3": {
        "num_key_value_heads": None,
        "hidden_act": "silu",
        "max_position_embeddings": 4096,
        "sliding_window": None,
        "tie_word_embeddings": False,
    },
    "llama": {
        "num_key_value_heads": None,
        "head_dim": None,
        "hidden_act": "silu",
        "max_position_embeddings": 2048,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
    },
    "mistral": {
        "num_key_value_heads": 8,
        "head_dim": None,
        "hidden_act": "silu",
        "max_position_embeddings": 131_072,
        "sliding_window": 4096,
        "tie_word_embeddings": False,
    },
    "mixtral": {
        "num_key_value_heads": 8,
        "head_dim": None,
        "hidden_act": "silu",
        "max_position_embeddings": 131_072,
        "sliding_window": None,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        "tie_word_embeddings": False,
    },
    "qwen2": {
        "num_key_value_heads": 32,
        "hidden_act": "silu",
        "max_position_embeddings": 32_768,
        "use_sliding_window": False,
        "sliding_window": 4096,
        "max_window_layers": 28,
        "tie_word_embeddings": False,
    },
    "qwen2_moe": {
        "num_key_value_heads": 16,
        "hidden_act": "silu",
        "max_position_embeddings": 32_768,
        "use_sliding_window": False,
        "sliding_window": 4096,
        "decoder_sparse_step": 1,
        "moe_intermediate_size": 1408,
        "shared_expert_intermediate_size": 5632,
        "num_experts": 60,
        "num_experts_per_tok": 4,
        "mlp_only_layers": None,  # None means []
        "max_window_layers": 28,
        "qkv_bias": True,
        "tie_word_embeddings": False,
    },
    "qwen3": {
        "num_key_value_heads": 32,
        "head_dim": 128,
        "hidden_act": "silu",
        "max_position_embeddings": 32_768,
        "attention_bias": False,
        "use_sliding_window": False,
        "sliding_window": 4096,
        "max_window_layers": 28,
        "tie_word_embeddings": False,
    },
    "qwen3_moe": {
        "num_key_value_heads": 4,
        "hidden_act": "silu",
        "max_position_embeddings": 32_768,
        "attention_bias": False,
        "use_sliding_window": False,
        "sliding_window": 4096,
        "decoder_sparse_step": 1,
        "moe_intermediate_size": 768,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "mlp_only_layers": None,
        "tie_word_embeddings": False,
    },
    "gemma": {
        "num_key_value_heads": 16,
        "head_dim": 256,
        "hidden_act": "gelu_pytorch_tanh",
        "max_position_embeddings": 8192,
        "attention_bias": False,
        "tie_word_embeddings": True,
    },
    "gemma2": {
        "num_key_value_heads": 4,
        "head_dim": 256,
        "hidden_activation": "gelu_pytorch_tanh",
        "max_position_embeddings": 8192,
        "attention_bias": False,
        "sliding_window": 4096,
        "tie_word_embeddings": True,
    },
    "gemma3_text": {
        "vocab_size": 262_208,  # configuration_gemma3.py: the multimodal checkpoints' text_config omits it
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "hidden_activation": "gelu_pytorch_tanh",
        "max_position_embeddings": 131_072,
        "attention_bias": False,
        "sliding_window": 4096,
        "layer_types": None,  # None means sliding_window_pattern (6): every 6th block global
        "tie_word_embeddings": True,
    },
    "olmo2": {
        "num_key_value_heads": None,
        "hidden_act": "silu",
        "max_position_embeddings": 2048,
        "attention_bias": False,
        "tie_word_embeddings": False,
    },
    "deepseek_v2": {
        "num_key_value_heads": None,
        "hidden_act": "silu",
        "max_position_embeddings": 2048,
        "attention_bias": False,
        "mlp_bias": False,
        "first_k_dense_replace": 0,
        "kv_lora_rank": 512,
        "q_lora_rank": 1536,
        "n_routed_experts": 64,
        "n_shared_experts": 2,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "num_experts_per_tok": None,
        "moe_intermediate_size": 1407,
        "topk_method": "greedy",
        "tie_word_embeddings": False,
    },
    "deepseek_v3": {
        "vocab_size": 129_280,
        "moe_intermediate_size": 2048,
        "num_key_value_heads": 128,
        "n_shared_experts": 1,
        "n_routed_experts": 256,
        "kv_lora_rank": 512,
        "q_lora_rank": 1536,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "qk_nope_head_dim": 128,
        "n_group": 8,
        "topk_group": 4,
        "num_experts_per_tok": 8,
        "first_k_dense_replace": 3,
        "hidden_act": "silu",
        "max_position_embeddings": 4096,
        "attention_bias": False,
        "tie_word_embeddings": False,
        "num_mtp_layers": 1,  # transformers 5 builds no MTP module from it (modeling_deepseek_v3.py)
    },
    # configuration_gpt_oss.py (GptOssConfig): its defaults are gpt-oss-120b's
    "gpt_oss": {
        "head_dim": 64,
        "num_key_value_heads": 8,
        "sliding_window": 128,
        "tie_word_embeddings": False,
        "hidden_act": "silu",
        "max_position_embeddings": 131072,
        "num_experts_per_tok": 4,
        "swiglu_alpha": 1.702,
        "swiglu_limit": 7.0,
        "layer_types": None,
        "attention_bias": True,
    },
    # configuration_llama4.py (Llama4TextConfig): its defaults are Llama-4-Scout-17B-16E's text model
    "llama4_text": {
        "head_dim": 128,
        "num_key_value_heads": 8,
        "intermediate_size_mlp": 16384,
        "tie_word_embeddings": False,
        "hidden_act": "silu",
        "max_position_embeddings": 131072,
        "num_experts_per_tok": 1,
        "num_local_experts": 16,
        "moe_layers": None,
        "interleave_moe_layer_step": 1,
        "use_qk_norm": True,
        "no_rope_layers": None,
        "no_rope_layer_interval": 4,
        "attention_chunk_size": 8192,
        "attn_temperature_tuning": True,
        "attention_bias": False,
    },
    "t5": {
        "d_kv": 64,
        "num_decoder_layers": None,  # None means num_layers
        "relative_attention_num_buckets": 32,
        "feed_forward_proj": "relu",
    },
    "mt5": {
        "d_kv": 64,
        "num_decoder_layers": None,
        "relative_attention_num_buckets": 32,
        "feed_forward_proj": "gated-gelu",
    },
}

#: the transformers defaults of the fields a vision config may omit (ViTConfig, CLIPVisionConfig,
#: SiglipVisionConfig in transformers 5.24's configuration_*.py)
VISION_DEFAULTS: dict[str, dict[str, Any]] = {
    "vit": {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072,
            "hidden_act": "gelu", "image_size": 224, "patch_size": 16, "num_channels": 3, "qkv_bias": True,
            "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0},
    "clip_vision_model": {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                          "intermediate_size": 3072, "hidden_act": "quick_gelu", "image_size": 224,
                          "patch_size": 32, "num_channels": 3, "projection_dim": 512, "attention_dropout": 0.0},
    "siglip_vision_model": {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                            "intermediate_size": 3072, "hidden_act": "gelu_pytorch_tanh", "image_size": 224,
                            "patch_size": 16, "num_channels": 3, "vision_use_head": True, "attention_dropout": 0.0},
}

#: Qwen2_5_VLVisionConfig's field defaults (configuration_qwen2_5_vl.py, transformers 5.24): Qwen2.5-VL's tower
VISION_DEFAULTS["qwen2_5_vl_vision"] = {
    "depth": 32, "hidden_size": 3584, "hidden_act": "silu", "intermediate_size": 3420, "num_heads": 16,
    "in_channels": 3, "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2,
    "window_size": 112, "out_hidden_size": 3584, "fullatt_block_indexes": (7, 15, 23, 31),
}

#: Llama4VisionConfig's field defaults (configuration_llama4.py, transformers 5.24): Llama 4's tower and adapter
VISION_DEFAULTS["llama4_vision_model"] = {
    "hidden_size": 768, "num_hidden_layers": 34, "num_attention_heads": 16, "num_channels": 3,
    "intermediate_size": 5632, "vision_output_dim": 7680, "image_size": 448, "patch_size": 14,
    "pixel_shuffle_ratio": 0.5, "projector_input_dim": 4096, "projector_output_dim": 4096, "hidden_act": "gelu",
}
DEFAULTS.update(VISION_DEFAULTS)

#: WhisperConfig's field defaults (configuration_whisper.py, transformers 5.24: the whisper-tiny shape)
DEFAULTS["whisper"] = {
    "vocab_size": 51_865, "num_mel_bins": 80, "encoder_layers": 4, "encoder_attention_heads": 6, "decoder_layers": 4,
    "decoder_attention_heads": 6, "decoder_ffn_dim": 1536, "encoder_ffn_dim": 1536, "activation_function": "gelu",
    "d_model": 384, "dropout": 0.0, "attention_dropout": 0.0, "activation_dropout": 0.0, "max_source_positions": 1500,
    "max_target_positions": 448, "scale_embedding": False,
}

#: Defaults set in a config class's ``__post_init__`` rather than as a field default:
#: (model_type, config.json key) -> value, with the place transformers keeps it.
POST_INIT_DEFAULTS: dict[tuple[str, str], Any] = {
    # configuration_gpt_neox.py: rope_parameters.setdefault("partial_rotary_factor", rotary_pct=0.25)
    ("gpt_neox", "rotary_pct"): 0.25,
    # configuration_phi.py: kwargs.setdefault("partial_rotary_factor", 0.5)
    ("phi", "partial_rotary_factor"): 0.5,
    # configuration_phi3.py: rope_parameters.setdefault("partial_rotary_factor", 1.0)
    ("phi3", "partial_rotary_factor"): 1.0,
    # configuration_gemma3.py: self._sliding_window_pattern = kwargs.get("sliding_window_pattern", 6)
    ("gemma3_text", "sliding_window_pattern"): 6,
}

#: Each config class's ``attribute_map`` (generic name -> the class's own field name):
#: config.json may use either name.
ATTRIBUTE_MAPS: dict[str, dict[str, str]] = {
    "gpt2": {
        "hidden_size": "n_embd",
        "max_position_embeddings": "n_positions",
        "num_attention_heads": "n_head",
        "num_hidden_layers": "n_layer",
    },
    "gpt_bigcode": {
        "hidden_size": "n_embd",
        "max_position_embeddings": "n_positions",
        "num_attention_heads": "n_head",
        "num_hidden_layers": "n_layer",
    },
    "bloom": {"num_hidden_layers": "n_layer", "num_attention_heads": "n_head"},
    "distilbert": {"hidden_size": "dim", "num_attention_heads": "n_heads", "num_hidden_layers": "n_layers"},
    "mixtral": {"num_experts": "num_local_experts"},
    "deepseek_v2": {"num_experts": "n_routed_experts"},
    "deepseek_v3": {"num_local_experts": "n_routed_experts", "num_mtp_layers": "num_nextn_predict_layers"},
    "qwen3_moe": {"num_experts": "num_local_experts"},
    "gpt_oss": {"num_experts": "num_local_experts"},
    "t5": {
        "hidden_size": "d_model",
        "num_attention_heads": "num_heads",
        "num_hidden_layers": "num_layers",
        "head_dim": "d_kv",
    },
    "mt5": {
        "hidden_size": "d_model",
        "num_attention_heads": "num_heads",
        "num_hidden_layers": "num_layers",
        "head_dim": "d_kv",
    },
}

#: Old spellings that a config class's ``__post_init__`` still accepts (BloomConfig and
#: FalconConfig pop ``n_embed`` into ``hidden_size``): old name -> field.
LEGACY_ALIASES: dict[str, dict[str, str]] = {
    "bloom": {"n_embed": "hidden_size"},
    "falcon": {"n_embed": "hidden_size"},
}

#: WhisperConfig.attribute_map (configuration_whisper.py)
ATTRIBUTE_MAPS["qwen2_5_vl_vision"] = {"num_attention_heads": "num_heads", "num_hidden_layers": "depth"}
ATTRIBUTE_MAPS["whisper"] = {"hidden_size": "d_model", "num_attention_heads": "encoder_attention_heads",
                             "num_key_value_heads": "encoder_attention_heads", "num_hidden_layers": "encoder_layers"}
