"""DeBERTa-v2 and v3 (``model_type`` "deberta-v2"): BERT's blocks with disentangled attention.

Layout from ``transformers/models/deberta_v2/modeling_deberta_v2.py`` (transformers 5.x):
``DebertaV2Embeddings`` has word embeddings at ``embedding_size`` (default hidden_size), a position
table only when ``position_biased_input``, token types only when ``type_vocab_size > 0``, an
``embed_proj`` (no bias) when ``embedding_size != hidden_size``, then a LayerNorm at hidden_size
and the int64 ``position_ids`` buffer. ``DisentangledSelfAttention`` has biased
``query_proj``/``key_proj``/``value_proj``; with ``relative_attention`` and without
``share_att_key`` it adds ``pos_key_proj`` (for "c2p") and ``pos_query_proj`` (for "p2c").
``DebertaV2Encoder`` owns ``rel_embeddings`` (2 x att_span rows: att_span is
``position_buckets`` when > 0, else ``max_relative_positions``, else max_position_embeddings),
a LayerNorm when ``norm_rel_ebd`` has "layer_norm", and a ``ConvLayer`` after the first block
when ``conv_kernel_size > 0`` (DeBERTa-v2 xlarge/xxlarge).

The attention is written in the module itself (no ``attn_implementation`` interface, no
``_supports_sdpa``): transformers refuses SDPA for it and it always runs eager.

Heads: ``DebertaV2ForMaskedLM`` (``legacy``, the default: ``cls.predictions`` with a transform
at ``embedding_size`` and a decoder tied to the word embeddings; otherwise ``lm_predictions``),
sequence classification and multiple choice (``ContextPooler``: dense and activation on the
first token, then dropout ``cls_dropout`` or hidden_dropout_prob), token classification
(dropout, classifier), question answering (``qa_outputs``, no dropout).
"""

from __future__ import annotations

from vramlens.models._reader import ConfigReader
from vramlens.models._tensors import Tensors, num_labels
from vramlens.models.families._common import Built, modelled_head, torch_dtype

MODEL_TYPES = ("deberta-v2",)

_HEADS = {"base", "masked_lm", "seq_cls", "tok_cls", "qa", "multiple_choice"}


def pos_att_terms(r: ConfigReader) -> tuple[str, ...]:
    """``pos_att_type`` as DebertaV2Config.__post_init__ reads it: "p2c|c2p" or a list."""
    value = r.raw.get("pos_att_type")
    if value is None:
        return ()
    if isinstance(value, str):
        items = [x.strip() for x in value.lower().split("|")]
    elif isinstance(value, list) and all(isinstance(x, str) for x in value):
        items = [x.strip().lower() for x in value]
    else:
        r.problem(f"pos_att_type={value!r} must be a string such as \"p2c|c2p\" or a list of them")
        return ()
    bad = [x for x in items if x not in ("c2p", "p2c")]
    if bad:
        r.problem(f"pos_att_type={value!r}: {', '.join(bad)} is not c2p or p2c")
    return tuple(x for x in ("c2p", "p2c") if x in items)


def build_deberta_v2(r: ConfigReader, architecture: str) -> Built:
    """DeBERTa-v2/v3 inventory and facts."""
    h, L, a = r.get_int("hidden_size"), r.get_int("num_hidden_layers"), r.get_int("num_attention_heads")
    V, f = r.get_int("vocab_size"), r.get_int("intermediate_size")
    n_pos = r.get_int("max_position_embeddings")
    n_types = r.get_int("type_vocab_size", minimum=0)
    E = r.opt_int("embedding_size") or h
    r.divisible("hidden_size", h, "num_attention_heads", a)
    d = r.opt_int("attention_head_size") or h // max(a, 1)
    relative = r.get_bool("relative_attention")
    biased_input = r.get_bool("position_biased_input")
    terms = pos_att_terms(r)
    shared = r.get_bool("share_att_key", False)
    buckets = r.get_int("position_buckets", -1, minimum=-1)
    max_rel = r.get_int("max_relative_positions", minimum=-1)
    norm_rel = str(r.raw.get("norm_rel_ebd") or "none").lower()
    conv_k = r.get_int("conv_kernel_size", 0, minimum=0)
    conv_groups = r.get_int("conv_groups", 1)
    legacy = r.get_bool("legacy")
    act = r.get_str("hidden_act")
    tied = r.get_bool("tie_word_embeddings")
    hid_dropout = r.get_float("hidden_dropout_prob")
    cls_dropout = r.raw.get("cls_dropout")
    dtype = torch_dtype(r)
    r.check()
    if max_rel < 1:
        max_rel = n_pos  # DisentangledSelfAttention: max_relative_positions < 1 means max_position_embeddings
    span = buckets if buckets > 0 else max_rel  # pos_ebd_size

    head = modelled_head(r, architecture, _HEADS)
    if conv_k:
        r.assume("conv_kernel_size > 0: the ConvLayer after the first block is counted in the inventory, "
                 "its activations (b*s*h a few times, once per model) are not")
    p = "" if head == "base" else "deberta."
    t = Tensors()
    e = f"{p}embeddings."
    t.embedding(f"{e}word_embeddings", V, E)
    if biased_input:
        t.embedding(f"{e}position_embeddings", n_pos, E, role="position_embedding")
    if n_types > 0:
        t.embedding(f"{e}token_type_embeddings", n_types, E, role="position_embedding")
    if E != h:
        t.linear(f"{e}embed_proj", h, E)
    t.norm(f"{e}LayerNorm", h)
    for i in range(L):
        b = f"{p}encoder.layer.{i}."
        for proj in ("query_proj", "key_proj", "value_proj"):
            t.linear(f"{b}attention.self.{proj}", a * d, h, True)
        if relative and not shared:
            if "c2p" in terms:
                t.linear(f"{b}attention.self.pos_key_proj", a * d, h, True)
            if "p2c" in terms:
                t.linear(f"{b}attention.self.pos_query_proj", a * d, h, True)
        t.linear(f"{b}attention.output.dense", h, h, True)
        t.norm(f"{b}attention.output.LayerNorm", h)
        t.linear(f"{b}intermediate.dense", f, h, True)
        t.linear(f"{b}output.dense", h, f, True)
        t.norm(f"{b}output.LayerNorm", h)
    if relative:
        t.embedding(f"{p}encoder.rel_embeddings", 2 * span, h, role="position_embedding")
    if "layer_norm" in [x.strip() for x in norm_rel.split("|")]:
        t.norm(f"{p}encoder.LayerNorm", h)
    if conv_k:
        t.add(f"{p}encoder.conv.conv.weight", (h, h // max(1, conv_groups), conv_k), "other")
        t.add(f"{p}encoder.conv.conv.bias", (h,), "bias")
        t.norm(f"{p}encoder.conv.LayerNorm", h)
    n = num_labels(r.raw)
    if head == "masked_lm":
        if legacy:
            t.add("cls.predictions.bias", (V,), "bias")
            t.linear("cls.predictions.transform.dense", E, h, True)
            t.norm("cls.predictions.transform.LayerNorm", E)
            if not tied:
                t.linear("cls.predictions.decoder", V, E, True, role="lm_head")
        else:  # DebertaV2LMPredictionHead multiplies by the word embeddings themselves
            t.add("lm_predictions.lm_head.bias", (V,), "bias")
            t.linear("lm_predictions.lm_head.dense", h, h, True)
            t.norm("lm_predictions.lm_head.LayerNorm", h)
    elif head in ("seq_cls", "multiple_choice"):
        pooler = r.opt_int("pooler_hidden_size") or h
        t.linear("pooler.dense", pooler, pooler, True)
        t.linear("classifier", n if head == "seq_cls" else 1, pooler, True, role="other")
    elif head == "tok_cls":
        t.linear("classifier", n, h, True, role="other")
    elif head == "qa":
        t.linear("qa_outputs", n, h, True, role="other")
    t.buffer(f"{e}position_ids", (1, n_pos), dtype="int64")

    facts = dict(
        kind="encoder", hidden_size=h, n_heads=a, n_kv_heads=a, head_dim=d, ffn_size=f,
        vocab_size=V, n_encoder_layers=L, max_position=n_pos, activation=act, gated_mlp=False,
        norm="layernorm", position="disentangled" if relative else ("learned" if biased_input else "none"),
        tied_embeddings=tied and head == "masked_lm" and legacy, torch_dtype=dtype,
        mlm_transform=head == "masked_lm", mlm_width=E if (E != h and legacy) else None,
        embedding_size=E if E != h else None, embedding_norm_first=False,
        # ContextPooler: dense and activation on the first token (a view of the last hidden state),
        # then the classifier's dropout: BERT's pooler, tensor for tensor
        classifier="pooler", attention_interface=False,
        head_dropout={"qa": 0.0, "seq_cls": None, "multiple_choice": None}.get(head, hid_dropout),
        rel_span=2 * span if relative else 0, rel_terms=terms if relative else (),
    )
    if head in ("seq_cls", "multiple_choice"):
        facts["head_dropout"] = r.get_float("cls_dropout") if cls_dropout is not None else hid_dropout
    return Built(facts, t.items)


BUILDERS = {"deberta-v2": build_deberta_v2}
