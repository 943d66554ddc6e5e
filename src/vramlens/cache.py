"""vramlens' folder on disk and a small cache of JSON values in it, each keyed by a hash of what made it.

The folder is ``$VRAMLENS_HOME``, by default ``$XDG_CACHE_HOME/vramlens`` (``~/.cache/vramlens``);
the runs database lives there too (:mod:`vramlens.monitor.runs`). A cached value is the file
``<home>/<kind>/<key>.json`` holding ``{"key": key, "value": ...}``; it is written whole to a
temporary file and renamed, so a reader sees the old file or the new one, never half of one.
A file that cannot be read, is not JSON or holds another key is a miss with a note, never an error:
the caller computes the value again and overwrites it.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vramlens.safe_io import UnsafeJSON, loads_bounded, read_capped

#: Largest cache file read back (a traced profile of a 1,000-block model is a few MiB).
MAX_CACHE_FILE_BYTES = 64 * 1024 * 1024


def home() -> Path:
    """The folder vramlens keeps its files in (``VRAMLENS_HOME`` overrides)."""
    env = os.environ.get("VRAMLENS_HOME")
    if env:
        return Path(env).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "vramlens"


def key_of(value: Any) -> str:
    """A hex SHA-256 of ``value`` as canonical JSON (sorted keys, no spaces): equal values, equal keys."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def path_of(kind: str, key: str) -> Path:
    """Where the value of ``key`` among the ``kind`` values lives."""
    return home() / kind / f"{key}.json"


def shown(kind: str, key: str) -> str:
    """How notes name a cache file: under ``$VRAMLENS_HOME``, so a note the web page shows names no
    folder of the server."""
    return f"$VRAMLENS_HOME/{kind}/{key}.json"


@dataclass(frozen=True, slots=True)
class Lookup:
    """What a cache read found: the value (None on a miss) and, for a file that was unusable, why."""

    value: dict[str, Any] | None
    note: str = ""


def read(kind: str, key: str) -> Lookup:
    """The cached value of ``key``, or a miss (with a note when a file was there but unusable)."""
    path, name = path_of(kind, key), shown(kind, key)
    try:
        data = read_capped(path, MAX_CACHE_FILE_BYTES)
    except FileNotFoundError:
        return Lookup(None)
    except OSError as e:
        return Lookup(None, f"cache file {name} ignored ({e.strerror or e})")
    if len(data) > MAX_CACHE_FILE_BYTES:
        return Lookup(None, f"cache file {name} ignored (over {MAX_CACHE_FILE_BYTES:,} bytes)")
    try:
        doc = loads_bounded(data)
    except (UnsafeJSON, ValueError) as e:
        return Lookup(None, f"cache file {name} ignored ({e})")
    if not isinstance(doc, dict) or doc.get("key") != key or not isinstance(doc.get("value"), dict):
        return Lookup(None, f"cache file {name} ignored (not a vramlens cache entry for this key)")
    return Lookup(doc["value"])


def write(kind: str, key: str, value: dict[str, Any]) -> str:
    """Store ``value`` under ``key``; returns "" or, when the folder is not writable, a note saying so."""
    path = path_of(kind, key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump({"key": key, "value": value}, f, separators=(",", ":"))
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as e:
        return (f"not cached: $VRAMLENS_HOME/{kind} cannot be written ({e.strerror or type(e).__name__}); "
                "set VRAMLENS_HOME to a writable folder")
    return ""


__all__ = ["Lookup", "MAX_CACHE_FILE_BYTES", "home", "key_of", "path_of", "read", "shown", "write"]
