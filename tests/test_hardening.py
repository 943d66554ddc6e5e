"""Absurd values are refused with the limit named, settings that do not apply are named, and what the
CLI writes is written as users expect (issue: never crash, never hang, never accept nonsense)."""

from __future__ import annotations

import math
import os
import stat

import pytest

import vramlens
from vramlens import limits as L
from vramlens.errors import ConfigError, InputError
from vramlens.workload import Workload, make_workload


@pytest.mark.parametrize(("field", "value", "limit"), [
    ("batch", 10**26, L.MAX_BATCH), ("seq", 10**20, L.MAX_SEQ), ("gpus", 10**18, L.MAX_GPUS),
    ("grad_accum", 10**9, L.MAX_GRAD_ACCUM), ("tp", 10**6, L.MAX_PARALLEL), ("pp", 10**6, L.MAX_PARALLEL),
    ("lora_rank", 10**7, L.MAX_LORA_RANK),
])
def test_counts_over_their_limit_are_refused_naming_it(field, value, limit):
    with pytest.raises(ConfigError) as e:
        make_workload(**{field: value})
    assert str(e.value) == f"{field}={value} is over the limit of {limit:,}"


def test_a_huge_integer_is_shown_shortened():
    with pytest.raises(ConfigError) as e:
        make_workload(batch=10**5000)
    assert str(e.value) == f"batch=a many-digit number is over the limit of {L.MAX_BATCH:,}"


@pytest.mark.parametrize("value", [math.nan, math.inf, -0.5, 1.0, "0.1", True])
def test_lora_dropout_outside_0_1_is_refused(value):
    with pytest.raises(ConfigError, match="lora_dropout=.* must be in \\[0, 1\\)"):
        make_workload(mode="train", method="lora", lora_dropout=value)


def test_kv_block_is_bounded():
    with pytest.raises(ConfigError, match="kv_block=100000 is over the limit of 65,536 tokens"):
        make_workload(kv_block=100_000)


def test_settings_that_do_not_apply_are_named_in_the_notes_of_estimate():
    est = vramlens.estimate("llama-2-7b", optimizer="sgd", keep_grads=True, checkpointing="full", lora_rank=16,
                            fsdp_strategy="hybrid", dora=True, lora_dtype="bf16", quant_targets="adapted")
    notes = list(est.breakdown.notes)
    assert ("ignored in inference (they apply to training): optimizer='sgd', keep_grads=True, "
            "checkpointing='full'") in notes
    assert ("ignored with method='full' (they apply to LoRA and QLoRA): lora_rank=16, lora_dtype='bf16', dora=True, "
            "quant_targets='adapted'") in notes
    assert "ignored: fsdp_strategy='hybrid' applies only with fsdp" in notes
    # they change nothing: the figures equal those of the plain workload
    plain = vramlens.estimate("llama-2-7b").breakdown
    assert est.breakdown.as_dict() == plain.as_dict()
    assert est.breakdown.device_total == plain.device_total
    train = vramlens.estimate("llama-2-7b", mode="train", kv_dtype="fp8", kv_block=16, cache="static",
                              max_cache_len=4096)
    assert ("ignored in training (they apply to the inference KV cache): kv_dtype='fp8', kv_block=16, "
            "cache='static', max_cache_len=4096" in train.breakdown.notes)
    lora = vramlens.estimate("llama-2-7b", method="lora", quant_targets="adapted", lora_dropout=0.1, max_cache_len=64)
    assert tuple(n for n in lora.breakdown.notes if n.startswith("ignored")) == (
        "ignored: quant_targets='adapted' says which linears quantized weights cover, and none are quantized "
        "(use --method qlora or --quant)",
        "ignored in inference: lora_dropout=0.1 (dropout is off in eval mode)",
        "ignored: max_cache_len=64 sizes a static cache, and cache='dynamic'")


def test_defaults_are_never_named_as_ignored():
    assert Workload().ignored() == []
    assert Workload(mode="train").ignored() == []


def test_lora_rank_larger_than_the_adapted_matrix_is_refused():
    with pytest.raises(ConfigError) as e:
        vramlens.estimate("gpt2", mode="train", method="lora", lora_rank=769, lora_targets="c_attn")
    assert str(e.value) == ("lora_rank=769 exceeds the smaller side of c_attn (768x2304) of openai-community/gpt2: a LoRA "
                            "update's rank is at most min(in, out) = 768; use --lora-rank 768 or less")
    vramlens.estimate("gpt2", mode="train", method="lora", lora_rank=768, lora_targets="c_attn")  # the limit itself


def test_check_int_names_field_value_and_limit():
    assert L.check_int("layers", 4096.0, L.MAX_LAYERS) == 4096
    for bad, text in [(10**400, "a 401-digit number is over the limit"), (math.nan, "nan is not a whole number"),
                      ("12", "'12' is not a whole number"), (True, "True is not a whole number"),
                      (0, "0 must be >= 1"), (4097, "4097 is over the limit of 4,096")]:
        with pytest.raises(InputError) as e:
            L.check_int("layers", bad, L.MAX_LAYERS, fix="see the config")
        assert str(e.value).startswith("layers=") and str(e.value).endswith(": see the config")
        assert text in str(e.value)


def test_reports_are_written_with_the_umask_mode(tmp_path):
    from vramlens.report.html import write_text_atomic

    old = os.umask(0o022)
    try:
        target = write_text_atomic(tmp_path / "r.html", "<p>x</p>")
    finally:
        os.umask(old)
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    target.chmod(0o600)  # a file that exists keeps its mode
    write_text_atomic(target, "<p>y</p>")
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]  # no temporary left behind


# ---- the second campaign (fuzz2): the Python API's own arguments, engine versions, reports, caches ----------
GPU_FIX = "give a catalog name such as 'A100-80GB' (see `vramlens gpus`), a size such as '24GB', or a vramlens.GPU"


@pytest.mark.parametrize(("call", "message"), [
    # were AttributeError / TypeError / ValueError from inside, or (nodes) a search that ran for minutes
    (lambda: vramlens.estimate("llama-2-7b", gpu=80), f"gpu=80 is not a GPU: {GPU_FIX}"),
    (lambda: vramlens.fit("llama-2-7b", gpu=24.0), f"gpu=24.0 is not a GPU: {GPU_FIX}"),
    (lambda: vramlens.capacity("llama-3.1-8b", "vllm", gpu=None),
     "capacity needs a GPU: give gpu='H100-SXM-80GB' (a catalog name) or a size such as '80GB'"),
    (lambda: vramlens.estimate("llama-2-7b", "train"),
     "workload='train' is not a Workload: build one with vramlens.make_workload(...), or give its fields as keywords "
     "(mode='train', batch=8)"),
    (lambda: vramlens.estimate("llama-2-7b", headroom="0.1"), "headroom='0.1' must be in [0, 1): e.g. 0.1 keeps 10% free"),
    (lambda: vramlens.fit("llama-2-7b", gpu="24GB", headroom=None),
     "headroom=None must be in [0, 1): e.g. 0.1 keeps 10% free"),
    (lambda: vramlens.estimate("llama-2-7b", mode=10**5000), "mode=a many-digit number is not one of: inference, train"),
    (lambda: vramlens.estimate("llama-2-7b", mode="train", method="lora", lora_targets=0),
     "lora_targets=0 must be module names such as q_proj,v_proj"),
    (lambda: vramlens.estimate(params=[7]), "params=[7] is not a size: give a count such as '7B' or 7_000_000_000"),
    (lambda: vramlens.fit("llama-2-7b", gpu="24GB", nodes=10**13), "nodes=10000000000000 is over the limit of 1,048,576"),
    (lambda: vramlens.fit("llama-2-7b", gpu="24GB", keep=[1]),
     "keep/forbid=[1] is not remedy names: give a comma-separated string or a list of names such as "
     "['lora', 'checkpointing']"),
    (lambda: vramlens.capacity("llama-3.1-8b", "vllm", gpu="H100-80GB", gpu_memory_utilization=10**5000),
     "gpu_memory_utilization=a many-digit number is not a number between 0 and 1"),
    (lambda: vramlens.capacity("llama-3.1-8b", "vllm", gpu="H100-80GB",
                               speculative_config={"method": "ngram", "num_speculative_tokens": 10**5000}),
     "speculative_config num_speculative_tokens=a many-digit number is over 1,024"),
    # a confident answer to nonsense: "-1GB" was read as the key "1gb", found inside "h200141gb"
    (lambda: vramlens.capacity("llama-3.1-8b", "vllm", gpu="-1GB"),
     "gpu='-1GB' is a signed size: give the memory of one GPU without a sign, such as 24GB"),
    # engine releases are read whole, in ASCII digits (these were taken as 0.5.3 and 0.19)
    (lambda: vramlens.capacity("llama-3.1-8b", "sglang", gpu="H100-80GB", version="0.5.3.4.5"),
     "version='0.5.3.4.5' is not an SGLang release vramlens follows: give 0.3.3 or later, e.g. version='0.5.3' "
     "(--sglang-version 0.5.3)"),
    (lambda: vramlens.capacity("llama-3.1-8b", "vllm", gpu="H100-80GB", version="\uff10.19"),
     "version='\uff10.19' is not a vLLM release vramlens follows: give 0.4 or later, e.g. version='0.19' "
     "(--vllm-version 0.19)"),
], ids=["estimate-gpu-int", "fit-gpu-float", "capacity-gpu-none", "workload-str", "headroom-str", "fit-headroom-none",
        "mode-5000-digits", "lora-targets-int", "params-list", "fit-nodes-1e13", "fit-keep-ints", "fraction-5000-digits",
        "speculative-tokens-5000-digits", "gpu-signed-size", "sglang-version-5-parts", "vllm-version-full-width"])
def test_the_python_api_refuses_a_wrong_argument_in_one_line(call, message):
    with pytest.raises(InputError) as e:
        call()
    assert str(e.value) == message


def test_a_deeply_nested_speculative_config_is_refused(capsys):
    from cli_run import run_cli

    deep = "[" * 2000 + "]" * 2000  # json.loads raised RecursionError
    code, out, err = run_cli(capsys, ["capacity", "llama-3.1-8b", "--gpu", "H100-SXM-80GB", "--speculative-config", deep])
    assert (code, out) == (2, "")
    assert err == (f"error: speculative_config={L.show(deep)} is not JSON (it nests 2,000 levels deep, over the limit "
                   "of 64): give --speculative-config '{\"method\": \"eagle3\", \"model\": DRAFT, "
                   "\"num_speculative_tokens\": 3}'\n")


def test_a_report_path_that_is_a_fifo_is_refused_and_left_as_it_is(tmp_path, capsys):
    """The write goes through a rename, which replaced the device itself: `--html /dev/null` as root made /dev/null
    a plain file."""
    from cli_run import run_cli

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    code, out, err = run_cli(capsys, ["estimate", "llama-2-7b", "--html", str(fifo)])
    assert (code, out) == (2, "")
    assert err == f"error: cannot write {fifo}: it is a device, FIFO or socket, not a file: choose a file path\n"
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]  # no temporary left behind


def test_sglang_speculative_flags_without_an_algorithm_are_named_as_ignored():
    plain = vramlens.capacity("llama-3.1-8b", "sglang", gpu="H100-SXM-80GB")
    alone = vramlens.capacity("llama-3.1-8b", "sglang", gpu="H100-SXM-80GB", speculative_draft_model_path="llama-3.2-1b",
                              speculative_num_steps=3)
    assert alone.notes[-1] == ("ignored: speculative_draft_model_path, speculative_num_steps apply only with "
                               "--speculative-algorithm (SGLang reads them under one)")
    assert alone.kv_cache_bytes == plain.kv_cache_bytes  # they change nothing


# ---- the third campaign (fuzz3) ------------------------------------------------------------------------------
@pytest.mark.parametrize(("call", "message"), [
    # a truthy 1 / 'no' was taken for True; top=[] or 0 fell back to the default of 5 plans
    (lambda: vramlens.estimate("llama-2-7b", trace_fallback=1),
     "trace_fallback=1 must be true or false"),
    (lambda: vramlens.capacity("llama-3.1-8b", "vllm", gpu="H100-80GB", trace_fallback="no"),
     "trace_fallback='no' must be true or false"),
    (lambda: vramlens.fit("llama-2-7b", gpu="24GB", top=[]), "top=[] is not a whole number"),
    (lambda: vramlens.fit("llama-2-7b", gpu="24GB", max_plans=0), "max_plans=0 must be >= 1"),
    # the message printed the 5,000-digit group whole: ValueError (int to str past 4,300 digits)
    (lambda: vramlens.estimate("llama-2-7b", quant="uint4", quant_group_size=10**5000),
     "quant_group_size=a many-digit number is over the limit of 262,144 weights"),
], ids=["estimate-trace-fallback-1", "capacity-trace-fallback-str", "fit-top-empty-list", "fit-max-plans-0",
        "quant-group-5000-digits"])
def test_the_python_api_refuses_a_switch_or_count_of_the_wrong_type(call, message):
    with pytest.raises(InputError) as e:
        call()
    assert str(e.value) == message


@pytest.mark.parametrize(("argv", "message"), [
    # int() and float() read any Unicode digit: the Arabic-Indic 4096 was read as 4096
    (["capacity", "llama-3.1-8b", "--engine", "llama.cpp", "--gpu", "24GB", "--ctx-size", "\u0664\u0660\u0669\u0666"],
     "error: argument --ctx-size: '\u0664\u0660\u0669\u0666' is not a whole number: write it with the ASCII digits 0-9 "
     "(see vramlens capacity --help)"),
    (["estimate", "llama-2-7b", "--headroom", "\u0660.\u0661"],
     "error: argument --headroom: '\u0660.\u0661' is not a number: write it with the ASCII digits 0-9 "
     "(see vramlens estimate --help)"),
    (["estimate", "llama-2-7b", "--batch", "\uff18"],
     "error: argument --batch: '\uff18' is not a whole number: write it with the ASCII digits 0-9 "
     "(see vramlens estimate --help)"),
], ids=["type-int-arabic-indic", "type-float-arabic-indic", "whole-number-full-width"])
def test_a_number_flag_takes_ascii_digits_only(capsys, argv, message):
    from cli_run import run_cli

    code, out, err = run_cli(capsys, argv)
    assert (code, out, err) == (2, "", message + "\n")


def test_hybrid_state_settings_on_a_plain_model_are_named_as_ignored():
    plain = vramlens.capacity("llama-3.1-8b", "sglang", gpu="H100-SXM-80GB")
    given = vramlens.capacity("llama-3.1-8b", "sglang", gpu="H100-SXM-80GB", max_mamba_cache_size=8,
                              mamba_ssm_dtype="bfloat16")
    assert given.notes[-1] == ("ignored: mamba_ssm_dtype, max_mamba_cache_size apply only to hybrid models (a "
                               "recurrent state per request); meta-llama/Llama-3.1-8B has none")
    assert given.kv_cache_bytes == plain.kv_cache_bytes  # they change nothing
    vllm = vramlens.capacity("llama-3.1-8b", "vllm", gpu="H100-SXM-80GB", mamba_cache_mode="all")
    assert vllm.notes[-1] == ("ignored: mamba_cache_mode applies only to hybrid models (a recurrent state per "
                              "request); meta-llama/Llama-3.1-8B has none")
