"""Encoders: BERT and RoBERTa, with the head named in ``architectures[0]``.

Layouts from ``transformers/models/{bert,roberta}/modeling_*.py`` (transformers 5.x):
post-norm blocks with biased q/k/v/o and MLP, learned absolute positions, token-type
embeddings, and two int64 buffers ``position_ids``/``token_type_ids`` of shape
(1, max_position_embeddings). RoBERTa registers its position table after the LayerNorm.

Which classes carry the pooler (``BertModel(add_pooling_layer=...)``): BERT's base model,
pre-training, next-sentence, sequence-classification and multiple-choice heads; RoBERTa's
base model and multiple-choice head only. The MLM decoder is tied to the word
embeddings (and its bias to the head's ``bias``) unless ``tie_word_embeddings`` is false.
"""

from __future__ import annotations

from vramlens.models._reader import ConfigReader
from vramlens.models._tensors import Tensors, head_kind, num_labels
from vramlens.models.families._common import Built, torch_dtype

MODEL_TYPES = ("bert", "roberta")

_BERT_POOLED = {"base", "pretraining", "nsp", "seq_cls", "multiple_choice"}
_ROBERTA_POOLED = {"base", "multiple_choice"}
_HEADS = {"base", "lm", "masked_lm", "pretraining", "nsp", "seq_cls", "tok_cls", "qa",
          "multiple_choice"}


def build_bert(r: ConfigReader, architecture: str) -> Built:
    """BERT / RoBERTa inventory and facts."""
    roberta = r.model_type == "roberta"
    h, L, a = r.get_int("hidden_size"), r.get_int("num_hidden_layers"), r.get_int("num_attention_heads")
    V, f = r.get_int("vocab_size"), r.get_int("intermediate_size")
    n_pos, n_types = r.get_int("max_position_embeddings"), r.get_int("type_vocab_size")
    r.divisible("hidden_size", h, "num_attention_heads", a)
    tied = r.get_bool("tie_word_embeddings")
    act = r.get_str("hidden_act")
    if r.get_bool("add_cross_attention"):
        r.problem("add_cross_attention=true (BERT as a seq2seq decoder) is not supported: "
                  "use a config without it")
    dtype = torch_dtype(r)
    r.check()

    head = head_kind(architecture)
    if head not in _HEADS:
        r.assume(f"{architecture}: this head is not modelled, only the base model is counted")
        head = "base"
    name = "roberta" if roberta else "bert"
    p = "" if head == "base" else f"{name}."
    t = Tensors()
    e = f"{p}embeddings."
    t.embedding(f"{e}word_embeddings", V, h)
    if not roberta:
        t.embedding(f"{e}position_embeddings", n_pos, h, role="position_embedding")
    t.embedding(f"{e}token_type_embeddings", n_types, h, role="position_embedding")
    t.norm(f"{e}LayerNorm", h)
    if roberta:
        t.embedding(f"{e}position_embeddings", n_pos, h, role="position_embedding")
    t.buffer(f"{e}position_ids", (1, n_pos), dtype="int64")
    t.buffer(f"{e}token_type_ids", (1, n_pos), dtype="int64")
    for i in range(L):
        b = f"{p}encoder.layer.{i}."
        for proj in ("query", "key", "value"):
            t.linear(f"{b}attention.self.{proj}", h, h, True)
        t.linear(f"{b}attention.output.dense", h, h, True)
        t.norm(f"{b}attention.output.LayerNorm", h)
        t.linear(f"{b}intermediate.dense", f, h, True)
        t.linear(f"{b}output.dense", h, f, True)
        t.norm(f"{b}output.LayerNorm", h)
    if head in (_ROBERTA_POOLED if roberta else _BERT_POOLED):
        t.linear(f"{p}pooler.dense", h, h, True)

    n = num_labels(r.raw)
    if head in ("lm", "masked_lm", "pretraining"):
        if roberta:
            t.add("lm_head.bias", (V,), "bias")
            t.linear("lm_head.dense", h, h, True)
            t.norm("lm_head.layer_norm", h)
            if not tied:
                t.linear("lm_head.decoder", V, h, True, role="lm_head")
        else:
            t.add("cls.predictions.bias", (V,), "bias")
            t.linear("cls.predictions.transform.dense", h, h, True)
            t.norm("cls.predictions.transform.LayerNorm", h)
            if not tied:
                t.linear("cls.predictions.decoder", V, h, True, role="lm_head")
    if head in ("pretraining", "nsp"):
        t.linear("cls.seq_relationship", 2, h, True, role="other")
    if head == "seq_cls":
        if roberta:  # RobertaClassificationHead: dense + out_proj
            t.linear("classifier.dense", h, h, True)
            t.linear("classifier.out_proj", n, h, True, role="other")
        else:
            t.linear("classifier", n, h, True, role="other")
    elif head == "tok_cls":
        t.linear("classifier", n, h, True, role="other")
    elif head == "multiple_choice":
        t.linear("classifier", 1, h, True, role="other")
    elif head == "qa":
        t.linear("qa_outputs", n, h, True, role="other")  # nn.Linear(hidden_size, num_labels): 2 by default

    facts = dict(
        kind="encoder", hidden_size=h, n_heads=a, n_kv_heads=a, head_dim=h // a, ffn_size=f,
        # RoBERTa numbers positions from padding_idx + 1 = 2 (create_position_ids_from_input_ids),
        # so 514 table rows hold 512 tokens.
        vocab_size=V, n_encoder_layers=L, max_position=n_pos - 2 if roberta else n_pos,
        activation=act, gated_mlp=False, norm="layernorm", position="learned",
        tied_embeddings=tied and head in ("lm", "masked_lm", "pretraining"), torch_dtype=dtype,
        mlm_transform=head in ("lm", "masked_lm", "pretraining"),
        classifier="dense" if roberta else "pooler",
        # sentence-transformers loads the base model with its pooler, which mean pooling never reads
        outside_loss=tuple(x.name for x in t.items if x.name.startswith("pooler.")) if head == "base" else (),
    )
    return Built(facts, t.items)


BUILDERS = {"bert": build_bert, "roberta": build_bert}
