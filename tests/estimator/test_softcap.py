"""Gemma 2's softcapping (tanh(x / cap) * cap on the attention scores and on the logits): tanh keeps its output for
backward. Checked against the arithmetic on Gemma 2 9B's shapes (16 heads, 42 blocks, V 256,000) at 1 x 2,048
tokens; the tracer checks the same on the real modules (crosscheck ARCHITECTURES: gemma-2-2b)."""

import dataclasses

from vramlens.estimator import estimate
from vramlens.models import load_model

TRAIN = dict(mode="train", dtype="bf16", batch=1, seq=2048, attention="eager")


def test_softcaps_keep_their_tanh_outputs():
    g2 = load_model("gemma-2-9b")
    plain = dataclasses.replace(g2, attn_softcap=False, logit_softcap=False)
    capped, uncapped = estimate(g2, **TRAIN).breakdown, estimate(plain, **TRAIN).breakdown
    # per block the scores' tanh output: 2 B x 16 heads x 2,048 x 2,048 = 134,217,728 B; at the head the logits'
    # tanh output: 2 B x 256,000 x 2,048 tokens = 1,048,576,000 B
    assert capped["activations"] - uncapped["activations"] == 42 * 134_217_728 + 1_048_576_000
    # the loss' backward still makes two fp32 gradients of what the loss keeps (its fp32 log_softmax)
    assert capped["temporaries"] == uncapped["temporaries"]


def test_sdpa_is_estimated_as_eager():
    g2 = load_model("gemma-2-9b")
    assert (estimate(g2, **{**TRAIN, "attention": "sdpa"}).breakdown["activations"]
            == estimate(g2, **TRAIN).breakdown["activations"])
