"""The built-in model catalog: real checkpoints stored as their published config.json.

``data/catalog.json`` lists each model's hub id, short aliases and the config.json fields
as published on the Hugging Face hub (``source`` names where an entry's fields were read); the inventory is computed from them like from any
other config (no numbers typed twice). Lookup is case-insensitive on the hub id, the
part after the slash, and the aliases.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from vramlens.errors import UnknownModelError
from vramlens.models.inventory import spec_from_config
from vramlens.models.spec import ModelKind, ModelSpec


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """One catalog model as listed by :func:`list_catalog`."""

    id: str
    aliases: tuple[str, ...]
    family: str
    params: int
    kind: ModelKind
    note: str | None = None
    source: str | None = None


@lru_cache(maxsize=1)
def _raw_entries() -> tuple[dict[str, Any], ...]:
    text = resources.files("vramlens.models").joinpath("data").joinpath("catalog.json").read_text("utf-8")
    return tuple(json.loads(text)["models"])


@lru_cache(maxsize=1)
def _index() -> dict[str, int]:
    """Lower-cased name -> entry position, for the id, its basename and every alias."""
    index: dict[str, int] = {}
    for i, e in enumerate(_raw_entries()):
        for name in (e["id"], e["id"].rsplit("/", 1)[-1], *e.get("aliases", ()), *e.get("multimodal_aliases", ())):
            index.setdefault(name.lower(), i)
    return index


@lru_cache(maxsize=1)
def _multimodal_names() -> frozenset[str]:
    """Lower-cased names that build an entry's whole vision-language model (``multimodal_aliases``: Gemma 3's
    checkpoints, whose plain names count the text model alone)."""
    return frozenset(a.lower() for e in _raw_entries() for a in e.get("multimodal_aliases", ()))


#: model_type values whose transformers class is a vision-language model built whole (image tower included)
VLM_MODEL_TYPES = frozenset({"llava", "llava_next", "qwen2_5_vl"})


@lru_cache(maxsize=1)
def vlm_names() -> tuple[str, ...]:
    """The first name users type for each catalog entry that takes ``--images``: the first alias of a
    vision-language entry, or its first multimodal alias (Gemma 3's ``-vision`` names)."""
    out: list[str] = []
    for e in _raw_entries():
        if e.get("multimodal_aliases"):
            out.append(e["multimodal_aliases"][0])
        elif e["config"].get("model_type") in VLM_MODEL_TYPES and "vision_config" in e["config"]:
            out.append((e.get("aliases") or [e["id"]])[0])
    return tuple(out)


def catalog_names() -> tuple[str, ...]:
    """Every name the catalog answers to (ids and aliases), as written in the catalog."""
    names: list[str] = []
    for e in _raw_entries():
        names.append(e["id"])
        names.extend(e.get("aliases", ()))
        names.extend(e.get("multimodal_aliases", ()))
    return tuple(names)


def find_config(name: str) -> tuple[str, dict[str, Any]] | None:
    """(hub id, config.json dict) of a catalog name, or None when it is not in the catalog."""
    i = _index().get(name.strip().lower())
    if i is None:
        return None
    e = _raw_entries()[i]
    return e["id"], dict(e["config"])


@lru_cache(maxsize=None)
def _catalog_spec(position: int, multimodal: bool = False) -> ModelSpec:
    e = _raw_entries()[position]
    return spec_from_config(e["config"], name=e["id"] + (" (multimodal)" if multimodal else ""), source="catalog",
                            where=f"catalog entry {e['id']}", multimodal=multimodal)


def catalog_spec(name: str) -> ModelSpec | None:
    """The ModelSpec of a catalog name (built once, then cached), or None if unknown; a multimodal alias
    builds the entry's whole vision-language model."""
    key = name.strip().lower()
    i = _index().get(key)
    return None if i is None else _catalog_spec(i, key in _multimodal_names())


def whole_checkpoint_spec(name: str) -> ModelSpec | None:
    """The whole vision-language build of a catalog name whose plain build counts the text model alone
    (an entry with ``multimodal_aliases``: Gemma 3, Llama 4), as an engine that loads the checkpoint's
    own architecture holds it; None for any other name (not in the catalog, or already whole)."""
    i = _index().get(name.strip().lower())
    if i is None or not _raw_entries()[i].get("multimodal_aliases"):
        return None
    return _catalog_spec(i, True)


@lru_cache(maxsize=1)
def list_catalog() -> tuple[CatalogEntry, ...]:
    """Every catalog model with its computed parameter count, in catalog order."""
    out = []
    for i, e in enumerate(_raw_entries()):
        spec = _catalog_spec(i)
        out.append(CatalogEntry(
            id=e["id"],
            aliases=tuple(e.get("aliases", ())),
            family=e.get("family", spec.model_type),
            params=spec.params,
            kind=spec.kind,
            note=e.get("note"),
            source=e.get("source"),
        ))
    return tuple(out)


def closest_names(name: str, n: int = 5) -> list[str]:
    """Catalog names closest to ``name`` (difflib ratio), best first, aliases preferred."""
    by_lower: dict[str, str] = {}
    for e in _raw_entries():
        for alias in e.get("aliases", ()):
            by_lower.setdefault(alias.lower(), alias)
    for e in _raw_entries():
        by_lower.setdefault(e["id"].lower(), e["id"])
    matches = difflib.get_close_matches(name.strip().lower(), list(by_lower), n=n, cutoff=0.6)
    return [by_lower[m] for m in matches]


def unknown_model_error(name: str) -> UnknownModelError:
    """The error for a name that is no catalog entry, local path or reachable hub id."""
    close = closest_names(name)
    where = (f"closest catalog names: {', '.join(close)}" if close
             else "no catalog name is close (vramlens models lists them)")
    return UnknownModelError(
        f"unknown model {name!r}: {where}; or pass a local config.json / model folder, "
        f"or a hub id when online"
    )
