"""FSDP2 over tensor parallelism traced per rank (vramlens.trace.fsdp on a 2-D mesh, dp x tp).

torchtitan's order (parallelize_llama): its TP plan with ``parallelize_module`` on the "tp" dimension, then
``fully_shard`` per block and the root on "dp". The per-rank state is checked against figures computed here
from the shapes: each TP-local shard sharded again on dim 0 over dp, each parameter and optimizer state its
own allocation, each FSDP group's gradients one flat reduce-scatter output, all rounded to 512 B. The
cross-check rows (vramlens.trace.crosscheck.FSDP_TP_ROWS) hold the estimate to the trace.
"""

from __future__ import annotations

import importlib.util
import json

import pytest
from tests.trace.conftest import tiny_llama

from vramlens.errors import InputError, TraceError
from vramlens.trace import trace
from vramlens.trace.crosscheck import FSDP_TP_ROWS, render, run_row

pytest.importorskip("torch", reason="tracing needs the trace extra (torch)")

# hidden 128 in 4 heads (2 KV heads), MLP 344, vocabulary 1024, 2 blocks
CFG = tiny_llama(layers=2, intermediate_size=344, vocab_size=1024)
W = dict(mode="train", dtype="bf16", batch=2, seq=64, fsdp=True, gpus=4, tp=2)


@pytest.fixture(scope="module")
def dp2tp2():
    return trace(CFG, **W)


def test_state_per_rank_is_exact(dp2tp2):
    bd = dp2tp2.breakdown
    # TP 2 then FSDP over dp 2 on the local dim 0, bf16: embedding and lm_head (1024, 128) -> (512, 128) ->
    # (256, 128) = 65,536 B each; q (128, 128) -> (64, 128) -> (32, 128) = 8,192; k and v (64, 128) -> (16, 128)
    # = 4,096 each; o Shard(1) (128, 64) -> (64, 64) = 8,192; gate and up (344, 128) -> (86, 128) = 22,016 each;
    # down (128, 172) -> (64, 172) = 22,016; the norms (128,) -> (64,) = 128 B -> 512 each
    block = 8_192 + 2 * 4_096 + 8_192 + 3 * 22_016 + 2 * 512  # 91,648
    # the final norm 512, the rotary buffers inv_freq and original_inv_freq 512 each
    assert bd["weights"] == 2 * 65_536 + 2 * block + 512 + 2 * 512  # 315,904
    assert bd["optimizer_states"] == 2 * (2 * 65_536 + 2 * block + 512)  # AdamW: 629,760
    # one flat reduce-scatter output per FSDP group: a block's 90,880 B -> 91,136; the root's
    # 2 x 65,536 + 128 = 131,200 -> 131,584. No whole (V, h) embedding gradient, which TP alone keeps
    # (tests/trace/test_tp.py): FSDP2 redistributes it to Shard(0) before its reduce-scatter
    assert bd["gradients"] == 2 * 91_136 + 131_584  # 313,856
    notes = " ".join(bd.notes)
    assert "2-D mesh (dp 2, tp 2)" in notes and "rank 0 of 4" in notes


def test_tied_output_layer_is_one_parameter():
    tied = trace({**CFG, "tie_word_embeddings": True}, **W, steps=1).breakdown
    # the untied state less the output layer's shard (65,536 B), its optimizer states and gradient rows
    assert tied["weights"] == 315_904 - 65_536
    assert tied["optimizer_states"] == 629_760 - 2 * 65_536
    assert tied["gradients"] == 2 * 91_136 + 66_048  # the root's 65,536 + 128 = 65,664 -> 66,048


def test_refusals_are_one_line(tmp_path, capsys):
    from vramlens.cli.main import main

    with pytest.raises(TraceError, match=r"^tp=2 must divide intermediate_size=343"):
        trace({**CFG, "intermediate_size": 343}, **W)
    with pytest.raises(TraceError, match=r"^method=lora under tp=2 is not traced"):
        trace(CFG, **{**W, "method": "lora"})
    with pytest.raises(TraceError, match="GPT2LMHeadModel: --tp applies torchtitan's plan to Llama-style decoders"):
        trace({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": 128, "n_head": 4,
               "n_layer": 2, "vocab_size": 1024, "n_positions": 128}, **W)
    with pytest.raises(InputError, match=r"^world_size=2 must be a multiple of tp=2 with at least 2 data-parallel"):
        from vramlens.trace.fsdp import trace_fsdp

        trace_fsdp(CFG, **{**W, "gpus": 2})
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(CFG))
    rc = main(["trace", str(cfg), "--mode", "train", "--seq", "64", "--batch", "2", "--dtype", "bf16", "--fsdp",
               "--tp", "2", "--gpus", "4", "--fp8", "--quiet"])
    assert rc == 2
    # torchao's float8 TP styles take only Float8Linear, and an MLP of 344 is not converted (not a multiple of 16)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    if importlib.util.find_spec("torchao") is not None:  # without it, the line says to install torchao
        assert "fp8 with tp: block 0's mlp.gate_proj, mlp.up_proj, mlp.down_proj stayed nn.Linear" in err[0]


def test_cli_traces_fsdp_over_tp(tmp_path, capsys):
    from vramlens.cli.main import main

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(CFG))
    rc = main(["trace", str(cfg), "--mode", "train", "--seq", "64", "--batch", "2", "--dtype", "bf16", "--fsdp",
               "--tp", "2", "--gpus", "4", "--loss-parallel", "--steps", "1", "--json", "--quiet"])
    assert rc == 0
    d = json.loads(capsys.readouterr().out)
    assert d["components"]["gradients"] == 313_856  # as test_state_per_rank_is_exact


@pytest.mark.slow
def test_fsdp_tp_rows_match_the_estimate():
    rows = [run_row(name, row) for name, row in FSDP_TP_ROWS]
    assert {(r.workload["gpus"], r.workload["tp"]) for r in rows} == {(4, 2), (8, 2), (8, 4)}
    assert {r.workload["checkpointing"] for r in rows} == {"none", "full", "selective-op"}
    for r in rows:
        assert abs(r.peak_error) <= 0.02, render(rows)
        for c in r.traced:
            err = r.component_error(c)
            assert err is None or abs(err) <= 0.10, (c, render(rows))
        # the sharded gradients and AdamW states exactly, within the 512-byte rounding of each tensor
        assert abs(r.traced["gradients"] - r.estimate["gradients"]) <= 3 * 512, render(rows)
        assert abs(r.traced["optimizer_states"] - r.estimate["optimizer_states"]) <= 512 * 64, render(rows)
