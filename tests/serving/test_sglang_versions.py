"""SGLang by release (--sglang-version): each release's defaults and the NCCL communicator 0.3.3-0.4.6 make late.

The rules are read in the wheels' server_args.py, model_runner.py and utils.py (serving/sglang.py says which);
``gpu_mem`` is nvidia-smi's memory.total in MiB, the catalog's capacity_bytes.
"""

from __future__ import annotations

import json

import pytest

from vramlens.cli.main import main
from vramlens.errors import ConfigError
from vramlens.hardware.catalog import get_gpu
from vramlens.serving import capacity
from vramlens.serving.api import resolve_model
from vramlens.serving.sglang import (
    DEFAULT_VERSION,
    default_chunked_prefill_size,
    default_mem_fraction,
    hybrid_pool,
    late_communicator_bytes,
)

A100_80, H200, B200, MI300X, RTX4090, L4, L40S = 81_920, 143_771, 183_359, 196_288, 24_564, 23_034, 46_068  # MiB


@pytest.mark.parametrize(("version", "gpu_mem", "tp", "pp", "cuda", "expected"), [
    # 0.3.3-0.3.5: by tp, 0.83 at tp 8; 0.3.6: 0.82
    ((0, 3, 3), A100_80, 8, 1, True, 0.83),
    ((0, 3, 5), A100_80, 8, 1, True, 0.83),
    ((0, 3, 3), A100_80, 1, 1, True, 0.88),
    ((0, 3, 6), A100_80, 8, 1, True, 0.82),
    # 0.4.0-0.4.5: by tp, 0.81 at tp 8, whatever the GPU
    ((0, 4, 0), A100_80, 8, 1, True, 0.81),
    ((0, 4, 5), A100_80, 8, 1, True, 0.81),
    ((0, 4, 2), H200, 2, 1, True, 0.87),
    # 0.4.6: the table up to 81,920 MiB, (gpu_mem - 13 GiB) / gpu_mem above: (143,771 - 13,312) / 143,771
    ((0, 4, 6), A100_80, 4, 1, True, 0.85),
    ((0, 4, 6), H200, 1, 1, True, 130_459 / 143_771),
    # 0.4.7: the table on tp x pp up to 81,920 MiB; above, 0.88 raised by 48 GiB x (1 - f) / gpu_mem and capped by
    # (gpu_mem - 18 GiB) / gpu_mem over 96 GiB: min(0.88 + 49,152 x 0.12 / 143,771, 125,339 / 143,771); 0.79 over
    # 180,000 MiB on CUDA; an MI300X (ROCm) takes the 96 GiB branch: min(0.91, 177,856 / 196,288)
    ((0, 4, 7), A100_80, 2, 2, True, 0.85),
    ((0, 4, 7), H200, 1, 1, True, 125_339 / 143_771),
    ((0, 4, 7), B200, 1, 1, True, 0.79),
    ((0, 4, 7), MI300X, 1, 1, False, 177_856 / 196_288),
    # 0.4.8 to 0.5.2: round((gpu_mem - reserved) / gpu_mem, 3), reserved in MiB by GPU size and tp x pp:
    # (24,564 - (2.8 + 0.4) x 1,024) / 24,564 = 0.8666; (81,920 - 10 x 1,024) / 81,920 = 0.875;
    # (143,771 - 16 x 1,024) / 143,771 = 0.8860; (196,288 - 32 x 1,024) / 196,288 = 0.8331; (23,034 - 2.9 x 1,024) / 23,034
    ((0, 4, 8), RTX4090, 4, 1, True, 0.867),
    ((0, 5, 2), A100_80, 1, 1, True, 0.875),
    ((0, 4, 9), H200, 8, 1, True, 0.886),
    ((0, 5, 2), MI300X, 1, 1, False, 0.833),
    ((0, 5, 2), L4, 1, 1, True, 0.871),
])
def test_default_mem_fraction_by_release(version, gpu_mem, tp, pp, cuda, expected):
    assert default_mem_fraction(version, gpu_mem, tp, pp, cuda=cuda) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize(("gpu_mem", "tp", "chunk", "expected"), [
    # 0.5.3: reserved = 512 + 1.5 x max(chunk, 2048) + 2 x cuda_graph_max_bs + tp x pp / 8 x 1,024 MiB, at least
    # 10,240 over 60 GiB. A100 80GB, tp 1: 512 + 12,288 + 512 + 128 = 13,440 -> (81,920 - 13,440) / 81,920 = 0.8359
    (A100_80, 1, None, 0.836),
    # tp 4: max_bs 512: 512 + 12,288 + 1,024 + 512 = 14,336 -> 0.8250
    (A100_80, 4, None, 0.825),
    # a 2048-token chunk: 512 + 3,072 + 512 + 128 = 4,224, raised to the 10,240 floor -> 0.8750
    (A100_80, 1, 2048, 0.875),
    # L4: chunk 2048, max_bs 16: 512 + 3,072 + 32 + 128 = 3,744 -> (23,034 - 3,744) / 23,034 = 0.8375
    (L4, 1, None, 0.837),
    # L40S: chunk 4096, max_bs 32: 512 + 6,144 + 64 + 128 = 6,848 -> (46,068 - 6,848) / 46,068 = 0.8513
    (L40S, 1, None, 0.851),
    # RTX 4090 at tp 4: chunk 2048, max_bs 80: 512 + 3,072 + 160 + 512 = 4,256 -> (24,564 - 4,256) / 24,564 = 0.8267
    (RTX4090, 4, None, 0.827),
    # B200: chunk 16,384, max_bs 512: 512 + 24,576 + 1,024 + 128 = 26,240 -> (183,359 - 26,240) / 183,359 = 0.8569
    (B200, 1, None, 0.857),
])
def test_default_mem_fraction_053(gpu_mem, tp, chunk, expected):
    assert default_mem_fraction((0, 5, 3), gpu_mem, tp, chunked_prefill_size=chunk) == expected


@pytest.mark.parametrize(("version", "gpu_mem", "expected"), [
    ((0, 3, 3), RTX4090, 8192), ((0, 3, 5), RTX4090, 8192),  # 0.3.3-0.3.5: the dataclass default
    ((0, 3, 6), RTX4090, 2048), ((0, 3, 6), 25_000, 8192),  # 0.3.6: 8192 // 4 under 25,000 MiB
    ((0, 4, 2), RTX4090, 2048), ((0, 4, 6), 25_000, 8192), ((0, 4, 6), B200, 8192),
    ((0, 4, 7), B200, 16384), ((0, 4, 7), 25_000, 8192),
    ((0, 4, 8), 25_000, 2048), ((0, 5, 2), A100_80, 8192), ((0, 5, 2), H200, 8192), ((0, 5, 2), B200, 16384),
    ((0, 5, 2), L40S, 8192), ((0, 5, 3), L40S, 4096), ((0, 5, 3), RTX4090, 2048), ((0, 5, 3), A100_80, 8192),
    ((0, 5, 3), B200, 16384),
])
def test_default_chunked_prefill_size_by_release(version, gpu_mem, expected):
    assert default_chunked_prefill_size(version, gpu_mem) == expected


def test_default_release_is_the_newest_read():
    cap = capacity("llama-2-7b", "sglang", gpu="A100-80GB")
    assert DEFAULT_VERSION == "0.5.3" and cap.accounting.startswith("SGLang 0.5.3 ")
    assert cap.figure("mem_fraction_static") == 0.836
    assert not any("later than the newest" in n for n in cap.notes)


def test_late_communicator_at_tp2():
    # L4 (PCIe): 2 channels x 2 connections x (SIMPLE 4,194,304 + LL 524,288 + LL128 4,915,200) = 38,535,168 B;
    # an H100 SXM (NVLink): 16 channels, 308,281,344 B, and no NVLS buffers for a 4-byte all-reduce
    assert late_communicator_bytes((0, 4, 6), get_gpu("L4"), 2) == 2 * 2 * (4_194_304 + 524_288 + 4_915_200) == 38_535_168
    assert late_communicator_bytes((0, 4, 2), get_gpu("H100-SXM-80GB"), 4) == 16 * 2 * 9_633_792 == 308_281_344
    assert late_communicator_bytes((0, 4, 7), get_gpu("L4"), 2) == 0  # gloo from 0.4.7
    assert late_communicator_bytes((0, 3, 3), get_gpu("L4"), 1) == 0  # no all-reduce at tp 1


def test_late_communicator_comes_out_of_the_pool():
    # the same fraction and chunk in 0.4.6 and 0.4.7: the pools differ by the communicator's bytes over the cell
    # (Qwen2.5-7B at tp 2: 2 kv heads x 128 x 28 layers x 2 x 2 B = 28,672 B a token)
    kw = dict(gpu="L4", tp=2, mem_fraction_static=0.85, chunked_prefill_size=2048)
    old = capacity("qwen2.5-7b", "sglang", version="0.4.6", **kw)
    new = capacity("qwen2.5-7b", "sglang", version="0.4.7", **kw)
    assert old.kv_bytes_per_token == new.kv_bytes_per_token == 28_672
    assert old.weights_bytes == new.weights_bytes and old.budget_bytes == new.budget_bytes
    assert new.kv_tokens - old.kv_tokens in (38_535_168 // 28_672, 38_535_168 // 28_672 + 1)
    assert old.non_torch_bytes - new.non_torch_bytes == 38_535_168
    assert any("default group, 37 MiB" in n for n in old.notes)
    assert not any("default group" in n for n in new.notes)


def test_a_release_before_033_is_one_config_error():
    for bad in ("0.3.2", "0.2", "abc", "", "nan"):
        with pytest.raises(ConfigError) as e:
            capacity("llama-2-7b", "sglang", gpu="A100-80GB", version=bad)
        assert str(e.value) == (f"version={bad!r} is not an SGLang release vramlens follows: give 0.3.3 or later, "
                                "e.g. version='0.5.3' (--sglang-version 0.5.3)")


def test_a_later_release_says_it_follows_053():
    cap = capacity("llama-2-7b", "sglang", gpu="A100-80GB", version="0.5.23")
    assert cap.accounting.startswith("SGLang 0.5.23 ")
    assert "SGLang 0.5.23 is later than the newest release whose code vramlens follows (0.5.3)" in cap.notes[0]
    assert cap.kv_tokens == capacity("llama-2-7b", "sglang", gpu="A100-80GB").kv_tokens


def test_hybrid_pool_by_release():
    gpt_oss = resolve_model("gpt-oss-20b", engine="sglang")
    scout = resolve_model("llama-4-scout", engine="sglang")
    # 0.5.0rc2-0.5.3's server_args.py sets disable_hybrid_swa_memory for GptOssForCausalLM
    assert [hybrid_pool(gpt_oss, v) for v in ((0, 4, 9), (0, 4, 10), (0, 5, 0), (0, 5, 3), (0, 5, 23))] == [
        False, True, False, False, True]
    assert [hybrid_pool(scout, v) for v in ((0, 4, 9), (0, 4, 10), (0, 5, 3), (0, 5, 4))] == [False, False, False, True]
    assert not hybrid_pool(resolve_model("llama-3-8b", engine="sglang"), (0, 5, 23))
    # one pool: every layer at full length, the profiled tokens as they are (tp 8: 1 kv head x 128 x 48 x 2 x 2 B)
    cap = capacity("llama-4-scout", "sglang", gpu="H100-SXM-80GB", tp=8)
    assert cap.kv_bytes_per_token == 24_576 and cap.kv_cache_bytes == cap.kv_tokens * 24_576
    assert cap.figure("max_total_num_tokens") == cap.kv_tokens and "hybrid" not in cap.accounting
    assert any("SGLang 0.5.3 keeps every layer of" in n and "0.4.10-0.5.3 leave Llama 4 out" in n for n in cap.notes)
    cap = capacity("gpt-oss-20b", "sglang", gpu="H100-SXM-80GB", version="0.4.9.post2")
    assert any("no hybrid SWA pool by default before 0.4.10" in n for n in cap.notes)
    cap = capacity("gpt-oss-20b", "sglang", gpu="H100-SXM-80GB", version="0.4.10.post2")
    assert "hybrid SWA" in cap.accounting and not any("keeps every layer" in n for n in cap.notes)
    cap = capacity("gpt-oss-20b", "sglang", gpu="H100-SXM-80GB")
    assert any("SGLang 0.5.3 keeps every layer of" in n and "0.5.0-0.5.3 set disable_hybrid_swa_memory for it, "
               "server_args.py" in n for n in cap.notes)


def test_cli_flag_json_and_refusals(capsys):
    assert main(["capacity", "llama-2-7b", "--engine", "sglang", "--gpu", "A100-80GB", "--sglang-version", "0.4.5",
                 "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["accounting"].startswith("SGLang 0.4.5 ") and d["figures"]["mem_fraction_static"]["value"] == 0.88
    assert main(["capacity", "llama-2-7b", "--engine", "sglang", "--gpu", "A100-80GB", "--sglang-version", "0.3"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "give 0.3.3 or later" in err
    assert main(["capacity", "llama-2-7b", "--gpu", "A100-80GB", "--sglang-version", "0.4.5"]) == 2
    assert capsys.readouterr().err.strip() == "error: --sglang-version is a sglang flag, not one of vllm's"
    assert main(["capacity", "llama-2-7b", "--engine", "sglang", "--gpu", "A100-80GB", "--vllm-version", "0.6"]) == 2
    assert capsys.readouterr().err.strip() == "error: --vllm-version is a vllm flag, not one of sglang's"


def test_api_version_must_be_a_name():
    with pytest.raises(ConfigError) as e:
        capacity("llama-2-7b", "sglang", gpu="A100-80GB", version=5)
    assert "--sglang-version takes at most 64 characters" in str(e.value)


def test_the_flag_help_and_api_name_the_default():
    from vramlens.cli.capacity import FLAGS

    help_text = next(opts["help"] for flag, _dest, _engines, opts in FLAGS if flag == "--sglang-version")
    assert f"({DEFAULT_VERSION})" in help_text
    from vramlens.serving.api import capacity as api_capacity

    assert f'default "{DEFAULT_VERSION}"' in (api_capacity.__doc__ or "")


def test_request_pool_rows_by_release():
    # max_num_reqs = min(max(tokens / 4096 x 512, 2048), 4096) = 4096 here; the ReqToTokenPool has max_num_reqs + 1
    # rows in 0.4.3.post4 (the logs' 2049 and 4097) and max_num_reqs from 0.4.8 (model_runner.py
    # ``ReqToTokenPool(size=max_num_reqs, ...)``): max_running_requests = min(tokens // 2, rows)
    old = capacity("llama-3.1-8b", "sglang", gpu="H100-SXM-80GB", context_length=4096, version="0.4.3.post4")
    new = capacity("llama-3.1-8b", "sglang", gpu="H100-SXM-80GB", context_length=4096)
    assert (old.figure("max_running_requests"), new.figure("max_running_requests")) == (4_097, 4_096)
