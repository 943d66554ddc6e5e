"""--output-upcast traced: LitGPT's loop under Lightning Fabric (every chunk of the logits cast to fp32 at once and
held by the loop through backward, or until the next forward returns) on a tiny Llama with a 32,000-token vocabulary,
against the estimate (tests/estimator/test_loss_upcast.py has the arithmetic)."""

from __future__ import annotations

import pytest
from tests.trace.conftest import tiny_llama

pytest.importorskip("torch", reason="tracing needs the trace extra (torch)")
pytest.importorskip("transformers", reason="tracing needs the trace extra (transformers)")

from vramlens.estimator import estimate  # noqa: E402
from vramlens.trace import trace  # noqa: E402

RUN = dict(mode="train", dtype="bf16", method="lora", lora_dtype="bf16", batch=2, seq=256, loss_chunks=8,
           loss_upcast=False)


def test_the_peak_moves_by_the_estimates_figure():
    cfg = tiny_llama(vocab_size=32_000, max_position_embeddings=512)
    peaks = {}
    for up in ("none", "step", "next-forward"):
        kw = dict(output_upcast=up != "none", holds_outputs=up)
        t = trace(cfg, **kw, **RUN, steps=2)
        e = estimate(cfg, **kw, **RUN)
        peaks[up] = (t.breakdown.peak_allocated, e.breakdown.peak_allocated)
    for up in ("step", "next-forward"):
        traced = peaks[up][0] - peaks["none"][0]
        estimated = peaks[up][1] - peaks["none"][1]
        # step: the fp32 copies (8 x 2 x 32 x 32,000 x 4 B = 65.5 MB) and fp32 log_softmax beside the blocks; with
        # the previous step's copies held too, the cast in the next forward is higher still
        assert abs(traced - estimated) <= 16 * 1024, (up, traced, estimated)
    assert peaks["next-forward"][0] > peaks["step"][0] > peaks["none"][0]

