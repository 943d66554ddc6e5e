"""The issue's case at full size: bert-base-uncased fine-tuned as a sentence embedder (sentence-transformers:
mean pooling, in-batch negatives over two text columns) at batch 16 x 512 in fp32 with AdamW, the 0.44 GB model
that fills more than 10 GiB. The estimate against the tracer on the real transformers BertModel."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="the tracer runs the real model under fake tensors")
pytest.importorskip("transformers", reason="the tracer builds transformers' BertModel")

from vramlens.estimator import estimate  # noqa: E402
from vramlens.trace import trace  # noqa: E402

pytestmark = pytest.mark.slow

WORKLOAD = dict(task="embedding", mode="train", method="full", dtype="fp32", optimizer="adamw", batch=16, seq=512,
                attention="sdpa", checkpointing="none")


def test_bert_embedding_finetune_16x512_fp32_adamw_matches_the_trace():
    e = estimate("bert-base-uncased", **WORKLOAD).breakdown
    t = trace("bert-base-uncased", steps=2, **WORKLOAD).breakdown
    # weights (437,937,152 B in fp32), their gradients and AdamW's two fp32 states: exact
    for c in ("weights", "gradients", "optimizer_states"):
        assert e[c] == t[c], c
    assert abs(e.peak_allocated / t.peak_allocated - 1) < 0.05  # measured +1.2%: 11,747,308,544 vs 11,605,703,680 B
    assert abs(e["activations"] / t["activations"] - 1) < 0.10  # measured -0.5% (two text columns' graphs)
    # known gap: temporaries read 12.5% low (570,832,896 vs 652,613,120 B); the peak is in activations
    assert e["temporaries"] < t["temporaries"]
    assert e.peak_allocated > 10 * 2**30  # the model's 0.44 GB of weights fill more than 10 GiB
