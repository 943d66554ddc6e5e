"""FSDP2 per rank on the configurations that used to fail (vramlens.trace.fsdp), one test per class.

* a transformer "block" holding a tied weight: the encoders list their embeddings in
  ``_no_split_modules`` while the MLM head's decoder reuses the word embeddings (BERT, RoBERTa,
  XLM-R, ModernBERT): ``fully_shard`` refused the second group;
* a loss that calls the decoder and the output layer itself (``--loss-chunks``, ``--loss
  fused-linear``): the root's forward never ran, so the embedding saw its sharded DTensor
  (``aten.embedding got mixed torch.Tensor and DTensor``);
* a block with parameters of two dtypes (DeepSeek V2/V3's router ``gate`` kept in fp32 under bf16
  weights): FSDP2 all-gathers one dtype per group.

Each trace's sharded gradients are checked against figures computed here from the model's shapes:
one flat reduce-scatter output per FSDP group, holding each parameter's rank-0 shard (``ceil(dim0 / N)``
rows), rounded to 512 bytes like CUDA's allocator. A group that never reduce-scatters (the root, when its
forward did not run) or a different grouping changes that sum.
"""

from __future__ import annotations

import math

import pytest
from tests.trace.conftest import tiny_llama

from vramlens.trace import trace
from vramlens.trace.crosscheck import tiny_config
from vramlens.workload import Workload

pytest.importorskip("torch", reason="tracing needs the trace extra (torch)")

N = 2
W = dict(mode="train", method="full", attention="sdpa", checkpointing="none", batch=2, seq=32, gpus=N, fsdp=True)


def _r(n: int) -> int:
    return -(-n // 512) * 512


def _shard(p) -> int:
    """Rank 0's shard of ``p`` in bytes: ceil(dim0 / N) rows."""
    return math.ceil(p.shape[0] / N) * (p.numel() // p.shape[0]) * p.element_size()


def _meta_model(cfg: dict, **wl):
    from vramlens.trace.build import build_hf

    return build_hf(cfg, Workload(**{**W, "gpus": 1, "fsdp": False, **wl}), meta_only=True).model


def _grad_bytes(model, groups: list[list]) -> int:
    """One flat reduce-scatter output per group in ``groups`` (lists of parameters), and one for
    the root: every parameter of ``model`` in no group."""
    inside = {id(p) for g in groups for p in g}
    root = [p for p in model.parameters() if id(p) not in inside]
    return sum(_r(sum(_shard(p) for p in g)) for g in [*groups, root])


def test_tied_encoder_embeddings_stay_in_the_root():
    from vramlens.trace.fsdp import _blocks

    cfg = tiny_config("bert-base-uncased")
    model = _meta_model(cfg, dtype="bf16")
    # BertEmbeddings is in _no_split_modules, but its word_embeddings is the MLM decoder's weight
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
    assert _blocks(model) == list(model.bert.encoder.layer)
    res = trace(cfg, steps=1, dtype="bf16", **W)
    # 2 BertLayer groups and the root (embeddings, pooler-less MLM head, tied decoder)
    assert res.breakdown["gradients"] == _grad_bytes(model, [list(b.parameters()) for b in model.bert.encoder.layer])


@pytest.mark.parametrize("loss", [{"loss_chunks": 4}, {"loss": "fused-linear"}])
def test_chunked_and_fused_losses_run_through_the_root(loss):
    cfg = tiny_llama(layers=2, intermediate_size=342, vocab_size=1001)
    model = _meta_model(cfg, dtype="bf16")
    res = trace(cfg, steps=1, dtype="bf16", **W, **loss)
    # the root's group (embedding 1001 x 128 -> 501 rows, final norm, lm_head 501 rows) reduce-scatters
    # too: its gradients exist only if its forward's hooks ran around the loss
    assert res.breakdown["gradients"] == _grad_bytes(model, [list(b.parameters()) for b in model.model.layers])
    root = [model.model.embed_tokens.weight, model.model.norm.weight, model.lm_head.weight]
    # 501 * 128 * 2 + 64 * 2 + 501 * 128 * 2 = 256,640 bytes -> 257,024 after rounding
    assert _r(sum(_shard(p) for p in root)) == 257_024


def test_fp32_router_is_its_own_group():
    import torch

    cfg = tiny_config("deepseek-v3")
    model = _meta_model(cfg, dtype="bf16")
    gates = [b.mlp.gate for b in model.model.layers if hasattr(b.mlp, "gate")]
    assert [g.weight.dtype for g in gates] == [torch.float32]  # one MoE block (the first is dense)
    res = trace(cfg, steps=1, dtype="bf16", **W)
    gate_ids = {id(p) for g in gates for p in g.parameters()}
    groups = [list(g.parameters()) for g in gates] + [
        [p for p in b.parameters() if id(p) not in gate_ids] for b in model.model.layers]
    assert res.breakdown["gradients"] == _grad_bytes(model, groups)
