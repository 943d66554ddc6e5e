"""The front door: any model source -> ModelSpec.

Sources, in the order they are tried for a string:

1. an existing local path: a ``config.json`` file, or a model folder holding one (with
   safetensors weights, the inventory comes from their headers: real dtypes and shapes,
   quantized layouts included);
2. a catalog name (hub id or alias, any case);
3. a hub id ``org/name``: the local Hugging Face cache, then the hub when online
   (config.json and safetensors headers only).

Specs are cached: a catalog or hub name is built once per process, a local path once per
modification time of its files, so a repeated estimate costs a dictionary lookup.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from vramlens.errors import InputError, ModelSourceError, UnknownModelError
from vramlens.limits import MAX_MODEL_ARG, show
from vramlens.models import hub
from vramlens.models.catalog import catalog_spec, closest_names, unknown_model_error
from vramlens.models.checkpoint import merge_checkpoint
from vramlens.models.generic import generic_spec
from vramlens.models.inventory import spec_from_config
from vramlens.models.safetensors_header import checkpoint_tensors, read_json
from vramlens.models.spec import ModelSpec


def load_model(
    source: str | os.PathLike[str] | Mapping[str, Any] | ModelSpec | None = None,
    *,
    params: str | int | None = None,
) -> ModelSpec:
    """Turn a model source into a ModelSpec with an exact tensor inventory.

    Args:
        source: a catalog name (``"llama-2-7b"``), a hub id (``"org/name"``), a local
            ``config.json`` or model folder, a parsed config dict, or a ModelSpec (returned
            as is). None with ``params`` builds a generic decoder.
        params: a size such as ``"7B"`` for a generic Llama-style decoder (only without
            ``source``).

    Returns:
        The spec. ``assumed`` lists anything that was not read from the source.

    Raises:
        UnknownModelError: a name that is no path, catalog entry or hub repository.
        ModelSourceError: a config or checkpoint that is malformed or inconsistent.
        OfflineError: a hub id that is not cached while the hub cannot be reached.
        InputError: neither or both of ``source`` and ``params``.
    """
    if source is None:
        if params is None:
            raise InputError("no model given: pass a catalog name, a config.json or model folder, "
                             "a hub id, or params such as '7B'")
        if isinstance(params, bool) or not isinstance(params, (str, int)):  # generic_spec's cache hashes it
            raise InputError(f"params={show(params)} is not a size: give a count such as '7B' or 7_000_000_000")
        return generic_spec(params)
    if params is not None:
        raise InputError(f"give a model or params, not both (model={show(source)}, params={show(params)}): "
                         f"params builds a generic decoder when no model is known")
    if isinstance(source, ModelSpec):
        return source
    if isinstance(source, Mapping):
        return spec_from_config(source, source="config")
    if isinstance(source, os.PathLike):
        source = os.fspath(source)
    if not isinstance(source, str):
        raise InputError(f"model={show(source)} is not a name, a path, a config dict or a ModelSpec")
    name = source.strip()
    if not name:
        raise InputError("model='' is empty: pass a catalog name, a path or a hub id")
    if len(name) > MAX_MODEL_ARG:
        raise InputError(f"model={show(name)} is {len(name):,} characters, over the limit of {MAX_MODEL_ARG:,}: "
                         f"pass a catalog name, a hub id or a shorter path")
    try:
        path = Path(name).expanduser()
        if not path.exists() and (name.endswith(".json") or name.startswith(("./", "../", "/", "~"))):
            raise ModelSourceError(f"no such file or folder: {name!r}: pass an existing config.json or model "
                                   "folder, a catalog name (vramlens models) or a hub id")
        if path.is_file() or (path / "config.json").is_file():
            return _load_path_cached(str(path.resolve()), _stamp(path))
        is_dir = path.is_dir()
        if not is_dir and path.exists():  # a pipe, device or socket: never opened
            raise ModelSourceError(f"{path}: not a regular file (a pipe, device or socket): pass the model's "
                                   f"config.json or its folder")
    except (OSError, ValueError, RuntimeError) as e:  # name too long, permission denied, NUL byte, loop
        if isinstance(e, InputError):
            raise
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise ModelSourceError(f"model={show(name)} cannot be looked up as a path ({why}): pass an existing "
                               f"config.json or model folder, a catalog name (vramlens models) or a hub id") from None
    if is_dir and catalog_spec(name) is None and not hub.is_hub_id(name):
        return load_path(path)  # a folder without config.json: say so
    return _load_name(name.lower(), name)


@lru_cache(maxsize=512)
def _load_name(key: str, name: str) -> ModelSpec:
    spec = catalog_spec(name)
    if spec is not None:
        return spec
    if hub.is_hub_id(name):
        return load_hub(name)
    raise unknown_model_error(name)


def _stamp(path: Path) -> tuple[float, ...]:
    """Modification times of the files a path's spec depends on (the cache key)."""
    files = [path] if path.is_file() else [path / "config.json", *sorted(path.glob("*.safetensors*"))]
    return tuple(f.stat().st_mtime_ns for f in files if f.exists())


@lru_cache(maxsize=64)
def _load_path_cached(path: str, stamp: tuple[float, ...]) -> ModelSpec:
    return load_path(path)


def load_path(path: str | os.PathLike[str]) -> ModelSpec:
    """A spec from a local ``config.json`` file or a model folder.

    A folder's safetensors weights (``model.safetensors``, or shards listed in
    ``*.safetensors.index.json``) give the real tensors; a ``quantize_config.json``
    (AutoGPTQ) stands in for a missing ``quantization_config``.

    Raises:
        ModelSourceError: no config.json, or a file that cannot be used.
    """
    p = Path(path)
    if p.is_file():
        if p.name.endswith(".safetensors"):
            folder = p.parent
            if not (folder / "config.json").is_file():
                raise ModelSourceError(f"{p}: a safetensors file needs the config.json of its folder, "
                                       f"and {folder} has none")
            return load_path(folder)
        config = read_json(p)
        return spec_from_config(config, name=_name_of(config, p.parent), source="config.json", where=str(p))
    if not p.is_dir():
        raise ModelSourceError(f"{p}: not a file or folder")
    cfg_path = p / "config.json"
    if not cfg_path.is_file():
        raise ModelSourceError(f"{p}: no config.json in this folder: pass the folder of a transformers "
                               f"model (save_pretrained writes config.json) or a config.json file")
    return _spec_from_folder(p, _name_of(read_json(cfg_path), p), "folder")


def _spec_from_folder(folder: Path, name: str, source: str) -> ModelSpec:
    config = read_json(folder / "config.json")
    if "quantization_config" not in config and (folder / "quantize_config.json").is_file():
        config = {**config, "quantization_config": read_json(folder / "quantize_config.json")}
    spec = spec_from_config(config, name=name, source=source, where=str(folder / "config.json"))
    tensors = checkpoint_tensors(folder)
    if tensors is None:
        return spec
    return merge_checkpoint(spec, tensors, where=str(folder), source=f"{source}+safetensors")


def _name_of(config: Mapping[str, Any], folder: Path) -> str:
    given = config.get("_name_or_path")
    return given if isinstance(given, str) and given and not os.path.isabs(given) else folder.name


def load_hub(repo_id: str) -> ModelSpec:
    """A spec for a hub repository: the local cache first, then the hub (config + headers).

    Raises:
        OfflineError: not cached and the hub cannot be reached.
        UnknownModelError: the hub has no such repository.
        ModelSourceError: the repository is gated, or its config is unusable.
    """
    snap = hub.cached_snapshot(repo_id)
    if snap is not None:
        return _spec_from_folder(snap, repo_id, "hub-cache")
    try:
        cfg_path = hub.fetch_config(repo_id)
    except LookupError:
        close = closest_names(repo_id)
        raise UnknownModelError(
            f"unknown model {repo_id!r}: the hub has no such repository (or it is private: log in with "
            f"hf auth login)" + (f"; closest catalog names: {', '.join(close)}" if close else "")
        ) from None
    config = read_json(cfg_path)
    spec = spec_from_config(config, name=repo_id, source="hub", where=f"{repo_id}/config.json")
    tensors = hub.fetch_header_tensors(repo_id)
    if tensors is None:
        return spec
    return merge_checkpoint(spec, tensors, where=repo_id, source="hub+safetensors")
