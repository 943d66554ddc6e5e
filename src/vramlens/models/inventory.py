"""config.json dict -> ModelSpec with the exact tensor inventory of the transformers model.

:func:`spec_from_config` picks the family builder from ``model_type`` (or, when that is
missing, from the class named in ``architectures[0]``), builds the inventory for that class
(the head matters: ``BertModel`` has a pooler, ``BertForMaskedLM`` does not), and fills
every architecture field of :class:`~vramlens.models.spec.ModelSpec`. An unknown
``model_type`` with the standard fields becomes a generic Llama-style decoder, recorded in
``assumed``. No torch, no transformers: the defaults it needs are data
(:mod:`vramlens.models.defaults`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from vramlens.errors import InputError, ModelSourceError, UnmodelledModelError
from vramlens.limits import MAX_PARAMS, MAX_TENSOR_NUMEL, MAX_TENSORS, show
from vramlens.models._reader import ConfigReader
from vramlens.models._tensors import Tensors, num_labels
from vramlens.models.families import BUILDERS, DEFAULT_ARCHITECTURES, UNWRAP, llama4_vision, qwen_vl
from vramlens.models.families.llama import build_llama_like
from vramlens.models.families.vlm import (
    ANYRES_DEFAULT_IMAGE,
    ARCHITECTURES,
    outside_loss,
    projector_tensors,
    rename_text,
)
from vramlens.models.families.vlm import PARTS as VLM_PARTS
from vramlens.models.heads import head_of, task_architecture
from vramlens.models.spec import VLM, AnyRes, ModelSpec, TensorInfo, TiledImages

#: What a config needs to be built as a generic decoder when its model_type is unknown.
GENERIC_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                  "vocab_size")

SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(sorted({*BUILDERS, *UNWRAP, *VLM_PARTS, qwen_vl.MODEL_TYPE}))

_HEAD_SUFFIX = re.compile(
    r"(ForCausalLM|LMHeadModel|ForConditionalGeneration|ForMaskedLM|ForPreTraining|"
    r"ForSequenceClassification|ForTokenClassification|ForQuestionAnswering|"
    r"ForNextSentencePrediction|ForMultipleChoice|EncoderModel|Model)$"
)
#: Class-name stem -> model_type ("Qwen2Moe" -> "qwen2_moe"), to read configs without model_type.
_STEMS = {_HEAD_SUFFIX.sub("", arch): mt for mt, arch in DEFAULT_ARCHITECTURES.items()}


def model_type_of(config: Mapping[str, Any], where: str) -> str:
    """The config's ``model_type``, or the one its ``architectures[0]`` class implies.

    Raises:
        ModelSourceError: neither is usable; the message names the field.
    """
    mt = config.get("model_type")
    if isinstance(mt, str) and mt:
        return mt
    if mt is not None:
        raise ModelSourceError(f"{where}: model_type={mt!r} must be a string such as \"llama\"")
    arch = _architecture(config, where)
    if arch and _HEAD_SUFFIX.sub("", arch) in _STEMS:
        return _STEMS[_HEAD_SUFFIX.sub("", arch)]
    raise ModelSourceError(
        f"{where}: missing field 'model_type' (and architectures={config.get('architectures')!r} "
        f"does not name a known class): add e.g. \"model_type\": \"llama\""
    )


def _architecture(config: Mapping[str, Any], where: str) -> str | None:
    archs = config.get("architectures")
    if archs is None:
        return None
    if not isinstance(archs, list) or not archs or not all(isinstance(a, str) for a in archs):
        raise ModelSourceError(
            f"{where}: architectures={archs!r} must be a list of class names such as [\"LlamaForCausalLM\"]"
        )
    first: str = archs[0]  # a str: checked above
    return first


def spec_from_config(
    config: Mapping[str, Any],
    *,
    name: str | None = None,
    source: str = "config",
    where: str | None = None,
    task: str | None = None,
    multimodal: bool = False,
) -> ModelSpec:
    """Build the ModelSpec of the transformers model that ``config`` describes.

    Args:
        config: a parsed config.json (the original Hugging Face fields).
        name: the model's name in reports; default ``_name_or_path`` or the model type.
        source: where the config came from (``"catalog"``, ``"config.json"``, ``"hub"``...).
        where: how to name the config in error messages (a path, a hub id).
        task: build the class transformers' ``AutoModelFor<task>`` makes (one of
            ``vramlens.workload.TASKS``) instead of ``architectures[0]``.
        multimodal: build a wrapping config that has a text reading (Gemma 3's ``gemma3``) as the
            whole vision-language model (families.vlm); LLaVA configs are always built whole.

    Returns:
        The spec; ``tensors`` equal ``model.named_parameters()`` (tied weights once) plus
        ``named_buffers()`` of the class in ``architectures[0]`` (or of the task's class).
        A wrapping config (Gemma 3's multimodal ``gemma3``) is read as the part vramlens
        models (families.UNWRAP): ``config`` on the spec is then that part's config.

    Raises:
        InputError: the task does not apply to this model's family.
        ModelSourceError: a field is missing, of the wrong type, or inconsistent; or the
            model type is unknown and the config lacks the fields of a generic decoder.
    """
    where = where or name or "config"
    if not isinstance(config, Mapping):
        raise ModelSourceError(f"{where}: a config must be a JSON object, not {type(config).__name__}")
    mt = model_type_of(config, where)
    if mt == qwen_vl.MODEL_TYPE:
        return _qwen_vl_spec(config, name=name, source=source, where=where, task=task)
    if mt == llama4_vision.MODEL_TYPE and multimodal:
        return _llama4_vl_spec(config, name=name, source=source, where=where, task=task)
    if mt in VLM_PARTS and (multimodal or mt not in UNWRAP):
        return _vlm_spec(config, mt, name=name, source=source, where=where, task=task)
    unwrap_note = None
    if mt in UNWRAP:
        unwrap, unwrap_note = UNWRAP[mt]
        config = unwrap(config, where)
        mt = model_type_of(config, where)
    arch = _architecture(config, where)
    reader = ConfigReader(config, mt, where)
    if unwrap_note:
        reader.assume(unwrap_note)
    generic = mt not in BUILDERS
    if task is not None:
        arch = task_architecture(mt, arch or DEFAULT_ARCHITECTURES.get(mt, "ForCausalLM"), task,
                                 DEFAULT_ARCHITECTURES.get(mt))
    if arch is None:
        arch = DEFAULT_ARCHITECTURES.get(mt, "ForCausalLM")
        reader.assume(f"architecture={arch} (config.json has no 'architectures')")
    if generic:
        missing = [f for f in GENERIC_FIELDS if f not in config]
        if missing:
            raise UnmodelledModelError(
                f"{where}: model_type {mt!r} is not supported and the config lacks "
                f"{', '.join(missing)} to build it as a generic decoder: supported model types "
                f"are {', '.join(SUPPORTED_MODEL_TYPES)}", model_type=mt, config=dict(config),
            )
        reader.assume(f"model_type {mt!r} is not known to vramlens: built as a generic "
                      f"Llama-style decoder (RMSNorm, rotary, gated MLP) from the standard fields")
        built = build_llama_like(reader, arch, generic=True)
    else:
        built = BUILDERS[mt](reader, arch)
    reader.check()
    _check_size(built.tensors, where)
    facts = dict(built.facts)
    facts.setdefault("head", head_of(arch, facts["kind"]))
    if facts["head"] in ("sequence-classification", "token-classification", "question-answering",
                         "image-classification"):
        facts["num_labels"] = num_labels(config)  # QA: start and end logits per token (2 by default)
    return ModelSpec(
        name=name or str(config.get("_name_or_path") or mt),
        model_type=mt,
        architecture=arch,
        tensors=tuple(built.tensors),
        source=source,
        assumed=tuple(dict.fromkeys(reader.assumed)),
        config=dict(config) if task is None else {**config, "architectures": [arch]},
        quantization=_quantization(config, where),
        **facts,
    )


def _vlm_spec(config: Mapping[str, Any], mt: str, *, name: str | None, source: str, where: str,
              task: str | None) -> ModelSpec:
    """A vision-language model: its text model's spec (facts and tensors, renamed as the VLM class names
    them) with the vision tower's and the projector's tensors in front and the image facts in ``vlm``."""
    from dataclasses import replace

    if task not in (None, "causal-lm"):
        raise InputError(f"task={task}: {ARCHITECTURES[mt]} is modelled with its causal LM head only: drop --task")
    parts = VLM_PARTS[mt](config, where)
    text = spec_from_config(parts.text, name=name, source=source, where=f"{where} text_config")
    tower = spec_from_config(parts.vision, name=f"{name or mt} vision tower", source=source,
                             where=f"{where} vision_config")
    assert tower.vision is not None  # a CLIP or SigLIP vision config
    proj = projector_tensors(parts, tower.hidden_size, text.hidden_size).items
    # the tower's and the projector's tensors sit outside the decoder's blocks (layer None), so the
    # decoder formulas, which read the first block's linears, see the text model alone
    outside = [replace(t, name="model.vision_tower." + t.name, layer=None) for t in tower.tensors]
    outside += [replace(t, layer=None) for t in proj]
    # LLaVA-NeXT's image_newline is LlavaNextModel's own parameter: named_parameters() lists it first
    outside.sort(key=lambda t: t.name != "model.image_newline")
    renamed = [replace(t, name=rename_text(t.name)) for t in text.tensors]
    side = tower.vision.image_size // tower.vision.patch_size
    feature = side * side + (1 if tower.vision.class_token and not parts.drop_class_token else 0)
    image_tokens = parts.image_tokens if parts.image_tokens is not None else feature
    if parts.projector == "pool_norm_matmul":
        per_side = int(round(image_tokens ** 0.5))
        if per_side * per_side != image_tokens or per_side < 1 or side % per_side:
            raise ModelSourceError(f"{where}: mm_tokens_per_image={image_tokens} must be a square whose side "
                                   f"divides the {side} patches a side of the tower")
    anyres = None
    if parts.pinpoints is not None:
        anyres = AnyRes(pinpoints=parts.pinpoints, crop=tower.vision.image_size, patch=tower.vision.patch_size,
                        default_image=ANYRES_DEFAULT_IMAGE)
        image_tokens = anyres.tokens(*ANYRES_DEFAULT_IMAGE)
    vlm = VLM(tower=tower, projector=parts.projector,  # type: ignore[arg-type]
              image_tokens=image_tokens, feature_tokens=feature, image_token_id=parts.image_token_id,
              image_size=tower.vision.image_size, projector_act=parts.projector_act, text_hidden=text.hidden_size,
              anyres=anyres)
    unreached = outside_loss(parts, tower.n_layers, [t.name for t in outside if t.role != "buffer"])
    return _whole_vlm(text, tower, vlm, outside + renamed, config, name=name, where=where, model_type=mt,
                      architecture=ARCHITECTURES[mt],
                      outside_loss=tuple(rename_text(n) for n in text.outside_loss) + unreached)


def _qwen_vl_spec(config: Mapping[str, Any], *, name: str | None, source: str, where: str,
                  task: str | None) -> ModelSpec:
    """Qwen2.5-VL (families.qwen_vl): the Qwen2 text model's spec renamed under ``model.language_model``, the
    tower (merger included) under ``model.visual``, image tokens from the image's size (``VLM.dynamic``)."""
    from dataclasses import replace

    if task not in (None, "causal-lm"):
        raise InputError(f"task={task}: {qwen_vl.ARCHITECTURE} is modelled with its causal LM head only: drop --task")
    text_cfg, vision_cfg, token = qwen_vl.split(config, where)
    text = spec_from_config(text_cfg, name=name, source=source, where=f"{where} text")
    tower = spec_from_config(vision_cfg, name=f"{name or 'qwen2_5_vl'} vision tower", source=source,
                             where=f"{where} vision_config")
    assert tower.vision is not None
    dyn = qwen_vl.dynamic(vision_cfg, f"{where} vision_config")
    out_hidden = next(t.shape[0] for t in tower.tensors if t.name == "merger.mlp.2.weight")
    if out_hidden != text.hidden_size:
        raise ModelSourceError(f"{where}: vision_config.out_hidden_size={out_hidden} must equal the text model's "
                               f"hidden_size={text.hidden_size} (the merged image tokens replace text embeddings)")
    side = qwen_vl.DEFAULT_IMAGE_SIDE
    tokens = dyn.tokens(side, side)
    outside = [replace(t, name="model.visual." + t.name, layer=None) for t in tower.tensors]
    renamed = [replace(t, name=rename_text(t.name)) for t in text.tensors]
    vlm = VLM(tower=tower, projector="patch_merger", image_tokens=tokens, feature_tokens=tokens * dyn.merge ** 2,
              image_token_id=token, image_size=side, projector_act="gelu", text_hidden=text.hidden_size,
              dynamic=dyn, tower_prefix="model.visual.")
    return _whole_vlm(text, tower, vlm, outside + renamed, config, name=name, where=where,
                      model_type=qwen_vl.MODEL_TYPE, architecture=qwen_vl.ARCHITECTURE,
                      outside_loss=tuple(rename_text(n) for n in text.outside_loss))


def _llama4_vl_spec(config: Mapping[str, Any], *, name: str | None, source: str, where: str,
                    task: str | None) -> ModelSpec:
    """Llama 4 whole (families.llama4_vision): the text model's spec under ``language_model.``, the tower (its
    pixel-shuffle adapter included) under ``vision_model.``, ``multi_modal_projector.linear_1``, and image tokens
    from the tiles the processor cuts (``VLM.tiled``)."""
    from dataclasses import replace

    if task not in (None, "causal-lm"):
        raise InputError(f"task={task}: {llama4_vision.ARCHITECTURE} is modelled with its causal LM head only: "
                         "drop --task")
    text_cfg, vision_cfg, token, v_out = llama4_vision.split(config, where)
    text = spec_from_config(text_cfg, name=name, source=source, where=f"{where} text_config")
    tower = spec_from_config(vision_cfg, name=f"{name or 'llama4'} vision tower", source=source,
                             where=f"{where} vision_config")
    assert tower.vision is not None
    adapter_out = next(t.shape[0] for t in tower.tensors if t.name == "vision_adapter.mlp.fc2.weight")
    if adapter_out != v_out:
        raise ModelSourceError(f"{where}: vision_config.vision_output_dim={v_out} must equal projector_output_dim="
                               f"{adapter_out} (the projector's linear_1 reads the adapter's output)")
    tiled = TiledImages(tile=tower.vision.image_size, patch=tower.vision.patch_size)
    side = tower.vision.image_size
    outside = [replace(t, name="vision_model." + t.name, layer=None) for t in tower.tensors]
    proj = Tensors()
    proj.linear("multi_modal_projector.linear_1", text.hidden_size, v_out)  # Llama4MultiModalProjector, no bias
    outside += proj.items
    renamed = [replace(t, name="language_model." + t.name) for t in text.tensors]
    vlm = VLM(tower=tower, projector="tiles_linear", image_tokens=tiled.image_tokens(side, side),
              feature_tokens=tiled.per_tile, image_token_id=token, image_size=side, projector_act="none",
              text_hidden=text.hidden_size, tower_prefix="vision_model.", tiled=tiled)
    return _whole_vlm(text, tower, vlm, outside + renamed, config, name=name, where=where,
                      model_type=llama4_vision.MODEL_TYPE, architecture=llama4_vision.ARCHITECTURE,
                      outside_loss=tuple("language_model." + n for n in text.outside_loss))


def _whole_vlm(text: ModelSpec, tower: ModelSpec, vlm: VLM, tensors: list[TensorInfo], config: Mapping[str, Any], *,
               name: str | None, where: str, model_type: str, architecture: str,
               outside_loss: tuple[str, ...]) -> ModelSpec:
    """A vision-language model's spec: the text model's, with the tower's and projector's tensors beside its own
    (renamed under the checkpoint's prefixes by the caller), the VLM facts and both parts' assumptions."""
    from dataclasses import replace

    _check_size(tensors, where)
    return replace(text, name=name or str(config.get("_name_or_path") or model_type), model_type=model_type,
                   architecture=architecture, tensors=tuple(tensors), config=dict(config), vlm=vlm,
                   assumed=tuple(dict.fromkeys((*text.assumed, *tower.assumed))),
                   quantization=_quantization(config, where), outside_loss=outside_loss)


def with_task(spec: ModelSpec, task: str | None) -> ModelSpec:
    """``spec`` rebuilt for ``task`` (its head, inventory and head facts); ``spec`` when None or the same.

    Raises:
        InputError: the task does not apply to the model, or the spec has no config.json fields
            to rebuild it from.
    """
    if task is None or task == spec.head:
        return spec
    if not spec.config:
        raise InputError(f"task={task}: {spec.name} has no config.json fields to build its {task} head from: "
                         "pass the model's config.json or drop --task")
    if "safetensors" in spec.source:
        raise InputError(f"task={task}: {spec.name}'s inventory was read from its checkpoint ({spec.source}), "
                         f"whose head is {spec.head}: drop --task, or pass the config.json alone")
    return spec_from_config(spec.config, name=spec.name, source=spec.source, task=task)


def _check_size(tensors: list[TensorInfo], where: str) -> None:
    """Refuse an inventory whose tensors or total are beyond any real model (vramlens.limits).

    Each dimension is bounded where it is read, but their products are not: 4,096 layers of
    a 262,144-wide model with a 2M-wide MLP is 7e15 parameters.

    Raises:
        ModelSourceError: too many tensors, a tensor over MAX_TENSOR_NUMEL, or over MAX_PARAMS in all.
    """
    if len(tensors) > MAX_TENSORS:
        raise ModelSourceError(f"{where}: the config builds {len(tensors):,} tensors, over the limit of "
                               f"{MAX_TENSORS:,}: fix the config")
    total = 0
    for t in tensors:
        n = t.numel
        if n > MAX_TENSOR_NUMEL:
            raise ModelSourceError(f"{where}: tensor {t.name} of shape {show(t.shape)} is over the limit of "
                                   f"{MAX_TENSOR_NUMEL:,} elements: fix the config's dimensions")
        total += n
    if total > MAX_PARAMS:
        raise ModelSourceError(f"{where}: the config describes {show(total)} parameters, "
                               f"over the limit of {MAX_PARAMS:,} ({MAX_PARAMS // 10**12}T): "
                               f"fix the config's dimensions")


def _quantization(config: Mapping[str, Any], where: str) -> dict[str, Any] | None:
    q = config.get("quantization_config")
    if q is None:
        return None
    if not isinstance(q, dict):
        raise ModelSourceError(f"{where}: quantization_config={q!r} must be a JSON object")
    return dict(q)
