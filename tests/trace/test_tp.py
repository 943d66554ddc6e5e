"""Tensor parallelism traced per rank (vramlens.trace.tp): torchtitan's plan on transformers' Llama.

The per-rank state is checked against figures computed here from the shapes: every matrix
(embedding and output layer over the vocabulary) split tp ways, the norms whole, each tensor its own
allocation rounded to 512 B; the input embedding's gradient is whole (V x h) on every rank (DTensor
has no row-sharded strategy for ``embedding_dense_backward``). The cross-check rows
(vramlens.trace.crosscheck.TP_ROWS) hold the estimate to the trace: peak within 5 %, every component
within 10 %.
"""

from __future__ import annotations

import json

import pytest
from tests.trace.conftest import tiny_llama

from vramlens.errors import TraceError
from vramlens.trace import trace
from vramlens.trace.crosscheck import TP_ROWS, render, run_row

pytest.importorskip("torch", reason="tracing needs the trace extra (torch)")

# hidden 128 in 4 heads (2 KV heads), MLP 344, vocabulary 1024, 2 blocks
CFG = tiny_llama(layers=2, intermediate_size=344, vocab_size=1024)
W = dict(mode="train", dtype="bf16", batch=2, seq=64)


@pytest.fixture(scope="module")
def tp2():
    return trace(CFG, **W, tp=2, gpus=2)


def test_state_per_rank_is_exact(tp2):
    bd = tp2.breakdown
    # per rank, bf16: embedding and lm_head 512 x 128 x 2 = 131,072 each; per block q 64 x 128 x 2 =
    # 16,384, k and v (2 KV heads of 32 -> 1 per rank) 32 x 128 x 2 = 8,192 each, o 128 x 64 x 2 = 16,384,
    # gate and up 172 x 128 x 2 = 44,032, down 128 x 172 x 2 = 44,032, two norms 128 x 2 = 256 -> 512 each;
    # final norm 512; the rotary buffers inv_freq and original_inv_freq (16 fp32 each) 512 each
    block = 16_384 + 2 * 8_192 + 16_384 + 3 * 44_032 + 2 * 512  # 182,272
    assert bd["weights"] == 2 * 131_072 + 2 * block + 512 + 2 * 512  # 628,224
    # AdamW: exp_avg and exp_avg_sq of every parameter shard (the buffer has none)
    assert bd["optimizer_states"] == 2 * (2 * 131_072 + 2 * block + 512)  # 1,254,400
    # the gradients: the shards', but the input embedding's whole (1024 x 128 x 2 = 262,144)
    assert bd["gradients"] == 262_144 + 131_072 + 2 * block + 512  # 758,272
    # global counts (DTensor.numel), not the shard's: embedding and lm_head 2 x 1024 x 128; per block q and o
    # 128 x 128, k and v 64 x 128, MLP 3 x 344 x 128, norms 2 x 128; the final norm 128
    assert tp2.params == 2 * 1024 * 128 + 2 * (2 * 128 * 128 + 2 * 64 * 128 + 3 * 344 * 128 + 2 * 128) + 128
    assert "rank 0 of 2" in " ".join(bd.notes)


def test_loss_parallel_keeps_the_logits_sharded(tp2):
    lp = trace(CFG, **W, tp=2, gpus=2, loss_parallel=True)
    # the fp32 log_softmax the loss keeps: b x s x V/tp x 4 = 2 x 64 x 512 x 4 = 262,144 with loss_parallel,
    # 2 x 64 x 1024 x 4 = 524,288 gathered; the rest of the saved tensors is the same
    assert tp2.breakdown["activations"] - lp.breakdown["activations"] == 524_288 - 262_144
    assert lp.breakdown["gradients"] == tp2.breakdown["gradients"]


def test_refusals_are_one_line(tmp_path, capsys):
    from vramlens.cli.main import main

    with pytest.raises(TraceError, match=r"^tp=3 must divide the 4 attention heads and 2 key-value heads"):
        trace(CFG, **W, tp=3, gpus=3)
    with pytest.raises(TraceError, match="GPT2LMHeadModel: --tp applies torchtitan's plan to Llama-style decoders"):
        trace({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": 128, "n_head": 4,
               "n_layer": 2, "vocab_size": 1024, "n_positions": 128}, **W, tp=2, gpus=2)
    with pytest.raises(TraceError, match=r"^amp=bf16 under tp=2 is not traced"):
        trace(CFG, **{**W, "dtype": "fp32"}, tp=2, gpus=2, amp="bf16")
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(CFG))
    rc = main(["trace", str(cfg), "--mode", "train", "--seq", "64", "--batch", "2", "--dtype", "bf16",
               "--tp", "2", "--gpus", "2", "--method", "lora", "--quiet"])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "method=lora under tp=2 is not traced" in err[0]


def test_cli_traces_tp(tmp_path, capsys):
    from vramlens.cli.main import main

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(CFG))
    rc = main(["trace", str(cfg), "--mode", "train", "--seq", "64", "--batch", "2", "--dtype", "bf16",
               "--tp", "2", "--gpus", "2", "--loss-parallel", "--steps", "1", "--json", "--quiet"])
    assert rc == 0
    d = json.loads(capsys.readouterr().out)
    assert d["components"]["gradients"] == 758_272  # as test_state_per_rank_is_exact


@pytest.mark.slow
def test_tp_rows_match_the_estimate():
    rows = [run_row(name, row) for name, row in TP_ROWS]
    assert {(r.workload["tp"], bool(r.workload.get("loss_parallel"))) for r in rows} == {
        (2, False), (2, True), (4, False), (4, True)}
    assert {r.workload["checkpointing"] for r in rows} == {"none", "full", "selective-op", "every:2"}
    for r in rows:
        assert abs(r.peak_error) <= 0.05, render(rows)
        for c in r.traced:
            err = r.component_error(c)
            assert err is None or abs(err) <= 0.10, (c, render(rows))
        assert r.traced["gradients"] == r.estimate["gradients"], render(rows)
        assert r.traced["optimizer_states"] == r.estimate["optimizer_states"], render(rows)
        # the two rotary buffers (64 B each, a 512-byte block each on every rank), which the estimator
        # scales by the rank's share of the parameters instead
        assert 0 < r.traced["weights"] - r.estimate["weights"] < 2 * 512, render(rows)


def test_loss_parallel_temporaries_inside_dtensor_are_counted():
    """loss_parallel's DTensor handlers run their local ops inside DTensor's dispatch; the recorder sees them."""
    from vramlens.trace.tp_loss import trace_tp_loss

    h = trace_tp_loss(vocab=1024, hidden=64, batch=1, seq=256, tp=2)
    # 256 tokens x 512 local vocabulary: bf16 logits 262,144 B, each fp32 shard 524,288 B
    # forward (_log_softmax): logits, the fp32 input, shifted and exp(shifted), and a few 512-byte reductions
    assert 262_144 + 3 * 524_288 <= h.forward_peak <= 262_144 + 3 * 524_288 + 8 * 512
    # backward (_nll_loss_and_log_softmax_backward): beside the saved log_softmax, three fp32 shards at once
    assert 4 * 524_288 <= h.backward_peak <= 4 * 524_288 + 24 * 512


def test_a_collective_wait_returns_its_input():
    """funcol's wait_tensor returns its input on a GPU; its fake kernel makes an empty_like copy the recorder skips."""
    import torch
    import torch.distributed._functional_collectives as funcol
    from torch._subclasses.fake_tensor import FakeTensorMode

    from vramlens.trace.events import summarize
    from vramlens.trace.ranks import fake_process_group
    from vramlens.trace.recorder import Recorder

    with fake_process_group(2) as mesh, FakeTensorMode():
        x = torch.empty(256, 256)  # 262,144 B
        rec = Recorder()
        with rec:
            y = funcol.wait_tensor(funcol.all_gather_single(x, 0, mesh))  # all_gather_into_tensor, wait_tensor
            assert y.shape == (512, 256)
            del y
        rec.close()
    # one 524,288-byte output, not two
    assert summarize(rec.events()).peak_allocated == 524_288


# the same model with an MLP of 352 (a multiple of 16: torchao converts every block linear)
CFG_F8 = tiny_llama(layers=2, intermediate_size=352, vocab_size=1024)


def test_cli_traces_fp8_under_tp(tmp_path, capsys):
    """torchao's float8 TP styles on the fake process group (torchtitan's apply_tp with float8)."""
    pytest.importorskip("torchao.float8", reason="fp8 training needs torchao")
    from vramlens.cli.main import main

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(CFG_F8))
    rc = main(["trace", str(cfg), "--mode", "train", "--seq", "64", "--batch", "2", "--dtype", "bf16",
               "--tp", "2", "--gpus", "2", "--loss-parallel", "--fp8", "--steps", "1", "--json", "--quiet"])
    assert rc == 0
    d = json.loads(capsys.readouterr().out)
    # the bf16 trace's 1,149,440 B (test_fp8_under_tp_saves_float8_inputs) less, per block of 128 tokens: the
    # gathered attention and MLP inputs in float8 (128 x 128 + a 512 B scale) instead of bf16 (32,768) twice, down's
    # input (128 x 176) in float8 instead of bf16 (45,056 -> 22,528 + 512), o's float8 copy (128 x 64 + 512) added:
    # 2 x (31,744 + 22,016 - 8,704) = 90,112
    assert d["components"]["activations"] == 1_149_440 - 90_112
    assert any("float8 styles" in n for n in d["notes"])


def test_fp8_under_tp_refuses_plain_linears():
    pytest.importorskip("torchao.float8", reason="fp8 training needs torchao")
    # MLP 344 is not a multiple of 16: gate/up/down stay nn.Linear, which torchao's float8 styles refuse
    with pytest.raises(TraceError, match=r"^fp8 with tp: block 0's mlp.gate_proj, mlp.up_proj, mlp.down_proj stayed "
                                         r"nn.Linear \(dims not multiples of 16\)"):
        trace(CFG, **W, tp=2, gpus=2, fp8=True, steps=1)


@pytest.mark.slow
def test_fp8_under_tp_saves_float8_inputs():
    pytest.importorskip("torchao.float8", reason="fp8 training needs torchao")
    bf16 = trace(CFG_F8, **W, tp=2, gpus=2, loss_parallel=True, steps=1).breakdown
    f8 = trace(CFG_F8, **W, tp=2, gpus=2, loss_parallel=True, fp8=True, steps=1).breakdown
    assert bf16["activations"] == 1_149_440
    assert bf16["activations"] - f8["activations"] == 90_112  # as test_cli_traces_fp8_under_tp
    assert f8["weights"] == bf16["weights"] and f8["gradients"] == bf16["gradients"]


@pytest.mark.slow
def test_fp8_tp_rows_match_the_estimate():
    pytest.importorskip("torchao.float8", reason="fp8 training needs torchao")
    from vramlens.trace.crosscheck import run_fp8_tp_rows

    rows = run_fp8_tp_rows()
    assert len(rows) == 8
    for r in rows:
        assert abs(r.peak_error) <= 0.05, render(rows)
        for c in r.traced:
            err = r.component_error(c)
            assert err is None or abs(err) <= 0.10, (c, render(rows))
