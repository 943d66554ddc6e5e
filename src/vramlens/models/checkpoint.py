"""Merge a checkpoint's real tensors (from safetensors headers) into a config-built spec.

The config gives the architecture and the names transformers will load into; the
checkpoint gives what is really stored: dtypes and shapes, including quantized layouts
the config alone cannot predict exactly. Rules:

- A checkpoint tensor is matched to the config inventory by name, allowing the base-model
  prefix to be present or absent (GPT-2 checkpoints say ``h.0...``, the LM head model
  ``transformer.h.0...``): the loaded name is the config's.
- Quantized layers keep their stored tensors with their real dtypes, anchored to the
  linear they replace (``logical_shape`` = that linear's (out, in)): GPTQ/AWQ ``qweight``
  ``qzeros`` ``scales`` ``g_idx``; bitsandbytes 4-bit ``weight`` (uint8) with ``absmax``
  ``quant_map`` ``nested_*`` ``quant_state.*``; bitsandbytes 8-bit ``SCB``; fp8
  ``weight_scale(_inv)``/``input_scale``.
- Floating tensors of ordinary layers get dtype None (they follow the run's dtype).
- Config tensors the file lacks (non-persistent buffers such as ``inv_freq``, a tied
  ``lm_head``) come from the config; a tied copy stored in the file is counted once;
  other file tensors unknown to the layout are ignored, as transformers ignores unexpected
  keys, except for a generic (unknown model_type) spec, where they are kept.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from vramlens.errors import ModelSourceError
from vramlens.models._tensors import layer_index, leaf_module
from vramlens.models.families import BUILDERS
from vramlens.models.spec import ModelSpec, Role, TensorInfo

#: Suffixes of the tensors a quantized linear stores instead of (or beside) ``weight``.
QUANT_SUFFIXES = (
    # GPTQ / AWQ QuantLinear (auto_gptq, gptqmodel, autoawq): packed int32 weights and zeros
    ".qweight", ".qzeros", ".scales", ".g_idx",
    # bitsandbytes Params4bit.quant_state serialized by transformers (bnb_4bit)
    ".weight.absmax", ".weight.quant_map", ".weight.nested_absmax", ".weight.nested_quant_map",
    ".weight.quant_state.bitsandbytes__nf4", ".weight.quant_state.bitsandbytes__fp4",
    # bitsandbytes Int8Params (bnb_8bit): per-row scales
    ".SCB", ".weight_format",
    # fp8 checkpoints (FineGrainedFP8, compressed-tensors, fbgemm)
    ".weight_scale_inv", ".weight_scale", ".input_scale",
)
_FLOATS = ("fp64", "fp32", "fp16", "bf16")
_BASE_PREFIXES = ("model.decoder.", "model.", "transformer.", "bert.", "roberta.", "gpt_neox.")


def _quant_suffix(name: str) -> str | None:
    for s in QUANT_SUFFIXES:
        if name.endswith(s):
            return s
    return None


class _Resolver:
    """Finds the config tensor a checkpoint name loads into."""

    def __init__(self, spec: ModelSpec):
        self.cfg = {t.name: t for t in spec.tensors}
        self.prefixes = [p for p in _BASE_PREFIXES if any(n.startswith(p) for n in self.cfg)]

    def __call__(self, name: str) -> str | None:
        if name in self.cfg:
            return name
        for p in self.prefixes:
            if p + name in self.cfg:
                return p + name
        if "." in name:
            rest = name.split(".", 1)[1]
            if rest in self.cfg:
                return rest
        return None


def _guess_role(name: str, shape: tuple[int, ...]) -> Role:
    """Role of a tensor known only by name and shape (generic specs)."""
    low = name.lower()
    if "lm_head" in low or low.startswith("embed_out"):
        return "lm_head"
    if low.endswith(".bias"):
        return "norm" if "norm" in low or ".ln" in low else "bias"
    if "norm" in low or ".ln_" in low or "layernorm" in low:
        return "norm"
    if "embed" in low or low.endswith("wte.weight"):
        return "position_embedding" if "pos" in low else "embedding"
    if "experts" in low:
        return "expert"
    if len(shape) == 2:
        return "linear"
    return "other"


def merge_checkpoint(spec: ModelSpec, tensors: Iterable[tuple[str, str, tuple[int, ...]]],
                     where: str, source: str = "safetensors") -> ModelSpec:
    """Replace ``spec.tensors`` by what the checkpoint really stores (see the module docstring).

    Args:
        spec: the spec built from the checkpoint's config.json.
        tensors: (name, vramlens dtype, shape) from the safetensors headers.
        where: the checkpoint's path or id, for messages.
        source: the resulting spec's ``source``.

    Raises:
        ModelSourceError: no tensor of the checkpoint matches the config's layout.
    """
    resolve = _Resolver(spec)
    cfg = resolve.cfg
    generic = spec.model_type not in BUILDERS
    groups: dict[str, list[TensorInfo]] = {}
    quantized: set[str] = set()
    loose_bias: dict[str, TensorInfo] = {}
    extras: list[TensorInfo] = []
    mismatched: list[str] = []
    n_in = 0
    float_elems: dict[str, int] = {}
    for name, dtype, shape in tensors:
        n_in += 1
        if dtype in _FLOATS:
            float_elems[dtype] = float_elems.get(dtype, 0) + _numel(shape)
        fixed = None if dtype in _FLOATS else dtype
        target = resolve(name)
        if target is not None:
            c = cfg[target]
            logical = None
            if fixed is not None and c.role != "buffer":  # int8 / uint8 / fp8 weight: quantized
                quantized.add(target)
                logical = (c.out_features, c.in_features) if len(c.shape) == 2 else c.shape
            elif shape != c.shape:
                mismatched.append(f"{target} {shape} vs {c.shape}")
            role = "linear" if logical is not None and c.role == "conv1d" else c.role
            groups.setdefault(target, []).append(dataclasses.replace(
                c, shape=shape, dtype=fixed if c.role != "buffer" else (fixed or c.dtype),
                role=role, logical_shape=logical if logical != shape else None))
            continue
        suffix = _quant_suffix(name)
        base = name[: -len(suffix)] if suffix else None
        anchor = resolve(base + ".weight") if base else None
        if anchor is not None and suffix:  # suffix is set whenever anchor is
            a = cfg[anchor]
            quantized.add(anchor)
            loaded = anchor[: -len(".weight")] + suffix
            is_weight = suffix == ".qweight"
            groups.setdefault(anchor, []).append(TensorInfo(
                name=loaded, shape=shape,
                role=("linear" if a.role == "conv1d" else a.role) if is_weight else "other",
                module=a.module, layer=a.layer, dtype=dtype, stack=a.stack,
                logical_shape=(a.out_features, a.in_features) if is_weight and len(a.shape) == 2 else None,
            ))
            continue
        if name.endswith(".bias"):
            anchor = resolve(name[: -len(".bias")] + ".weight")
            if anchor is not None:  # kept only if its linear turns out to be quantized
                a = cfg[anchor]
                loose_bias[anchor] = TensorInfo(anchor[: -len(".weight")] + ".bias", shape, "bias",
                                                a.module, a.layer, fixed, a.stack)
                continue
        extras.append(TensorInfo(name, shape, _guess_role(name, shape), leaf_module(name),
                                 layer_index(name), fixed))

    if n_in and not groups and not generic:
        example = extras[0].name if extras else "?"
        raise ModelSourceError(
            f"{where}: no checkpoint tensor matches the {spec.architecture} layout of config.json "
            f"(e.g. {example!r}): the config and the weights describe different models"
        )
    out: list[TensorInfo] = []
    missing: list[str] = []
    for c in spec.tensors:
        if c.name in groups:
            out.extend(groups[c.name])
            if c.name in quantized and c.name in loose_bias:  # QuantLinear always has a bias
                out.append(loose_bias.pop(c.name))
        else:
            out.append(c)
            if c.role != "buffer":
                missing.append(c.name)
    extras.extend(loose_bias.values())
    notes = list(spec.assumed)
    if mismatched:
        notes.append(f"checkpoint shapes differ from config.json for {len(mismatched)} tensors "
                     f"(e.g. {mismatched[0]}): used the checkpoint's")
    tied_copy = [t for t in extras if t.name.split(".")[-2:] == ["lm_head", "weight"]
                 or t.name.endswith("decoder.weight")]
    if tied_copy and spec.tied_embeddings:
        extras = [t for t in extras if t not in tied_copy]
        notes.append(f"{tied_copy[0].name} in the checkpoint is tied to the input embedding: counted once")
    if missing and n_in:
        notes.append(f"{len(missing)} parameters are not in the checkpoint (e.g. {missing[0]}): "
                     f"taken from config.json")
    if extras:
        if generic:
            out.extend(extras)
            notes.append(f"{len(extras)} checkpoint tensors kept with guessed roles (e.g. {extras[0].name})")
        else:
            notes.append(f"{len(extras)} checkpoint tensors are not part of the {spec.architecture} layout "
                         f"and are not loaded by transformers (e.g. {extras[0].name}): ignored")
    # config.json without torch_dtype: the checkpoint's dominant float dtype is what it loads as
    # with torch_dtype="auto"
    auto_dtype = spec.torch_dtype or (max(float_elems, key=float_elems.__getitem__) if float_elems else None)
    return dataclasses.replace(spec, tensors=tuple(out), source=source, torch_dtype=auto_dtype,
                               assumed=tuple(dict.fromkeys(notes)))


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
