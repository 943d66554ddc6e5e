"""The published figures, reproduced (src/vramlens/data/published-cases.json)."""

import json

import pytest

from vramlens.cli.main import main
from vramlens.cli.validate import bundled_cases_path
from vramlens.published import CASES, UNSUPPORTED, run_all


@pytest.fixture(scope="module")
def rows():
    return {r.id: r for r in run_all(json.loads(bundled_cases_path().read_text()))}


def test_every_case_is_mapped_or_explained(rows):
    assert set(rows) == set(CASES) | set(UNSUPPORTED)


@pytest.mark.parametrize("case_id", [
    "zero-paper-7.5b-baseline-dp", "zero-paper-7.5b-pos", "zero-paper-7.5b-pos-g", "zero-paper-7.5b-pos-g-p",
    "korthikanti-gpt3-175b-act-per-layer-noparallel", "hf-llmopt-octocoder-kvcache-16k-mha-derived",
    "accelerate-estimator-bert-base-cased-adam-derived", "accelerate-bert-base-cased-load-measured",
])
def test_formula_cases_agree_closely(rows, case_id):
    assert abs(rows[case_id].error) < 0.01, rows[case_id]


def test_measured_cases_median_error(rows):
    errs = sorted(abs(r.error) for r in rows.values() if r.error is not None)
    assert len(errs) >= 25
    assert errs[len(errs) // 2] < 0.10


def test_reserve_model_improves_nvidia_smi_cases(rows):
    nvml = [r for r in rows.values() if r.figure == "device_total"]
    assert nvml
    better = sum(abs(r.error) <= abs(r.first_order_error) for r in nvml)
    assert better >= len(nvml) * 0.7, [(r.id, r.error, r.first_order_error) for r in nvml]


def test_validate_published_cli(capsys):
    assert main(["validate", "published"]) == 0
    out = capsys.readouterr().out
    assert "zero-paper-7.5b-pos-g-p" in out and "median |error|" in out


def test_peft_readme_rows(rows):
    # PEFT's README table in GB read as GiB (the scripts print MiB): 32 x 2**30 = 34,359,738,368 B
    bloomz = rows["peft-readme-bloomz-7b1-lora-pytorch"]
    assert bloomz.figure == "peak_allocated" and bloomz.published_bytes == 34_359_738_368
    assert bloomz.estimated_bytes is not None
    # the seq2seq rows stay unexpressed: the encoder sees each batch's longest tweet, the decoder a few label tokens
    for case_id in ("peft-readme-t0-3b-full", "peft-readme-t0-3b-lora-pytorch", "peft-readme-mt0-xxl-lora-pytorch"):
        assert rows[case_id].estimated_bytes is None
        assert rows[case_id].reason == (
            "encoder and decoder lengths differ and neither is stated: the encoder sees each batch's longest tweet, "
            "the decoder the labels padded to the longest class label (a few tokens); --seq sets both")


def test_optimum_gptq_bench_rows(rows):
    # optimum's benchmark_gptq.py prints MB of 1e6 bytes: 29,152.98 MB = 29,152,980,000 B
    r = rows["optimum-gptq-bench-llama2-13b-fp16-generate-bs1"]
    assert r.figure == "allocated+outside" and r.published_bytes == 29_152_980_000
    from vramlens.estimator import estimate
    from vramlens.hardware.catalog import get_gpu
    from vramlens.models import load_model

    case = CASES[r.id]
    # generate(max_new_tokens=512): the prefill makes the first token, 511 decode steps follow; the prefill table's
    # single new token is no decode step at all
    assert case.settings["new_tokens"] == 511
    assert CASES["optimum-gptq-bench-llama2-13b-fp16-prefill-bs1"].settings["new_tokens"] == 0
    est = estimate(load_model("llama-2-13b"), gpu=get_gpu("A100-80GB"), **case.settings)
    # outside the allocator for torch 2.0.1's CUDA 11.7 build with lazy loading: the context (pull 86509's
    # 287,047,680 B less its 20 MiB segment) plus the kernel images a transformer's forward loads (697 - 400 MiB)
    outside = 287_047_680 - 20 * 2**20 + 297 * 2**20
    assert r.estimated_bytes == est.breakdown.peak_allocated + outside


def test_device_total_outside_without_lazy_loading(rows):
    # CUDA 11.2 (no lazy loading): only the eager context, the mean of 1105, 1486 and 1685 MiB
    from vramlens.estimator import estimate
    from vramlens.hardware.catalog import get_gpu
    from vramlens.models import load_model

    r = rows["hf-perf-bert-large-vanilla-bs4"]
    case = CASES[r.id]
    assert case.model is not None
    spec = load_model({**load_model(case.model).config, **case.overrides})
    est = estimate(spec, gpu=get_gpu("V100-16GB"), **case.settings)
    assert r.estimated_bytes == est.breakdown.peak_reserved + (1105 + 1486 + 1685) * 2**20 // 3


def test_peft_metamathqa_rows(rows):
    # accelerator_memory_max is in bytes: max_memory_reserved() less the 2 MiB reserved at the start
    r = rows["peft-metamathqa-llama3.2-3b-lora-r32-qv"]
    assert r.figure == "peak_reserved" and r.published_bytes == 22_292_725_760
    case = CASES[r.id]
    assert (case.settings["batch"], case.settings["seq"], case.settings["lora_rank"]) == (4, 768, 32)
    # rsLoRA changes the scale only: the same workload as rank 64
    assert CASES["peft-metamathqa-llama3.2-3b-lora-r64-qv-rslora"].settings == \
        CASES["peft-metamathqa-llama3.2-3b-lora-r64-qv"].settings
    assert rows["peft-metamathqa-llama3.2-3b-lora-r64-qv-rslora"].estimated_bytes == \
        rows["peft-metamathqa-llama3.2-3b-lora-r64-qv"].estimated_bytes


def test_optimum_benchmark_running_llamas_rows(rows):
    # optimum-benchmark's MB are 1e6 bytes (bytes_to_mega_bytes: int(bytes * 1e-6))
    fwd = rows["optimum-benchmark-llama2-7b-fp16-forward-bs64"]
    assert fwd.figure == "peak_allocated" and fwd.published_bytes == 25_422_000_000
    assert CASES[fwd.id].settings["new_tokens"] == 0 and CASES[fwd.id].settings["transformers_version"] == "4.35"
    # the forward's slope is the head's: per sample the 256-token cache (32 x 2 x 4,096 x 2 B x 256 = 134,217,728),
    # the fp16 logits (256 x 32,000 x 2 = 16,384,000), their fp32 copy (32,768,000) and the hidden state (2,097,152)
    per_sample = 134_217_728 + 16_384_000 + 32_768_000 + 2_097_152
    first = rows["optimum-benchmark-llama2-7b-fp16-forward-bs1"]
    assert fwd.estimated_bytes is not None and first.estimated_bytes is not None
    assert fwd.estimated_bytes - first.estimated_bytes == 63 * per_sample
    assert CASES["optimum-benchmark-llama2-7b-fp16-generate-bs64"].settings["new_tokens"] == 511


def test_llm_tutorial_optimization_octocoder_rows(rows):
    # bytes_to_giga_bytes divides by 1024**3: 29.0260648727417 GiB = 31,166,499,840 B
    bf16 = rows["hf-llmopt-octocoder-bf16-generate"]
    assert bf16.figure == "peak_allocated" and bf16.published_bytes == 31_166_499_840
    # pipeline(prompt, max_new_tokens=60) on the 20-token prompt: the prefill makes the first token, 59 decode steps
    case = CASES[bf16.id]
    assert (case.settings["seq"], case.settings["new_tokens"]) == (20, 59)
    # the bf16 weights are the figure: 15,517,456,384 parameters x 2 B, within 0.2% of 31,166,499,840
    assert bf16.estimated_bytes is not None and bf16.estimated_bytes >= 15_517_456_384 * 2
    assert abs(bf16.error) < 0.005
    # load_in_8bit / load_in_4bit without torch_dtype: transformers 4.33 keeps the rest in fp16
    assert CASES["hf-llmopt-octocoder-int8-generate"].settings["dtype"] == "fp16"
    fp4 = CASES["hf-llmopt-octocoder-fp4-generate"].settings
    # BitsAndBytesConfig's bnb_4bit_compute_dtype=None is fp32, which Linear4bit keeps for fp16 inputs
    assert (fp4["quant"], fp4["bnb_compute_dtype"]) == ("fp4", "fp32")
    assert abs(rows["hf-llmopt-octocoder-fp4-generate"].error) < 0.01
    for kind in ("eager", "bettertransformer-flash"):
        r = rows[f"hf-llmopt-octocoder-bf16-longprompt-{kind}"]
        assert r.estimated_bytes is None
        assert r.reason == "the prompt's token count is not stated and needs bigcode/octocoder's tokenizer"


def test_peft_metamathqa_frozen_factor_rows(rows):
    # MiCA trains lora_A only: the workload of plain LoRA r32 on q and v, an upper bound
    assert CASES["peft-metamathqa-llama3.2-3b-lora-r32-qv-mica"].settings == \
        CASES["peft-metamathqa-llama3.2-3b-lora-r32-qv"].settings
    mica = rows["peft-metamathqa-llama3.2-3b-lora-r32-qv-mica"]
    assert mica.published_bytes == 22_244_491_264
    assert mica.estimated_bytes == rows["peft-metamathqa-llama3.2-3b-lora-r32-qv"].estimated_bytes
    # LoRA-FA (--lora-fa): B alone trains and lora_A keeps no input, 56 fp32 copies of (4 x 768, 3,072) and A's
    # gradient and AdamW states under the LoRA r32 estimate
    lorafa = rows["peft-metamathqa-llama3.2-3b-lorafa-r32-qv"]
    assert CASES["peft-metamathqa-llama3.2-3b-lorafa-r32-qv"].settings == {
        **CASES["peft-metamathqa-llama3.2-3b-lora-r32-qv"].settings, "lora_fa": True}
    assert lorafa.published_bytes == 22_240_296_960
    lora = rows["peft-metamathqa-llama3.2-3b-lora-r32-qv"].estimated_bytes
    assert lorafa.estimated_bytes is not None and lora is not None
    assert lora - lorafa.estimated_bytes >= 2 * 28 * 4 * 768 * 3_072 * 4


def test_peft_metamathqa_vera_row(rows):
    # VeraConfig's defaults (r=256 on q_proj and v_proj): the ratio to the LoRA r32 row, which cancels the bias the
    # rows share, within 1% of the published one (0.970)
    vera, lora = rows["peft-metamathqa-llama3.2-3b-vera"], rows["peft-metamathqa-llama3.2-3b-lora-r32-qv"]
    assert vera.published_bytes == 21_621_637_120
    assert vera.estimated_bytes is not None and lora.estimated_bytes is not None
    published = vera.published_bytes / lora.published_bytes
    assert abs(vera.estimated_bytes / lora.estimated_bytes / published - 1) < 0.01


def test_peft_metamathqa_adalora_row(rows):
    # init_r 64 (--lora-rank 64): the ratio to the LoRA r32 row within 1% of the published one (1.022)
    ada, lora = rows["peft-metamathqa-llama3.2-3b-adalora-r32"], rows["peft-metamathqa-llama3.2-3b-lora-r32-qv"]
    assert CASES["peft-metamathqa-llama3.2-3b-adalora-r32"].settings["lora_rank"] == 64
    assert ada.published_bytes == 22_781_362_176
    assert ada.estimated_bytes is not None and lora.estimated_bytes is not None
    published = ada.published_bytes / lora.published_bytes
    assert abs(ada.estimated_bytes / lora.estimated_bytes / published - 1) < 0.01


def test_peft_metamathqa_prefix_tuning_rows(rows):
    # n = 50: the ratio to the LoRA r32 row within 2% of the published one (0.923); n = 200 is off (the case's
    # notes: the published figure grows 9.1 MB per virtual token, the training step 2.8 MB)
    lora = rows["peft-metamathqa-llama3.2-3b-lora-r32-qv"]
    p50, p200 = rows["peft-metamathqa-llama3.2-3b-prefix-tuning-50"], rows["peft-metamathqa-llama3.2-3b-prefix-tuning-200"]
    assert (p50.published_bytes, p200.published_bytes) == (20_585_644_032, 21_952_987_136)
    assert p50.estimated_bytes and p200.estimated_bytes and lora.estimated_bytes
    published = p50.published_bytes / lora.published_bytes
    assert abs(p50.estimated_bytes / lora.estimated_bytes / published - 1) < 0.02
    assert 0 < p200.estimated_bytes - p50.estimated_bytes < p200.published_bytes - p50.published_bytes


def test_torchao_low_bit_optim_vit_rows(rows):
    from vramlens.models import load_model

    # timm's vit_huge_patch14_224 with num_classes=45: patch embedding 3 x 14 x 14 x 1,280 + 1,280 = 753,920, class
    # token 1,280, positions 257 x 1,280 = 328,960, 32 blocks of attention 4 x 1,280^2 + 4 x 1,280 = 6,558,720, MLP
    # 2 x 1,280 x 5,120 + 5,120 + 1,280 = 13,113,600 and two LayerNorms 5,120 (19,677,440 each), final norm 2,560,
    # head 1,280 x 45 + 45 = 57,645: 630,822,445 ("630M params" in the README)
    case = CASES["torchao-readme-vit-h-torch-fused"]
    assert case.model is not None
    assert load_model({**load_model(case.model).config, **case.overrides}).params == 630_822_445
    # the script prints max_memory_allocated() / 1e9: 12.23 GB = 12,230,000,000 B
    assert rows["torchao-readme-vit-h-torch-fused"].published_bytes == 12_230_000_000
    for row in ("torch-fused", "bnb-8bit", "ao-8bit", "ao-fp8", "ao-4bit"):
        assert rows[f"torchao-readme-vit-h-{row}"].estimated_bytes is not None
    for row in ("lpmm-4bit", "lpmm-4bit-rank1"):
        assert rows[f"torchao-readme-vit-h-{row}"].reason == "lpmm's 4-bit AdamW (thu-ml/low-bit-optimizers) is not modelled"
    assert rows["torchao-readme-vit-g-dinov2-offload-ao"].estimated_bytes is None
    assert rows["torchao-readme-vit-g-dinov2-offload-ao"].published_bytes == 5_240_000_000


def test_torchao_quantized_training_rows(rows):
    # the script logs max_memory_allocated and max_memory_reserved / 1e9; the table does not say which
    for row in ("bf16-eager", "bf16-compile", "int8qt-eager", "int8qt-compile"):
        r = rows[f"torchao-readme-qt-llama2-1b-{row}"]
        assert r.estimated_bytes is None and r.reason.startswith("the figure kind is not stated")
    assert rows["torchao-readme-qt-llama2-1b-bf16-eager"].published_bytes == 11_070_000_000


def test_torchao_float8_training_rows(rows):
    # parse_torchtitan_logs.py reads torchtitan's "memory: X GiB": 47.65 GiB = 51,163,797,914 B
    h100 = rows["torchao-float8-h100-llama3-8b-fsdp8-sac-bs1-bf16"]
    assert h100.figure == "peak_reserved" and h100.published_bytes == 51_163_797_914
    # the H100 run's torchtitan compiled the blocks only; the MI300X and B200 runs' compiled the loss too
    assert CASES[h100.id].settings["compile_scope"] == "blocks"
    assert CASES["torchao-float8-b200-llama3-8b-fsdp8-sac-bs1-bf16"].settings["compile_scope"] == "blocks+loss"
    assert CASES["torchao-float8-b200-llama3-8b-fsdp8-sac-bs1-float8-tensorwise"].settings["fp8"] is True
    # the other recipes map to --fp8-recipe (torchtitan's --float8.recipe_name / --mx.recipe_name)
    assert CASES["torchao-float8-mi300x-llama3-8b-fsdp8-sac-bs1-float8-rowwise-gw-hp"].settings["fp8_recipe"] == \
        "rowwise_with_gw_hp"
    mx = rows["torchao-float8-b200-llama3-8b-fsdp8-sac-bs1-mxfp8-cublas"]
    assert mx.reason == "" and CASES[mx.id].settings["fp8_recipe"] == "mxfp8_cublas"
    # MX's backward casts along dim 1 with the CUDA kernel (no fp32 copies): above the bf16 step (its dim-0 casts,
    # 12 B per element) and below tensorwise's saved-input cast (9 B per element of b*s*f beside grad_input)
    bf16 = rows["torchao-float8-b200-llama3-8b-fsdp8-sac-bs1-bf16"].estimated_bytes
    assert bf16 < mx.estimated_bytes < rows["torchao-float8-b200-llama3-8b-fsdp8-sac-bs1-float8-tensorwise"].estimated_bytes


def test_torchao_gptfast_later_rows(rows):
    # the baselines of later gpt-fast tables map like the A100 table's bf16 row: the same static-cache generate()
    fp16 = CASES["torchao-gptfast-llama-2-7b-fp16-compile"]
    assert fp16.settings == {**CASES["torchao-gptfast-a100-llama-2-7b-bf16-compile"].settings, "dtype": "fp16"}
    # fp16 and bf16 take the same bytes: the estimates are equal
    assert rows["torchao-gptfast-llama-2-7b-fp16-compile"].estimated_bytes == \
        rows["torchao-gptfast-a100-llama-2-7b-bf16-compile"].estimated_bytes
    assert rows["torchao-gptfast-a6000-llama-3-8b-bf16"].published_bytes == 16_190_000_000
    for case_id in ("torchao-gptfast-a6000-llama-3-8b-codebook-4-64", "torchao-gptfast-xpu-llama-2-7b-int8wo"):
        assert rows[case_id].estimated_bytes is None and rows[case_id].reason
    # torchao's other weight-only formats, mapped since issue 9: the flags of each row's generate.py run
    assert CASES["torchao-gptfast-a100-llama-2-7b-fp6"].settings["quant"] == "fp6"
    assert CASES["torchao-gptfast-a100-llama-2-7b-fp6"].settings["dtype"] == "fp16"
    # the README's "-hqq" rows ran uintx-4-64 and uintx-2-8 without HQQ (benchmark_results.txt at b4d076813b)
    uintx = CASES["torchao-gptfast-a100-llama-3-8b-uintx-2-8-hqq"].settings
    assert (uintx["quant"], uintx["quant_group_size"]) == ("uint2", 8)
    marlin = CASES["torchao-gptfast-a100-llama-3-8b-int4wo-64-sparse-marlin"].settings
    assert (marlin["quant"], marlin["quantize_on_device"]) == ("int4-sparse-marlin", True)
    assert CASES["torchao-gptfast-llama-2-7b-w4a8"].settings["quant_group_size"] == 0
    assert CASES["torchao-gptfast-llama-2-7b-w4a8-g128"].settings["quant_group_size"] == 128
    for case_id in ("torchao-gptfast-a100-llama-2-7b-fp6", "torchao-gptfast-a100-llama-3-8b-int4wo-64-sparse-marlin",
                    "torchao-gptfast-a100-llama-2-7b-uintx-4-64-hqq", "torchao-gptfast-llama-2-7b-w4a8"):
        assert rows[case_id].estimated_bytes is not None and not rows[case_id].reason


def test_torchtune_readme_2024_09_rows(rows):
    # the README of 30b8519e prints GiB (get_memory_stats divides by 1024**3), and "GB" in the 405B row only
    assert rows["torchtune-readme-2024-09-llama3.1-8b-full-4090"].published_bytes == round(18.9 * 2**30)
    assert rows["torchtune-readme-2024-09-llama3.1-405b-qlora-8xa100"].published_bytes == 44_800_000_000
    for row in ("8b-full-4090", "8b-lora-4090"):
        assert abs(rows[f"torchtune-readme-2024-09-llama3.1-{row}"].error) < 0.10
    lora70 = CASES["torchtune-readme-2024-09-llama3.1-70b-lora-8xa100"].settings
    assert lora70["fsdp"] and lora70["gpus"] == 8 and lora70.get("offload", "none") == "none"
    for row in ("8b-full-a6000", "8b-lora-a6000", "405b-qlora-8xa100"):
        assert rows[f"torchtune-readme-2024-09-llama3.1-{row}"].estimated_bytes is None
    # custom_sharded_layers ['tok_embeddings', 'output'] with fsdp_cpu_offload: mapped since issue 9 (+8.6%, the peak in
    # the output layer's backward, its own unit gathered again)
    full70 = CASES["torchtune-readme-2024-09-llama3.1-70b-full-8xa100"].settings
    assert full70["fsdp_units"] == "blocks+embed+output" and full70["offload"] == "all" and full70["gpus"] == 8
    assert rows["torchtune-readme-2024-09-llama3.1-70b-full-8xa100"].estimated_bytes == 16_215_066_268
    # LoRA: the blocks' reduce-scatter input is the adapters' gradients alone (was a whole block's: 32.25 GiB)
    assert rows["torchtune-readme-2024-09-llama3.1-70b-lora-8xa100"].estimated_bytes == 32_914_164_864


def test_torchtune_readme_2024_09_a6000_full_note():
    # the A6000 full row's notes: the 4090 row's settings without activation checkpointing read the figure (+0.3%)
    from vramlens.estimator import estimate
    from vramlens.hardware.catalog import get_gpu
    from vramlens.models import load_model

    case = CASES["torchtune-readme-2024-09-llama3.1-8b-full-4090"]
    est = estimate(load_model("llama-3.1-8b"), gpu=get_gpu("RTX-A6000"), **{**case.settings, "checkpointing": "none"})
    assert abs(est.breakdown.peak_allocated / (37.4 * 2**30) - 1) < 0.01


def test_torchtune_init_rows_are_the_weights_and_the_rope_caches(rows):
    # e2e_flow.rst (0cd8bc4c): the LoRA model just loaded, plus torchtune's one Llama3ScaledRoPE cache
    # (131,072 x 64 x 2 fp32 = 64 MiB) that vramlens leaves out: the logged 6.21 GiB to its rounding
    e2e = rows["torchtune-docs-e2e-llama3.2-3b-lora-init"]
    assert abs(e2e.estimated_bytes + 131_072 * 64 * 2 * 4 - 6.21 * 2**30) <= 0.005 * 2**30
    # qlora_finetune.rst (0914d5cf): lora_llama2 keeps its template block (202,375,168 bf16 parameters) while the 32
    # deep copies exist, each of the 33 with a (4096, 64, 2) fp32 RoPE cache: the logged 13.96 GB to its rounding
    init = rows["torchtune-docs-qlora-tutorial-llama2-7b-lora-init"]
    block = (4 * 4096 * 4096 + 3 * 4096 * 11_008) * 2
    assert abs(init.estimated_bytes + block + 33 * 4096 * 64 * 2 * 4 - 13.96e9) <= 0.005e9


def test_torchtune_2024_09_lora_matches_the_trace_of_torchtune_code():
    # scripts/torchtune_2409_trace.py --method lora --layers 8 (torchtune 30b8519e, fake tensors, no cuBLAS workspace):
    # the step peaks at the loss' backward at 6,848.4 MiB, the fp32 RoPE cache (64 MiB) included
    from vramlens.estimator import estimate
    from vramlens.models import load_model

    case = CASES["torchtune-readme-2024-09-llama3.1-8b-lora-4090"]
    spec = load_model({**load_model(case.model).config, "num_hidden_layers": 8})
    bd = estimate(spec, **case.settings).breakdown
    assert bd.peak_phase == "backward"
    assert abs(bd.peak_allocated - 6_848.4 * 2**20) < 8 * 2**20
def test_hf_blog_rows(rows):
    from vramlens.models import load_model

    # the BLOOM-3B demo notebook prints get_memory_footprint() in bytes: bloom-3b's 3,002,557,440 parameters x 2 B
    case = CASES["hfblog-int8-demo-bloom-3b-fp16-footprint"]
    assert case.model is not None and case.figure == "weights"
    assert load_model({**load_model(case.model).config, **case.overrides}).params == 3_002_557_440
    fp16 = rows["hfblog-int8-demo-bloom-3b-fp16-footprint"]
    assert fp16.published_bytes == fp16.estimated_bytes == 3_002_557_440 * 2
    # load_in_8bit: the blocks' 30 x 2,560 x (7,680 + 2,560 + 10,240) + 30 x 10,240 x 2,560 = 2,359,296,000 linear
    # weights at 1 B, the other 643,261,440 parameters at 2 B; vramlens adds bitsandbytes' fp32 row scales (SCB), an
    # attribute of Int8Params that get_memory_footprint does not count: 30 x (7,680 + 2,560 + 10,240 + 2,560) x 4 B
    int8 = rows["hfblog-int8-demo-bloom-3b-int8-footprint"]
    assert int8.published_bytes == 2_359_296_000 + 643_261_440 * 2
    assert int8.estimated_bytes == int8.published_bytes + 30 * (7_680 + 2_560 + 10_240 + 2_560) * 4
    # personal-copilot.md: LoRA r=32 on c_attn (6,144 -> 6,400), both c_proj and c_fc of StarCoder's 40 blocks is the
    # post's "trainable params: 110,428,160": 32 x (12,544 + 12,288 + 30,720 + 30,720) x 40
    from vramlens.estimator import estimate

    est = estimate(load_model("starcoder"), **CASES["hfblog-personal-copilot-starcoder-qlora-r32-bs4"].settings)
    assert est.trainable_params == 32 * (12_544 + 12_288 + 30_720 + 30_720) * 40 == 110_428_160
    copilot = rows["hfblog-personal-copilot-starcoder-qlora-r32-bs4"]
    assert copilot.published_bytes == 26_000_000_000 and copilot.estimated_bytes is not None
    assert rows["hfblog-personal-copilot-starcoder-full-fsdp8-bs1"].estimated_bytes is None
    for m in ("roberta-large", "mistral-7b", "llama2-7b"):
        assert rows[f"hfblog-lora-seqcls-{m}-gpu1"].reason.startswith("a 30-run sweep whose row is not identified")
