"""The loss' largest tensor (activations.largest_loss_tensor): what a training step's reserve allowance multiplies.

scripts/derive_fragmentation.py checks it against the traces: it equals the largest short-lived tensor of
every derivation workload (transformers' causal-LM and masked-LM losses).
"""

import pytest

from vramlens.estimator.activations import largest_loss_tensor
from vramlens.workload import make_workload

V = 128_256  # Llama 3's vocabulary
T = 2 * 2048  # batch 2 x 2048 tokens


@pytest.mark.parametrize("fields, expected", [
    # transformers' ForCausalLMLoss: logits.float(), then log_softmax in fp32: 4 B x V per token
    (dict(dtype="bf16"), 4 * V * T),
    (dict(dtype="fp32"), 4 * V * T),
    (dict(dtype="fp32", amp="bf16"), 4 * V * T),
    # torchtune's chunked loss, 8 chunks of 256 positions: one chunk's fp32 upcast
    (dict(dtype="bf16", loss_chunks=8), 4 * V * 2 * 256),
    # LitGPT's chunked_cross_entropy in the logits' dtype: one bf16 chunk; under Lightning Fabric's fp32 cast, fp32
    (dict(dtype="bf16", loss_chunks=8, loss_upcast=False), 2 * V * 2 * 256),
    (dict(dtype="bf16", loss_chunks=8, loss_upcast=False, output_upcast=True), 4 * V * 2 * 256),
    # torchtitan's compiled cross-entropy: one fused reduction over the bf16 logits
    (dict(dtype="bf16", compile=True, compile_scope="blocks+loss"), 2 * V * T),
    # Liger's fused linear cross-entropy: one chunk of next_power_of_2(ceil(4096 / ceil(V / 4096))) = 128 tokens
    (dict(dtype="bf16", loss="fused-linear"), 2 * V * 128),
    # logits.sum(): the logits themselves
    (dict(dtype="bf16", loss="logits-sum"), 2 * V * T),
])
def test_largest_loss_tensor(llama8b, fields, expected):
    w = make_workload(mode="train", batch=2, seq=2048, **fields)
    assert largest_loss_tensor(llama8b, w, w.batch, w.seq) == expected


BERT = {"architectures": ["BertForMaskedLM"], "model_type": "bert", "hidden_size": 768, "intermediate_size": 3072,
        "num_hidden_layers": 2, "num_attention_heads": 12, "vocab_size": 30_522, "max_position_embeddings": 512,
        "type_vocab_size": 2}


@pytest.mark.parametrize("fields, expected", [
    # BertForMaskedLM's cross_entropy takes the logits as they are: log_softmax in bf16
    (dict(dtype="bf16"), 2 * 30_522 * 8 * 512),
    # under CUDA autocast nll_loss keeps an fp32 copy of the bf16 log_softmax (heads.cross_entropy_kept)
    (dict(dtype="fp32", amp="bf16"), 4 * 30_522 * 8 * 512),
])
def test_masked_lm_loss_tensor(fields, expected):
    from vramlens.models.inventory import spec_from_config

    w = make_workload(mode="train", batch=8, seq=512, task="masked-lm", **fields)
    assert largest_loss_tensor(spec_from_config(BERT, name="bert-2"), w, w.batch, w.seq) == expected
