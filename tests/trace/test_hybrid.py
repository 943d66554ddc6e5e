"""Hybrid attention/SSM models under the tracer: extrapolation by whole periods of the layer pattern, and the
recurrent blocks' fixed state in the cache.

Each family at tiny widths and 4 periods or more: `trace --layers 3` (2 and 3 periods, extrapolated) against the full
trace of the same config, byte for byte. transformers 5.24 runs every one of them on CPU under fake tensors
through its PyTorch paths (mamba_ssm, causal_conv1d and flash-linear-attention are not installed).
"""

import pytest

from vramlens.errors import TraceError
from vramlens.trace import trace

pytest.importorskip("transformers")

W = dict(hidden_size=64, intermediate_size=128, vocab_size=512, num_attention_heads=4, num_key_value_heads=2)
MAMBA2 = dict(mamba_n_heads=8, mamba_d_head=16, mamba_d_state=8, mamba_n_groups=1, mamba_chunk_size=16)
QWEN3_NEXT = {  # 16 layers: (3 gated-DeltaNet blocks, 1 attention block) x 4 (full_attention_interval 4)
    "model_type": "qwen3_next", "architectures": ["Qwen3NextForCausalLM"], **W, "num_hidden_layers": 16,
    "head_dim": 16, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32, "num_experts": 4,
    "num_experts_per_tok": 2, "linear_num_value_heads": 4, "linear_num_key_heads": 2, "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
}
FAMILIES = {
    "qwen3_next": QWEN3_NEXT,
    # attention every 4th block from the 3rd, MoE every 2nd block: period 4
    "jamba": {"model_type": "jamba", "architectures": ["JambaForCausalLM"], **W, "num_hidden_layers": 16,
              "attn_layer_period": 4, "attn_layer_offset": 2, "expert_layer_period": 2, "expert_layer_offset": 1,
              "num_experts": 4, "mamba_d_state": 8, "mamba_expand": 2, "mamba_dt_rank": 8},
    # 17 layers: attention at 1, 5, 9, 13: 4 periods of 4 and a one-block tail
    "bamba": {"model_type": "bamba", "architectures": ["BambaForCausalLM"], **W, **MAMBA2, "num_hidden_layers": 17,
              "attn_layer_indices": [1, 5, 9, 13]},
    "granitemoehybrid": {"model_type": "granitemoehybrid", "architectures": ["GraniteMoeHybridForCausalLM"], **W,
                         **MAMBA2, "num_hidden_layers": 16, "layer_types": ["mamba"] * 3 + ["attention"],
                         "num_local_experts": 4, "num_experts_per_tok": 2, "shared_intermediate_size": 64},
    # Mamba2 (M), MLP (-) and attention (*) blocks of one letter each
    "nemotron_h": {"model_type": "nemotron_h", "architectures": ["NemotronHForCausalLM"], **W, "head_dim": 16,
                   "num_hidden_layers": 20, "hybrid_override_pattern": "M-M*-" * 4, "mamba_num_heads": 8,
                   "mamba_head_dim": 16, "ssm_state_size": 8, "n_groups": 1, "chunk_size": 16},
    # short-conv blocks and attention at 2, 5, 8, 11, 14: 5 periods of 3 and a one-block tail
    "lfm2": {"model_type": "lfm2", "architectures": ["Lfm2ForCausalLM"], **W, "num_hidden_layers": 16,
             "full_attn_idxs": [2, 5, 8, 11, 14], "block_auto_adjust_ff_dim": False},
    # attention and Mamba2 side by side in every block: a uniform model, traced as before (2 and 3 blocks)
    "falcon_h1": {"model_type": "falcon_h1", "architectures": ["FalconH1ForCausalLM"], **W, "num_hidden_layers": 8,
                  "head_dim": 16, "mamba_d_ssm": 64, "mamba_n_heads": 8, "mamba_d_head": 8, "mamba_d_state": 8,
                  "mamba_n_groups": 1, "mamba_chunk_size": 16},
}
FAMILIES["granitemoehybrid"]["layer_types"] = FAMILIES["granitemoehybrid"]["layer_types"] * 4
TRUNCATED = {"qwen3_next": (8, 12), "jamba": (8, 12), "bamba": (9, 13), "granitemoehybrid": (8, 12),
             "nemotron_h": (10, 15), "lfm2": (7, 10), "falcon_h1": (2, 3)}
INFER = dict(mode="inference", batch=1, seq=32, new_tokens=2, dtype="bf16")
TRAIN = dict(mode="train", batch=1, seq=32, dtype="bf16")


def _agree(cfg, kw, truncated):
    full = trace(cfg, **kw)
    ex = trace(cfg, layers=3, **kw)
    assert ex.breakdown.source == "trace-extrapolated" and ex.truncated == truncated
    assert ex.breakdown.as_dict() == full.breakdown.as_dict()  # to the byte
    assert ex.peak_allocated == full.peak_allocated and ex.breakdown.phases == full.breakdown.phases
    assert ex.params == full.params
    return full, ex


def test_lfm2_inference_extrapolated_per_period_equals_the_full_trace():
    full, ex = _agree(FAMILIES["lfm2"], INFER, (7, 10))
    assert full.breakdown["kv_cache"] > 0
    assert ex.to_dict()["trace"]["truncated_layers"] == [7, 10] and ex.to_dict()["trace"]["extrapolated_from_layers"] == 3
    assert ("extrapolated linearly per period of the layer pattern (conv x2, full_attention) x5, conv: traces of "
            "the first 7 and 10 of 16 layers (2 and 3 periods of 3) (events, live set and modules are those of the "
            "10-layer trace)") in ex.breakdown.notes


@pytest.mark.slow  # > 5 s each on 2 cores
@pytest.mark.parametrize("family", sorted(set(FAMILIES) - {"lfm2"}))
def test_inference_extrapolated_per_period_equals_the_full_trace(family):
    _agree(FAMILIES[family], INFER, TRUNCATED[family])


@pytest.mark.slow  # > 5 s each on 2 cores
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_training_extrapolated_per_period_equals_the_full_trace(family):
    _agree(FAMILIES[family], TRAIN, TRUNCATED[family])


@pytest.mark.slow  # > 5 s on 2 cores
def test_qwen3_next_full_checkpointing_components_agree():
    """The temporaries' peak moves from backward's recomputation to the optimizer's foreach temporaries as the
    model grows (between 1 and 2 periods here): from 2 and 3 periods on, every component is on its line."""
    _agree(QWEN3_NEXT, {**TRAIN, "checkpointing": "full"}, (8, 12))


def test_qwen3_next_cache_holds_each_deltanet_blocks_state_once_per_sequence():
    """kv_cache after the prefill: attention keys and values grow with the sequence, the gated-DeltaNet state
    does not (transformers' LinearAttentionLayer: conv_states and recurrent_states, allocated at the prefill)."""
    def kv(seq):
        return trace(QWEN3_NEXT, mode="inference", batch=1, seq=seq, new_tokens=0, dtype="bf16").breakdown["kv_cache"]

    # attention: 4 blocks x (K, V) x (b=1, n_kv=2, s, d=16) bf16 = 4 x 2 x 64 s bytes
    # DeltaNet, 12 blocks, each: conv state (b, conv_dim = 2 x 2 key heads x 16 + 4 value heads x 16 = 128,
    # kernel 4) bf16 = 1,024 B, and recurrent state (b, 4 value heads, 16, 16) in fp32 (the PyTorch
    # torch_chunk_gated_delta_rule computes in fp32 and returns its last state so) = 4,096 B
    states = 12 * (1_024 + 4_096)
    assert kv(32) == 4 * 2 * 64 * 32 + states == 77_824
    assert kv(64) == 4 * 2 * 64 * 64 + states == 94_208


def test_zamba2_shared_blocks_are_refused_in_one_line():
    """Zamba2's hybrid blocks share attention blocks whose adapters count the hybrid blocks of the whole
    model: the truncated model's blocks are not the full model's first blocks, so it is not extrapolated."""
    cfg = {"model_type": "zamba2", "architectures": ["Zamba2ForCausalLM"], "hidden_size": 64,
           "intermediate_size": 128, "vocab_size": 512, "num_attention_heads": 4, "num_key_value_heads": 4,
           "attention_head_dim": 32, "num_hidden_layers": 16, "mamba_d_state": 8, "mamba_headdim": 16,
           "n_mamba_heads": 8, "mamba_ngroups": 1, "chunk_size": 16,
           "layers_block_type": ["mamba", "mamba", "hybrid", "mamba"] * 4}
    with pytest.raises(TraceError) as e:
        trace(cfg, layers=3, **INFER)
    assert str(e.value) == ("the config cut to its first 8 blocks builds other blocks than the full model's first 8 "
                            "(a per-block field vramlens does not cut): trace the full model (omit --layers)")


def test_a_pattern_that_does_not_repeat_is_refused_in_one_line():
    cfg = {**FAMILIES["nemotron_h"], "num_hidden_layers": 7, "hybrid_override_pattern": "M*MM-*M"}
    with pytest.raises(TraceError) as e:
        trace(cfg, layers=3, **INFER)
    assert str(e.value) == ("layers=3: the 7 blocks repeat no pattern (linear_attention, full_attention, "
                            "linear_attention, linear_attention, mlp, full_attention, linear_attention), so the traced "
                            "blocks cannot be extrapolated to the rest: trace the full model (omit --layers)")


def test_the_fallback_estimate_of_a_hybrid_is_its_trace_by_periods(tmp_path, monkeypatch):
    """`vramlens estimate` of an unmodelled hybrid (it failed before: the first 2 and 3 blocks were all short-conv
    blocks, and transformers' cache refused get_seq_length on them) equals `trace --layers 3`."""
    import vramlens

    monkeypatch.setenv("VRAMLENS_HOME", str(tmp_path))
    cfg = FAMILIES["lfm2"]
    est = vramlens.estimate(cfg, gpu="T4", **INFER)
    res = trace(cfg, layers=3, **INFER)
    assert est.breakdown.source == "trace-extrapolated" and est.peak_allocated == res.peak_allocated
    assert est.breakdown["kv_cache"] == res.breakdown["kv_cache"] > 0
    assert est.breakdown.notes[0] == (
        "figures traced (model_type lfm2 is not modelled analytically): Lfm2ForCausalLM built by transformers under "
        "fake tensors, its first 7 and 10 of 16 blocks traced at this workload and extrapolated linearly (whole "
        "periods of its layer pattern), as `vramlens trace --layers 3`; the runtime (CUDA context, workspaces) is "
        "added from the GPU catalog")


def test_gemma2_alternating_sliding_and_full_attention_is_two_blocks_a_period():
    """Not a hybrid, but its blocks alternate (layer_types): 2 and 3 blocks were 1,536 B off in inference
    activations (and 225,280 B in training temporaries); 2 and 3 periods of 2 blocks are exact."""
    cfg = {"model_type": "gemma2", "architectures": ["Gemma2ForCausalLM"], **W, "head_dim": 16, "num_hidden_layers": 8,
           "sliding_window": 16}
    _agree(cfg, {**INFER, "seq": 64}, (4, 6))


def test_a_config_transformers_saved_with_an_infinite_float_builds(tmp_path, capsys, monkeypatch):
    # Falcon-H1's time_step_limit defaults to (0.0, inf); save_pretrained writes inf as {"__float__": "Infinity"}
    # (configuration_utils.py _encode_special_floats), which only from_json_file decodes: vramlens reads the JSON
    # itself, so the tracer decodes the tag before transformers' strict dataclass validates it (it raised
    # huggingface_hub's StrictDataclassFieldValidationError, a traceback, before)
    transformers = pytest.importorskip("transformers")
    monkeypatch.setenv("VRAMLENS_HOME", str(tmp_path / "home"))
    transformers.FalconH1Config(num_hidden_layers=2, hidden_size=256, num_attention_heads=4, num_key_value_heads=2,
                                head_dim=64, intermediate_size=512, vocab_size=1000, mamba_d_ssm=256,
                                mamba_n_heads=8, mamba_d_head=32, mamba_d_state=16).save_pretrained(tmp_path)
    assert '"__float__": "Infinity"' in (tmp_path / "config.json").read_text()
    from vramlens.cli.main import main

    assert main(["capacity", str(tmp_path / "config.json"), "--engine", "vllm", "--gpu", "H100-SXM-80GB"]) == 0
    assert "weights from the inventory of FalconH1ForCausalLM built by transformers" in capsys.readouterr().out


def test_a_config_transformers_rejects_is_one_line(tmp_path):
    from vramlens.errors import TraceError
    from vramlens.trace.build import _hf_config

    with pytest.raises(TraceError) as e:  # a strict dataclass field of the wrong type: huggingface_hub's error
        _hf_config({"model_type": "falcon_h1", "time_step_limit": [0.0, "wide"]})
    assert str(e.value).startswith("transformers cannot build a config for model_type='falcon_h1' (")
    assert str(e.value).endswith("); use the analytic `vramlens estimate` instead")


def test_a_config_transformers_divides_by_zero_on_is_a_trace_error():
    """Qwen3NextConfig.__post_init__ computes (i + 1) % full_attention_interval: 0 was a ZeroDivisionError from inside
    transformers (vramlens estimate of such a config.json)."""
    with pytest.raises(TraceError) as e:
        trace(dict(QWEN3_NEXT, full_attention_interval=0))
    assert str(e.value) == ("transformers cannot build a config for model_type='qwen3_next' (integer modulo by zero); "
                            "use the analytic `vramlens estimate` instead")
