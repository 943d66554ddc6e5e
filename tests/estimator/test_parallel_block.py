"""GPT-NeoX's parallel block (``use_parallel_residual``: x + attn(ln1(x)) + mlp(ln2(x))) and its attention's output
copy, checked against the arithmetic on Pythia-410M's shapes (h 1,024, f 4,096, 24 blocks) at 1 x 2,048 tokens in
bf16; the tracer checks the same on the real module (crosscheck ARCHITECTURES: pythia-160m, 7 rows)."""

import dataclasses

from vramlens.estimator import estimate
from vramlens.models import load_model

FULL = dict(mode="train", dtype="bf16", batch=1, seq=2048, attention="sdpa")
LORA = dict(FULL, method="lora", lora_targets=("query_key_value",))
X = 2 * 1_024 * 2_048  # one (t, h) bf16 tensor: 4,194,304 B


def _acts(spec, **w):
    return estimate(spec, **w).breakdown["activations"]


def test_both_norms_keep_one_input():
    neox = load_model("pythia-410m")
    assert neox.parallel_norms_share_input and neox.attention_output_copy
    sequential = dataclasses.replace(neox, parallel_norms_share_input=False)
    # the MLP's LayerNorm reads the block's input, which the attention's LayerNorm keeps: 24 x 4,194,304 B less
    assert _acts(sequential, **FULL) - _acts(neox, **FULL) == 24 * X


def test_the_attention_output_copy_is_kept_by_a_trained_dense():
    neox = load_model("pythia-410m")
    no_copy = dataclasses.replace(neox, attention_output_copy=False)
    # q and k come from torch.cat (contiguous head-major), so the kernel's output is transposed back by a copy,
    # which attention.dense keeps when it trains
    assert _acts(neox, **FULL) - _acts(no_copy, **FULL) == 24 * X
    assert _acts(neox, **LORA) == _acts(no_copy, **LORA)  # a frozen dense keeps nothing


def test_the_first_blocks_mlp_branch_is_untracked_under_lora():
    neox = load_model("pythia-410m")
    sequential = dataclasses.replace(neox, parallel_norms_share_input=False)
    # every block: the shared input once (24 x 4,194,304); the first block: its MLP branch reads the frozen
    # embeddings' output, so neither the MLP norm's fp32 mean and rstd (2 x 8,192) nor GELU's input
    # (2 x 4,096 x 2,048 = 16,777,216) is kept
    assert _acts(sequential, **LORA) - _acts(neox, **LORA) == 24 * X + 2 * 8_192 + 16_777_216


def test_eager_keeps_a_copy_of_v_not_the_fused_output():
    neox = load_model("pythia-410m")
    no_fused = dataclasses.replace(neox, fused_qkv_kept=False)
    # SDPA keeps v's view of query_key_value's (t, 3h) output, so its q and k parts too: 24 x 2 x 4,194,304 B
    assert _acts(neox, **FULL) - _acts(no_fused, **FULL) == 24 * 2 * X
    # eager's matmul reshapes that strided view into a copy and keeps the copy: nothing keeps the fused output
    # (the tracer agrees: crosscheck's pythia-160m eager rows)
    eager = dict(FULL, attention="eager")
    assert _acts(neox, **eager) == _acts(no_fused, **eager)
    # selective recomputation's checkpoint around the attention function keeps its inputs, v's view among them
    selective = dict(eager, checkpointing="selective")
    assert _acts(neox, **selective) - _acts(no_fused, **selective) == 24 * 2 * X
