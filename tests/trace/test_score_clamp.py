"""The mechanism behind Workload.legacy_score_clamp, on real torch ops: transformers <= 4.48 OPTAttention clamps its
masked scores with ``torch.max(scores + mask, torch.tensor(finfo.min))`` (modeling_opt.py lines 200-203 of the
v4.48.0 wheel), and maximum's backward keeps its input; adding the mask keeps nothing."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the saved-tensor count needs the trace extra (torch)")


def _saved_bytes(fn, x):
    saved = []

    def pack(t):
        saved.append(t.untyped_storage().nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(x)
    return sum(saved)


def test_clamp_keeps_the_masked_scores():
    b, a, s = 1, 4, 64
    scores = torch.randn(b, a, s, s, dtype=torch.float16, requires_grad=True)
    mask = torch.triu(torch.full((s, s), torch.finfo(torch.float16).min, dtype=torch.float16), 1)[None, None]
    floor = torch.tensor(torch.finfo(torch.float16).min, dtype=torch.float16)
    assert _saved_bytes(lambda x: x + mask, scores) == 0
    # the masked scores (b, a, s, s) in fp16, and the 0-dim floor: 2 x 4 x 64 x 64 + 2 = 32,770 B
    assert _saved_bytes(lambda x: torch.max(x + mask, floor), scores) == 2 * b * a * s * s + 2 == 32_770
