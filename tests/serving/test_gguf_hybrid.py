"""llama.cpp capacity from the GGUF header of a recurrent or hybrid architecture (headers written here).

The keys are those llama.cpp's load_hparams reads (src/llama-model.cpp at 00342301d01a); each test pins the
KV cells and the r_l / s_l rows (n_embd_r(), n_embd_s(), src/llama-hparams.cpp) in exact bytes.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

import vramlens
from vramlens.advise.gguf_header import read_gguf
from vramlens.errors import ConfigError, ModelSourceError
from vramlens.models.hybrid import BOTH, NONE, STATE

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from make_file_corpus import ARR, I32, STR, U32, gguf_bytes  # noqa: E402

MiB = 2**20


def _info(arch: str, n_layers: int, n_embd: int, keys: dict):
    kv = [("general.architecture", STR, arch), (f"{arch}.block_count", U32, n_layers),
          (f"{arch}.context_length", U32, 262_144), (f"{arch}.embedding_length", U32, n_embd)]
    kv += [(f"{arch}.{k}", ARR, (I32, v)) if isinstance(v, list) else (f"{arch}.{k}", U32, v) for k, v in keys.items()]
    tensors = [("token_embd.weight", (32, 8), 1), ("blk.0.attn_norm.weight", (32,), 0), ("output.weight", (32, 8), 1)]
    data = gguf_bytes(kv, tensors)
    return read_gguf(io.BytesIO(data), len(data), f"{arch}.gguf")


#: Qwen3-Next-80B-A3B's header (ggml-org/llama.cpp pull 16095's metadata print): 48 blocks, n_embd 2048,
#: 16 heads, 2 KV heads of 256, ssm_d_conv 4, ssm_d_inner 4,096 (32 value heads x 128), ssm_d_state 128,
#: ssm_n_group 16, time_step_rank 32
QWEN3NEXT = {"attention.head_count": 16, "attention.head_count_kv": 2, "attention.key_length": 256,
             "attention.value_length": 256, "ssm.conv_kernel": 4, "ssm.inner_size": 4096, "ssm.state_size": 128,
             "ssm.time_step_rank": 32, "ssm.group_count": 16, "full_attention_interval": 4}


def test_qwen3next_gguf_equals_the_config_path():
    info = _info("qwen3next", 48, 2048, QWEN3NEXT)
    h = info.hybrid
    assert h is not None and (h.mixer, h.n_attention, h.n_state, info.head_dim) == ("gated_deltanet", 12, 36, 256)
    # n_embd_r = 3 x (4,096 + 2 x 16 x 128) = 24,576; n_embd_s = 128 x 4,096 = 524,288
    assert h.llama_rs_values() == (24_576, 524_288)
    cap = vramlens.capacity(info, "llama.cpp", gpu="H200-141GB", ctx_size=65536, parallel=4)
    # the figures of tests/serving/test_hybrid_capacity.py's config.json case: 12 x 2 x 65,536 x 512 x 2 B =
    # 1,536 MiB of KV; 36 x 4 x 4 B x 24,576 = 13.5 MiB of R, 36 x 4 x 4 B x 524,288 = 288 MiB of S
    assert cap.figure("kv_self_size_mib") == 1536.0
    assert (cap.figure("r_size_mib"), cap.figure("s_size_mib"), cap.figure("rs_size_mib")) == (13.5, 288.0, 301.5)
    assert cap.kv_cache_bytes == 1536 * MiB + 36 * 4 * 4 * (24_576 + 524_288)


NEMOTRON_KEYS = {"attention.head_count": 8, "attention.head_count_kv": [0, 0, 0, 2, 0, 0],
                 "feed_forward_length": [0, 512, 0, 0, 512, 0], "ssm.conv_kernel": 4, "ssm.inner_size": 256,
                 "ssm.state_size": 16, "ssm.time_step_rank": 8, "ssm.group_count": 2}


def test_nemotron_h_kinds_from_per_layer_head_and_ffn_counts():
    """Recurrent where head_count_kv and feed_forward_length are 0, attention where only the FFN width is 0."""
    keys = NEMOTRON_KEYS
    info = _info("nemotron_h", 6, 64, keys)
    h = info.hybrid
    assert h is not None and h.kinds == (STATE, NONE, STATE, "attention", NONE, STATE)
    # n_embd_r = 3 x (256 + 2 x 2 x 16) = 960; n_embd_s = 16 x 256 = 4,096
    assert h.llama_rs_values() == (960, 4096)
    cap = vramlens.capacity(info, "llama.cpp", gpu="H100-80GB", ctx_size=1024, parallel=2)
    # 1 attention block: 2 x 1,024 cells x 2 heads x (64 / 8 = 8) x 2 B = 65,536; 3 Mamba2 blocks x 2 sequences
    # x (960 + 4,096) x 4 B = 121,344
    assert cap.kv_cache_bytes == 65_536 + 121_344
    moe = _info("nemotron_h_moe", 6, 64, keys).hybrid  # the MoE variant shares load_hparams' case
    assert moe is not None and moe.kinds == h.kinds


def test_falcon_h1_blocks_keep_kv_cells_and_recurrent_rows():
    keys = {"attention.head_count": 8, "attention.head_count_kv": 2, "attention.key_length": 16,
            "ssm.conv_kernel": 4, "ssm.inner_size": 128, "ssm.state_size": 16, "ssm.time_step_rank": 4,
            "ssm.group_count": 1}
    info = _info("falcon-h1", 2, 64, keys)
    assert info.hybrid is not None and info.hybrid.kinds == (BOTH, BOTH)
    cap = vramlens.capacity(info, "llama.cpp", gpu="H100-80GB", ctx_size=512)
    # per block: K and V 512 cells x 2 x 16 x 2 B = 2 x 32,768; r 3 x (128 + 2 x 16) = 480, s 16 x 128 = 2,048,
    # f32, one sequence: 10,112; two blocks
    assert cap.kv_cache_bytes == 2 * (65_536 + 10_112)
    assert (cap.figure("kv_self_size_mib"), cap.figure("rs_size_mib")) == (0.12, 0.02)


def test_lfm2_short_convolutions_keep_only_r_rows():
    keys = {"attention.head_count": 4, "attention.head_count_kv": [0, 0, 2, 0], "shortconv.l_cache": 3}
    h = _info("lfm2", 4, 64, keys).hybrid
    assert h is not None and (h.n_attention, h.n_state) == (1, 3)
    assert h.llama_rs_values() == (64 * 2, 0)  # n_embd x (L_cache - 1); n_embd_s() 0


def test_mamba_and_rwkv_have_no_attention_heads_and_no_kv_cells():
    info = _info("mamba", 2, 64, {"attention.head_count": 0, "ssm.conv_kernel": 4, "ssm.inner_size": 128,
                                  "ssm.state_size": 16, "ssm.time_step_rank": 4})
    cap = vramlens.capacity(info, "llama.cpp", gpu="H100-80GB", ctx_size=4096, parallel=3)
    # r = 3 x 128 = 384, s = 16 x 128 = 2,048 values; 2 blocks x 3 sequences x 4 B
    assert cap.kv_cache_bytes == 2 * 3 * 4 * (384 + 2048)
    assert cap.figure("kv_self_size_mib") == 0.0
    rwkv = _info("rwkv7", 2, 64, {"wkv.head_size": 16}).hybrid
    assert rwkv is not None and rwkv.llama_rs_values() == (2 * 64, 64 * 16)  # token_shift_count 2 by default


def test_a_header_without_a_required_state_key_is_refused():
    keys = {k: v for k, v in QWEN3NEXT.items() if k != "ssm.inner_size"}
    with pytest.raises(ModelSourceError) as e:
        _info("qwen3next", 48, 2048, keys)
    assert str(e.value) == ("qwen3next.gguf: the header lacks qwen3next.ssm.inner_size, which llama.cpp's load_hparams "
                            "requires for architecture 'qwen3next': the file is truncated, corrupt or not GGUF: "
                            "download it again or re-convert it with llama.cpp")
    with pytest.raises(ModelSourceError) as e:
        _info("lfm2", 4, 64, {"attention.head_count": 4, "attention.head_count_kv": [0, 2], "shortconv.l_cache": 3})
    assert str(e.value) == ("lfm2.gguf: not a readable GGUF file (lfm2.attention.head_count_kv has 2 entries but "
                            "lfm2.block_count=4: the file is truncated, corrupt or not GGUF: download it again or "
                            "re-convert it with llama.cpp)")


def test_an_unread_recurrent_gguf_is_refused_for_llama_cpp():
    info = _info("plamo2", 2, 64, {"attention.head_count": 4})
    with pytest.raises(ConfigError) as e:
        vramlens.capacity(info, "llama.cpp", gpu="H100-80GB")
    assert str(e.value) == (
        "plamo2.gguf: GGUF architecture 'plamo2' keeps a recurrent state per sequence (llama.cpp's "
        "llama_memory_recurrent / llama_memory_hybrid) whose layout vramlens does not read (it reads arwkv7, "
        "falcon-h1, granitehybrid, jamba, lfm2, lfm2moe, mamba, mamba2, nemotron_h, nemotron_h_moe, qwen35, "
        "qwen35moe, qwen3next, rwkv6, rwkv6qwen2, rwkv7); only its attention layers would keep the KV cache counted here")


def test_place_counts_kv_cells_for_attention_blocks_only():
    from vramlens.advise.gguf_split import split_layers
    from vramlens.hardware.gpu import GPU

    info = _info("qwen3next", 48, 2048, QWEN3NEXT)
    gpu = GPU(name="test", memory_bytes=80 * 2**30, bandwidth_bytes_s=1e12, bf16_flops=1e14, fp16_flops=1e14,
              fp32_flops=1e13, arch="hopper")
    s = split_layers(info, gpu, n_ctx=4096)
    # the blocks hold one 128-B norm here: every block and its cache go to the GPU, the output layer too:
    # 12 attention blocks x 2 x 4,096 x 512 x 2 B + 36 Gated DeltaNet blocks x (24,576 + 524,288) x 4 B
    assert s.n_gpu_layers == 49
    assert s.gpu_bytes == 12 * 2 * 4096 * 512 * 2 + 36 * (24_576 + 524_288) * 4 + 128 + info.output_bytes


def test_qwen35_gguf_against_a_published_recurrent_state_log():
    """ggml-org/llama.cpp pull 23792 (comment by Stoney49th): a Qwen3.5 GGUF of 64 blocks and one MTP block at 3
    sequences logs "llama_memory_recurrent: size = 448.88 MiB (3 cells, 65 layers, 3 seqs 0 rs_seq), R (f32):
    16.88 MiB, S (f32): 432.00 MiB" and skips every 4th block and the MTP block. The header below has the sizes
    those per-layer figures imply (48 value heads x 128 = 6,144 inner, 16 key heads of 128)."""
    keys = {"attention.head_count": 24, "attention.head_count_kv": 4, "attention.key_length": 256,
            "ssm.conv_kernel": 4, "ssm.inner_size": 6144, "ssm.state_size": 128, "ssm.time_step_rank": 48,
            "ssm.group_count": 16, "full_attention_interval": 4, "nextn_predict_layers": 1}
    info = _info("qwen35", 65, 5120, keys)
    h = info.hybrid
    # trunk of 64: 48 Gated DeltaNet blocks, 16 attention; the MTP block 64 neither
    assert h is not None and (h.n_state, h.n_attention, h.kinds[63], h.kinds[64]) == (48, 16, "attention", "none")
    cap = vramlens.capacity(info, "llama.cpp", gpu="H200-141GB", ctx_size=4096, parallel=3)
    # R: 48 x 3 x 4 B x 3 x (6,144 + 2 x 16 x 128) = 16.875 MiB; S: 48 x 3 x 4 B x 128 x 6,144 = 432 MiB
    assert (cap.figure("r_size_mib"), cap.figure("s_size_mib"), cap.figure("rs_size_mib")) == (16.88, 432.0, 448.88)


def test_kv_heads_that_do_not_divide_the_heads_are_refused():
    """llama.cpp's KQ product asserts ggml_can_mul_mat (n_head % n_head_kv == 0) when it builds the graph."""
    with pytest.raises(ModelSourceError) as e:
        _info("llama", 2, 64, {"attention.head_count": 8, "attention.head_count_kv": 3})
    assert str(e.value) == (
        "llama.gguf: not a readable GGUF file (llama.attention.head_count_kv=3 does not divide "
        "llama.attention.head_count=8: llama.cpp broadcasts each KV head over a whole group of query heads "
        "(ggml_can_mul_mat); the file is truncated, corrupt or not GGUF: download it again or re-convert it "
        "with llama.cpp)")
    # per layer: a recurrent block's 0 has no attention; block 3's 3 does not divide 8
    keys = dict(NEMOTRON_KEYS, **{"attention.head_count_kv": [0, 0, 0, 3, 0, 0]})
    with pytest.raises(ModelSourceError, match=r"head_count_kv=3 does not divide nemotron_h.attention.head_count=8 "
                                               r"\(block 3\)"):
        _info("nemotron_h", 6, 64, keys)


def test_a_convolution_kernel_under_2_is_refused():
    """A kernel of 1 keeps no conv state (kernel - 1 columns): no model has one, causal_conv1d takes 2 to 4."""
    with pytest.raises(ModelSourceError) as e:
        _info("lfm2", 4, 64, {"attention.head_count": 8, "attention.head_count_kv": [0, 0, 2, 0], "shortconv.l_cache": 1})
    assert str(e.value) == ("lfm2.gguf: not a readable GGUF file (lfm2.shortconv.l_cache=1 must be >= 2: the file is "
                            "truncated, corrupt or not GGUF: download it again or re-convert it with llama.cpp)")


def test_a_hybrid_header_without_a_mixing_block_is_refused():
    """Every Nemotron-H block an MLP (feed_forward_length > 0 everywhere): was a confident 0-byte cache."""
    keys = dict(NEMOTRON_KEYS, feed_forward_length=[3] * 6)
    with pytest.raises(ModelSourceError) as e:
        _info("nemotron_h", 6, 64, keys)
    assert str(e.value) == (
        "nemotron_h.gguf: not a readable GGUF file (none of the 6 blocks of nemotron_h is attention or recurrent (a "
        "block is attention where head_count_kv > 0, recurrent where head_count_kv and feed_forward_length are 0): "
        "the file is truncated, corrupt or not GGUF: download it again or re-convert it with llama.cpp)")
