"""Where the PyTorch versions the simulator models differ: one place, one table.

The simulator follows ``c10/cuda/CUDACachingAllocator.cpp`` as it stands in PyTorch 2.4 to 2.10.
Its block rules (512-byte rounding, 1 MiB small/large boundary, 2 MiB and 20 MiB segments,
best fit by (stream, size), splitting, coalescing, expandable segments, garbage collection)
did not change over those releases. What did change is how ``PYTORCH_CUDA_ALLOC_CONF`` is
parsed and the messages it gives:

- "2.8": PyTorch 2.4 to 2.8, ``c10/cuda/CUDAAllocatorConfig.cpp``. ``max_split_size_mb`` and
  ``max_non_split_rounding_mb`` must be **greater than** 20; the garbage-collection threshold has
  separate "too small" and "too big" messages; in ``roundup_power2_divisions:[...,>:N]`` the
  ``>`` entry overwrites the last listed interval as well.
- "2.9": PyTorch 2.9 and later, ``c10/core/AllocatorConfig.cpp`` (AcceleratorAllocatorConfig):
  20 itself is accepted (``>= 20``); one threshold message; ``>`` starts after the last listed
  interval; unknown keys are reported as "Unrecognized key '...' in CUDA allocator config.".

``max_non_split_rounding_mb`` exists since PyTorch 2.4; before it the rounding limit was the
fixed 20 MiB that is still its default, so older runs behave like the default here.
"""

from __future__ import annotations

from dataclasses import dataclass

from vramlens.errors import InputError


@dataclass(frozen=True, slots=True)
class VersionProfile:
    """Parsing rules and messages of one range of PyTorch releases.

    Attributes:
        name: "2.8" or "2.9".
        releases: the PyTorch releases it covers, in words.
        split_min_inclusive: whether max_split_size_mb / max_non_split_rounding_mb may equal 20.
        gt_fill_after_last: whether ``>:N`` fills from the interval after the last listed one.
    """

    name: str
    releases: str
    split_min_inclusive: bool
    gt_fill_after_last: bool

    def split_too_small(self, key: str) -> str:
        op = ">=" if self.split_min_inclusive else ">"
        return f"CachingAllocator option {key} too small, must be {op} 20"

    def gc_threshold_message(self, value: float) -> str:
        if self.name == "2.8":
            word = "small" if value <= 0 else "big"
            return f"garbage_collect_threshold too {word}, set it 0.0~1.0"
        return "garbage_collect_threshold is invalid, set it in (0.0, 1.0)"

    def unknown_key(self, key: str) -> str:
        if self.name == "2.8":
            return f"Unrecognized CachingAllocator option: {key}"
        return f"Unrecognized key '{key}' in CUDA allocator config."


PROFILES: dict[str, VersionProfile] = {
    "2.8": VersionProfile("2.8", "PyTorch 2.4-2.8 (c10/cuda/CUDAAllocatorConfig.cpp)", False, False),
    "2.9": VersionProfile("2.9", "PyTorch 2.9+ (c10/core/AllocatorConfig.cpp)", True, True),
}

#: The profile used when none is named.
DEFAULT_VERSION = "2.8"


def profile(version: str | None) -> VersionProfile:
    """The profile for a PyTorch version such as "2.5.1", "2.9" or None (the default).

    Raises:
        InputError: a version outside the modelled range.
    """
    if version is None:
        return PROFILES[DEFAULT_VERSION]
    parts = str(version).strip().split(".")
    try:
        major, minor = int(parts[0]), int(parts[1].split("+")[0]) if len(parts) > 1 else 0
    except ValueError:
        raise InputError(f"torch version {version!r} is not a version: write e.g. 2.5 or 2.9.1") from None
    if (major, minor) < (2, 4):
        raise InputError(f"torch version {version!r} is not modelled: the simulator covers PyTorch 2.4 and later")
    return PROFILES["2.8" if (major, minor) <= (2, 8) else "2.9"]
