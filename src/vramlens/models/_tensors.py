"""A small helper to write tensor inventories the way the modules register them.

The family builders call ``linear``/``norm``/``embedding``... in the order the transformers
modules create their submodules, so that the inventory lists tensors in the order of
``model.named_parameters()``; names, leaf module names and block indices are derived the
same way for config-built and checkpoint-read inventories.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from vramlens.models.spec import Role, TensorInfo

_LAYER = re.compile(r"(?:^|\.)(\d+)(?:\.|$)")


def leaf_module(name: str) -> str:
    """The attribute name of the module holding tensor ``name`` (``"q_proj"``), what peft matches."""
    parts = name.split(".")
    return parts[-2] if len(parts) >= 2 else ""


def layer_index(name: str) -> int | None:
    """The first numeric component of ``name`` (the block index), None outside the blocks."""
    m = _LAYER.search(name)
    return int(m.group(1)) if m else None


class Tensors:
    """An ordered list of TensorInfo under construction.

    ``stack`` is stamped on every tensor added while it is set ("encoder"/"decoder" for
    encoder-decoder models).
    """

    def __init__(self) -> None:
        self.items: list[TensorInfo] = []
        self.stack: Literal["encoder", "decoder"] | None = None

    def add(self, name: str, shape: Iterable[int], role: Role, dtype: str | None = None,
            module: str | None = None) -> None:
        self.items.append(TensorInfo(
            name=name,
            shape=tuple(shape),
            role=role,
            module=leaf_module(name) if module is None else module,
            layer=layer_index(name),
            dtype=dtype,
            stack=self.stack,
        ))

    def linear(self, name: str, out_features: int, in_features: int, bias: bool = False,
               role: Role = "linear") -> None:
        """An ``nn.Linear``: weight (out, in) and optional bias (out,)."""
        self.add(f"{name}.weight", (out_features, in_features), role)
        if bias:
            self.add(f"{name}.bias", (out_features,), "bias")

    def conv1d(self, name: str, in_features: int, out_features: int) -> None:
        """GPT-2's ``Conv1D`` (pytorch_utils.py): weight stored (in, out), always a bias."""
        self.add(f"{name}.weight", (in_features, out_features), "conv1d")
        self.add(f"{name}.bias", (out_features,), "bias")

    def norm(self, name: str, size: int, bias: bool = True) -> None:
        """A LayerNorm (weight and bias) or an RMSNorm (``bias=False``)."""
        self.add(f"{name}.weight", (size,), "norm")
        if bias:
            self.add(f"{name}.bias", (size,), "norm")

    def embedding(self, name: str, rows: int, dim: int, role: Role = "embedding") -> None:
        self.add(f"{name}.weight", (rows, dim), role)

    def buffer(self, name: str, shape: Iterable[int], dtype: str | None = None) -> None:
        """A registered buffer; dtype None for float buffers (they follow ``model.to(dtype)``)."""
        self.add(name, shape, "buffer", dtype=dtype)

    def rotary(self, prefix: str, head_dim: int, partial: float = 1.0) -> None:
        """The rotary embedding's ``inv_freq`` and ``original_inv_freq`` buffers.

        ``dim = int(head_dim * partial_rotary_factor)`` and ``inv_freq`` is
        ``base ** -(arange(0, dim, 2) / dim)``, so ceil(dim / 2) entries
        (modeling_rope_utils.py ``_compute_default_rope_parameters``).
        """
        dim = int(head_dim * partial)
        n = (dim + 1) // 2
        self.buffer(f"{prefix}inv_freq", (n,))
        self.buffer(f"{prefix}original_inv_freq", (n,))


def head_kind(architecture: str) -> str:
    """What sits on top of the base model, from the class name in ``architectures[0]``.

    Returns one of ``lm``, ``base``, ``seq_cls``, ``tok_cls``, ``qa``, ``masked_lm``,
    ``pretraining``, ``nsp``, ``multiple_choice``, ``encoder`` or ``unknown``.
    """
    for suffix, kind in (
        ("ForCausalLM", "lm"), ("LMHeadModel", "lm"), ("ForConditionalGeneration", "lm"),
        ("ForMaskedLM", "masked_lm"), ("ForPreTraining", "pretraining"),
        ("ForSequenceClassification", "seq_cls"), ("ForTokenClassification", "tok_cls"),
        ("ForQuestionAnswering", "qa"), ("ForNextSentencePrediction", "nsp"),
        ("ForMultipleChoice", "multiple_choice"), ("ForImageClassification", "image_cls"),
        ("ModelWithProjection", "projection"), ("EncoderModel", "encoder"), ("Model", "base"),
    ):
        if architecture.endswith(suffix):
            return kind
    return "unknown"


def num_labels(raw: Mapping[str, Any]) -> int:
    """Classifier width: ``len(id2label)``, else ``num_labels``, else 2 (PretrainedConfig)."""
    id2label = raw.get("id2label")
    if isinstance(id2label, dict) and id2label:
        return len(id2label)
    n = raw.get("num_labels")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 2
