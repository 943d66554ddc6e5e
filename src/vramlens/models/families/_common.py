"""Pieces shared by the family builders: heads, dtype, rotary factor, the Built result."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vramlens.errors import InputError
from vramlens.models._reader import ConfigReader
from vramlens.models._tensors import Tensors, head_kind, num_labels
from vramlens.models.spec import TensorInfo
from vramlens.units import canonical_dtype


@dataclass
class Built:
    """What a family builder returns: ModelSpec's architecture fields and the inventory."""

    facts: dict[str, Any]
    tensors: list[TensorInfo] = field(default_factory=list)


def torch_dtype(r: ConfigReader) -> str | None:
    """config.json's ``torch_dtype`` (``dtype`` in transformers >= 5) in vramlens' spelling."""
    value = r.raw.get("torch_dtype", r.raw.get("dtype"))
    if value is None or value == "auto":
        return None
    try:
        return canonical_dtype(str(value))
    except InputError:
        r.problem(f"torch_dtype={value!r} is not a dtype: use e.g. \"bfloat16\" or \"float16\"")
        return None


def kv_heads_and_head_dim(r: ConfigReader, heads: int, hidden: int) -> tuple[int, int]:
    """(``num_key_value_heads``, checked to divide the heads and defaulting to them; ``head_dim``, or
    hidden over heads) as the newer decoders' configs give them (gpt-oss, Llama 4)."""
    n_kv = r.opt_int("num_key_value_heads") or heads
    r.divisible("num_attention_heads", heads, "num_key_value_heads", n_kv)
    return n_kv, r.opt_int("head_dim") or hidden // max(heads, 1)


def rope_partial(r: ConfigReader, default: float = 1.0, legacy_key: str | None = None) -> float:
    """The fraction of each head that is rotated (``partial_rotary_factor``).

    Looked up in ``rope_parameters`` (transformers >= 5 files), ``rope_scaling``, the top
    level, then the family's legacy key (GPT-NeoX ``rotary_pct``), then ``default``.
    """
    for key in ("rope_parameters", "rope_scaling"):
        section = r.raw.get(key)
        if isinstance(section, dict) and section.get("partial_rotary_factor") is not None:
            return r.fraction(f"{key}.partial_rotary_factor", section["partial_rotary_factor"])
    if r.has("partial_rotary_factor"):
        return r.fraction("partial_rotary_factor")
    if legacy_key and r.has(legacy_key):
        return r.fraction(legacy_key)
    return default


def modelled_head(r: ConfigReader, architecture: str, heads: set[str] | frozenset[str]) -> str:
    """The architecture's head kind when the family models it, else "base" with an assumption noted."""
    head = head_kind(architecture)
    if head not in heads:
        r.assume(f"{architecture}: this head is not modelled, only the base model is counted")
        return "base"
    return head


def decoder_prefix(head: str, base: str) -> str:
    """Where the base model sits: ``""`` for the bare ``XModel``, else e.g. ``"model."``."""
    return "" if head == "base" else base


def decoder_head(t: Tensors, r: ConfigReader, head: str, architecture: str, hidden: int,
                 vocab: int, tied: bool, lm_bias: bool = False, score_in: int | None = None) -> None:
    """The output head of a decoder-only model.

    ``lm``: ``lm_head`` (vocab, hidden), listed only when untied (named_parameters() drops
    the tied alias); a bias (Phi) stays a parameter of its own even when the weight is tied.
    ``seq_cls``: ``score`` (num_labels, hidden) without bias. Anything else is not
    modelled: the base model alone is counted and ``assumed`` says so.
    """
    if head == "lm":
        if not tied:
            t.add("lm_head.weight", (vocab, hidden), "lm_head")
        if lm_bias:
            t.add("lm_head.bias", (vocab,), "bias")
    elif head == "seq_cls":
        t.linear("score", num_labels(r.raw), score_in or hidden, role="other")
    elif head != "base":
        r.assume(f"{architecture}: this head is not modelled, only the base model is counted")
