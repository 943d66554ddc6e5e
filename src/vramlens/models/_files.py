"""Model files that may be hostile, read through :mod:`vramlens.safe_io` with the models' own messages.

Every model file (config.json, an index, a safetensors header, a hub ref) goes through here;
safe_io does the bounded opening and parsing, this module names the file and the fix.
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import IO, Any

from vramlens import safe_io
from vramlens.errors import ModelSourceError
from vramlens.limits import MAX_CONFIG_BYTES


def open_regular(path: Path) -> IO[bytes]:
    """Open ``path`` for reading if, and only if, it is a regular file (see safe_io.open_regular).

    Raises:
        ModelSourceError: missing, unreadable, or not a regular file.
    """
    try:
        f, _size = safe_io.open_regular(path)
    except OSError as e:
        if e.errno == errno.EINVAL and e.strerror == safe_io.NOT_REGULAR:
            raise ModelSourceError(f"{path}: not a regular file (a pipe, device or socket): "
                                   f"pass the model's config.json or its folder") from None
        raise ModelSourceError(f"{path}: cannot read: {e.strerror or e}") from e
    return f


def read_capped(path: Path, limit: int, what: str) -> bytes:
    """The bytes of a regular file, refusing one longer than ``limit`` (reads at most limit + 1).

    Raises:
        ModelSourceError: not a regular readable file, or over the limit.
    """
    with open_regular(path) as f:
        try:
            data = f.read(limit + 1)
        except OSError as e:
            raise ModelSourceError(f"{path}: cannot read: {e.strerror or e}") from e
    if len(data) > limit:
        raise ModelSourceError(f"{path}: {what} is over the limit of {limit:,} bytes: "
                               f"this is not a {what} (real ones are a few KiB)")
    return data


def loads_bounded(data: bytes, where: str, what: str = "JSON", *, subject: str = "") -> Any:
    """Parse JSON with bounded nesting, integer digits and finite numbers only (safe_io.loads_bounded).

    ``subject`` (``"safetensors header is "``) starts the message of a syntax error.

    Raises:
        ModelSourceError: not UTF-8, not JSON, nested too deep, or a number that is huge, infinite
            or NaN; the message names the file and the rule.
    """
    try:
        return safe_io.loads_bounded(data)
    except safe_io.UnsafeJSON as e:
        if e.kind == "depth":
            raise ModelSourceError(f"{where}: {what} {str(e).removeprefix('it ')}: this is not a model file") from None
        if e.kind == "number":
            raise ModelSourceError(f"{where}: {e}: fix the {what}") from None
        if subject:
            raise ModelSourceError(f"{where}: {subject}not valid JSON: {e.detail}") from None
        raise ModelSourceError(f"{where}: {e}") from None


def read_json_object(path: Path, *, limit: int = MAX_CONFIG_BYTES, what: str = "config.json") -> dict[str, Any]:
    """A JSON object from a regular file of at most ``limit`` bytes, parsed with bounds.

    Raises:
        ModelSourceError: unreadable, too large, not bounded JSON, or not an object.
    """
    data = loads_bounded(read_capped(path, limit, what), str(path), what)
    if not isinstance(data, dict):
        raise ModelSourceError(f"{path}: must hold a JSON object, not {type(data).__name__}")
    return data
