"""`vramlens capacity`: the lines beside the engine's log, --json, and one-line refusals with exit code 2."""

from __future__ import annotations

import json

import pytest

from vramlens.cli.main import main


def run(capsys, argv):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_vllm_lines_name_the_log_figures(capsys):
    code, out, err = run(capsys, ["capacity", "llama-2-7b", "--engine", "vllm", "--gpu", "A100-80GB", "--context", "4096"])
    assert code == 0, err
    assert "  # GPU blocks: 7,404\n" in out  # vLLM 0.19 arithmetic (tests/serving/test_engines.py)
    assert "  GPU KV cache size (tokens): 118,464\n" in out  # 7,404 x 16
    assert "  Maximum concurrency for 4,096 tokens per request (x): 28.92\n" in out  # 7,404 / 256


def test_vllm_version_flag(capsys):
    code, out, err = run(capsys, ["capacity", "llama-2-7b", "--engine", "vllm", "--gpu", "A100-80GB", "--context", "4096",
                                  "--vllm-version", "0.6.4"])
    assert code == 0, err
    assert "  # GPU blocks: 7,432\n" in out  # test_vllm_0_6_4_llama2_7b_a100


def test_json(capsys):
    code, out, _ = run(capsys, ["capacity", "llama-2-7b", "--engine", "sglang", "--gpu", "A100-80GB",
                                "--sglang-version", "0.4.3.post4", "--json"])
    assert code == 0
    assert json.loads(out)["figures"]["max_total_num_tokens"]["value"] == 116_385  # test_sglang_llama2_7b_a100


@pytest.mark.parametrize(("argv", "line"), [
    (["--tp", "3", "--gpus", "3"], "error: Total number of attention heads (32) must be divisible by tensor parallel "
                                   "size (3)."),
    (["--engine", "sglang", "--ctx-size", "5"], "error: --ctx-size is a llama.cpp flag, not one of sglang's"),
    (["--gpu-memory-utilization", "0"], "error: GPU memory utilization must be within (0, 1]. Got 0.0. (vLLM "
                                        "CacheConfig; pass --gpu-memory-utilization 0.9)"),
])
def test_refusals_are_one_line_exit_2(capsys, argv, line):
    code, out, err = run(capsys, ["capacity", "llama-2-7b", "--gpu", "A100-80GB", *argv])
    assert code == 2
    assert err.strip() == line
    assert out == ""


@pytest.mark.parametrize("engine, extra", [("vllm", []), ("sglang", []), ("llama.cpp", ["--ctx-size", "8192"]),
                                           ("transformers", [])])
def test_a_context_longer_than_the_engine_accepts_is_one_line(capsys, engine, extra):
    """A request longer than max_model_len (Gemma 3: 32,768; llama.cpp: the slot's n_ctx) is refused, not
    answered with "0.00 requests fit" and a time to first token of years."""
    code, out, err = run(capsys, ["capacity", "gemma-3-1b-it", "--engine", engine, "--gpu", "A100-80GB",
                                  "--context", "40000", *extra])
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "context=40,000 tokens is longer than the longest request" in err
    code, out, err = run(capsys, ["capacity", "gemma-3-1b-it", "--engine", engine, "--gpu", "A100-80GB",
                                  "--context", "4096", *extra])
    assert code == 0, err


def test_a_vllm_release_after_the_newest_followed_says_so(capsys):
    code, out, err = run(capsys, ["capacity", "llama-2-7b", "--engine", "vllm", "--gpu", "A100-80GB",
                                  "--vllm-version", "1.5", "--json"])
    assert code == 0, err
    d = json.loads(out)
    assert any("vLLM 1.5 is later than the newest release whose code vramlens follows" in n for n in d["notes"])
    code, out, _ = run(capsys, ["capacity", "llama-2-7b", "--engine", "vllm", "--gpu", "A100-80GB", "--json"])
    assert not any("is later than" in n for n in json.loads(out)["notes"])
