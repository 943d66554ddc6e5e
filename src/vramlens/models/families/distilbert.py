"""DistilBERT: BERT distilled to half its depth, with its own module names.

Layout from ``transformers/models/distilbert/modeling_distilbert.py`` (transformers 5.x):
``Embeddings`` has word and position tables (learned, or sinusoidal values written into the
same ``nn.Embedding`` when ``sinusoidal_pos_embds``: still a parameter), no token types, a
LayerNorm and one int64 buffer ``position_ids`` (1, max_position_embeddings). Each
``TransformerBlock`` is post-norm: ``attention.{q,k,v,out}_lin`` (biased), ``sa_layer_norm``,
``ffn.lin1``/``ffn.lin2``, ``output_layer_norm``. Unlike BERT, nothing drops out the attention
output: the only residual dropout is the FFN's (``FFN.ff_chunk``).

Heads: ``DistilBertForMaskedLM`` (``vocab_transform``, ``vocab_layer_norm``, ``vocab_projector``
tied to the word embeddings, its bias its own), ``...ForSequenceClassification`` and
``...ForMultipleChoice`` (``pre_classifier`` on the first token, ReLU, ``seq_classif_dropout``,
``classifier``), ``...ForTokenClassification`` (``dropout``, ``classifier``),
``...ForQuestionAnswering`` (``qa_dropout``, ``qa_outputs``). The config names its sizes
``dim``, ``n_heads``, ``n_layers``, ``hidden_dim`` (``attribute_map`` maps the generic names).
"""

from __future__ import annotations

from vramlens.models._reader import ConfigReader
from vramlens.models._tensors import Tensors, num_labels
from vramlens.models.families._common import Built, modelled_head, torch_dtype

MODEL_TYPES = ("distilbert",)

_HEADS = {"base", "masked_lm", "seq_cls", "tok_cls", "qa", "multiple_choice"}


def build_distilbert(r: ConfigReader, architecture: str) -> Built:
    """DistilBERT inventory and facts."""
    h, L, a = r.get_int("dim"), r.get_int("n_layers"), r.get_int("n_heads")
    V, f = r.get_int("vocab_size"), r.get_int("hidden_dim")
    n_pos = r.get_int("max_position_embeddings")
    r.divisible("dim", h, "n_heads", a)
    tied = r.get_bool("tie_word_embeddings")
    act = r.get_str("activation")
    dropout = r.get_float("dropout")
    seq_dropout, qa_dropout = r.get_float("seq_classif_dropout"), r.get_float("qa_dropout")
    dtype = torch_dtype(r)
    r.check()

    head = modelled_head(r, architecture, _HEADS)
    p = "" if head == "base" else "distilbert."
    t = Tensors()
    t.embedding(f"{p}embeddings.word_embeddings", V, h)
    t.embedding(f"{p}embeddings.position_embeddings", n_pos, h, role="position_embedding")
    t.norm(f"{p}embeddings.LayerNorm", h)
    for i in range(L):
        b = f"{p}transformer.layer.{i}."
        for proj in ("q_lin", "k_lin", "v_lin", "out_lin"):
            t.linear(f"{b}attention.{proj}", h, h, True)
        t.norm(f"{b}sa_layer_norm", h)
        t.linear(f"{b}ffn.lin1", f, h, True)
        t.linear(f"{b}ffn.lin2", h, f, True)
        t.norm(f"{b}output_layer_norm", h)
    n = num_labels(r.raw)
    if head == "masked_lm":
        t.linear("vocab_transform", h, h, True)
        t.norm("vocab_layer_norm", h)
        if tied:
            t.add("vocab_projector.bias", (V,), "bias")
        else:
            t.linear("vocab_projector", V, h, True, role="lm_head")
    elif head in ("seq_cls", "multiple_choice"):
        t.linear("pre_classifier", h, h, True)
        t.linear("classifier", n if head == "seq_cls" else 1, h, True, role="other")
    elif head == "tok_cls":
        t.linear("classifier", n, h, True, role="other")
    elif head == "qa":
        t.linear("qa_outputs", n, h, True, role="other")
    t.buffer(f"{p}embeddings.position_ids", (1, n_pos), dtype="int64")

    facts = dict(
        kind="encoder", hidden_size=h, n_heads=a, n_kv_heads=a, head_dim=h // a, ffn_size=f,
        vocab_size=V, n_encoder_layers=L, max_position=n_pos, activation=act, gated_mlp=False,
        norm="layernorm", position="learned", tied_embeddings=tied and head == "masked_lm",
        torch_dtype=dtype, mlm_transform=head == "masked_lm",
        # pre_classifier on the first token (a view of the last hidden state), ReLU, dropout: the
        # same tensors as BERT's pooler
        classifier="pooler", block_dropouts=1,
        head_dropout={"seq_cls": seq_dropout, "multiple_choice": seq_dropout, "qa": qa_dropout}.get(head, dropout),
    )
    return Built(facts, t.items)


BUILDERS = {"distilbert": build_distilbert}
