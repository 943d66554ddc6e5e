"""Training-stack memory techniques: the estimate against the tracer running the technique on the
real module (vramlens.trace.crosscheck.TECHNIQUE_ROWS): peak within 5%, every component within 10%."""

import pytest
from tests.trace.conftest import check_rows

from vramlens.trace.crosscheck import (
    AO_FORMAT_ROWS,
    CACHE_ROWS,
    CHECKPOINT_ROWS,
    FSDP_ROWS,
    FSDP_TP_ROWS,
    LOGITS_SUM_ROWS,
    PEFT_VECTOR_ROWS,
    QLORA_ROWS,
    TECHNIQUE_ROWS,
    TP_INFERENCE_ROWS,
    TP_ROWS,
    TP_TECHNIQUE_ROWS,
    WEIGHT_ONLY_ROWS,
    render,
    run_checkpoint_rows,
    run_fsdp_rows,
    run_rows,
    run_technique_rows,
    technique_rows,
)

pytestmark = pytest.mark.slow  # each row traces two steps of a shrunk model


def _row_id(row) -> str:
    name, w = row
    return name + "".join(f"-{k}={v}" for k, v in w.items() if k not in ("mode", "method", "attention", "dtype"))


_check = check_rows


def test_rows_name_real_settings():
    from vramlens.workload import workload_fields

    for _name, row in (TECHNIQUE_ROWS + QLORA_ROWS + PEFT_VECTOR_ROWS + CACHE_ROWS + CHECKPOINT_ROWS + FSDP_ROWS + FSDP_TP_ROWS + TP_ROWS
                       + TP_INFERENCE_ROWS + TP_TECHNIQUE_ROWS
                       + LOGITS_SUM_ROWS + WEIGHT_ONLY_ROWS + AO_FORMAT_ROWS):
        assert set(row) <= set(workload_fields())


def test_optimizer_in_backward_matches_trace():
    _check(run_technique_rows(only="optimizer_in_backward"))


def test_fp8_training_matches_trace():
    """torchao's Float8Linear on the real module: the same saved tensors, its casts as transients."""
    pytest.importorskip("torchao.float8", reason="fp8 training needs torchao")
    rows = run_technique_rows(only="fp8")
    assert len(rows) == 10  # 6 tensorwise, 2 rowwise, 2 rowwise_with_gw_hp
    _check(rows)


def test_fp8_casts_are_transients():
    """torchao 0.18 saves the bf16 input for backward (matmul_with_hp_or_float8_args.forward): the
    activations equal the bf16 run's; the fused-loss row's peak is the float8 backward, above the bf16 one."""
    pytest.importorskip("torchao.float8", reason="fp8 training needs torchao")
    from vramlens.trace.crosscheck import run_row

    row = {"mode": "train", "method": "full", "attention": "sdpa", "checkpointing": "none", "dtype": "bf16",
           "loss": "fused-linear", "batch": 2, "seq": 512}
    bf16, fp8 = run_row("llama-3-8b", row), run_row("llama-3-8b", {**row, "fp8": True})
    assert fp8.traced["activations"] == bf16.traced["activations"]
    assert fp8.traced_peak > bf16.traced_peak
    assert fp8.estimate_peak > bf16.estimate_peak


def test_gqa_expansion_matches_trace():
    """torchtune's expansion of GQA keys and values before the kernel, traced through transformers' repeat_kv."""
    rows = run_technique_rows(only="gqa_expand")
    assert len(rows) == 6
    _check(rows)


def test_chunked_cross_entropy_matches_trace():
    _check(run_technique_rows(only="loss_chunks"))


def test_fused_linear_cross_entropy_matches_trace():
    _check(run_technique_rows(only="loss"))


def test_activation_offload_matches_trace():
    rows = run_technique_rows(only="activation_offload")
    _check(rows)
    for r in rows:
        # one pinned copy per save (views, weight.t() and a storage saved by two ops included)
        assert r.traced_host and abs(r.estimate_host / r.traced_host - 1) <= 0.05, render(rows)


# one test per row: these rows are minutes in all, and one test each lets pytest-xdist spread them over the cores
@pytest.mark.parametrize("row", technique_rows(only="new_tokens"), ids=_row_id)
def test_long_decoding_matches_trace(row):
    """GQA expansion in eager attention, a sliding window capping the cache, MLA's rebuilt keys and values."""
    _check(run_rows((row,)))


@pytest.mark.parametrize("row", QLORA_ROWS, ids=_row_id)
def test_qlora_lora_dtype_dropout_and_dora_match_trace(row):
    """bitsandbytes' 4-bit linears (all or the adapted ones), the adapters' dtype, dropout and DoRA."""
    _check(run_rows((row,)))


@pytest.mark.parametrize("row", PEFT_VECTOR_ROWS, ids=lambda row: f"{row[1]['method']}-{_row_id(row)}")
def test_ia3_and_ln_tuning_match_trace(row):
    """peft's IA3 and LN tuning (get_peft_model with the model type's default targets) on the real module."""
    _check(run_rows((row,)))


def test_torchao_int8_weight_only_matches_trace():
    """torchao's own Int8WeightOnlyConfig on the shrunk model: every linear's weight cast to bf16 at each call."""
    pytest.importorskip("torchao.quantization", reason="needs torchao")
    _check(run_rows(WEIGHT_ONLY_ROWS))


def test_torchao_other_weight_only_formats_match_trace():
    """fp6, uintx, Sparse-Marlin and Marlin QQQ: the tracer holds each layout's tensors (build.AOWeightOnlyLinear), so
    the weights agree to the byte; uintx's dequantize at every call (the output layer's the prompt's peak)."""
    rows = run_rows(AO_FORMAT_ROWS)
    _check(rows)
    for r in rows:
        assert r.estimate["weights"] == r.traced["weights"], render(rows)


def test_static_and_offloaded_caches_match_trace():
    rows = run_rows(CACHE_ROWS)
    _check(rows)
    for r in rows:
        if r.workload["cache"] == "offloaded":  # the layers on the host
            assert r.traced_host and abs(r.estimate_host / r.traced_host - 1) <= 0.10, render(rows)


def test_quantized_cache_is_not_traced():
    from vramlens.errors import TraceError
    from vramlens.trace import trace
    from vramlens.trace.crosscheck import tiny_config

    with pytest.raises(TraceError, match="cache=quantized needs optimum-quanto or hqq"):
        trace(tiny_config("llama-2-7b"), mode="inference", seq=16, new_tokens=2, cache="quantized")


def test_torchtitan_checkpointing_matches_trace():
    """selective-op and every:N (torchtitan's policies run on transformers' blocks), Megatron-style
    selective over SDPA; several rows put the peak inside a recomputed block's backward."""
    rows = run_checkpoint_rows()
    _check(rows)
    modes = {r.workload["checkpointing"] for r in rows}
    assert {"selective-op", "every:2", "selective"} <= modes


def test_fsdp_mixed_precision_matches_trace():
    """FSDP2 per rank on the fake process group: torchtitan's MixedPrecisionPolicy(bf16, fp32) over fp32
    shards, and pure bf16 (tests/advise/test_fsdp_crosscheck.py has the backward-bound cases), with
    torchtune's activation offloading."""
    rows = run_fsdp_rows()
    _check(rows)
    mp = [r for r in rows if r.workload.get("amp") == "bf16" and r.workload["checkpointing"] == "none"]
    assert mp and all(r.traced["master_weights"] == 0 for r in mp)  # no autocast copies
    # torchtune's recipe (activation offloading, the loss outside the model, the root resharded when it
    # runs): the host copies as on one GPU
    offloaded = [r for r in rows if r.workload.get("activation_offload")]
    assert len(offloaded) == 3
    for r in offloaded:
        assert r.traced_host and abs(r.estimate_host / r.traced_host - 1) <= 0.05, render(rows)


def test_older_transformers_rows():
    assert len(technique_rows(only="transformers_version")) == 11


@pytest.mark.parametrize("row", technique_rows(only="transformers_version"), ids=_row_id)
def test_older_transformers_generate_matches_trace(row):
    """generate() of transformers < 4.42 keeps the previous step's cache through each decode forward, and < 4.45
    makes (and, for Llama's copies, upcasts) every prompt token's logits, kept into the first step before 4.42:
    MHA and GQA, eager and SDPA; the decode phase's peak within 5% too."""
    rows = run_rows((row,))
    _check(rows)
    for r in rows:
        assert abs(r.phase_error("decode") or 1.0) <= 0.05, render(rows)
    # Llama 2's 128-token rows (multi-head: the most cache per token): the previous cache doubles the cache the
    # decode step holds, which makes it the peak
    for r in rows:
        if r.workload["new_tokens"] == 128 and r.model == "llama-2-7b":
            assert r.phase_error("decode") is not None and r.estimate_phases["decode"] == r.estimate_peak
