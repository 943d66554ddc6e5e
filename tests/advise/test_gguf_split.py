"""GGUF headers to llama.cpp --n-gpu-layers splits (a small GGUF file written here)."""

from __future__ import annotations

import json

import pytest

from vramlens.advise.gguf_header import read_gguf_file as read_gguf_info
from vramlens.advise.gguf_split import GGUFInfo, split_layers
from vramlens.cli.main import main
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


# ---- hostile headers: one ModelSourceError naming the field, never a traceback or an allocation ----
import io  # noqa: E402
import os  # noqa: E402
import struct  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from vramlens.advise.gguf_header import read_gguf  # noqa: E402
from vramlens.errors import ModelSourceError, VramlensError  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from make_file_corpus import ARR, STR, U32, U64, _s, _set, base_kv, base_tensors, gguf_bytes  # noqa: E402

FIX = "the file is truncated, corrupt or not GGUF: download it again or re-convert it with llama.cpp"


def _read(data: bytes):
    return read_gguf(io.BytesIO(data), len(data), "m.gguf")


def _refused(data: bytes) -> str:
    with pytest.raises(ModelSourceError) as e:
        _read(data)
    return str(e.value)


def test_the_corpus_writer_makes_a_valid_file():
    info = _read(gguf_bytes())
    # 2 blocks of F16 (32, 4) and Q8_0 (32, 4): 256 + 4 rows x 34 bytes
    assert info.layer_bytes == (32 * 4 * 2 + 4 * 34,) * 2
    assert (info.n_layers, info.n_embd, info.n_head, info.n_head_kv, info.n_ctx_train, info.vocab) == (2, 32, 4, 2, 256, 32)


def test_reader_agrees_with_gguf_py(gguf_file):
    ours = _read(gguf_file.read_bytes())
    r = gguf.GGUFReader(str(gguf_file), "r")
    assert sum(ours.layer_bytes) + ours.input_bytes + ours.output_bytes == sum(int(t.n_bytes) for t in r.tensors)


@pytest.mark.parametrize("data, message", [
    (b"GGUF", "m.gguf: not a readable GGUF file (the version needs 4 bytes at byte 4 but the file has 0 left: " + FIX + ")"),
    (gguf_bytes(n_kv=2**62), f"m.gguf: not a readable GGUF file (kv_count={2**62} is over the limit of 65,536: {FIX})"),
    (gguf_bytes(raw_kv=_s("general.url") + struct.pack("<I", STR) + _s("x", 2**63)),
     f"m.gguf: not a readable GGUF file (general.url length={2**63} is over the limit of 16,777,216: {FIX})"),
    # 2**60 u64 elements declared in a 37-byte file: refused before anything is allocated
    (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + _s("a") + struct.pack("<IIQ", ARR, U64, 2**60),
     f"m.gguf: not a readable GGUF file (a array count={2**60} is over the limit of 16,777,216: {FIX})"),
    (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + _s("a") + struct.pack("<IIQ", ARR, U64, 1000),
     f"m.gguf: not a readable GGUF file (a array count=1,000 needs 8,000 bytes at byte 49 but the file has 0 left: {FIX})"),
    (gguf_bytes(_set(base_kv(), "llama.block_count", U32, 0)),
     f"m.gguf: not a readable GGUF file (llama.block_count=0 must be >= 1: {FIX})"),
    (gguf_bytes(_set(base_kv(), "llama.block_count", STR, "32")),
     f"m.gguf: not a readable GGUF file (llama.block_count='32' is not a whole number: {FIX})"),
    (gguf_bytes(_set(base_kv(), "llama.block_count", U64, 10**12)),
     f"m.gguf: not a readable GGUF file (llama.block_count=1000000000000 is over the limit of 4,096: {FIX})"),
    (gguf_bytes(tensors=base_tensors() + [("blk.5.attn_q.weight", (32, 4), 1)]),
     "m.gguf: not a readable GGUF file (tensor 'blk.5.attn_q.weight' names block '5' but llama.block_count=2 "
     f"(blocks 0-1): {FIX})"),
    (gguf_bytes(tensors=base_tensors() + [("blk.0.x", (32, 1, 1, 1, 1), 0)]),
     f"m.gguf: not a readable GGUF file (tensor 'blk.0.x' n_dims=5 is over the limit of 4: {FIX})"),
    (gguf_bytes(tensors=base_tensors() + [("blk.0.x", (2**30, 2**30), 0)]),
     f"m.gguf: not a readable GGUF file (tensor 'blk.0.x' elements={2**60} is over the limit of 35,184,372,088,832: {FIX})"),
    (gguf_bytes(tensors=base_tensors() + [("blk.0.x", (32,), 99)]),
     "m.gguf: not a readable GGUF file (tensor 'blk.0.x' has ggml type id 99, which this vramlens does not know "
     "(known: 0, 1, 2, 3, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, "
     "30, 34, 35, 39, 40, 41): a newer format, or a corrupt file)"),
    (gguf_bytes(raw_tensors=_s("blk.0.x") + struct.pack("<I", 2**32 - 1), n_tensors=8),
     f"m.gguf: not a readable GGUF file (tensor 'blk.0.x' n_dims=4294967295 is over the limit of 4: {FIX})"),
    (gguf_bytes()[:-1],
     f"m.gguf: not a readable GGUF file (tensor 'output.weight' data ends at byte 2,848 but the file has 2,847 bytes: {FIX})"),
])
def test_hostile_header_is_one_message(data, message):
    assert _refused(data) == message


def _cli(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_place_refuses_a_context_beyond_the_model(gguf_file, capsys):
    code, out, err = _cli(["place", str(gguf_file), "--gpu", "T4", "--seq", "4096"], capsys)
    assert (code, out) == (2, "")
    assert err == (f"error: --seq 4096 + --new-tokens 128 = 4224 tokens exceeds the 256-token context of {gguf_file} "
                   "(llama.context_length): use a shorter --seq or --new-tokens\n")


@pytest.mark.parametrize("flags, shown", [
    (["--quant", "nf4"], "--quant nf4"),
    (["--mode", "train"], "--mode train"),
    (["--tp", "2", "--fsdp"], "--fsdp, --tp 2"),
    (["--host-ram", "32GB", "--no-disk"], "--host-ram 32GB, --no-disk"),
])
def test_place_refuses_flags_a_gguf_split_ignores(gguf_file, capsys, flags, shown):
    code, out, err = _cli(["place", str(gguf_file), "--gpu", "T4", "--seq", "64", *flags], capsys)
    assert (code, out) == (2, "")
    assert err == (f"error: {shown}: not used for a GGUF file (its tensor types are fixed in the file and llama.cpp "
                   "places whole blocks with --n-gpu-layers): drop them\n")


def test_place_gguf_gpus_0(gguf_file, capsys):
    assert _cli(["place", str(gguf_file), "--gpu", "T4", "--seq", "64", "--gpus", "0"], capsys) == (
        2, "", "error: gpus=0 must be a whole number >= 1\n")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs os.mkfifo")
def test_a_fifo_named_gguf_does_not_hang(tmp_path, capsys):
    fifo = tmp_path / "x.gguf"
    os.mkfifo(fifo)
    assert _cli(["place", str(fifo), "--gpu", "T4"], capsys) == (
        2, "", f"error: {fifo}: not a readable GGUF file (a FIFO, socket or device, not a regular file)\n")


# ---- fuzzing: a valid header, then its counts, lengths and types mutated ----------------------------
VALID = gguf_bytes()
HEADER_END = VALID.index(b"output.weight") + 40


@st.composite
def mutated_gguf(draw) -> bytes:
    data = bytearray(VALID)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, HEADER_END - 1))
        kind = draw(st.sampled_from(["u64", "u32", "byte"]))
        if kind == "u64":  # a count or a length
            value = draw(st.one_of(st.integers(0, 64), st.sampled_from([2**31, 2**32 - 1, 2**60, 2**63, 2**64 - 1]),
                                   st.integers(0, 2**64 - 1)))
            data[at:at + 8] = struct.pack("<Q", value)
        elif kind == "u32":  # a value type, a ggml type, n_dims
            data[at:at + 4] = struct.pack("<I", draw(st.one_of(st.integers(0, 45), st.integers(0, 2**32 - 1))))
        else:
            data[at] = draw(st.integers(0, 255))
    if draw(st.booleans()):
        data = data[:draw(st.integers(0, len(data)))]
    return bytes(data)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_gguf())
def test_fuzzed_headers_give_an_info_or_a_vramlens_error(data):
    try:
        info = _read(data)
    except VramlensError as e:
        assert "\n" not in str(e)
        return
    s = split_layers(info, _gpu(24 * 1024), n_ctx=min(info.n_ctx_train, 256))
    assert 0 <= s.n_gpu_layers <= info.n_layers + 1
