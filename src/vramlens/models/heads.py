"""Task heads: which transformers class a task builds, and the head a class carries.

``--task`` names what a model is trained or run for; the class is what transformers'
``AutoModelFor<Task>`` builds for the config's ``model_type`` (``AutoModel`` for
``embedding``, sentence-transformers' base model under mean pooling). A family declares the
tasks it models; any other pairing is refused in one line naming the tasks that apply.
"""

from __future__ import annotations

import re
from typing import Literal

from vramlens.errors import InputError

Head = Literal["causal-lm", "seq2seq-lm", "masked-lm", "sequence-classification", "token-classification",
               "question-answering", "embedding", "replaced-token-detection", "image-classification", "other"]

#: Class-name suffix of each task (transformers' naming; GPT-2's causal LM is ``GPT2LMHeadModel``).
TASK_SUFFIX: dict[str, str] = {
    "causal-lm": "ForCausalLM",
    "seq2seq-lm": "ForConditionalGeneration",
    "masked-lm": "ForMaskedLM",
    "sequence-classification": "ForSequenceClassification",
    "token-classification": "ForTokenClassification",
    "question-answering": "ForQuestionAnswering",
    "embedding": "Model",
    "image-classification": "ForImageClassification",
}

_ENCODER_TASKS = ("masked-lm", "sequence-classification", "token-classification", "question-answering",
                  "embedding")
_DECODER_TASKS = ("causal-lm", "sequence-classification", "embedding")
_SEQ2SEQ_TASKS = ("seq2seq-lm",)
#: ViT: its image classifier, or the bare model; CLIP's and SigLIP's vision towers: the pooled embedding
_VIT_TASKS = ("image-classification", "embedding")
_TOWER_TASKS = ("embedding",)

#: The tasks each family models (encoders: BERT, RoBERTa, XLM-R, DistilBERT, ELECTRA, DeBERTa-v2, ModernBERT;
#: encoder-decoders: T5; the rest decoders).
FAMILY_TASKS: dict[str, tuple[str, ...]] = {
    "bert": _ENCODER_TASKS, "roberta": _ENCODER_TASKS, "xlm-roberta": _ENCODER_TASKS, "distilbert": _ENCODER_TASKS,
    "electra": _ENCODER_TASKS, "deberta-v2": _ENCODER_TASKS, "modernbert": _ENCODER_TASKS,
    "t5": _SEQ2SEQ_TASKS, "mt5": _SEQ2SEQ_TASKS,
    "vit": _VIT_TASKS, "clip_vision_model": _TOWER_TASKS, "siglip_vision_model": _TOWER_TASKS,
    "whisper": _SEQ2SEQ_TASKS,
}

_SUFFIX = re.compile(
    r"(ForCausalLM|LMHeadModel|ForConditionalGeneration|ForMaskedLM|ForPreTraining|"
    r"ForSequenceClassification|ForTokenClassification|ForQuestionAnswering|"
    r"ForNextSentencePrediction|ForMultipleChoice|ForImageClassification|EncoderModel|Model)$"
)


def tasks_of(model_type: str) -> tuple[str, ...]:
    """The tasks vramlens models for ``model_type`` (decoders' when the family is not listed)."""
    return FAMILY_TASKS.get(model_type, _DECODER_TASKS)


def head_of(architecture: str, kind: str) -> Head:
    """The head of the class ``architecture`` (``kind``: the spec's decoder/encoder/encoder-decoder).

    A bare ``XModel`` is the embedding case (what sentence-transformers checkpoints declare);
    ``BertLMHeadModel``/``RobertaForCausalLM`` are causal LMs; pre-training heads count as
    masked LMs; multiple-choice and next-sentence heads are ``other`` (small logits, no pooling).
    """
    if architecture.endswith(("ForCausalLM", "LMHeadModel")):
        return "causal-lm"
    if architecture.endswith("ForConditionalGeneration"):
        return "seq2seq-lm" if kind == "encoder-decoder" else "causal-lm"
    if architecture.endswith(("ForMaskedLM", "ForPreTraining")):
        return "masked-lm"
    for task in ("sequence-classification", "token-classification", "question-answering", "image-classification"):
        if architecture.endswith(TASK_SUFFIX[task]):
            return task
    if architecture.endswith("Model") and not architecture.endswith("EncoderModel"):
        return "embedding"
    return "other"


def task_architecture(model_type: str, architecture: str, task: str, default_architecture: str | None) -> str:
    """The class transformers' ``AutoModelFor<task>`` builds for ``model_type``.

    Args:
        model_type: the config's model type.
        architecture: the config's ``architectures[0]`` (its stem names the family's classes).
        task: one of ``vramlens.workload.TASKS``.
        default_architecture: the family's causal-LM / seq2seq class, when its name is not
            ``<stem>ForCausalLM`` (``GPT2LMHeadModel``).

    Raises:
        InputError: the family does not have (or vramlens does not model) that head.
    """
    allowed = tasks_of(model_type)
    if task not in allowed:
        raise InputError(f"task={task} does not apply to {model_type} models ({_what(model_type)}): "
                         f"use --task {' | '.join(allowed)}")
    if task in ("causal-lm", "seq2seq-lm") and default_architecture and \
            head_of(default_architecture, "encoder-decoder" if task == "seq2seq-lm" else "decoder") == task:
        return default_architecture
    stem = _SUFFIX.sub("", default_architecture or architecture)
    return stem + TASK_SUFFIX[task]


def _what(model_type: str) -> str:
    if FAMILY_TASKS.get(model_type) is _ENCODER_TASKS:
        return "an encoder: no causal or seq2seq LM head is modelled"
    if FAMILY_TASKS.get(model_type) in (_VIT_TASKS, _TOWER_TASKS):
        return "a vision encoder: " + " or ".join(FAMILY_TASKS[model_type]) + " only"
    if FAMILY_TASKS.get(model_type) is _SEQ2SEQ_TASKS:
        return "an encoder-decoder: only its seq2seq LM head is modelled"
    return "a decoder-only model"
