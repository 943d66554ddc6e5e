"""AllocatorConfig: the caching allocator's settings, parsed from PYTORCH_CUDA_ALLOC_CONF.

``parse_alloc_conf("expandable_segments:True,max_split_size_mb:128")`` applies PyTorch's own
rules (tokens split on ``, : [ ]``, spaces dropped) and rejects what PyTorch rejects, with
PyTorch's message after the key and value: ``max_split_size_mb=10: CachingAllocator option
max_split_size_mb too small, must be > 20``. Settings that do not change device memory
(pinned-memory options, ``release_lock_on_cudamalloc``) are accepted and ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from vramlens.allocator.versions import VersionProfile, profile
from vramlens.errors import InputError

MiB = 1024 * 1024
#: c10/cuda/CUDACachingAllocator.cpp kLargeBuffer: 20 MiB segments for 1-10 MiB requests, and
#: the default of max_non_split_rounding_mb.
LARGE_BUFFER = 20 * MiB
#: roundup_power2_divisions holds one value per power-of-two interval from 1 MiB to 64 GiB.
ROUNDUP_INTERVALS = 16
_MAX_SIZE_MB = (2**64 - 1) // MiB

#: Accepted keys that do not change device memory (host pinned memory, locking, graphs).
_IGNORED_BOOL_KEYS = (
    "release_lock_on_cudamalloc", "release_lock_on_hipmalloc", "pinned_use_cuda_host_register",
    "pinned_use_hip_host_register", "pinned_use_background_threads", "graph_capture_record_stream_reuse",
)
_IGNORED_INT_KEYS = ("pinned_num_register_threads", "pinned_reserve_segment_size_mb")


@dataclass(frozen=True, slots=True)
class AllocatorConfig:
    """Settings of PyTorch's CUDA caching allocator (defaults = PyTorch's defaults).

    Attributes:
        max_split_size: blocks of this size or more are never split, bytes; None = unlimited.
        max_non_split_rounding_size: an oversize cached block serves a request at most this many
            bytes smaller than itself (default 20 MiB).
        roundup_power2_divisions: divisions per power-of-two interval [1 MiB, 2 MiB), ..., the
            last covering 32 GiB and up; 0 or 1 = plain 512-byte rounding.
        garbage_collection_threshold: fraction in (0, 1), or 0 = off. Acts only when a memory
            fraction is set (torch.cuda.set_per_process_memory_fraction), as in PyTorch.
        expandable_segments: grow one segment per stream in 2 MiB (small) / 20 MiB (large) pages.
        backend: "native" (simulated) or "cudaMallocAsync" (not simulated).
        text: the string it was parsed from.
        version: the version profile used to parse it.
    """

    max_split_size: int | None = None
    max_non_split_rounding_size: int = LARGE_BUFFER
    roundup_power2_divisions: tuple[int, ...] = (0,) * ROUNDUP_INTERVALS
    garbage_collection_threshold: float = 0.0
    expandable_segments: bool = False
    backend: str = "native"
    text: str = ""
    version: str = "2.8"
    ignored: tuple[str, ...] = field(default=())

    def divisions_for(self, size: int) -> int:
        """roundup_power2_divisions for a request of ``size`` bytes (its interval's value)."""
        index = size.bit_length() - 1 - 20  # log2(size) - log2(1 MiB)
        index = 0 if index < 0 else (ROUNDUP_INTERVALS - 1 if index >= ROUNDUP_INTERVALS else index)
        return self.roundup_power2_divisions[index]

    @classmethod
    def parse(cls, text: str | None, *, version: str | None = None) -> AllocatorConfig:
        """Same as :func:`parse_alloc_conf`."""
        return parse_alloc_conf(text, version=version)


def _lex(text: str) -> list[str]:
    """PyTorch's lexArgs: ``, : [ ]`` are tokens of their own, spaces are dropped."""
    return [t for t in re.split(r"([,:\[\]])", text.replace(" ", "")) if t]


class _Parser:
    def __init__(self, text: str, prof: VersionProfile):
        self.text, self.prof, self.tokens = text, prof, _lex(text)

    def fail(self, key: str, value: str | None, message: str) -> InputError:
        where = f"{key}={value}" if value is not None else key
        return InputError(f"PYTORCH_CUDA_ALLOC_CONF {where}: {message}")

    def expect(self, i: int, char: str, key: str) -> None:
        if i >= len(self.tokens) or self.tokens[i] != char:
            got = self.tokens[i] if i < len(self.tokens) else "end of text"
            raise self.fail(key, None, f"Error parsing CachingAllocator settings, expected {char} (got {got!r})")

    def value(self, i: int, key: str) -> str:
        if i >= len(self.tokens) or self.tokens[i] in ",:[]":
            raise self.fail(key, None, f"Error, expecting {key} value")
        return self.tokens[i]

    def integer(self, text: str, key: str) -> int:
        if not re.fullmatch(r"[0-9]+", text):
            raise self.fail(key, text, f"{text!r} is not a whole number")
        if len(text) > 20 or int(text) > 2**64 - 1:  # std::stoull throws out_of_range past size_t
            raise self.fail(key, text, f"{text[:30]!r} is out of range for size_t (at most {2**64 - 1})")
        return int(text)

    def boolean(self, i: int, key: str) -> bool:
        text = self.tokens[i] if i < len(self.tokens) else None
        if text not in ("True", "False"):
            raise self.fail(key, text, f"Expected a single True/False argument for {key}")
        return text == "True"


def parse_alloc_conf(text: str | None, *, version: str | None = None) -> AllocatorConfig:
    """Parse a PYTORCH_CUDA_ALLOC_CONF string as PyTorch does.

    Args:
        text: e.g. "expandable_segments:True,max_split_size_mb:128,roundup_power2_divisions:4,
            garbage_collection_threshold:0.8", or "roundup_power2_divisions:[256:1,512:2,>:4]".
            None or "" gives the defaults.
        version: the PyTorch version whose rules apply (see :mod:`vramlens.allocator.versions`).

    Returns:
        The settings as an AllocatorConfig.

    Raises:
        InputError: a value PyTorch would reject; the message names the key, the value and
            PyTorch's own rule.
    """
    prof = profile(version)
    if not text or not text.strip():
        return AllocatorConfig(version=prof.name)
    p = _Parser(text, prof)
    tokens = p.tokens
    values: dict[str, Any] = {}
    ignored: list[str] = []
    divisions = [0] * ROUNDUP_INTERVALS
    i = 0
    while i < len(tokens):
        key = tokens[i]
        if key in ("max_split_size_mb", "max_non_split_rounding_mb"):
            p.expect(i + 1, ":", key)
            i += 2
            raw = p.value(i, key)
            mb = p.integer(raw, key)
            if mb < 20 or (mb == 20 and not prof.split_min_inclusive):
                raise p.fail(key, raw, prof.split_too_small(key))
            name = "max_split_size" if key == "max_split_size_mb" else "max_non_split_rounding_size"
            values[name] = min(mb, _MAX_SIZE_MB) * MiB
        elif key == "garbage_collection_threshold":
            p.expect(i + 1, ":", key)
            i += 2
            raw = p.value(i, key)
            try:
                threshold = float(raw)
            except ValueError:
                raise p.fail(key, raw, f"{raw!r} is not a number") from None
            if not 0.0 < threshold < 1.0:
                raise p.fail(key, raw, prof.gc_threshold_message(threshold))
            values["garbage_collection_threshold"] = threshold
        elif key == "roundup_power2_divisions":
            p.expect(i + 1, ":", key)
            i = _parse_divisions(p, i + 2, divisions)
            values["roundup_power2_divisions"] = tuple(divisions)
        elif key == "expandable_segments":
            p.expect(i + 1, ":", key)
            i += 2
            values["expandable_segments"] = p.boolean(i, key)
        elif key == "backend":
            p.expect(i + 1, ":", key)
            i += 2
            raw = p.value(i, key)
            if raw not in ("native", "cudaMallocAsync"):
                raise p.fail(key, raw, "Unknown allocator backend, options are native and cudaMallocAsync")
            values["backend"] = raw
        elif key in _IGNORED_BOOL_KEYS:
            p.expect(i + 1, ":", key)
            i += 2
            p.boolean(i, key)
            ignored.append(key)
        elif key in _IGNORED_INT_KEYS:
            p.expect(i + 1, ":", key)
            i += 2
            p.integer(p.value(i, key), key)
            ignored.append(key)
        else:
            raise InputError(f"PYTORCH_CUDA_ALLOC_CONF: {prof.unknown_key(key)}")
        if i + 1 < len(tokens):
            p.expect(i + 1, ",", key)
            i += 1
        i += 1
    return AllocatorConfig(text=text, version=prof.name, ignored=tuple(ignored), **values)


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _parse_divisions(p: _Parser, i: int, divisions: list[int]) -> int:
    """roundup_power2_divisions:N or :[MB:N,...,>:N]; fills ``divisions``; returns the last index."""
    key = "roundup_power2_divisions"
    tokens = p.tokens
    first = p.value(i, key) if i < len(tokens) and tokens[i] != "[" else "["
    if first != "[":
        n = p.integer(first, key)
        if not _is_pow2(n):
            raise p.fail(key, first, "For roundups, the divisions has to be power of 2")
        divisions[:] = [n] * ROUNDUP_INTERVALS
        return i
    last_index, first_value = 0, True
    i += 1
    while i < len(tokens) and tokens[i] != "]":
        bound = tokens[i]
        p.expect(i + 1, ":", key)
        i += 2
        raw = p.value(i, key)
        n = p.integer(raw, key)
        if n != 0 and not _is_pow2(n):
            raise p.fail(key, raw, "For roundups, the divisions has to be power of 2 or 0 to disable roundup")
        if bound == ">":
            start = last_index + 1 if p.prof.gt_fill_after_last else last_index
            divisions[start:] = [n] * (ROUNDUP_INTERVALS - start)
        else:
            mb = p.integer(bound, key)
            if not _is_pow2(mb):
                raise p.fail(key, bound, "For roundups, the intervals have to be power of 2")
            index = min(mb.bit_length() - 1, ROUNDUP_INTERVALS - 1)
            if first_value:
                divisions[:index] = [n] * index
                first_value = False
            divisions[index] = n
            last_index = index
        if i + 1 < len(tokens) and tokens[i + 1] != "]":
            p.expect(i + 1, ",", key)
            i += 1
        i += 1
    if i >= len(tokens):
        raise p.fail(key, None, "Expected closing bracket ']'")
    return i
