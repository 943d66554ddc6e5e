"""The one norm of Phi's parallel block (ModelSpec.shared_block_norm) and its copied attention output
(ModelSpec.attention_output_copy) against the traced block."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="tracing needs the trace extra (torch)")
pytest.importorskip("transformers", reason="tracing needs the trace extra (transformers)")

from vramlens.estimator import estimate  # noqa: E402
from vramlens.trace import trace  # noqa: E402


def test_phi_block_has_one_norm():
    """PhiDecoderLayer runs its attention and MLP on input_layernorm's output: nothing of a second norm is kept;
    its q and k are torch.cat's (partial rotary), so a trained dense keeps a copy of the attention's output."""
    cfg = {"architectures": ["PhiForCausalLM"], "model_type": "phi", "hidden_size": 128, "intermediate_size": 512,
           "num_hidden_layers": 4, "num_attention_heads": 4, "vocab_size": 1000, "max_position_embeddings": 256,
           "partial_rotary_factor": 0.5, "tie_word_embeddings": False, "hidden_act": "gelu_new",
           "resid_pdrop": 0.0, "attention_dropout": 0.0, "embd_pdrop": 0.0}
    base = dict(mode="train", dtype="bf16", batch=2, seq=128)
    for kw in ({"method": "lora", "lora_dtype": "bf16", "lora_targets": ("q_proj", "v_proj")}, {"method": "full"}):
        traced = trace(cfg, **base, **kw, layers=3).per_layer["activations"]
        e = estimate(cfg, **base, **kw).layer_activation_bytes
        # within 1 KiB a block (the norm's two fp32 statistics, rounded apart); a second norm's input and output
        # would be 128 KiB more
        assert abs(e - traced) <= 1024, (kw, e, traced)
