"""The advisor's per-rank FSDP memory agrees with a traced FSDP2 rank within 5%.

Uses ``vramlens.trace.fsdp.trace_fsdp`` (FSDP2 under PyTorch's fake process group). The estimate's
peak_allocated includes the cuBLAS workspaces (allocator memory, not tensors), which a trace
cannot see; they are taken out before comparing, as vramlens.trace.crosscheck does.
"""

from __future__ import annotations

import pytest
from advise_specs import TINY, tiny

from vramlens.estimator import estimate_spec
from vramlens.workload import Workload

pytest.importorskip("torch", reason="FSDP cross-check needs torch (the trace extra)")


@pytest.mark.parametrize("world_size, strategy", [(2, "full"), (4, "full"), (4, "shard-grad-op")])
def test_fsdp_per_rank_estimate_within_5_percent_of_trace(world_size, strategy):
    from vramlens.estimator.runtime import runtime
    from vramlens.trace.fsdp import trace_fsdp

    w = Workload(mode="train", dtype="fp32", batch=2, seq=128, gpus=world_size, fsdp=True, fsdp_strategy=strategy)
    traced = trace_fsdp(dict(TINY, architectures=["LlamaForCausalLM"]), w, world_size=world_size)
    est = estimate_spec(tiny(), w)
    for name in ("weights", "gradients", "optimizer_states"):
        t, e = traced.breakdown[name], est.breakdown[name]
        assert abs(e - t) <= 0.05 * max(t, 1), (name, e, t)
    est_peak = est.breakdown.peak_allocated - runtime(est.gpu, est.workload).workspace_bytes
    assert abs(est_peak - traced.breakdown.peak_allocated) <= 0.05 * traced.breakdown.peak_allocated, (
        est_peak, traced.breakdown.peak_allocated)
