"""Reading model files that may be hostile: regular files only, bounded sizes, bounded JSON.

Every model file (config.json, an index, a safetensors header, a hub ref) goes through
here, so that no input can hang the reader (a named pipe called ``config.json``), make it
read without end (a 10 GB "config"), recurse without end (``[[[[...`` 100,000 deep) or
build numbers nobody can print (a 5,000-digit integer, ``1e400``, ``NaN``).
"""

from __future__ import annotations

import json
import os
import re
import stat
from itertools import accumulate
from pathlib import Path
from typing import IO, Any

from vramlens.errors import ModelSourceError
from vramlens.limits import MAX_CONFIG_BYTES, MAX_INT_DIGITS, MAX_JSON_DEPTH


def open_regular(path: Path) -> IO[bytes]:
    """Open ``path`` for reading if, and only if, it is a regular file.

    The file is opened with O_NONBLOCK and checked with fstat on the open descriptor, so a
    FIFO or a device neither blocks the open nor gets read, and nothing can be swapped in
    between the check and the read.

    Raises:
        ModelSourceError: missing, unreadable, or not a regular file.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise ModelSourceError(f"{path}: cannot read: {e.strerror or e}") from e
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise ModelSourceError(f"{path}: not a regular file (a pipe, device or socket): "
                                   f"pass the model's config.json or its folder")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


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


# A JSON string token; the two alternatives are disjoint, so the scan is linear.
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*+"', re.DOTALL)
_BRACKETS = re.compile(rb"[\[\]{}]")
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def json_depth(data: bytes) -> int:
    """The deepest nesting of objects and arrays in ``data``, found without recursion."""
    if not any(c in data for c in (b"[", b"{")):
        return 0
    brackets = b"".join(_BRACKETS.findall(_STRING.sub(b'""', data)))
    return max(accumulate(_STEP[c] for c in brackets), default=0)


def _int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise _Refused(f"an integer of {digits:,} digits is over the limit of {MAX_INT_DIGITS} digits")
    return int(text)


def _float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _Refused(f"the number {text[:40]} is too large for a float (it reads as infinity)")
    return value


def _constant(text: str) -> Any:
    raise _Refused(f"{text} is not JSON (no NaN or Infinity in a config)")


class _Refused(ValueError):
    """A number the JSON parser hooks refuse."""


def loads_bounded(data: bytes, where: str, what: str = "JSON", *, subject: str = "") -> Any:
    """Parse JSON with bounded nesting, integer digits and finite numbers only.

    ``subject`` (``"safetensors header is "``) starts the message of a syntax error.

    Raises:
        ModelSourceError: not UTF-8, not JSON, nested deeper than MAX_JSON_DEPTH, or a
            number that is huge, infinite or NaN; the message names the file and the rule.
    """
    depth = json_depth(data)
    if depth > MAX_JSON_DEPTH:
        raise ModelSourceError(f"{where}: {what} nests {depth:,} levels deep, over the limit of "
                               f"{MAX_JSON_DEPTH}: this is not a model file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        if subject:
            raise ModelSourceError(f"{where}: {subject}not valid JSON: {e}") from e
        raise ModelSourceError(f"{where}: not UTF-8 text: {e}") from e
    try:
        return json.loads(text, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except _Refused as e:
        raise ModelSourceError(f"{where}: {e}: fix the {what}") from None
    except json.JSONDecodeError as e:
        if subject:
            raise ModelSourceError(f"{where}: {subject}not valid JSON: {e}") from e
        raise ModelSourceError(f"{where}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from e
    except RecursionError:  # the depth scan makes this unreachable; kept as a last guard
        raise ModelSourceError(f"{where}: {what} nests too deep: this is not a model file") from None


def read_json_object(path: Path, *, limit: int = MAX_CONFIG_BYTES, what: str = "config.json") -> dict[str, Any]:
    """A JSON object from a regular file of at most ``limit`` bytes, parsed with bounds.

    Raises:
        ModelSourceError: unreadable, too large, not bounded JSON, or not an object.
    """
    data = loads_bounded(read_capped(path, limit, what), str(path), what)
    if not isinstance(data, dict):
        raise ModelSourceError(f"{path}: must hold a JSON object, not {type(data).__name__}")
    return data
