"""Reading files and text that may be hostile: the one home for it.

Every reader of untrusted input (config.json and safetensors headers in ``models``, snapshots and
memory_stats in ``allocator``, GGUF files, the config text pasted into the web page) opens and parses
through here, so that no input can hang a reader (a named pipe called ``config.json``), make it read
without end (a 10 GB "config"), recurse without end (``[[[[...`` 100,000 deep) or build numbers
nobody can print (a 5,000-digit integer, ``1e400``, ``NaN``).

The functions raise neutral exceptions (``OSError`` from the system, :class:`UnsafeJSON`); each
caller turns them into its own error class with the file's name, because "a snapshot that is not
one" and "a config that is not one" call for different fixes.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
from itertools import accumulate
from pathlib import Path
from typing import Any, BinaryIO

from vramlens.limits import MAX_INT_DIGITS, MAX_JSON_DEPTH

#: What a FIFO, socket or device is called in messages (the read would block or never end).
NOT_REGULAR = "a FIFO, socket or device, not a regular file"


def open_regular(path: str | os.PathLike[str] | Path) -> tuple[BinaryIO, int]:
    """``path`` opened for binary reading, with its size, if and only if it is a regular file.

    Opened with O_NONBLOCK and checked with fstat on the open descriptor, so a FIFO (which would
    wait for a writer) or a device is refused at once, and nothing can be swapped in between the
    check and the read.

    Raises:
        OSError: missing or unreadable (the system's strerror), a folder (EISDIR), or not a regular
            file (EINVAL, strerror :data:`NOT_REGULAR`).
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "Is a directory")
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, NOT_REGULAR)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb"), st.st_size
    except BaseException:
        os.close(fd)
        raise


def read_capped(path: str | os.PathLike[str] | Path, limit: int) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes; at most ``limit + 1`` are ever read,
    so a longer file comes back one byte over the limit (the caller names the rule).

    Raises:
        OSError: as :func:`open_regular`, or a read error.
    """
    f, _size = open_regular(path)
    with f:
        return f.read(limit + 1)


class UnsafeJSON(ValueError):
    """Text that is not JSON, or JSON over a bound: the message says which, on one line.

    Attributes:
        kind: ``"depth"`` (nested too deep), ``"number"`` (a number over a bound, NaN or Infinity),
            ``"encoding"`` (not UTF-8) or ``"syntax"`` (not JSON).
        detail: the parser's own words for an encoding or syntax error.
    """

    def __init__(self, message: str, kind: str, detail: str = ""):
        super().__init__(message)
        self.kind = kind
        self.detail = detail or message


# A JSON string token; the two alternatives are disjoint, so the scan is linear.
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*+"', re.DOTALL)
_BRACKETS = re.compile(rb"[\[\]{}]")
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def json_depth(data: bytes) -> int:
    """The deepest nesting of objects and arrays in ``data``, found without recursion."""
    if b"[" not in data and b"{" not in data:
        return 0
    brackets = b"".join(_BRACKETS.findall(_STRING.sub(b'""', data)))
    return max(accumulate(_STEP[c] for c in brackets), default=0)


def _int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise UnsafeJSON(f"an integer of {digits:,} digits is over the limit of {MAX_INT_DIGITS} digits", "number")
    return int(text)


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise UnsafeJSON(f"the number {text[:40]} is too large for a float (it reads as infinity)", "number")
    return value


def _constant(text: str) -> Any:
    raise UnsafeJSON(f"{text} is not JSON (no NaN or Infinity)", "number")


def loads_bounded(data: bytes | str, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Parse JSON with nesting of at most ``max_depth``, integers of at most MAX_INT_DIGITS digits, and
    finite numbers only (NaN and Infinity, which Python's json accepts, are refused).

    Raises:
        UnsafeJSON: not UTF-8, not JSON (the message starts "not valid JSON"), too deep, or a number
            over a bound.
    """
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    depth = json_depth(raw)
    if depth > max_depth:
        raise UnsafeJSON(f"it nests {depth:,} levels deep, over the limit of {max_depth}", "depth")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UnsafeJSON(f"not UTF-8 text: {e}", "encoding", str(e)) from None
    try:
        return json.loads(text, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except json.JSONDecodeError as e:
        raise UnsafeJSON(f"not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})", "syntax", str(e)) from None
    except RecursionError:  # the depth scan makes this unreachable; kept as a last guard
        raise UnsafeJSON(f"it nests more than {max_depth} levels deep", "depth") from None


__all__ = ["NOT_REGULAR", "UnsafeJSON", "json_depth", "loads_bounded", "open_regular", "read_capped"]
