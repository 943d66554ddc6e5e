"""ModernBERT: a pre-norm encoder with rotary positions, GeGLU MLPs, no biases, and local attention.

Layout from ``transformers/models/modernbert/modeling_modernbert.py`` (transformers 5.x):
``embeddings.tok_embeddings`` then ``embeddings.norm`` (LayerNorm, bias only with ``norm_bias``);
each ``ModernBertEncoderLayer`` has ``attn_norm`` (an Identity in block 0), ``attn.Wqkv`` (one
fused q/k/v projection) and ``attn.Wo``, ``mlp_norm``, ``mlp.Wi`` (h -> 2f: input and gate) and
``mlp.Wo``; linears are biased only with ``attention_bias``/``mlp_bias``. Then ``final_norm`` and
``rotary_emb``, which registers ``<type>_inv_freq`` and ``<type>_original_inv_freq`` (head_dim / 2
floats each) per layer type present, sorted ("full_attention", "sliding_attention"): the two
types have their own rope theta (``global_rope_theta`` 160,000, ``local_rope_theta`` 10,000).

``layer_types`` (given, or from ``global_attn_every_n_layers``, default 3: block i is global when
i is a multiple of it) decides which blocks attend within a window of ``local_attention`` tokens
(``sliding_window`` = local_attention // 2 on each side). transformers 5 no longer unpads: the
attention runs on the padded (b, s) batch through ``attn_implementation`` (eager, SDPA, flash),
with a b x 1 x s x s mask built for the sliding blocks by
``create_bidirectional_sliding_window_mask``.

Heads: ``ModernBertForMaskedLM`` (``head``: dense, activation, norm; ``decoder`` tied to the
token embeddings with its own bias when ``decoder_bias``; the loss is transformers'
``ForMaskedLMLoss``, which upcasts the logits to fp32), and the classification heads, which
pool (sequence classification: ``classifier_pooling`` "cls" or "mean"), run ``head``, drop out
and classify (``classifier`` always has a bias).
"""

from __future__ import annotations

from typing import Any

from vramlens.models._reader import ConfigReader
from vramlens.models._tensors import Tensors, num_labels
from vramlens.models.families._common import Built, modelled_head, torch_dtype

MODEL_TYPES = ("modernbert",)

_HEADS = {"base", "masked_lm", "seq_cls", "tok_cls", "qa", "multiple_choice"}
_KINDS = ("full_attention", "sliding_attention")


def layer_types(r: ConfigReader, L: int) -> list[str]:
    """``layer_types`` as ModernBertConfig.__post_init__ makes them."""
    given: Any = r.raw.get("layer_types")
    if given is not None:
        if not isinstance(given, list) or len(given) != L or any(x not in _KINDS for x in given):
            r.problem(f"layer_types must list {L} of \"full_attention\"/\"sliding_attention\", "
                      f"one per num_hidden_layers: fix the config")
            return ["full_attention"] * L
        return list(given)
    every = r.get_int("global_attn_every_n_layers", 3)
    return ["sliding_attention" if i % every else "full_attention" for i in range(L)]


def build_modernbert(r: ConfigReader, architecture: str) -> Built:
    """ModernBERT inventory and facts."""
    h, L, a = r.get_int("hidden_size"), r.get_int("num_hidden_layers"), r.get_int("num_attention_heads")
    V, f = r.get_int("vocab_size"), r.get_int("intermediate_size")
    r.divisible("hidden_size", h, "num_attention_heads", a)
    attn_bias, mlp_bias, norm_bias = (r.get_bool("attention_bias"), r.get_bool("mlp_bias"),
                                      r.get_bool("norm_bias"))
    cls_bias, dec_bias = r.get_bool("classifier_bias"), r.get_bool("decoder_bias")
    tied = r.get_bool("tie_word_embeddings")
    act = r.get_str("hidden_activation")
    window = r.get_int("local_attention")
    pooling = r.get_str("classifier_pooling")
    if pooling not in ("cls", "mean"):
        r.problem(f"classifier_pooling={pooling!r} must be \"cls\" or \"mean\"")
    kinds = layer_types(r, L)
    max_pos = r.get_int("max_position_embeddings")
    dropout = r.get_float("classifier_dropout")
    dtype = torch_dtype(r)
    r.check()
    d = h // a

    head = modelled_head(r, architecture, _HEADS)
    p = "" if head == "base" else "model."
    t = Tensors()
    t.embedding(f"{p}embeddings.tok_embeddings", V, h)
    t.norm(f"{p}embeddings.norm", h, bias=norm_bias)
    for i in range(L):
        b = f"{p}layers.{i}."
        if i > 0:
            t.norm(f"{b}attn_norm", h, bias=norm_bias)
        t.linear(f"{b}attn.Wqkv", 3 * h, h, attn_bias)
        t.linear(f"{b}attn.Wo", h, h, attn_bias)
        t.norm(f"{b}mlp_norm", h, bias=norm_bias)
        t.linear(f"{b}mlp.Wi", 2 * f, h, mlp_bias)
        t.linear(f"{b}mlp.Wo", h, f, mlp_bias)
    t.norm(f"{p}final_norm", h, bias=norm_bias)
    n = num_labels(r.raw)
    if head != "base":
        t.linear("head.dense", h, h, cls_bias)
        t.norm("head.norm", h, bias=norm_bias)
    if head == "masked_lm":
        if not tied:
            t.linear("decoder", V, h, dec_bias, role="lm_head")
        elif dec_bias:
            t.add("decoder.bias", (V,), "bias")
    elif head in ("seq_cls", "tok_cls", "qa"):
        t.linear("classifier", n, h, True, role="other")
    elif head == "multiple_choice":
        t.linear("classifier", 1, h, True, role="other")
    for kind in sorted(set(kinds)):
        t.buffer(f"{p}rotary_emb.{kind}_inv_freq", ((d + 1) // 2,))
        t.buffer(f"{p}rotary_emb.{kind}_original_inv_freq", ((d + 1) // 2,))

    sliding = tuple(i for i, k in enumerate(kinds) if k == "sliding_attention")
    facts = dict(
        kind="encoder", hidden_size=h, n_heads=a, n_kv_heads=a, head_dim=d, ffn_size=f,
        vocab_size=V, n_encoder_layers=L, max_position=max_pos, activation=act, gated_mlp=True,
        norm="layernorm", position="rotary", tied_embeddings=tied and head == "masked_lm",
        torch_dtype=dtype, mlm_transform=head == "masked_lm", mlm_loss_upcast=True,
        # Wqkv's output is viewed and unbound: v keeps the fused output alive next to the rotated q, k
        fused_qkv_kept=True, softmax_fp32=True, classifier="transform", head_transform=True,
        pooling=pooling, head_dropout=dropout, block_dropouts=0,
        sliding_window=window // 2 if sliding else None, sliding_layer_ids=sliding,
        rotary_tables=len(set(kinds)), embedding_norm=True, rotary_fp32=True,
    )
    return Built(facts, t.items)


BUILDERS = {"modernbert": build_modernbert}
