"""Capacity invariants with Hypothesis: more memory never fewer blocks, longer contexts never more concurrency."""

from __future__ import annotations

import pytest

pytest.importorskip("hypothesis", reason="property tests need hypothesis (the dev extra)")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from vramlens.serving import capacity  # noqa: E402


@settings(max_examples=25, deadline=None)
@given(lo=st.floats(0.5, 0.95), step=st.floats(0.0, 0.05))
def test_more_utilization_never_fewer_blocks(lo, step):
    a = capacity("llama-2-7b", "vllm", gpu="A100-80GB", gpu_memory_utilization=lo)
    b = capacity("llama-2-7b", "vllm", gpu="A100-80GB", gpu_memory_utilization=min(1.0, lo + step))
    assert b.figure("num_gpu_blocks") >= a.figure("num_gpu_blocks")


@settings(max_examples=25, deadline=None)
@given(ctx=st.integers(1, 4096))
def test_longer_context_never_more_concurrency(ctx):
    a = capacity("llama-2-7b", "vllm", gpu="A100-80GB", context=ctx)
    b = capacity("llama-2-7b", "vllm", gpu="A100-80GB", context=min(4096, ctx + 16))
    assert b.concurrency <= a.concurrency
