"""Gemma 3's multimodal checkpoints (``model_type`` gemma3) read as their text tower.

google/gemma-3-4b-it, -12b-it and -27b-it publish a ``Gemma3Config`` whose language model sits
in ``text_config`` (a ``gemma3_text`` config that lists only what differs from
``Gemma3TextConfig``'s defaults) next to a SigLIP ``vision_config``. vramlens models the text
tower: the inventory is ``Gemma3ForCausalLM(Gemma3TextConfig(**text_config))``, which is what
transformers builds for text-only use of the checkpoint's language model; the vision tower
(SigLIP, 27 layers of 1152) and the multimodal projector are not counted, and ``assumed``
says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vramlens.errors import ModelSourceError

#: What the text tower takes from the outer config when ``text_config`` does not set it
#: (Gemma3Config keeps ``tie_word_embeddings`` at the top; config.json keeps the dtype there).
_INHERITED = ("tie_word_embeddings", "torch_dtype", "dtype", "_name_or_path")

NOTE = ("gemma3: the text tower only (Gemma3ForCausalLM over text_config); the SigLIP vision tower "
        "and the multimodal projector are not counted")


def text_tower(config: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The ``gemma3_text`` config of a ``gemma3`` checkpoint's language model.

    Raises:
        ModelSourceError: ``text_config`` is missing or not a JSON object.
    """
    text = config.get("text_config")
    if not isinstance(text, dict):
        raise ModelSourceError(f"{where}: a gemma3 config needs its language model under \"text_config\" "
                               f"(a JSON object), not {text!r}")
    out = {k: v for k, v in text.items() if k not in ("architectures",)}
    out["model_type"] = "gemma3_text"
    out["architectures"] = ["Gemma3ForCausalLM"]
    for key in _INHERITED:
        if key not in out and key in config:
            out[key] = config[key]
    return out


#: model_type -> the function that reads the config of the part vramlens models.
UNWRAP = {"gemma3": text_tower}
