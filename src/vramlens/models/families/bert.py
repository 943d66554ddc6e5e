"""Encoders: BERT, RoBERTa and XLM-RoBERTa, with the head named in ``architectures[0]``.

Layouts from ``transformers/models/{bert,roberta,xlm_roberta}/modeling_*.py`` (transformers 5.x):
post-norm blocks with biased q/k/v/o and MLP, learned absolute positions, token-type
embeddings, and two int64 buffers ``position_ids``/``token_type_ids`` of shape
(1, max_position_embeddings). RoBERTa registers its position table after the LayerNorm.

Which classes carry the pooler (``BertModel(add_pooling_layer=...)``): BERT's base model,
pre-training, next-sentence, sequence-classification and multiple-choice heads; RoBERTa's
base model and multiple-choice head only. The MLM decoder is tied to the word
embeddings (and its bias to the head's ``bias``) unless ``tie_word_embeddings`` is false.

XLM-RoBERTa is RoBERTa's layout (a 250,002-token vocabulary in the released models), but its
head classes register the head before ``roberta`` (modeling_xlm_roberta.py, generated from
modular_xlm_roberta.py), so ``named_parameters()`` lists the head first, and a tied MLM decoder
is listed as ``lm_head.decoder.weight`` in place of ``roberta.embeddings.word_embeddings.weight``.
"""

from __future__ import annotations

from vramlens.models._reader import ConfigReader
from vramlens.models._tensors import Tensors, num_labels
from vramlens.models.families._common import Built, modelled_head, torch_dtype

MODEL_TYPES = ("bert", "roberta", "xlm-roberta")

_BERT_POOLED = {"base", "pretraining", "nsp", "seq_cls", "multiple_choice"}
_ROBERTA_POOLED = {"base", "multiple_choice"}
_HEADS = {"base", "lm", "masked_lm", "pretraining", "nsp", "seq_cls", "tok_cls", "qa",
          "multiple_choice"}


def build_bert(r: ConfigReader, architecture: str) -> Built:
    """BERT / RoBERTa / XLM-RoBERTa inventory and facts."""
    roberta = r.model_type in ("roberta", "xlm-roberta")
    head_first = r.model_type == "xlm-roberta"
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

    head = modelled_head(r, architecture, _HEADS)
    name = "roberta" if roberta else "bert"
    p = "" if head == "base" else f"{name}."
    lm = head in ("lm", "masked_lm", "pretraining")
    # XLM-R's tied decoder is listed under the head's name (the head comes first)
    word_in_head = head_first and lm and tied
    t = Tensors()
    e = f"{p}embeddings."
    if not word_in_head:
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
    hd = Tensors()
    if lm:
        if roberta:
            hd.add("lm_head.bias", (V,), "bias")
            hd.linear("lm_head.dense", h, h, True)
            hd.norm("lm_head.layer_norm", h)
            if word_in_head:
                hd.embedding("lm_head.decoder", V, h)  # the word embeddings, tied
            elif not tied:
                hd.linear("lm_head.decoder", V, h, True, role="lm_head")
        else:
            hd.add("cls.predictions.bias", (V,), "bias")
            hd.linear("cls.predictions.transform.dense", h, h, True)
            hd.norm("cls.predictions.transform.LayerNorm", h)
            if not tied:
                hd.linear("cls.predictions.decoder", V, h, True, role="lm_head")
    if head in ("pretraining", "nsp"):
        hd.linear("cls.seq_relationship", 2, h, True, role="other")
    if head == "seq_cls":
        if roberta:  # RobertaClassificationHead: dense + out_proj
            hd.linear("classifier.dense", h, h, True)
            hd.linear("classifier.out_proj", n, h, True, role="other")
        else:
            hd.linear("classifier", n, h, True, role="other")
    elif head == "tok_cls":
        hd.linear("classifier", n, h, True, role="other")
    elif head == "multiple_choice":
        hd.linear("classifier", 1, h, True, role="other")
    elif head == "qa":
        hd.linear("qa_outputs", n, h, True, role="other")  # nn.Linear(hidden_size, num_labels): 2 by default
    params = [x for x in t.items if x.role != "buffer"]
    buffers = [x for x in t.items if x.role == "buffer"]
    tensors = hd.items + params + buffers if head_first else params + hd.items + buffers

    facts = dict(
        kind="encoder", hidden_size=h, n_heads=a, n_kv_heads=a, head_dim=h // a, ffn_size=f,
        # RoBERTa numbers positions from padding_idx + 1 = 2 (create_position_ids_from_input_ids),
        # so 514 table rows hold 512 tokens.
        vocab_size=V, n_encoder_layers=L, max_position=n_pos - 2 if roberta else n_pos,
        activation=act, gated_mlp=False, norm="layernorm", position="learned",
        tied_embeddings=tied and lm, torch_dtype=dtype, mlm_transform=lm,
        # BertForQuestionAnswering has no dropout; the others drop out classifier_dropout, else
        # hidden_dropout_prob (modeling_bert.py, RobertaClassificationHead)
        head_dropout=0.0 if head == "qa" else _classifier_dropout(r),
        classifier="dense" if roberta else "pooler",
        # sentence-transformers loads the base model with its pooler, which mean pooling never reads
        outside_loss=tuple(x.name for x in t.items if x.name.startswith("pooler.")) if head == "base" else (),
    )
    return Built(facts, tensors)


def _classifier_dropout(r: ConfigReader) -> float:
    """``classifier_dropout`` when set, else ``hidden_dropout_prob`` (BertForSequenceClassification)."""
    if r.raw.get("classifier_dropout") is not None:
        return r.get_float("classifier_dropout")
    return r.get_float("hidden_dropout_prob", 0.1)


BUILDERS = {"bert": build_bert, "roberta": build_bert, "xlm-roberta": build_bert}
