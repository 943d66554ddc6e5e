"""Hugging Face hub ids: the local cache first, then (when online) config.json and headers.

Only ``config.json`` is downloaded, and the safetensors headers are read by HTTP range
requests (``huggingface_hub.get_safetensors_metadata``): never the weights. The cache is
looked up by its folder layout (huggingface_hub/constants.py and file_download.py), so
it works without huggingface_hub installed and honours the environment at call time::

    $HF_HUB_CACHE (or $HUGGINGFACE_HUB_CACHE, or $HF_HOME/hub, or ~/.cache/huggingface/hub)
      models--{org}--{name}/refs/main            -> commit hash
      models--{org}--{name}/snapshots/{hash}/config.json, model.safetensors, ...

``HF_HUB_OFFLINE=1`` (or ``TRANSFORMERS_OFFLINE=1``) forbids the network. Otherwise one TCP
connect to the hub endpoint (``HF_ENDPOINT``, default https://huggingface.co), with a one-second
timeout and remembered for the process, decides whether huggingface_hub is called at all: an
unreachable hub then fails at once, instead of after huggingface_hub's retries (24-30 s and a
dozen warning lines on stderr).
"""

from __future__ import annotations

import os
import re
import socket
import threading
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

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


#: Seconds the reachability probe waits for a TCP connection to the hub endpoint. A healthy
#: connection to huggingface.co (a CDN) takes < 0.2 s from anywhere; 1 s leaves a 5x margin.
PROBE_TIMEOUT_S = 1.0


def hub_endpoint() -> str:
    """The hub's base URL, as huggingface_hub reads it (constants.py ``ENDPOINT``)."""
    return (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def hub_reachable() -> bool:
    """True when a TCP connection to the hub endpoint (or to the proxy the environment names
    for it) opens within PROBE_TIMEOUT_S; name resolution is bounded by the same timeout.

    The answer is remembered per endpoint for the life of the process (:func:`forget_probe`).
    """
    endpoint = hub_endpoint()
    scheme = endpoint.split(":", 1)[0].lower()
    env = os.environ
    proxy = next((env[k] for k in (f"{scheme}_proxy", f"{scheme.upper()}_PROXY", "all_proxy", "ALL_PROXY")
                  if env.get(k)), None)
    return _probe(proxy or endpoint)


@lru_cache(maxsize=8)
def _probe(url: str) -> bool:
    try:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        host = parts.hostname
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return False
    if not host:
        return False
    # getaddrinfo's answer: (family, kind, proto, canonname, address); the address's shape depends on the family
    found: list[Sequence[tuple[socket.AddressFamily, socket.SocketKind, int, str, Any]]] = []

    def resolve() -> None:  # getaddrinfo has no timeout of its own: a dead resolver would block
        try:
            found.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except (OSError, UnicodeError):
            pass

    resolver = threading.Thread(target=resolve, name="vramlens-hub-probe", daemon=True)
    resolver.start()
    resolver.join(PROBE_TIMEOUT_S)
    for family, kind, proto, _, address in found[0] if found else ():
        try:
            with socket.socket(family, kind, proto) as sock:
                sock.settimeout(PROBE_TIMEOUT_S)
                sock.connect(address)
                return True
        except OSError:
            continue
    return False


def forget_probe() -> None:
    """Forget the remembered reachability answers (tests, or a network that came back)."""
    _probe.cache_clear()


def cached_snapshot(repo_id: str, revision: str = "main") -> Path | None:
    """The cached snapshot folder of ``repo_id`` that holds a config.json, or None.

    Uses ``refs/{revision}`` when present, else the most recently modified snapshot with a
    config.json (a cache filled by ``snapshot_download(revision=<hash>)`` has no refs).
    """
    repo = hub_cache_dir() / ("models--" + repo_id.replace("/", "--"))
    ref = repo / "refs" / revision
    if ref.is_file():
        commit = _read_ref(ref)
        snap = repo / "snapshots" / commit
        if commit and (snap / "config.json").is_file():
            return snap
    snaps = [s for s in (repo / "snapshots").glob("*") if (s / "config.json").is_file()]
    if not snaps:
        return None
    return max(snaps, key=lambda s: (s / "config.json").stat().st_mtime)


def _read_ref(ref: Path) -> str:
    """The commit hash in a refs file ("" when it is not one: too long, not hex, unreadable)."""
    from vramlens.models._files import read_capped

    try:
        text = read_capped(ref, 256, "refs file").decode("ascii").strip()
    except (ModelSourceError, UnicodeDecodeError):
        return ""
    return text if re.fullmatch(r"[0-9a-fA-F]{7,64}", text) else ""


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
    if not hub_reachable():
        raise offline_error(repo_id, f"{hub_endpoint()} does not answer within {PROBE_TIMEOUT_S:g} s")
    try:
        return Path(huggingface_hub.hf_hub_download(repo_id, "config.json", cache_dir=hub_cache_dir()))
    except Exception as e:  # noqa: BLE001 - classified below; huggingface_hub's classes vary by version
        raise _classify(repo_id, e) from e


def fetch_header_tensors(repo_id: str) -> list[tuple[str, str, tuple[int, ...]]] | None:
    """(name, dtype, shape) of the repository's safetensors tensors via HTTP range reads.

    Returns None when the repository has no safetensors weights or the headers cannot be
    fetched (the config alone still gives an exact inventory for unquantized models).
    """
    if is_offline() or not hub_reachable():
        return None
    try:
        import huggingface_hub

        meta = huggingface_hub.get_safetensors_metadata(repo_id)
    except Exception:  # noqa: BLE001 - headers are an improvement, not a requirement
        return None
    from vramlens.limits import MAX_SHARDS, MAX_TENSORS
    from vramlens.models.safetensors_header import SAFETENSORS_DTYPES, header_tensors

    files = meta.files_metadata
    if len(files) > MAX_SHARDS:
        raise ModelSourceError(f"{repo_id}: the hub lists {len(files):,} safetensors files, over the limit of "
                               f"{MAX_SHARDS:,}")
    out: list[tuple[str, str, tuple[int, ...]]] = []
    for file_name, file_meta in files.items():
        header = {}
        for name, info in file_meta.tensors.items():
            if not isinstance(info.dtype, str) or info.dtype not in SAFETENSORS_DTYPES:
                return None
            header[name] = {"dtype": info.dtype, "shape": list(info.shape)}
        # the same rules as a local header: integer shapes, bounded elements
        out.extend(header_tensors(header, f"{repo_id}/{file_name}"))
        if len(out) > MAX_TENSORS:
            raise ModelSourceError(f"{repo_id}: the checkpoint holds over {MAX_TENSORS:,} tensors, the limit")
    return out


#: huggingface_hub / requests / httpx classes that mean "the hub cannot be reached". Checked
#: first: LocalEntryNotFoundError subclasses EntryNotFoundError (huggingface_hub/errors.py),
#: and it means "not cached and offline", not "the repository has no such file".
_OFFLINE = {"LocalEntryNotFoundError", "OfflineModeIsEnabled", "ConnectionError", "ConnectError",
            "ConnectTimeout", "Timeout", "TimeoutException", "ProxyError", "SSLError", "NetworkError"}


def _classify(repo_id: str, e: Exception) -> Exception:
    names = {c.__name__ for c in type(e).__mro__}
    if names & _OFFLINE:
        return offline_error(repo_id, _one_line(e))
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
    return offline_error(repo_id, _one_line(e))


def _one_line(e: Exception) -> str:
    """``Class: message`` on one line, cut at 200 characters (hub messages span several lines)."""
    text = " ".join(str(e).split())[:200]
    return f"{type(e).__name__}: {text}" if text else type(e).__name__

