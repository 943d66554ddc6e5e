"""One builder per model family: config dict -> architecture facts + exact tensor inventory.

Each builder reads a :class:`~vramlens.models._reader.ConfigReader` and returns a
:class:`~vramlens.models.families._common.Built`. :data:`BUILDERS` maps every supported
``model_type`` to its builder; :data:`DEFAULT_ARCHITECTURES` names the class transformers
builds for it when ``architectures`` is missing from config.json.
"""

from __future__ import annotations

from collections.abc import Callable as _Callable
from collections.abc import Mapping as _Mapping
from typing import Any as _Any

from vramlens.models._reader import ConfigReader as _ConfigReader
from vramlens.models.families import (
    bert,
    deberta,
    deepseek,
    distilbert,
    electra,
    gemma3,
    gpt,
    gpt_oss,
    llama,
    llama4,
    llama4_vision,
    modernbert,
    qwen_vl,
    t5,
    vision,
    whisper,
)
from vramlens.models.families._common import Built

Builder = _Callable[[_ConfigReader, str], Built]

BUILDERS: dict[str, Builder] = {
    **bert.BUILDERS,
    **gpt.BUILDERS,
    **{mt: llama.build_llama_like for mt in llama.MODEL_TYPES},
    **t5.BUILDERS,
    **distilbert.BUILDERS,
    **electra.BUILDERS,
    **deberta.BUILDERS,
    **modernbert.BUILDERS,
    **deepseek.BUILDERS,
    **gpt_oss.BUILDERS,
    **llama4.BUILDERS,
    **vision.BUILDERS,
    **whisper.BUILDERS,
    **qwen_vl.BUILDERS,
    **llama4_vision.BUILDERS,
}

#: model_type -> the reader of the part of a wrapping config that vramlens models, and the note
#: it adds to ``assumed`` (Gemma 3's and Llama 4's multimodal checkpoints: the text model).
UNWRAP: dict[str, tuple[_Callable[[_Mapping[str, _Any], str], dict[str, _Any]], str]] = {
    **{mt: (fn, gemma3.NOTE) for mt, fn in gemma3.UNWRAP.items()},
    **{mt: (fn, llama4.NOTE) for mt, fn in llama4.UNWRAP.items()},
    **{mt: (fn, vision.NOTE) for mt, fn in vision.UNWRAP.items()},
}

DEFAULT_ARCHITECTURES: dict[str, str] = {
    "bert": "BertForMaskedLM",
    "roberta": "RobertaForMaskedLM",
    "xlm-roberta": "XLMRobertaForMaskedLM",
    "distilbert": "DistilBertForMaskedLM",
    "electra": "ElectraForPreTraining",
    "deberta-v2": "DebertaV2ForMaskedLM",
    "modernbert": "ModernBertForMaskedLM",
    "gpt2": "GPT2LMHeadModel",
    "gpt_bigcode": "GPTBigCodeForCausalLM",
    "opt": "OPTForCausalLM",
    "bloom": "BloomForCausalLM",
    "falcon": "FalconForCausalLM",
    "gpt_neox": "GPTNeoXForCausalLM",
    "phi": "PhiForCausalLM",
    "phi3": "Phi3ForCausalLM",
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "mixtral": "MixtralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen2_moe": "Qwen2MoeForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "gemma": "GemmaForCausalLM",
    "gemma2": "Gemma2ForCausalLM",
    "gemma3_text": "Gemma3ForCausalLM",
    "olmo2": "Olmo2ForCausalLM",
    "deepseek_v2": "DeepseekV2ForCausalLM",
    "deepseek_v3": "DeepseekV3ForCausalLM",
    "gpt_oss": "GptOssForCausalLM",
    "llama4_text": "Llama4ForCausalLM",
    "t5": "T5ForConditionalGeneration",
    "mt5": "MT5ForConditionalGeneration",
    "vit": "ViTModel",
    "clip_vision_model": "CLIPVisionModel",
    "siglip_vision_model": "SiglipVisionModel",
    "whisper": "WhisperForConditionalGeneration",
    "qwen2_5_vl_vision": "Qwen2_5_VisionTransformerPretrainedModel",
    "llama4_vision_model": "Llama4VisionModel",
}

__all__ = ["BUILDERS", "Builder", "Built", "DEFAULT_ARCHITECTURES", "UNWRAP"]
