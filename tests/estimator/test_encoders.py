"""The encoder families' facts as the formulas read them: exact bytes, the arithmetic beside them.

The shapes are the cross-check's (vramlens.trace.crosscheck): b=2 sequences of s=128 tokens on
models shrunk to h=256, 4 heads of 64; tests/trace/test_crosscheck.py compares the totals with the
tracer, these pin the single terms so that a wrong fact fails here first.
"""

from __future__ import annotations

import dataclasses

import pytest

from vramlens import estimate
from vramlens.estimator import activations as A
from vramlens.estimator import heads as H
from vramlens.models import load_model, spec_from_config
from vramlens.models.inventory import with_task
from vramlens.workload import Workload

B, S = 2, 128
KIB = 1024


def _tiny(name: str) -> dict:
    from vramlens.models.catalog import find_config
    from vramlens.trace.crosscheck import shrink

    hub_id, cfg = find_config(name)
    return shrink({**cfg, "_name_or_path": hub_id}, 4)


def _w(**kw) -> Workload:
    base = dict(mode="train", method="full", attention="sdpa", checkpointing="none", dtype="bf16", batch=B, seq=S)
    return Workload(**{**base, **kw})


def test_family_facts():
    distil = load_model("distilbert-base-uncased")
    assert (distil.block_dropouts, distil.classifier, distil.head_dropout) == (1, "pooler", 0.1)
    assert with_task(distil, "sequence-classification").head_dropout == 0.2  # seq_classif_dropout
    assert with_task(distil, "question-answering").head_dropout == 0.1  # qa_dropout
    assert with_task(load_model("bert-base-uncased"), "question-answering").head_dropout == 0.0
    electra = load_model("electra-small-discriminator")
    assert (electra.head, electra.embedding_size, electra.hidden_size) == ("replaced-token-detection", 128, 256)
    assert with_task(electra, "masked-lm").mlm_width == 128  # generator_predictions at embedding_size
    deberta = load_model("deberta-v3-base")
    assert (deberta.position, deberta.rel_span, deberta.rel_terms) == ("disentangled", 512, ("c2p", "p2c"))
    assert not deberta.attention_interface
    modern = load_model("modernbert-base")
    # 22 layers, global every 3rd (0, 3, ..., 21): 8 global, 14 sliding; window 128 = 64 each side
    assert (modern.n_sliding_layers, modern.sliding_window, modern.rotary_tables) == (14, 64, 2)
    assert (modern.mlm_loss_upcast, modern.pooling, modern.fused_qkv_kept, modern.softmax_fp32) == (
        True, "mean", True, True)


def test_distilbert_has_one_residual_dropout_per_block():
    # BERT's block keeps two b*s*h bool dropout masks besides the attention's; DistilBERT's FFN one
    distil = spec_from_config(_tiny("distilbert-base-uncased"))
    w = _w()
    one_mask = A.layer_activations(distil, w, B, S).saved
    two = dataclasses.replace(distil, block_dropouts=2)
    assert A.layer_activations(two, w, B, S).saved - one_mask == B * S * 256  # 65,536 B: one bool mask


def test_sliding_blocks_keep_their_sdpa_mask():
    spec = spec_from_config(_tiny("modernbert-base"))
    assert (spec.n_layers, spec.n_sliding_layers) == (2, 1)  # block 0 global, block 1 local
    w = _w()
    local, glob = A.layer_activations(spec, w, B, S, local=True), A.layer_activations(spec, w, B, S)
    # SDPA converts the bool b x 1 x s x s mask to the query's dtype per call: 2 B * 2 * 128 * 128
    assert local.saved - glob.saved == 2 * B * S * S == 65_536
    # eager attention adds the mask to the scores, flash-attn takes the window itself: nothing of it kept
    for other in ("eager", "flash"):
        wo = _w(attention=other)
        assert A.layer_activations(spec, wo, B, S, local=True).saved == A.layer_activations(spec, wo, B, S).saved
    # below the window on either side (64) no mask is made (masking_utils._ignore_bidirectional_mask_sdpa)
    assert A.sliding_mask_bytes(spec, w, B, 63) == 0
    assert A.sliding_mask_bytes(spec, w, B, 64) == 2 * B * 64 * 64


def test_disentangled_attention_terms():
    spec = spec_from_config(_tiny("deberta-v3-base"))
    w = _w()
    D = A.Dims(h=256, a=4, kv=4, d=64, f=1024, V=4096)
    total, quad = A.disentangled_saved(spec, w, D, B, S)
    R, c = 512, 2
    # per term: raw (b*a, s, R) scores kept by gather + the int64 1 x s x s index; the b x 1 x s x s mask
    assert quad == 2 * (c * B * 4 * S * R + 8 * S * S) + B * S * S == 2_392_064
    # k / scale (c*b*s*h), pos_dropout's mask and dropped (R x h), two repeated projections (b*a, R, d)
    assert total - quad == c * B * S * 256 + R * 256 + c * R * 256 + 2 * c * B * 4 * R * 64 == 1_572_864


def test_deberta_runs_eager_whatever_is_asked():
    spec = load_model("deberta-v3-base")
    sdpa, eager = estimate(spec, **vars_of(_w())), estimate(spec, **vars_of(_w(attention="eager")))
    assert sdpa.breakdown.peak_allocated == eager.breakdown.peak_allocated
    assert any("computes its attention itself" in n for n in sdpa.breakdown.notes)


def vars_of(w: Workload) -> dict:
    return {k: getattr(w, k) for k in ("mode", "method", "attention", "checkpointing", "dtype", "batch", "seq")}


def test_heads_read_family_facts():
    w = _w()
    t = B * S
    rtd = spec_from_config(_tiny("electra-small-discriminator"))
    # discriminator_predictions: dense output and activation output; BCE keeps logits and fp32 targets
    assert H.head_level_saved(rtd, w, B, S) == 2 * 2 * 256 * t
    assert H.loss_saved(rtd, w, B, S)[0] == 2 * t + 4 * t
    modern = with_task(spec_from_config(_tiny("modernbert-base")), "sequence-classification")
    # mean pooling: the head on b rows (dense, act, norm: 3 x c*b*h, fp32 mean/rstd), the bool mask,
    # the int64 count, and dense's input (the pooled rows); the last hidden state is not kept
    assert not H.keeps_last_hidden(modern)
    c_b_h = 2 * B * 256  # 1,024 B; every term rounded up to the allocator's 512-byte block
    assert H.head_level_saved(modern, w, B, S) == 3 * c_b_h + 2 * 512 + 512 + 512 + c_b_h
    assert H.loss_upcasts(with_task(modern, "masked-lm"))
    assert not H.loss_upcasts(with_task(spec_from_config(_tiny("bert-base-uncased")), "masked-lm"))


@pytest.mark.parametrize("name", ["distilbert-base-uncased", "xlm-roberta-base", "electra-base-discriminator",
                                  "deberta-v3-base", "modernbert-base"])
@pytest.mark.parametrize("task", ["masked-lm", "sequence-classification", "token-classification",
                                  "question-answering", "embedding"])
def test_every_encoder_task_estimates(name, task):
    e = estimate(name, mode="train", task=task, batch=4, seq=256, dtype="bf16")
    assert e.model.head == task
    assert e.breakdown["activations"] > 0 and e.peak_allocated > e.breakdown["weights"]
