"""T5 / mT5 / T0 encoder-decoders.

Layout from ``transformers/models/t5/modeling_t5.py`` (transformers 5.x): a shared
embedding, then per block ``layer.0`` self-attention (q, k, v, o without biases; ``q`` is
(n_heads * d_kv, d_model), so the inner width may differ from d_model), cross-attention in
``layer.1`` of decoder blocks, and the MLP (``wi``, or ``wi_0``/``wi_1`` when
``feed_forward_proj`` is ``gated-*``) last, each with its own RMS-style ``layer_norm``.
Only block 0 of each stack owns a ``relative_attention_bias`` (num_buckets, n_heads).

Tying: transformers >= 5 forces ``tie_word_embeddings=True`` for t5 and mt5
(configuration_t5.py / configuration_mt5.py ``__post_init__``), so ``lm_head`` always
shares ``shared.weight``, even for v1.1 / mT5 / T0 checkpoints whose config.json says
false. The inventory follows the installed transformers; ``assumed`` notes the mismatch.
"""

from __future__ import annotations

from typing import Literal

from vramlens.models._reader import ConfigReader
from vramlens.models._tensors import Tensors, head_kind
from vramlens.models.families._common import Built, torch_dtype

MODEL_TYPES = ("t5", "mt5")


def build_t5(r: ConfigReader, architecture: str) -> Built:
    """T5-family inventory and facts (``T5ForConditionalGeneration``, ``T5Model``, ``T5EncoderModel``)."""
    h, a, V = r.get_int("d_model"), r.get_int("num_heads"), r.get_int("vocab_size")
    f, d = r.get_int("d_ff"), r.get_int("d_kv")
    L_enc = r.get_int("num_layers")
    L_dec = r.opt_int("num_decoder_layers") or L_enc
    buckets = r.get_int("relative_attention_num_buckets")
    ffp = r.get_str("feed_forward_proj")
    parts = ffp.split("-")
    if (len(parts) > 1 and parts[0] != "gated") or len(parts) > 2:
        r.problem(f"feed_forward_proj={ffp!r} is not 'gated-ACT' or 'ACT': e.g. 'relu' or 'gated-gelu'")
    gated = parts[0] == "gated"
    activation = "gelu_new" if ffp == "gated-gelu" else parts[-1]
    if r.has("n_positions"):
        max_pos = r.get_int("n_positions")
    else:
        max_pos = 512  # T5 paper (Raffel et al. 2020, section 3.1.2): pre-trained on 512 tokens
        r.assume("max_position=512 (T5's pre-training length; relative positions have no hard limit)")
    if r.raw.get("tie_word_embeddings") is False:
        r.assume("lm_head shares shared.weight: transformers >= 5 always ties T5 embeddings "
                 "(configuration_t5.py), although this config says tie_word_embeddings=false")
    dtype = torch_dtype(r)
    r.check()

    head = head_kind(architecture)
    if head not in ("lm", "base", "encoder"):
        r.assume(f"{architecture}: this head is not modelled, only the encoder-decoder is counted")
        head = "base"
    inner = a * d
    t = Tensors()
    t.embedding("shared", V, h)
    stacks: list[tuple[Literal["encoder", "decoder"], int]] = [("encoder", L_enc)]
    if head != "encoder":
        stacks.append(("decoder", L_dec))
    for stack, n_blocks in stacks:
        t.stack = stack
        for i in range(n_blocks):
            b = f"{stack}.block.{i}.layer."
            _attention(t, f"{b}0.SelfAttention.", h, inner)
            if i == 0:  # T5Block(has_relative_attention_bias=bool(i == 0))
                t.embedding(f"{b}0.SelfAttention.relative_attention_bias", buckets, a,
                            role="position_embedding")
            t.norm(f"{b}0.layer_norm", h, bias=False)
            mlp = 1
            if stack == "decoder":
                _attention(t, f"{b}1.EncDecAttention.", h, inner)
                t.norm(f"{b}1.layer_norm", h, bias=False)
                mlp = 2
            m = f"{b}{mlp}.DenseReluDense."
            if gated:
                t.linear(f"{m}wi_0", f, h)
                t.linear(f"{m}wi_1", f, h)
            else:
                t.linear(f"{m}wi", f, h)
            t.linear(f"{m}wo", h, f)
            t.norm(f"{b}{mlp}.layer_norm", h, bias=False)
        t.norm(f"{stack}.final_layer_norm", h, bias=False)
    facts = dict(
        kind="encoder" if head == "encoder" else "encoder-decoder", hidden_size=h, n_heads=a,
        n_kv_heads=a, head_dim=d, ffn_size=f, vocab_size=V, n_encoder_layers=L_enc,
        n_decoder_layers=0 if head == "encoder" else L_dec, max_position=max_pos,
        activation=activation, gated_mlp=gated, norm="rmsnorm", position="relative",
        tied_embeddings=head == "lm", torch_dtype=dtype,
    )
    return Built(facts, t.items)


def _attention(t: Tensors, prefix: str, h: int, inner: int) -> None:
    t.linear(f"{prefix}q", inner, h)
    t.linear(f"{prefix}k", inner, h)
    t.linear(f"{prefix}v", inner, h)
    t.linear(f"{prefix}o", h, inner)


BUILDERS = {"t5": build_t5, "mt5": build_t5}
