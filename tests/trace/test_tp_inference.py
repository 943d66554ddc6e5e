"""Tensor parallelism traced per rank in inference and with torchtune's techniques (vramlens.trace.tp, issue 9).

Inference runs transformers' own plan as ``from_pretrained(..., tp_plan="auto")`` applies it (the class's
``_tp_plan`` with the config's ``base_model_tp_plan``, ``apply_tensor_parallelism``) on the fake process
group, then a prefill and decode steps with the DynamicCache. Training composes torchtitan's plan with
torchtune's optimizer in backward, activation offloading and chunked cross-entropy (full_finetune_distributed
runs them under its TP plan). The cross-check rows (TP_INFERENCE_ROWS, TP_TECHNIQUE_ROWS) hold the estimate
to the trace: peak within 5 %, every component within 10 %.
"""

from __future__ import annotations

import json

import pytest
from tests.trace.conftest import tiny_llama

from vramlens.errors import TraceError
from vramlens.trace import trace
from vramlens.trace.crosscheck import TP_INFERENCE_ROWS, TP_TECHNIQUE_ROWS, render, run_row

pytest.importorskip("torch", reason="tracing needs the trace extra (torch)")

# hidden 128 in 4 heads (2 KV heads of 32), MLP 344, vocabulary 1024, 2 blocks
CFG = tiny_llama(layers=2, intermediate_size=344, vocab_size=1024)
INFER = dict(mode="inference", dtype="bf16", batch=2, seq=64, new_tokens=8)


@pytest.fixture(scope="module")
def infer_tp2():
    return trace(CFG, **INFER, tp=2, gpus=2)


def test_inference_state_per_rank_is_exact(infer_tp2):
    bd = infer_tp2.breakdown
    # transformers' plan: embed_tokens embedding_rowwise and lm_head colwise_gather_output (512 x 128 x 2 =
    # 131,072 each); per block q 64 x 128 x 2 = 16,384, k and v 32 x 128 x 2 = 8,192 each, o 16,384, gate, up
    # and down 172 x 128 x 2 = 44,032 each, two whole norms 256 -> 512 each; the final norm 512; the rotary
    # buffers inv_freq and original_inv_freq 512 each
    block = 16_384 + 2 * 8_192 + 16_384 + 3 * 44_032 + 2 * 512  # 182,272
    assert bd["weights"] == 2 * 131_072 + 2 * block + 512 + 2 * 512  # 628,224
    # the cache holds the rank's 1 KV head: each (b 2, 1 head, 72 tokens, 32) bf16 tensor is 9,216 B; four
    # (2 layers x keys, values) and the 71-token tensor torch.cat still holds at the last step (9,088 -> 9,216)
    assert bd["kv_cache"] == 5 * 9_216  # 46,080
    assert bd["gradients"] == 0 and bd["optimizer_states"] == 0
    assert "transformers' own plan (from_pretrained(tp_plan='auto')" in " ".join(bd.notes)


def test_inference_cache_halves_with_tp(infer_tp2):
    one = trace(CFG, **INFER)
    # 2 KV heads on one GPU, 1 per rank: the same 5 tensors of 18,432 B (b 2 x 2 heads x 72 x 32 x 2) on one GPU
    assert one.breakdown["kv_cache"] == 5 * 18_432 == 2 * infer_tp2.breakdown["kv_cache"]


def test_refusals_are_one_line():
    with pytest.raises(TraceError, match=r"^cache=static kv_dtype=None kv_block=0 under tp=2 is not traced"):
        trace(CFG, **INFER, tp=2, gpus=2, cache="static")
    with pytest.raises(TraceError, match=r"^method=lora under tp=2 is not traced: torchtune's "
                                         r"lora_finetune_distributed refuses tensor_parallel_dim > 1"):
        trace(CFG, mode="train", dtype="bf16", batch=2, seq=64, tp=2, gpus=2, method="lora")
    with pytest.raises(TraceError, match=r"^loss=fused-linear is not traced with tp=2"):
        trace(CFG, mode="train", dtype="bf16", batch=2, seq=64, tp=2, gpus=2, loss="fused-linear")


def test_cli_traces_tp_inference(tmp_path, capsys):
    from vramlens.cli.main import main

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(CFG))
    rc = main(["trace", str(cfg), "--mode", "inference", "--seq", "64", "--batch", "2", "--new-tokens", "8",
               "--dtype", "bf16", "--tp", "2", "--gpus", "2", "--json", "--quiet"])
    assert rc == 0
    d = json.loads(capsys.readouterr().out)
    assert d["components"]["kv_cache"] == 46_080  # as test_inference_state_per_rank_is_exact


def _check(rows) -> None:
    for r in rows:
        assert abs(r.peak_error) <= 0.05, render(rows)
        for c in r.traced:
            err = r.component_error(c)
            assert err is None or abs(err) <= 0.10, (c, render(rows))


@pytest.mark.slow
def test_tp_inference_rows_match_the_estimate():
    rows = [run_row(name, row) for name, row in TP_INFERENCE_ROWS]
    _check(rows)
    for r in rows:
        # the plan shards every matrix the estimator splits: the weights agree but for the rotary buffers (a
        # 512-byte block each, which the estimator scales by the rank's share) and Mixtral's routers, whole on
        # every rank (no plan entry), which the estimator splits: 8,003,072 traced, 8,000,512 estimated
        assert 0 <= r.traced["weights"] - r.estimate["weights"] <= 2_560, render(rows)


@pytest.mark.slow
def test_tp_technique_rows_match_the_estimate():
    rows = [run_row(name, row) for name, row in TP_TECHNIQUE_ROWS]
    assert {k for _n, row in TP_TECHNIQUE_ROWS for k in ("optimizer_in_backward", "activation_offload",
                                                          "loss_chunks") if row.get(k)} == {
        "optimizer_in_backward", "activation_offload", "loss_chunks"}
    _check(rows)
    for r in rows:
        # the input embedding's gradient whole (V x h) on every rank, also when its hook frees it at once
        assert r.traced["gradients"] == r.estimate["gradients"], render(rows)
        assert r.traced["optimizer_states"] == r.estimate["optimizer_states"], render(rows)


@pytest.mark.slow
def test_full_size_llama2_tp4_inference():
    """Llama 2 7B at full size on rank 0 of 4, 2,048 prompt tokens and 8 new: the case where the post-attention
    norm's fp32 upcast (2 x 2,048 x 4,096 x 4 B) outgrows the MLP (11,008 / 4 = 2,752 columns per rank < 4,096)."""
    from vramlens.estimator import estimate

    wl = dict(mode="inference", dtype="bf16", batch=1, seq=2048, new_tokens=8, tp=4, gpus=4)
    traced = trace("llama-2-7b", **wl).breakdown
    est = estimate("llama-2-7b", **wl).breakdown
    # 8 KV heads per rank x 128 x 2 B x 2,056 tokens = 4,210,688 per tensor, 64 tensors (32 layers x keys, values),
    # and the 2,055-token tensor torch.cat still holds at the last step (4,208,640)
    assert traced["kv_cache"] == est["kv_cache"] == 64 * 4_210_688 + 4_208_640  # 273,692,672
    assert abs(est["weights"] - traced["weights"]) < 1024  # the rotary buffers' rounding (768 B)
    assert abs(est["activations"] / traced["activations"] - 1) < 0.01  # 117,440,512 vs 118,538,240
