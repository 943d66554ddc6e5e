"""The tracer runs torchtitan's checkpointing on transformers' blocks: which blocks, which ops are
saved, and the estimate against it where no cross-check row reaches (a block after the last
checkpointed one), and FSDP2's mixed-precision policy on the fake process group."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="tracing needs the trace extra (torch)")
pytest.importorskip("transformers", reason="tracing needs the trace extra (transformers)")

from tests.trace.conftest import tiny_llama  # noqa: E402

from vramlens.estimator import estimate  # noqa: E402
from vramlens.estimator.runtime import runtime  # noqa: E402
from vramlens.models.inventory import spec_from_config  # noqa: E402
from vramlens.trace import trace  # noqa: E402
from vramlens.workload import make_workload  # noqa: E402

W = dict(mode="train", dtype="bf16", batch=4, seq=256, loss="fused-linear")


def _built(checkpointing: str, layers: int = 4):
    from vramlens.trace.build import build_hf

    return build_hf(tiny_llama(layers=layers), make_workload(**{**W, "checkpointing": checkpointing}), meta_only=True)


def test_every_n_wraps_the_nth_blocks_as_torchtitan():
    from vramlens.trace.checkpoint import blocks

    flags = [b.gradient_checkpointing for b in blocks(_built("every:2", layers=5).model)]
    assert flags == [False, True, False, True, False]  # blocks 2 and 4 (1-based), as _apply_layer_sac counts
    assert all(b.gradient_checkpointing for b in blocks(_built("selective-op").model))
    assert not any(b.gradient_checkpointing for b in blocks(_built("none").model))


def test_selective_op_policy_saves_every_other_mm_and_the_attention_kernel():
    import torch
    from torch.utils.checkpoint import CheckpointPolicy

    from vramlens.trace.checkpoint import save_list, selective_op_context

    saved = save_list()
    assert torch.ops.aten.mm.default in saved
    assert torch.ops.aten._scaled_dot_product_flash_attention.default in saved
    assert torch.ops.aten._scaled_dot_product_efficient_attention.default in saved
    assert torch.ops.aten.addmm.default not in saved and torch.ops.aten.bmm.default not in saved

    context_fn = selective_op_context(_built("selective-op").model)
    fwd, _ = context_fn()
    policy = fwd.policy_fn

    class Ctx:
        is_recompute = False

    a, b = torch.empty(2, 3, device="meta"), torch.empty(3, 4, device="meta")
    mm = torch.ops.aten.mm.default
    picks = [policy(Ctx, mm, a, b) for _ in range(4)]
    assert picks == [CheckpointPolicy.MUST_SAVE, CheckpointPolicy.PREFER_RECOMPUTE] * 2
    assert policy(Ctx, torch.ops.aten.silu.default, a) == CheckpointPolicy.PREFER_RECOMPUTE
    # a fresh counter for the next checkpoint (torchtitan: meta = defaultdict(int) per context)
    assert context_fn()[0].policy_fn(Ctx, mm, a, b) == CheckpointPolicy.MUST_SAVE


@pytest.mark.parametrize("checkpointing", ["every:2", "every:3", "selective-op"])
def test_estimate_within_5_percent_of_trace(checkpointing):
    """Three blocks: under every:2 and every:3 the last block is not checkpointed (its activations
    are freed before the first recomputation); the peak is in a recomputed block's backward."""
    cfg = tiny_llama(layers=3, intermediate_size=688, hidden_size=256)
    kw = {**W, "checkpointing": checkpointing}
    tr = trace(cfg, steps=2, **kw).breakdown
    e = estimate(spec_from_config(cfg, name="tiny-llama"), **kw)
    est_peak = e.breakdown.peak_allocated - runtime(e.gpu, e.workload).workspace_bytes
    assert abs(est_peak / tr.peak_allocated - 1) <= 0.05, (est_peak, tr.peak_allocated)
    for c in ("activations", "temporaries"):
        assert abs(e.breakdown[c] / tr[c] - 1) <= 0.10, (c, e.breakdown[c], tr[c])


def test_fsdp_mixed_precision_policy_is_applied():
    import torch

    from vramlens.trace.fsdp import mixed_precision_policy

    mp = mixed_precision_policy(make_workload(mode="train", dtype="fp32", amp="bf16", gpus=2, fsdp=True))
    assert (mp.param_dtype, mp.reduce_dtype) == (torch.bfloat16, torch.float32)
    plain = mixed_precision_policy(make_workload(mode="train", dtype="bf16", gpus=2, fsdp=True))
    assert plain.param_dtype is None and plain.reduce_dtype is None
    res = trace(tiny_llama(), mode="train", dtype="fp32", amp="bf16", batch=2, seq=32, gpus=2, fsdp=True, steps=1)
    # no autocast: nothing is tagged as autocast's weight copies; the all-gathered copies are comm buffers
    assert res.summary.by_tag["autocast_cache"] == 0
    assert "MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)" in " ".join(res.breakdown.notes)


def test_every_n_is_not_extrapolated():
    from vramlens.errors import TraceError

    with pytest.raises(TraceError, match="checkpoints every N-th block"):
        trace(tiny_llama(layers=4), mode="train", checkpointing="every:2", layers=3)
