"""ELECTRA: BERT's blocks under an embedding of its own width, with the discriminator's head.

Layout from ``transformers/models/electra/modeling_electra.py`` (transformers 5.x):
``ElectraEmbeddings`` holds word, position and token-type tables and a LayerNorm at
``embedding_size``, with BERT's two int64 buffers; when ``embedding_size != hidden_size``,
``ElectraModel.embeddings_project`` (a biased linear) maps them to ``hidden_size``. The blocks
are BERT's, under the prefix ``electra.``; no pooler.

Heads: ``ElectraForPreTraining`` is the released discriminator: ``discriminator_predictions``
(dense, activation, ``dense_prediction`` to one logit per token, a binary cross-entropy: replaced
token detection). ``ElectraForMaskedLM`` is the generator's head: ``generator_predictions``
(dense to ``embedding_size``, gelu, LayerNorm at ``embedding_size``) and ``generator_lm_head``
tied to the word embeddings. ``ElectraForSequenceClassification`` is RoBERTa's classification
head (dropout, dense, gelu, dropout, out_proj on the first token); token classification drops out
then classifies; question answering has no dropout.
"""

from __future__ import annotations

from vramlens.models._reader import ConfigReader
from vramlens.models._tensors import Tensors, num_labels
from vramlens.models.families._common import Built, modelled_head, torch_dtype

MODEL_TYPES = ("electra",)

_HEADS = {"base", "pretraining", "masked_lm", "seq_cls", "tok_cls", "qa", "multiple_choice"}


def build_electra(r: ConfigReader, architecture: str) -> Built:
    """ELECTRA inventory and facts."""
    h, L, a = r.get_int("hidden_size"), r.get_int("num_hidden_layers"), r.get_int("num_attention_heads")
    V, f, E = r.get_int("vocab_size"), r.get_int("intermediate_size"), r.get_int("embedding_size")
    n_pos, n_types = r.get_int("max_position_embeddings"), r.get_int("type_vocab_size")
    r.divisible("hidden_size", h, "num_attention_heads", a)
    tied = r.get_bool("tie_word_embeddings")
    act = r.get_str("hidden_act")
    if r.get_bool("add_cross_attention"):
        r.problem("add_cross_attention=true (ELECTRA as a seq2seq decoder) is not supported: "
                  "use a config without it")
    dtype = torch_dtype(r)
    r.check()

    head = modelled_head(r, architecture, _HEADS)
    p = "" if head == "base" else "electra."
    t = Tensors()
    t.embedding(f"{p}embeddings.word_embeddings", V, E)
    t.embedding(f"{p}embeddings.position_embeddings", n_pos, E, role="position_embedding")
    t.embedding(f"{p}embeddings.token_type_embeddings", n_types, E, role="position_embedding")
    t.norm(f"{p}embeddings.LayerNorm", E)
    if E != h:
        t.linear(f"{p}embeddings_project", h, E, True)
    for i in range(L):
        b = f"{p}encoder.layer.{i}."
        for proj in ("query", "key", "value"):
            t.linear(f"{b}attention.self.{proj}", h, h, True)
        t.linear(f"{b}attention.output.dense", h, h, True)
        t.norm(f"{b}attention.output.LayerNorm", h)
        t.linear(f"{b}intermediate.dense", f, h, True)
        t.linear(f"{b}output.dense", h, f, True)
        t.norm(f"{b}output.LayerNorm", h)
    n = num_labels(r.raw)
    if head == "pretraining":
        t.linear("discriminator_predictions.dense", h, h, True)
        t.linear("discriminator_predictions.dense_prediction", 1, h, True, role="other")
    elif head == "masked_lm":
        t.norm("generator_predictions.LayerNorm", E)
        t.linear("generator_predictions.dense", E, h, True)
        if tied:
            t.add("generator_lm_head.bias", (V,), "bias")
        else:
            t.linear("generator_lm_head", V, E, True, role="lm_head")
    elif head == "seq_cls":
        t.linear("classifier.dense", h, h, True)
        t.linear("classifier.out_proj", n, h, True, role="other")
    elif head == "tok_cls":
        t.linear("classifier", n, h, True, role="other")
    elif head == "qa":
        t.linear("qa_outputs", n, h, True, role="other")
    elif head == "multiple_choice":
        # ElectraSequenceSummary: summary_use_proj (the default) projects to hidden_size, or to
        # num_labels with summary_proj_to_labels
        width = n if r.raw.get("summary_proj_to_labels") else h
        if r.raw.get("summary_use_proj", True):
            t.linear("sequence_summary.summary", width, h, True)
        t.linear("classifier", 1, h, True, role="other")
    t.buffer(f"{p}embeddings.position_ids", (1, n_pos), dtype="int64")
    t.buffer(f"{p}embeddings.token_type_ids", (1, n_pos), dtype="int64")

    dropout = r.raw.get("classifier_dropout")
    facts = dict(
        kind="encoder", hidden_size=h, n_heads=a, n_kv_heads=a, head_dim=h // a, ffn_size=f,
        vocab_size=V, n_encoder_layers=L, max_position=n_pos, activation=act, gated_mlp=False,
        norm="layernorm", position="learned", tied_embeddings=tied and head == "masked_lm",
        torch_dtype=dtype, mlm_transform=head == "masked_lm", mlm_width=E if E != h else None,
        embedding_size=E if E != h else None, classifier="dense",
        head_dropout=0.0 if head == "qa" else (
            r.get_float("classifier_dropout") if dropout is not None else r.get_float("hidden_dropout_prob")),
    )
    if head == "pretraining":
        facts["head"] = "replaced-token-detection"
    return Built(facts, t.items)


BUILDERS = {"electra": build_electra}
