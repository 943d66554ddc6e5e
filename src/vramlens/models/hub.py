"""Hugging Face hub ids: the local cache first, then (when online) config.json and headers.

Only ``config.json`` is downloaded, and the safetensors headers are read by HTTP range
requests (``huggingface_hub.get_safetensors_metadata``): never the weights. The cache is
looked up by its folder layout (huggingface_hub/constants.py and file_download.py), so
it works without huggingface_hub installed and honours the environment at call time::

    $HF_HUB_CACHE (or $HUGGINGFACE_HUB_CACHE, or $HF_HOME/hub, or ~/.cache/huggingface/hub)
      models--{org}--{name}/refs/main            -> commit hash
      models--{org}--{name}/snapshots/{hash}/config.json, model.safetensors, ...

``HF_HUB_OFFLINE=1`` (or ``TRANSFORMERS_OFFLINE=1``) forbids the network.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from vramlens.errors import ModelSourceError, OfflineError

#: What a hub repository id looks like (huggingface_hub validate_repo_id: "org/name").
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*/[A-Za-z0-9_.\-]+$")

_TRUE = {"1", "ON", "YES", "TRUE"}  # huggingface_hub/constants.py _is_true


def is_hub_id(name: str) -> bool:
    return bool(HUB_ID.match(name)) and ".." not in name and not name.endswith(".json")


def hub_cache_dir() -> Path:
    """The hub cache folder, resolved from the environment as huggingface_hub does."""
    env = os.environ
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"]).expanduser()
    if env.get("HUGGINGFACE_HUB_CACHE"):
        return Path(env["HUGGINGFACE_HUB_CACHE"]).expanduser()
    if env.get("HF_HOME"):
        home = Path(env["HF_HOME"]).expanduser()
    else:
        home = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "huggingface"
    return home / "hub"


def is_offline() -> bool:
    env = os.environ
    return any(env.get(k, "").strip().upper() in _TRUE for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def cached_snapshot(repo_id: str, revision: str = "main") -> Path | None:
    """The cached snapshot folder of ``repo_id`` that holds a config.json, or None.

    Uses ``refs/{revision}`` when present, else the most recently modified snapshot with a
    config.json (a cache filled by ``snapshot_download(revision=<hash>)`` has no refs).
    """
    repo = hub_cache_dir() / ("models--" + repo_id.replace("/", "--"))
    ref = repo / "refs" / revision
    if ref.is_file():
        commit = ref.read_text().strip()
        snap = repo / "snapshots" / commit
        if (snap / "config.json").is_file():
            return snap
    snaps = [s for s in (repo / "snapshots").glob("*") if (s / "config.json").is_file()]
    if not snaps:
        return None
    return max(snaps, key=lambda s: (s / "config.json").stat().st_mtime)


def offline_error(repo_id: str, why: str = "") -> OfflineError:
    """The error for a hub id that is not cached while the hub cannot be reached (``why``)."""
    return OfflineError(
        f"cannot reach the Hugging Face hub for {repo_id!r} and it is not in the local cache: "
        f"use a catalog name (vramlens models), a local config.json / model folder, or go online"
        + (f" ({why})" if why else "")
    )


def fetch_config(repo_id: str) -> Path:
    """Download ``config.json`` of ``repo_id`` into the hub cache and return its path.

    Raises:
        OfflineError: offline, huggingface_hub missing, or the hub unreachable.
        ModelSourceError: the repository is gated or has no config.json.
        LookupError: the hub has no such repository (the caller turns it into UnknownModelError).
    """
    if is_offline():
        raise offline_error(repo_id, "HF_HUB_OFFLINE is set")
    try:
        import huggingface_hub
    except ImportError:
        raise offline_error(repo_id, "huggingface_hub is not installed: pip install 'vramlens[trace]'") from None
    try:
        return Path(huggingface_hub.hf_hub_download(repo_id, "config.json", cache_dir=hub_cache_dir()))
    except Exception as e:  # noqa: BLE001 - classified below; huggingface_hub's classes vary by version
        raise _classify(repo_id, e) from e


def fetch_header_tensors(repo_id: str) -> list[tuple[str, str, tuple[int, ...]]] | None:
    """(name, dtype, shape) of the repository's safetensors tensors via HTTP range reads.

    Returns None when the repository has no safetensors weights or the headers cannot be
    fetched (the config alone still gives an exact inventory for unquantized models).
    """
    if is_offline():
        return None
    try:
        import huggingface_hub

        meta = huggingface_hub.get_safetensors_metadata(repo_id)
    except Exception:  # noqa: BLE001 - headers are an improvement, not a requirement
        return None
    from vramlens.models.safetensors_header import SAFETENSORS_DTYPES

    out = []
    for file_meta in meta.files_metadata.values():
        for name, info in file_meta.tensors.items():
            if info.dtype not in SAFETENSORS_DTYPES:
                return None
            out.append((name, SAFETENSORS_DTYPES[info.dtype], tuple(info.shape)))
    return out


def _classify(repo_id: str, e: Exception) -> Exception:
    names = {c.__name__ for c in type(e).__mro__}
    if "GatedRepoError" in names:
        return ModelSourceError(
            f"{repo_id}: the hub repository is gated: accept its license on huggingface.co and log in "
            f"(hf auth login), or use a catalog name or a local config.json"
        )
    if names & {"RepositoryNotFoundError", "RevisionNotFoundError"}:
        return LookupError(repo_id)
    if names & {"EntryNotFoundError", "RemoteEntryNotFoundError"}:
        return ModelSourceError(f"{repo_id}: the hub repository has no config.json: "
                                f"it is not a transformers model; pass a local config.json")
    return offline_error(repo_id, f"{type(e).__name__}: {str(e)[:200]}" if str(e) else type(e).__name__)

