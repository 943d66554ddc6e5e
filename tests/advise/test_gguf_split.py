"""GGUF headers to llama.cpp --n-gpu-layers splits (a small GGUF file written here)."""

from __future__ import annotations

import json

import pytest

from vramlens.advise.gguf_split import GGUFInfo, split_layers
from vramlens.cli.main import main
from vramlens.cli.place import read_gguf_info
from vramlens.errors import InputError
from vramlens.hardware.gpu import GPU

gguf = pytest.importorskip("gguf", reason="GGUF files are written with the gguf extra")
np = pytest.importorskip("numpy", reason="GGUF tensors are numpy arrays (installed with gguf)")

L, H, V = 4, 64, 128


@pytest.fixture
def gguf_file(tmp_path):
    path = tmp_path / "tiny.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(L)
    w.add_context_length(256)
    w.add_embedding_length(H)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_tensor("token_embd.weight", np.zeros((V, H), dtype=np.float16))
    for i in range(L):
        w.add_tensor(f"blk.{i}.attn_q.weight", np.zeros((H, H), dtype=np.float16))
        # a Q8_0 tensor: blocks of 32 weights in 34 bytes
        w.add_tensor(f"blk.{i}.ffn_up.weight", np.zeros((H, H // 32 * 34), dtype=np.uint8),
                     raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.zeros((H,), dtype=np.float32))
    w.add_tensor("output_norm.weight", np.zeros((H,), dtype=np.float32))
    w.add_tensor("output.weight", np.zeros((V, H), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_header_is_read(gguf_file):
    info = read_gguf_info(str(gguf_file))
    per_layer = H * H * 2 + H * H // 32 * 34 + H * 4
    assert info.layer_bytes == (per_layer,) * L
    assert info.input_bytes == V * H * 2
    assert info.output_bytes == H * 4 + V * H * 2
    assert info.quant_types == {"F16": 1 + L + 1, "Q8_0": L, "F32": L + 1}
    assert (info.n_layers, info.n_head, info.n_head_kv, info.n_ctx_train) == (4, 4, 2, 256)


def _gpu(mib: float) -> GPU:
    return GPU(name="test", memory_bytes=int(mib * 2**20), bandwidth_bytes_s=1e12, bf16_flops=1e14, fp16_flops=1e14,
               fp32_flops=1e13, arch="ampere")


def test_split_fills_the_budget_and_not_more():
    per = 10 * 2**20
    info = GGUFInfo(name="x", arch="llama", n_layers=8, n_ctx_train=4096, n_embd=512, n_head=8, n_head_kv=8,
                    layer_bytes=(per,) * 8, input_bytes=per, output_bytes=per, vocab=1000)
    kv = info.kv_bytes_per_layer(1024)
    for mib in (600, 700, 900, 2000):
        s = split_layers(info, _gpu(mib), n_ctx=1024)
        blocks = min(s.n_gpu_layers, 8)
        assert s.gpu_bytes == blocks * (per + kv) + (per if s.n_gpu_layers == 9 else 0)
        assert s.gpu_bytes <= s.budget_bytes
        if s.n_gpu_layers < 9:  # one more would not fit
            nxt = per + (kv if s.n_gpu_layers < 8 else 0)
            assert s.gpu_bytes + nxt > s.budget_bytes
    assert split_layers(info, _gpu(2000), n_ctx=1024).n_gpu_layers == 9
    with pytest.raises(InputError, match="n_ctx=8192 exceeds the 4096 tokens x was trained for"):
        split_layers(info, _gpu(2000), n_ctx=8192)


def test_cli_gguf(gguf_file, capsys):
    assert main(["place", str(gguf_file), "--gpu", "T4", "--seq", "128", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["n_gpu_layers"] == L + 1
    assert d["llama_cpp_flags"] == f"--n-gpu-layers {L + 1} --ctx-size {128 + 128}"
