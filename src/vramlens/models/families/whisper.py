"""Whisper speech encoder-decoders (OpenAI Whisper, large-v3-turbo, Distil-Whisper).

Layout from transformers 5.24 (``transformers/models/whisper/modeling_whisper.py``), checked against
``named_parameters()`` on the meta device (tests/models/test_vs_transformers.py):

* ``WhisperEncoder`` (modeling_whisper.py:560-578): ``conv1`` a Conv1d (d, n_mels, 3) with a bias,
  ``conv2`` a Conv1d (d, d, 3) of stride 2 with a bias (GELU after each), ``embed_positions`` an
  ``nn.Embedding(max_source_positions, d)`` holding the sinusoids (``_init_weights`` copies
  ``sinusoids(...)`` into it): a *parameter*, counted by ``model.parameters()`` and kept in the
  state dict, with ``requires_grad_(False)``, so it gets no gradient and no optimizer state
  (``outside_loss``); then pre-LN ``WhisperEncoderLayer`` blocks (``self_attn.{k,v,q,out}_proj``,
  ``k_proj`` without bias; ``self_attn_layer_norm``; ``fc1``/``fc2`` biased, GELU;
  ``final_layer_norm``) and ``layer_norm``.
* ``WhisperDecoder`` (modeling_whisper.py:665-681): ``embed_tokens`` (V, d), ``embed_positions`` a
  learned ``WhisperPositionalEmbedding(max_target_positions, d)`` (trainable), pre-LN
  ``WhisperDecoderLayer`` blocks with self-attention, ``encoder_attn`` cross-attention (its own
  norm) and the MLP, then ``layer_norm``.
* ``WhisperForConditionalGeneration``: ``proj_out`` (V, d) tied to ``embed_tokens``
  (``_tied_weights_keys``), listed once.

The encoder sees exactly ``max_source_positions * 2`` mel frames (3,000: WhisperEncoder.forward
raises ValueError on another length), 1,500 positions after the stride-2 conv: the audio facts
(ModelSpec.audio) carry that, and ``--audio-seconds`` turns a clip into 30-second windows.
"""

from __future__ import annotations

from typing import Literal

from vramlens.models._reader import ConfigReader
from vramlens.models._tensors import Tensors
from vramlens.models.families._common import Built, decoder_prefix, modelled_head, torch_dtype
from vramlens.models.spec import Audio

MODEL_TYPES = ("whisper",)


def _attention(t: Tensors, prefix: str, d: int) -> None:
    """WhisperAttention (modeling_whisper.py:281-284): k_proj without bias, v, q, out with."""
    t.linear(f"{prefix}k_proj", d, d, False)
    t.linear(f"{prefix}v_proj", d, d, True)
    t.linear(f"{prefix}q_proj", d, d, True)
    t.linear(f"{prefix}out_proj", d, d, True)


def build_whisper(r: ConfigReader, architecture: str) -> Built:
    """Whisper inventory and facts (``WhisperForConditionalGeneration``, ``WhisperModel``)."""
    d, V = r.get_int("d_model"), r.get_int("vocab_size")
    L_enc, L_dec = r.get_int("encoder_layers"), r.get_int("decoder_layers")
    a_enc, a_dec = r.get_int("encoder_attention_heads"), r.get_int("decoder_attention_heads")
    f_enc, f_dec = r.get_int("encoder_ffn_dim"), r.get_int("decoder_ffn_dim")
    mels = r.get_int("num_mel_bins")
    src, tgt = r.get_int("max_source_positions"), r.get_int("max_target_positions")
    act = r.get_str("activation_function")
    r.divisible("d_model", d, "encoder_attention_heads", a_enc)
    if a_enc != a_dec:
        r.problem(f"encoder_attention_heads={a_enc} and decoder_attention_heads={a_dec} differ: vramlens models "
                  "Whisper with one head count (every released checkpoint has one)")
    if f_enc != f_dec:
        r.problem(f"encoder_ffn_dim={f_enc} and decoder_ffn_dim={f_dec} differ: vramlens models Whisper with one "
                  "MLP width (every released checkpoint has one)")
    if r.raw.get("tie_word_embeddings") is False:
        r.assume("proj_out is counted tied to embed_tokens (every released Whisper ties them), although this "
                 "config says tie_word_embeddings=false")
    dtype = torch_dtype(r)
    r.check()
    head = modelled_head(r, architecture, {"lm", "base"})
    pre = decoder_prefix(head, "model.")
    t = Tensors()
    stacks: list[tuple[Literal["encoder", "decoder"], int]] = [("encoder", L_enc), ("decoder", L_dec)]
    for stack, n in stacks:
        t.stack = stack
        s = f"{pre}{stack}."
        if stack == "encoder":
            t.add(f"{s}conv1.weight", (d, mels, 3), "other")
            t.add(f"{s}conv1.bias", (d,), "bias")
            t.add(f"{s}conv2.weight", (d, d, 3), "other")
            t.add(f"{s}conv2.bias", (d,), "bias")
            t.embedding(f"{s}embed_positions", src, d, role="position_embedding")
        else:
            t.embedding(f"{s}embed_tokens", V, d)
            t.embedding(f"{s}embed_positions", tgt, d, role="position_embedding")
        for i in range(n):
            b = f"{s}layers.{i}."
            _attention(t, f"{b}self_attn.", d)
            t.norm(f"{b}self_attn_layer_norm", d)
            if stack == "decoder":
                _attention(t, f"{b}encoder_attn.", d)
                t.norm(f"{b}encoder_attn_layer_norm", d)
            t.linear(f"{b}fc1", f_enc, d, True)
            t.linear(f"{b}fc2", d, f_enc, True)
            t.norm(f"{b}final_layer_norm", d)
        t.norm(f"{s}layer_norm", d)
    facts = dict(
        kind="encoder-decoder", hidden_size=d, n_heads=a_enc, n_kv_heads=a_enc, head_dim=d // a_enc,
        ffn_size=f_enc, vocab_size=V, n_encoder_layers=L_enc, n_decoder_layers=L_dec, max_position=tgt,
        activation=act, gated_mlp=False, norm="layernorm", position="learned", norm_placement="pre",
        tied_embeddings=head == "lm", torch_dtype=dtype,
        # the sinusoidal table: a parameter with requires_grad_(False) (WhisperEncoder.__init__)
        outside_loss=(f"{pre}encoder.embed_positions.weight",),
        audio=Audio(mel_bins=mels, source_positions=src, target_positions=tgt),
        # WhisperAttention.forward: q, k and v ``.transpose(1, 2).contiguous()`` (modeling_whisper.py:312, 336-337)
        attention_output_copy=True,
    )
    return Built(facts, t.items)


BUILDERS = {"whisper": build_whisper}
