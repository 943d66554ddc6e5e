"""`vramlens capacity` for hybrid models (attention + recurrent-state blocks) and unmodelled model_types.

The vLLM arithmetic is pinned on Qwen3-Next-80B-A3B's published shape (config.json as llama.cpp's GGUF
metadata prints it in ggml-org/llama.cpp pull 16095: n_embd 2048, 48 blocks, 16 heads, 2 KV heads of 256,
512 experts of 512, 10 per token, ssm_d_conv 4, ssm_d_inner 4096 = 32 value heads x 128, ssm_n_group 16 key
heads, ssm_d_state 128) built without torch (trace_fallback=False: the generic weights, the exact cache).
"""

import json

import pytest

import vramlens
import vramlens.trace
from vramlens.cli.main import main
from vramlens.errors import ConfigError, MissingExtraError
from vramlens.models.hybrid import HybridLayout, hybrid_layout
from vramlens.serving import resolve_model
from vramlens.serving.vllm import hybrid_stage_groups, pp_partitions
from vramlens.units import BLOCK, GiB, round_up

QWEN3_NEXT_80B = {
    "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "hidden_size": 2048,
    "num_hidden_layers": 48, "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
    "intermediate_size": 5120, "vocab_size": 151936, "max_position_embeddings": 262144, "num_experts": 512,
    "num_experts_per_tok": 10, "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512,
    "full_attention_interval": 4, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
    "linear_value_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
    "partial_rotary_factor": 0.25, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}
#: A tiny Qwen3-Next: 3 Gated DeltaNet blocks and 1 attention block, 4 experts.
TINY_QWEN3_NEXT = {
    "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "hidden_size": 64, "num_hidden_layers": 4,
    "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"],
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128, "vocab_size": 256,
    "max_position_embeddings": 256, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
    "linear_key_head_dim": 16, "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4, "torch_dtype": "bfloat16",
    "partial_rotary_factor": 0.25,
}


def test_qwen3_next_layout_from_full_attention_interval():
    h = hybrid_layout(QWEN3_NEXT_80B, 48)
    assert h is not None and (h.mixer, h.n_attention, h.n_state) == ("gated_deltanet", 12, 36)
    assert h.kinds[:4] == ("state", "state", "state", "attention")  # block i is attention when (i + 1) % 4 == 0
    # conv dim = 2 x 16 x 128 + 32 x 128 = 8,192, over tp 2: 4,096; recurrent (32 / 2, 128, 128)
    assert h.shapes(2) == ((3, 4096), (16, 128, 128))
    # 3 x 4,096 x 2 B + 16 x 128 x 128 x 2 B = 24,576 + 524,288
    assert h.state_bytes(2, 2, 2) == 548_864


def test_mamba2_groups_are_extended_to_the_tp_degree():
    """vLLM ``extra_groups_for_head_shards``: 1 group over tp 4 becomes 4 groups (+ tp - g)."""
    h = HybridLayout(kinds=("state", "attention"), mixer="mamba2", conv_kernel=4, intermediate=8192, n_groups=1,
                     n_heads=128, head_dim=64, state_size=128)
    # conv dim = 8,192 + 2 x 4 x 128 = 9,216, / 4 = 2,304; ssm (128 / 4, 64, 128)
    assert h.shapes(4) == ((3, 2304), (32, 64, 128))
    assert h.shapes(1) == ((3, 8192 + 2 * 128), (128, 64, 128))


def test_nemotron_h_pattern_and_ssm_dtype():
    cfg = {"model_type": "nemotron_h", "hidden_size": 4096, "hybrid_override_pattern": "M-M*-ME", "mamba_num_heads": 128,
           "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4, "mamba_ssm_cache_dtype": "float32"}
    h = hybrid_layout(cfg, 7)
    assert h is not None
    assert (h.kinds, h.intermediate, h.ssm_dtype) == (("state", "none", "state", "attention", "none", "state", "none"),
                                                      128 * 64, "fp32")
    # no mamba_ssm_cache_dtype: vLLM's NemotronHForCausalLMConfig takes float16
    assert hybrid_layout({k: v for k, v in cfg.items() if k != "mamba_ssm_cache_dtype"}, 7).ssm_dtype == "fp16"


def test_vllm_qwen3_next_tp2_h200_worked_case():
    """The layout of a public vLLM 0.10.2 log of this model at tp 2 on 2 x H200 ("Setting attention block size to
    544 tokens", "Padding mamba page size by 1.49%"; from its logged 44.59 GiB these formulas give its 973,760
    tokens and 14.77x)."""
    cap = vramlens.capacity(QWEN3_NEXT_80B, "vllm", gpu="H200-141GB", tp=2, version="0.10.2", trace_fallback=False)
    # attention: 2 (K, V) x max(1, 2 // 2) head x 256 x 2 B = 1,024 B per token; state 548,864 B per block;
    # block size = 16 x cdiv(548,864, 16 x 1,024) = 16 x 34 = 544; page = 544 x 1,024 = 557,056 B
    assert cap.figure("attention_block_size") == 544
    assert cap.figure("mamba_page_padding") == 1.49  # (557,056 - 548,864) / 548,864 = 1.4925%
    blocks = cap.figure("num_gpu_blocks")
    # 12 attention and 36 state layers: groups of 12 (36 >= 1.5 x 12), 1 attention + 3 state groups
    assert cap.kv_cache_bytes == blocks * 557_056 * 12
    assert cap.kv_tokens == blocks // 4 * 544
    # a 262,144-token request: cdiv(262,144, 544) = 482 attention blocks + 1 block in each of 3 state groups
    assert cap.figure("max_concurrency") == round(blocks / 485, 2)
    assert cap.kv_bytes_per_token == 1_024 * 12  # only the attention layers' cache grows with the context
    assert cap.notes[0] == ("weights approximated (model_type qwen3_next is not modelled analytically; a generic "
                            "Llama-style decoder from the standard fields, --no-trace-fallback)")


def test_a_user_block_size_under_the_minimum_is_raised():
    cap = vramlens.capacity(QWEN3_NEXT_80B, "vllm", gpu="H200-141GB", tp=2, block_size=128, version="0.10.2",
                            trace_fallback=False)
    assert cap.figure("attention_block_size") == 544  # 128 < 544: raised, as vLLM does


def test_sglang_refuses_a_mamba2_hybrid_it_has_no_model_class_for():
    cfg = {"architectures": ["GraniteMoeHybridForCausalLM"], "model_type": "granitemoehybrid", "hidden_size": 1024,
           "num_hidden_layers": 4, "layer_types": ["mamba", "attention", "mamba", "mamba"], "num_attention_heads": 8,
           "num_key_value_heads": 2, "intermediate_size": 2048, "vocab_size": 1000, "max_position_embeddings": 4096,
           "mamba_n_heads": 32, "mamba_d_head": 64, "mamba_d_state": 128, "mamba_n_groups": 1, "mamba_expand": 2,
           "mamba_d_conv": 4}
    with pytest.raises(ConfigError) as e:
        vramlens.capacity(cfg, "sglang", gpu="H200-141GB", version="0.5.4", trace_fallback=False)
    assert str(e.value) == (
        "granitemoehybrid is a hybrid model (1 attention and 3 mamba2 blocks): SGLang up to 0.5.4 keeps a recurrent "
        "state for Qwen3-Next's Gated DeltaNet, from 0.5.3 for Falcon-H1 and from 0.5.4 for Nemotron-H only; it has "
        "no model class for GraniteMoeHybridForCausalLM in the releases "
        "read: use --engine vllm")


def test_sglang_refuses_a_hybrid_config_without_a_recurrent_layer():
    """full_attention_interval=1 makes every block attention: was a ZeroDivisionError in the pool's note."""
    with pytest.raises(ConfigError) as e:
        vramlens.capacity(dict(QWEN3_NEXT_80B, full_attention_interval=1), "sglang", gpu="H200-141GB",
                          trace_fallback=False)
    assert str(e.value) == (
        "qwen3_next is a hybrid model (48 attention and 0 gated_deltanet blocks): vramlens follows SGLang's hybrid "
        "pools for a model with at least one recurrent layer (a config with none is no released model): check "
        "layer_types / full_attention_interval, or use --engine vllm")


def test_an_unread_state_layout_is_refused():
    cfg = {"architectures": ["Zamba2ForCausalLM"], "model_type": "zamba2", "hidden_size": 1024,
           "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2, "intermediate_size": 2048,
           "vocab_size": 1000, "max_position_embeddings": 4096, "mamba_d_state": 64, "hybrid_layer_ids": [2]}
    with pytest.raises(ConfigError) as e:
        vramlens.capacity(cfg, "vllm", gpu="H100-80GB", trace_fallback=False)
    assert str(e.value) == (
        "model_type 'zamba2' keeps a recurrent (state-space or linear-attention) state whose layout vramlens does "
        "not read (it reads qwen3_next, granitemoehybrid, bamba, nemotron_h, jamba, falcon_h1 and lfm2): vramlens "
        "capacity refuses it rather than count its blocks as attention")


def test_without_torch_one_line_naming_the_extra(monkeypatch, tmp_path, capsys):
    def missing():
        raise MissingExtraError("torch", "trace")

    monkeypatch.setenv("VRAMLENS_HOME", str(tmp_path))
    monkeypatch.setattr(vramlens.trace, "require_torch", missing)
    line = ("model_type 'qwen3_next' is not modelled analytically and vramlens builds the real model on the meta "
            "device for its weights instead (or --no-trace-fallback for a generic Llama-style approximation), but "
            "torch is not installed: pip install 'vramlens[trace]'")
    with pytest.raises(MissingExtraError) as e:
        vramlens.capacity(TINY_QWEN3_NEXT, "vllm", gpu="H100-80GB")
    assert str(e.value) == line
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY_QWEN3_NEXT))
    assert main(["capacity", str(cfg), "--engine", "vllm", "--gpu", "H100-80GB"]) == 2
    assert capsys.readouterr().err.strip() == f"error: {line}"


@pytest.mark.slow  # about 10 s on 2 cores, most of it importing transformers and building its model on meta
def test_unmodelled_weights_are_the_meta_models_parameters(monkeypatch, tmp_path):
    torch = pytest.importorskip("torch", reason="the meta-device inventory needs the trace extra (torch)")
    transformers = pytest.importorskip("transformers", reason="the meta-device inventory needs transformers")
    monkeypatch.setenv("VRAMLENS_HOME", str(tmp_path))
    kwargs = {k: v for k, v in TINY_QWEN3_NEXT.items() if k not in ("architectures", "model_type", "torch_dtype")}
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(transformers.Qwen3NextConfig(**kwargs))
    served = resolve_model(TINY_QWEN3_NEXT)
    # every parameter in bf16, each rounded up to the allocator's 512 B blocks, plus the two fp32 rotary buffers
    # (inv_freq and original_inv_freq, 2 values each: one 512 B block apiece)
    expected = sum(round_up(p.numel() * 2, BLOCK) for p in model.parameters()) + 2 * 512
    assert served.weight_bytes == expected
    assert served.params == sum(p.numel() for p in model.parameters())
    assert (served.n_experts, served.experts_per_token, served.ffn) == (4, 2, 32)
    assert served.source_notes[0] == (
        "weights from the inventory of Qwen3NextForCausalLM built by transformers on the meta device (model_type "
        f"qwen3_next is not modelled analytically): {served.params:,} parameters")
    again = resolve_model(TINY_QWEN3_NEXT)  # the second build is read from the cache
    assert again.weight_bytes == expected and again.source_notes[1].startswith("inventory answered from the cache ")
    assert expected < GiB




def test_vllm_refuses_what_it_does_not_follow_for_a_hybrid():
    with pytest.raises(ConfigError) as e:
        vramlens.capacity(QWEN3_NEXT_80B, "vllm", gpu="H200-141GB", tp=2, pp=2, version="0.6.4",
                          trace_fallback=False)
    assert str(e.value) == (
        "vLLM 0.6.4 (V0 engine): hybrid (attention + recurrent state) models are modelled for the V1 engine only "
        "(vLLM 0.10 or later): pass --vllm-version 0.19; pp=2: pipeline parallelism of a hybrid model is modelled "
        "from vLLM 0.11 (KV cache groups of the whole model, split over the stages): vLLM 0.6.4 (V0 engine) groups "
        "each stage's layers on its own: pass --vllm-version 0.19 or use --tp")
    with pytest.raises(ConfigError) as e:  # 32 value heads do not split over 3 ranks (nor 16 attention heads)
        vramlens.capacity(QWEN3_NEXT_80B, "vllm", gpu="H200-141GB", tp=3, trace_fallback=False)
    assert ("linear_num_value_heads 32, conv dim 8192 not divisible by tensor parallel size 3 (vLLM's "
            "MambaStateShapeCalculator divides them over the ranks): choose another --tp") in str(e.value)


def test_llama_cpp_keeps_kv_cells_for_attention_and_one_state_per_sequence():
    cap = vramlens.capacity(QWEN3_NEXT_80B, "llama.cpp", gpu="H200-141GB", weights_type="q8_0", ctx_size=65536,
                            parallel=4, trace_fallback=False)
    # 12 attention blocks: 65,536 cells x 2 KV heads x 256 x 2 B, K and V: 12 x 2 x 65,536 x 512 x 2 = 1,536 MiB
    assert cap.figure("kv_self_size_mib") == 1536.0
    # 36 Gated DeltaNet blocks, f32, 4 sequences: r_l = 3 x (4,096 + 2 x 16 x 128) = 24,576 values,
    # s_l = 128 x 4,096 = 524,288 values; 36 x 4 x 4 B x 24,576 = 13.5 MiB, 36 x 4 x 4 B x 524,288 = 288 MiB
    assert (cap.figure("r_size_mib"), cap.figure("s_size_mib"), cap.figure("rs_size_mib")) == (13.5, 288.0, 301.5)
    assert cap.kv_cache_bytes == 1536 * 2**20 + 36 * 4 * 4 * (24_576 + 524_288)  # one device holds every block


def test_transformers_engine_gated_deltanet_cache_equals_the_trace(monkeypatch, tmp_path):
    """generate()'s DynamicCache per request: the attention blocks' K and V and each Gated DeltaNet block's conv and
    recurrent state, the same bytes as the tracer measures on the real model (transformers 5, fake tensors)."""
    pytest.importorskip("torch", reason="the cross-check traces the real model (trace extra)")
    pytest.importorskip("transformers", reason="the cross-check traces the real model (trace extra)")
    import vramlens.trace as T

    monkeypatch.setenv("VRAMLENS_HOME", str(tmp_path))
    cap = vramlens.capacity(TINY_QWEN3_NEXT, "transformers", gpu="H100-80GB", context=64, max_batch=1)
    # 1 attention block: 2 (K, V) x 2 heads x 16 x 2 B x 64 tokens = 8,192; 3 Gated DeltaNet blocks: conv
    # (2 x 2 x 16 + 4 x 16 = 128 channels, kernel 4) x 2 B = 1,024 + recurrent (4, 16, 16) x 4 B = 4,096
    assert cap.kv_cache_bytes == 8_192 + 3 * (1_024 + 4_096)
    traced = T.trace(TINY_QWEN3_NEXT, mode="inference", batch=1, seq=64, dtype="bf16")
    assert traced.breakdown.component("kv_cache").bytes == cap.kv_cache_bytes == 23_552


#: A Falcon-H1 shape (every block runs attention and Mamba2 side by side): 2 KV heads of 128, mamba_d_ssm 3,072,
#: 24 Mamba heads of 128, state 256, 1 group, kernel 4.
FALCON_H1 = {"architectures": ["FalconH1ForCausalLM"], "model_type": "falcon_h1", "hidden_size": 2048,
             "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 128,
             "intermediate_size": 4096, "vocab_size": 32768, "max_position_embeddings": 16384, "mamba_d_ssm": 3072,
             "mamba_n_heads": 24, "mamba_d_head": 128, "mamba_d_state": 256, "mamba_n_groups": 1, "mamba_d_conv": 4,
             "torch_dtype": "bfloat16"}
#: An LFM2 shape: short convolutions ("conv", L_cache 3) and one full-attention block of 8 KV heads of 64.
LFM2 = {"architectures": ["Lfm2ForCausalLM"], "model_type": "lfm2", "hidden_size": 1024, "num_hidden_layers": 4,
        "layer_types": ["conv", "conv", "full_attention", "conv"], "num_attention_heads": 16,
        "num_key_value_heads": 8, "intermediate_size": 4096, "vocab_size": 65536, "max_position_embeddings": 32768,
        "conv_L_cache": 3, "torch_dtype": "bfloat16"}


def test_vllm_falcon_h1_counts_each_block_as_an_attention_and_a_mamba_layer():
    h = hybrid_layout(FALCON_H1, 4)
    assert h is not None and (h.n_attention, h.n_state, h.mixer) == (4, 4, "mamba2")
    cap = vramlens.capacity(FALCON_H1, "vllm", gpu="H100-80GB", version="0.10.2", trace_fallback=False)
    # state: conv (3, 3,072 + 2 x 1 x 256) x 2 B = 21,504 + ssm (24, 128, 256) x 2 B = 1,572,864 -> 1,594,368 B;
    # one token's attention page 2 x 2 x 128 x 2 B = 1,024; block size 16 x cdiv(1,594,368, 16 x 1,024) = 1,568
    assert cap.figure("attention_block_size") == 1568
    assert cap.figure("mamba_page_padding") == 0.71  # (1,568 x 1,024 - 1,594,368) / 1,594,368 = 0.706%
    assert cap.kv_bytes_per_token == 1_024 * 4


def test_lfm2_short_convolutions_in_vllm_and_llama_cpp():
    h = hybrid_layout(LFM2, 4)
    assert h is not None and h.kinds == ("state", "state", "attention", "state")
    assert h.shapes(2) == ((2, 512), ())  # (L_cache - 1, hidden / tp); no ssm state
    cap = vramlens.capacity(LFM2, "vllm", gpu="H100-80GB", version="0.10.2", trace_fallback=False)
    # state 2 x 1,024 x 2 B = 4,096 B; a1 = 2 x 8 x 64 x 2 B = 2,048; block size 16 x cdiv(4,096, 32,768) = 16
    assert (cap.figure("attention_block_size"), cap.figure("mamba_page_padding")) == (16, 700.0)
    cpp = vramlens.capacity(LFM2, "llama.cpp", gpu="H100-80GB", weights_type="q8_0", ctx_size=4096, parallel=2,
                            trace_fallback=False)
    # 1 attention block: 2 x 4,096 cells x 512 x 2 B = 8 MiB; 3 conv blocks x 2 sequences x 2,048 f32 values
    assert cpp.kv_cache_bytes == 8 * 2**20 + 3 * 2 * 2_048 * 4


NEMOTRON_H = {"model_type": "nemotron_h", "hidden_size": 4096, "hybrid_override_pattern": "M-M*-ME", "mamba_num_heads": 128,
              "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4}
JAMBA = {"model_type": "jamba", "hidden_size": 4096, "attn_layer_period": 8, "attn_layer_offset": 4, "mamba_d_state": 16}
GRANITE_H = {"model_type": "granitemoehybrid", "hidden_size": 1536, "layer_types": ["mamba", "mamba", "mamba", "attention"],
             "mamba_n_heads": 48, "mamba_d_head": 64, "mamba_d_state": 128}
FIX = "use the model's own config.json"


@pytest.mark.parametrize(("config", "n_layers", "message"), [
    # were ZeroDivisionError (i % 0), TypeError (a list as a layer type) or a state of 0 or negative bytes
    (dict(QWEN3_NEXT_80B, full_attention_interval=0), 48, f"full_attention_interval=0 must be >= 1: {FIX}"),
    (dict(QWEN3_NEXT_80B, layer_types=[["x"]] * 48), 48,
     "layer_types has ['x'], not a layer type (full_attention, attention, sliding_attention, linear_attention, mamba, "
     f"mamba2, conv, mlp, moe): {FIX}"),
    (dict(QWEN3_NEXT_80B, linear_num_value_heads=-32), 48, f"linear_num_value_heads=-32 must be >= 1: {FIX}"),
    (dict(QWEN3_NEXT_80B, layer_types=["linear_attention"] * 3 + ["full_attention"]), 48,
     "layer_types gives 4 block(s) for num_hidden_layers=48: give one per decoder block"),
    # a kernel of 1 was a conv state of 0 bytes: causal_conv1d_fwd takes widths 2 to 4
    (dict(QWEN3_NEXT_80B, linear_conv_kernel_dim=1), 48, f"linear_conv_kernel_dim=1 must be >= 2: {FIX}"),
    (dict(JAMBA, mamba_d_conv=1), 32, f"mamba_d_conv=1 must be >= 2: {FIX}"),
    # no block mixes tokens: llama.cpp gave a confident 0-byte cache
    (dict(GRANITE_H, layer_types=["mlp"] * 4), 4,
     f"layer_types makes none of the 4 blocks attention or recurrent (every one an MLP or MoE): {FIX}"),
    (dict(JAMBA, attn_layer_period=0), 32, f"attn_layer_period=0 must be >= 1: {FIX}"),
    (dict(JAMBA, attn_layer_offset=8), 32,
     f"attn_layer_offset=8 must be smaller than attn_layer_period=8 (else no block is attention): {FIX}"),
    (dict(NEMOTRON_H, hybrid_override_pattern="M-X"), 3,
     f"hybrid_override_pattern has 'X': its letters are M (Mamba2), * (attention), - (MLP) and E (MoE); {FIX}"),
    (dict(NEMOTRON_H, mamba_ssm_cache_dtype="int4"), 7,
     f"mamba_ssm_cache_dtype='int4' is not one of auto, float32, float16, bfloat16, half, float: {FIX}"),
    ({k: v for k, v in NEMOTRON_H.items() if k != "ssm_state_size"}, 7,
     f"mamba_d_state or ssm_state_size is missing: the mamba2 state of each block is sized by it; {FIX}"),
    (dict(GRANITE_H, mamba_n_heads=47), 4,
     f"mamba_n_heads=47 x mamba_d_head=64 must equal mamba_expand=2 x hidden_size=1536 (the Mamba2 intermediate "
     f"size): {FIX}"),
    (dict(QWEN3_NEXT_80B, linear_num_value_heads=31), 48,
     f"linear_num_value_heads=31 must be a multiple of linear_num_key_heads=16 (each key head serves the same number "
     f"of value heads): {FIX}"),
    (dict(NEMOTRON_H, n_groups=3), 7,
     f"3 Mamba2 groups (mamba_n_groups or n_groups) must divide its 128 heads (each group's B and C serve the same "
     f"number of heads): {FIX}"),
    ({**{k: v for k, v in GRANITE_H.items() if k != "layer_types"}, "model_type": "bamba", "attn_layer_indices": 3}, 4,
     f"attn_layer_indices=3 is not a list of block indices in [0, 4): {FIX}"),
])
def test_a_hybrid_layout_no_model_has_is_refused_naming_the_field(config, n_layers, message):
    with pytest.raises(ConfigError) as e:
        hybrid_layout(config, n_layers)
    assert str(e.value) == message


def test_a_bad_hybrid_field_is_one_line_exit_2(tmp_path, capsys):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(dict(QWEN3_NEXT_80B, full_attention_interval=0)))  # was ZeroDivisionError
    assert main(["capacity", str(cfg), "--gpu", "H200-141GB", "--no-trace-fallback"]) == 2
    out, err = capsys.readouterr()
    assert (out, err) == ("", f"error: full_attention_interval=0 must be >= 1: {FIX}\n")


@pytest.mark.parametrize(("value", "why"), [
    ({"format": 1, "tensors": []}, "no model facts or tensor list"),
    ({"format": 1, "model": {"hidden_size": -1}, "tensors": []}, "model hidden_size=-1 is not a count"),
    ({"format": 1, "model": {"hidden_size": "x"}, "tensors": []}, "model hidden_size='x' is not a count"),
])
def test_a_damaged_inventory_cache_entry_is_built_again(monkeypatch, value, why):
    """A cached inventory was used as it was read: a missing key was a KeyError, a negative width an answer.
    Now it is a miss (the rebuild needs torch: here it is missing, so the miss shows as MissingExtraError)."""
    from vramlens import cache
    from vramlens.fallback import inventory_problem

    assert inventory_problem(value) == why
    monkeypatch.setattr(cache, "read", lambda kind, key: cache.Lookup(value))

    def missing():
        raise MissingExtraError("torch", "trace")

    monkeypatch.setattr(vramlens.trace, "require_torch", missing)
    with pytest.raises(MissingExtraError):
        vramlens.capacity(TINY_QWEN3_NEXT, "vllm", gpu="H100-80GB")


def test_inventory_problem_names_a_bad_tensor_row():
    from vramlens.fallback import inventory_problem

    facts = {"model_type": "qwen3_next", "architecture": "Qwen3NextForCausalLM", "kind": "decoder", "head": "causal-lm",
             "hidden_size": 64, "n_heads": 4, "n_kv_heads": 2, "head_dim": 16, "ffn_size": 128, "vocab_size": 256,
             "n_layers": 4, "max_position": 256, "tied_embeddings": False}
    good = ["model.embed_tokens.weight", [256, 64], "embedding", "embed_tokens", None, None]
    assert inventory_problem({"model": facts, "tensors": [good]}) == ""
    bad = ["e.weight", [-256, 64], "embedding", "e", None, None]
    assert inventory_problem({"model": facts, "tensors": [good, bad]}) == (
        "tensor entry ['e.weight', [-256, 64], 'embedding', 'e', None, None] is not [name, shape, role, module, layer, "
        "dtype]")


#: A Granite 4.0-H-shaped Mamba2 hybrid (made up, 8 blocks: 6 Mamba2, 2 attention): hidden 4,096, 32 heads and 8 KV
#: heads of 128, Mamba2 128 heads of 64, state 128, 1 group, expand 2, conv 4, mamba_chunk_size 256.
GRANITE_H = {
    "architectures": ["GraniteMoeHybridForCausalLM"], "model_type": "granitemoehybrid", "hidden_size": 4096,
    "num_hidden_layers": 8, "layer_types": ["mamba", "mamba", "mamba", "attention"] * 2, "num_attention_heads": 32,
    "num_key_value_heads": 8, "intermediate_size": 8192, "vocab_size": 100352, "max_position_embeddings": 131072,
    "mamba_n_heads": 128, "mamba_d_head": 64, "mamba_d_state": 128, "mamba_n_groups": 1, "mamba_expand": 2,
    "mamba_d_conv": 4, "mamba_chunk_size": 256, "torch_dtype": "bfloat16",
}


def _granite(**kw):
    return vramlens.capacity(GRANITE_H, "vllm", gpu="H100-SXM-80GB", max_model_len=32768, trace_fallback=False, **kw)


def test_vllm_mamba_hybrid_prefix_caching_modes():
    """vLLM 0.19 MambaModelConfig / HybridAttentionMambaModelConfig / MambaSpec.max_memory_usage_bytes per mode."""
    # a1 = 2 x 8 KV heads x 128 x 2 B = 4,096 B per token; state = conv 3 x (8,192 + 2 x 128) x 2 B 50,688
    # + ssm 128 x 64 x 128 x 2 B 2,097,152 = 2,147,840 B; 2 attention and 6 state layers: groups of 2
    # (6 >= 1.5 x 2), 1 full and 3 state groups
    off = _granite()
    # prefix caching off: block 16 x cdiv(2,147,840, 16 x 4,096) = 16 x 33 = 528; page 528 x 4,096 = 2,162,688
    assert (off.figure("attention_block_size"), off.figure("mamba_page_padding")) == (528, 0.69)
    n = off.figure("num_gpu_blocks")
    assert off.kv_cache_bytes == n * 2_162_688 * 2
    # a 32,768-token request: cdiv(32,768, 528) = 63 attention blocks + 1 block in each of 3 state groups
    assert off.figure("max_concurrency") == round(n / 66, 2)
    assert off.kv_tokens == n // 4 * 528  # min(528, mamba_block_size = max_model_len 32,768)
    # --enable-prefix-caching on a Mamba2 hybrid: mode "all" by default; the block is the SSD chunk,
    # lcm(256, 16) = 256, x cdiv(cdiv(2,147,840, 4,096) = 525, 256) = 768; page 768 x 4,096 = 3,145,728 B
    all_ = _granite(enable_prefix_caching=True)
    assert (all_.figure("attention_block_size"), all_.figure("mamba_page_padding")) == (768, 46.46)
    n = all_.figure("num_gpu_blocks")
    assert all_.kv_cache_bytes == n * 3_145_728 * 2
    # every state layer keeps cdiv(32,768, 768) = 43 blocks, as the attention ones: 43 + 3 x 43 = 172
    assert all_.figure("max_concurrency") == round(n / 172, 2)
    assert all_.kv_tokens == n // 4 * 768
    assert ("hybrid: Mamba cache mode is set to 'all' for ... by default when prefix caching is enabled (vLLM)"
            in all_.notes)
    # --mamba-cache-mode align: the minimal block (528) and 2 blocks per state layer: 63 + 3 x 2 = 69
    align = _granite(enable_prefix_caching=True, mamba_cache_mode="align")
    assert align.figure("attention_block_size") == 528
    assert align.figure("num_gpu_blocks") == off.figure("num_gpu_blocks")
    assert align.figure("max_concurrency") == round(off.figure("num_gpu_blocks") / 69, 2)
    assert align.kv_tokens == off.kv_tokens  # min(528, mamba_block_size 528)
    # a mode without prefix caching is set back to "none"
    assert _granite(mamba_cache_mode="all").figure("max_concurrency") == off.figure("max_concurrency")


def test_vllm_prefix_caching_by_release():
    """0.11.1-0.14 cache a Mamba hybrid's state as 0.15's "all"; 0.11.0 and earlier turn prefix caching off."""
    old = _granite(enable_prefix_caching=True, version="0.12")
    assert old.figure("attention_block_size") == 768  # the chunk-aligned block, as "all" above
    assert old.figure("max_concurrency") == round(old.figure("num_gpu_blocks") / 172, 2)
    assert ("hybrid: Warning: Prefix caching is currently enabled. Its support for Mamba layers is experimental. "
            "(vLLM; the state of every block_size-th token is cached, as 0.15's mode 'all')") in old.notes
    off = _granite(enable_prefix_caching=True, version="0.11.0")
    assert off.figure("attention_block_size") == 528
    assert off.figure("max_concurrency") == round(off.figure("num_gpu_blocks") / 66, 2)
    assert ("hybrid: Hybrid or mamba-based model detected: disabling prefix caching since it is not yet supported. "
            "(vLLM; it is kept from 0.11.1 for Mamba hybrids)") in off.notes


def test_vllm_qwen3_next_prefix_caching_is_align_mode():
    """Qwen3NextForCausalLM lacks SupportsMambaPrefixCaching: 0.15+ run "align" (2 state blocks per request), even
    when "all" is asked for; 0.12 turns prefix caching off."""
    base = vramlens.capacity(QWEN3_NEXT_80B, "vllm", gpu="H200-141GB", tp=2, trace_fallback=False)
    cap = vramlens.capacity(QWEN3_NEXT_80B, "vllm", gpu="H200-141GB", tp=2, trace_fallback=False,
                            enable_prefix_caching=True, mamba_cache_mode="all")
    assert cap.figure("attention_block_size") == 544  # 16 x cdiv(548,864, 16 x 1,024), as without prefix caching
    assert cap.figure("num_gpu_blocks") == base.figure("num_gpu_blocks")
    # a 262,144-token request: cdiv(262,144, 544) = 482 attention blocks + 2 blocks in each of 3 state groups
    assert cap.figure("max_concurrency") == round(cap.figure("num_gpu_blocks") / 488, 2)
    assert ("hybrid: Hybrid or mamba-based model detected without support for prefix caching with Mamba cache 'all' "
            "mode: falling back to 'align' mode. (vLLM)") in cap.notes
    old = vramlens.capacity(QWEN3_NEXT_80B, "vllm", gpu="H200-141GB", tp=2, trace_fallback=False,
                            enable_prefix_caching=True, version="0.12")
    assert old.figure("max_concurrency") == round(old.figure("num_gpu_blocks") / 485, 2)  # 482 + 3 x 1


def test_vllm_mamba_cache_mode_refusals(capsys):
    with pytest.raises(ConfigError) as e:  # VllmConfig.__post_init__ (0.17+) asserts it
        vramlens.capacity(QWEN3_NEXT_80B, "vllm", gpu="H200-141GB", tp=2, trace_fallback=False,
                          enable_prefix_caching=True, max_num_batched_tokens=512, max_num_seqs=256)
    assert str(e.value) == ("In Mamba cache align mode, block_size (544) must be <= max_num_batched_tokens (512). "
                            "(vLLM): pass --max-num-batched-tokens 544 or more")
    with pytest.raises(ConfigError) as e:
        vramlens.capacity(QWEN3_NEXT_80B, "vllm", gpu="H200-141GB", tp=2, trace_fallback=False,
                          mamba_cache_mode="align", version="0.14")
    assert str(e.value) == ("--mamba-cache-mode is a flag of vLLM 0.15 and later (CacheConfig.mamba_cache_mode): "
                            "version 0.14 given: pass --vllm-version 0.19 or leave the flag out")
    assert main(["capacity", "qwen2.5-7b", "--engine", "vllm", "--gpu", "H100-SXM-80GB", "--enable-prefix-caching",
                 "--mamba-cache-mode", "everything"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: mamba_cache_mode='everything' is not one of none, align, all (vLLM CacheConfig.mamba_cache_mode): "
        "pass --mamba-cache-mode align or all")


def test_vllm_hybrid_pipeline_stages():
    """get_pp_indices' split and get_kv_cache_configs' whole-model groups, each stage holding its share of them."""
    assert pp_partitions(8, 3) == [3, 3, 2]  # 8 // 3 = 2 each, the remainder 2 to the second-to-last and the first
    assert pp_partitions(48, 5) == [9, 10, 10, 10, 9]  # 48 // 5 = 9, the remainder 3 to stages -2, -3, -4
    h = hybrid_layout(GRANITE_H, 8)  # blocks 3 and 7 attention, the others Mamba2
    # groups of 2 (6 state >= 1.5 x 2 attention): attention [3, 7]; state [0, 1, 2, 4, 5, 6] in cdiv(6, 2) = 3 groups
    # taking every 3rd layer: [0, 4], [1, 5], [2, 6]; over stages 0-2, 3-5, 6-7 no group has 2 layers on one stage
    assert hybrid_stage_groups(h, 3, 2) == ([1, 1, 1], [0, 1, 1])
    assert hybrid_stage_groups(h, 2, 2) == ([1, 1], [1, 1])
    pp1 = vramlens.capacity(QWEN3_NEXT_80B, "vllm", gpu="H200-141GB", tp=2, trace_fallback=False)
    cap = vramlens.capacity(QWEN3_NEXT_80B, "vllm", gpu="H200-141GB", tp=2, pp=2, trace_fallback=False)
    # 24 blocks a stage, 6 attention and 18 state layers each: every group of 12 has 6 layers on each stage
    blocks = cap.figure("num_gpu_blocks")
    assert cap.kv_cache_bytes == blocks * 557_056 * 6
    assert cap.kv_tokens == blocks // 4 * 544  # all 4 groups on every stage
    assert cap.figure("max_concurrency") == round(blocks / 485, 2)  # 482 + 3, as at pp 1
    assert cap.kv_bytes_per_token == 1_024 * 6
    assert blocks > 2 * pp1.figure("num_gpu_blocks")  # half the layers a GPU, and half the weights
    assert ("hybrid: pp=2: stages of 24, 24 blocks (get_pp_indices) hold 6, 6 attention layers; groups of 12 layers "
            "over the whole model, of at most 6, 6 layers on each stage: blocks = available // page // 6 on every "
            "stage (get_kv_cache_configs)") in cap.notes


def test_vllm_group_size_threshold_by_release():
    """_get_kv_cache_groups_uniform_page_size: 5 state and 4 attention layers are grouped by the larger count when
    5 < ratio x 4: 0.18-0.19's 1.5 (6) yes, 0.12-0.17's 1.25 (5) no, 0.10-0.11 always by the smaller."""
    cfg = {**GRANITE_H, "num_hidden_layers": 9, "layer_types": ["mamba", "attention"] * 4 + ["mamba"]}
    notes = {v: [n for n in vramlens.capacity(cfg, "vllm", gpu="H100-SXM-80GB", max_model_len=32768, version=v,
                                              trace_fallback=False).notes if n.startswith("KV groups")]
             for v in ("0.19", "0.17", "0.11.2")}
    assert notes["0.19"] == ["KV groups: 1 full, 1 state of 5 layers (hybrid KV cache manager)"]
    # cdiv(5, 4) = 2 state groups of 4 (one padding layer)
    assert notes["0.17"] == notes["0.11.2"] == ["KV groups: 1 full, 2 state of 4 layers (hybrid KV cache manager)"]


def test_vllm_019_qwen3_next_mtp_worked_case():
    """The model card's --speculative-config '{"method": "qwen3_next_mtp", "num_speculative_tokens": 2}' at tp 2 on
    H200: 2 more conv rows per Gated DeltaNet state, 2 more state blocks per request, the MTP layer's KV pages in the
    attention group (vLLM 0.19.0)."""
    cap = vramlens.capacity(QWEN3_NEXT_80B, "vllm", gpu="H200-141GB", tp=2, trace_fallback=False,
                            speculative_config={"method": "qwen3_next_mtp", "num_speculative_tokens": 2})
    # state: conv (3 + 2) x 4,096 x 2 B + ssm 16 x 128 x 128 x 2 B = 40,960 + 524,288 = 565,248 B;
    # block size = 16 x cdiv(565,248, 16 x 1,024) = 16 x 35 = 560; page = 560 x 1,024 = 573,440 B
    assert cap.figure("attention_block_size") == 560
    assert cap.figure("mamba_page_padding") == 1.45  # (573,440 - 565,248) / 565,248 = 1.449%
    blocks = cap.figure("num_gpu_blocks")
    # 12 + 1 MTP attention layers and 36 state layers: groups of 13 (36 >= 1.5 x 13), 1 attention + 3 state groups
    assert cap.kv_cache_bytes == blocks * 573_440 * 13
    assert cap.draft_kv_cache_bytes == blocks * 573_440
    assert cap.kv_tokens == blocks // 4 * 560
    # a 262,144-token request: cdiv(262,144, 560) = 469 attention blocks + (1 + 2) blocks in each of 3 state groups
    assert cap.figure("max_concurrency") == round(blocks / 478, 2)
    assert cap.kv_bytes_per_token == 1_024 * 13
    # the MTP layer: its full-attention block / 2 + fc 2 x 2,048 x 2,048 x 2 B / 2 (ColumnParallelLinear) + 3 norms
    # 2,048 x 2 B: 50,335,755 + 8,388,608 + 12,288 (the block, 100,671,509 B, is --no-trace-fallback's generic one)
    assert cap.draft_weights_bytes == 58_736_651
    ngram = vramlens.capacity(QWEN3_NEXT_80B, "vllm", gpu="H200-141GB", tp=2, trace_fallback=False,
                              speculative_config={"method": "ngram", "num_speculative_tokens": 2})
    assert ngram.figure("attention_block_size") == 560
    assert ngram.kv_cache_bytes == ngram.figure("num_gpu_blocks") * 573_440 * 12  # no draft layer: groups of 12
    assert ngram.figure("max_concurrency") == round(ngram.figure("num_gpu_blocks") / 478, 2)


def test_vllm_speculative_on_a_hybrid_refusals():
    with pytest.raises(ConfigError) as e:
        vramlens.capacity(QWEN3_NEXT_80B, "vllm", gpu="H200-141GB", tp=2, trace_fallback=False, version="0.15",
                          speculative_config={"method": "qwen3_next_mtp", "num_speculative_tokens": 2})
    assert str(e.value) == (
        "speculative decoding on a hybrid model is modelled as vLLM 0.19.0 sizes it (MambaSpec.num_speculative_blocks "
        "and the conv state's num_spec rows; earlier releases not read): pass --vllm-version 0.19")
    # the whole config (this module's NEMOTRON_H is the layout's)
    from test_sglang_hybrid import NEMOTRON_H as nemotron_h

    with pytest.raises(ConfigError) as e:
        vramlens.capacity(nemotron_h, "vllm", gpu="H200-141GB", trace_fallback=False,
                          speculative_config={"method": "ngram", "num_speculative_tokens": 2})
    assert str(e.value) == (
        "speculative decoding on a hybrid model is modelled for Gated DeltaNet (Qwen3-Next) only; the mamba2 mixers' "
        "speculative state shapes were not read: drop --speculative-config")
