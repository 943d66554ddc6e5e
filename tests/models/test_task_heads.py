"""--task builds the class transformers' AutoModelFor<Task> builds, tensor for tensor (meta device)."""

from __future__ import annotations

import pytest

from vramlens.errors import InputError
from vramlens.models import load_model, spec_from_config
from vramlens.models.inventory import with_task

transformers = pytest.importorskip("transformers", reason="the reference inventory comes from transformers")
pytest.importorskip("torch", reason="the reference model is built with torch on the meta device")

from _hf_meta import hf_tensors, ours  # noqa: E402

_BERT = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, vocab_size=100)
_LLAMA = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, vocab_size=100,
              num_key_value_heads=2)
_GPT2 = dict(n_embd=64, n_layer=2, n_head=4, vocab_size=100, n_positions=32)
_T5 = dict(d_model=64, d_ff=96, num_layers=2, num_heads=4, d_kv=8, vocab_size=100)
_ENCODER_TASKS = ("masked-lm", "sequence-classification", "token-classification", "question-answering", "embedding")

#: (config as released, with its own head) x the tasks vramlens models for the family
CASES = {
    "bert": ({"model_type": "bert", "architectures": ["BertForMaskedLM"], **_BERT},
             ("masked-lm", "sequence-classification", "token-classification", "question-answering", "embedding")),
    "roberta": ({"model_type": "roberta", "architectures": ["RobertaForMaskedLM"], **_BERT,
                 "id2label": {"0": "a", "1": "b", "2": "c"}},
                ("masked-lm", "sequence-classification", "token-classification", "question-answering", "embedding")),
    "llama": ({"model_type": "llama", "architectures": ["LlamaForCausalLM"], **_LLAMA},
              ("causal-lm", "sequence-classification", "embedding")),
    "gpt2": ({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], **_GPT2},
             ("causal-lm", "sequence-classification", "embedding")),
    "t5": ({"model_type": "t5", "architectures": ["T5ForConditionalGeneration"], **_T5}, ("seq2seq-lm",)),
    "distilbert": ({"model_type": "distilbert", "architectures": ["DistilBertForMaskedLM"], "dim": 64, "hidden_dim": 96,
                    "n_layers": 2, "n_heads": 4, "vocab_size": 100}, _ENCODER_TASKS),
    "xlm-roberta": ({"model_type": "xlm-roberta", "architectures": ["XLMRobertaForMaskedLM"], **_BERT}, _ENCODER_TASKS),
    "electra": ({"model_type": "electra", "architectures": ["ElectraForPreTraining"], **_BERT, "embedding_size": 32},
                _ENCODER_TASKS),
    "deberta-v2": ({"model_type": "deberta-v2", **_BERT, "relative_attention": True, "position_buckets": 8,
                    "share_att_key": True, "pos_att_type": "p2c|c2p", "norm_rel_ebd": "layer_norm",
                    "position_biased_input": False, "type_vocab_size": 0}, _ENCODER_TASKS),
    "modernbert": ({"model_type": "modernbert", "architectures": ["ModernBertForMaskedLM"], **_BERT, "pad_token_id": 0,
                    "bos_token_id": 0, "eos_token_id": 0, "cls_token_id": 0, "sep_token_id": 0}, _ENCODER_TASKS),
}

_AUTO = {
    "causal-lm": "AutoModelForCausalLM", "seq2seq-lm": "AutoModelForSeq2SeqLM", "masked-lm": "AutoModelForMaskedLM",
    "sequence-classification": "AutoModelForSequenceClassification",
    "token-classification": "AutoModelForTokenClassification",
    "question-answering": "AutoModelForQuestionAnswering", "embedding": "AutoModel",
}


def _auto_class(config: dict, task: str) -> str:
    """The class name transformers' Auto class picks for this config and task."""
    from transformers import AutoConfig

    cfg = dict(config)
    hf_cfg = AutoConfig.for_model(cfg.pop("model_type"), **{k: v for k, v in cfg.items() if k != "architectures"})
    auto = getattr(transformers, _AUTO[task])
    return auto._model_mapping[type(hf_cfg)].__name__


@pytest.mark.parametrize(("family", "task"), [(f, t) for f, (_, ts) in CASES.items() for t in ts],
                         ids=[f"{f}-{t}" for f, (_, ts) in CASES.items() for t in ts])
def test_task_builds_the_auto_class_inventory(family, task):
    config, _ = CASES[family]
    spec = spec_from_config(config, task=task)
    cls = _auto_class(config, task)
    assert spec.architecture == cls
    assert spec.config["architectures"] == [cls]  # what the tracer builds
    ref_params, ref_buffers = hf_tensors({**config, "architectures": [cls]})
    got_params, got_buffers = ours(spec)
    assert got_params == ref_params
    assert got_buffers == ref_buffers
    assert spec.head == task


def test_head_facts():
    bert = load_model("bert-base-uncased")
    assert (bert.head, bert.mlm_transform, bert.num_labels) == ("masked-lm", True, 0)
    emb = with_task(bert, "embedding")
    assert emb.outside_loss == ("pooler.dense.weight", "pooler.dense.bias")
    assert with_task(bert, "sequence-classification").classifier == "pooler"
    assert with_task(bert, "sequence-classification").num_labels == 2  # PretrainedConfig's default
    assert with_task(bert, "question-answering").num_labels == 2       # start and end
    roberta = with_task(load_model("roberta-base"), "sequence-classification")
    assert (roberta.classifier, roberta.num_labels, roberta.outside_loss) == ("dense", 2, ())
    # a bare base model is the sentence-transformers case
    assert spec_from_config({**CASES["bert"][0], "architectures": ["BertModel"]}).head == "embedding"
    assert with_task(bert, None) is bert and with_task(bert, "masked-lm") is bert


@pytest.mark.parametrize(("model", "task", "message"), [
    ("bert-base-uncased", "causal-lm",
     "task=causal-lm does not apply to bert models (an encoder: no causal or seq2seq LM head is modelled): "
     "use --task masked-lm | sequence-classification | token-classification | question-answering | embedding"),
    ("gpt2", "seq2seq-lm",
     "task=seq2seq-lm does not apply to gpt2 models (a decoder-only model): "
     "use --task causal-lm | sequence-classification | embedding"),
    ("gpt2", "masked-lm",
     "task=masked-lm does not apply to gpt2 models (a decoder-only model): "
     "use --task causal-lm | sequence-classification | embedding"),
    ("t5-small", "embedding",
     "task=embedding does not apply to t5 models (an encoder-decoder: only its seq2seq LM head is modelled): "
     "use --task seq2seq-lm"),
])
def test_nonsensical_task_is_one_clear_line(model, task, message):
    with pytest.raises(InputError) as e:
        with_task(load_model(model), task)
    assert str(e.value) == message
