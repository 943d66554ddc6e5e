"""Trace a real PyTorch model's memory: every allocation and free of a step, with no GPU.

The only package of vramlens that imports torch, and only when a trace is asked for:
``import vramlens.trace`` stays light; ``trace()`` imports torch, transformers and peft.

Public API::

    trace(model, workload=None, *, steps=2, layers=None, mode="fake", ...) -> TraceResult
    Event, Summary, summarize, write_timeline                              # the event stream
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vramlens.trace.events import (
    HOST_TAGS,
    PHASES,
    TAG_COMPONENT,
    TAGS,
    Event,
    LiveGroup,
    LiveTensor,
    Summary,
    summarize,
    timeline_text,
    write_timeline,
)

if TYPE_CHECKING:  # pragma: no cover
    from vramlens.trace.result import TraceResult

__all__ = [
    "Event",
    "HOST_TAGS",
    "LiveGroup",
    "LiveTensor",
    "PHASES",
    "Summary",
    "TAGS",
    "TAG_COMPONENT",
    "TraceResult",
    "require_torch",
    "summarize",
    "timeline_text",
    "trace",
    "write_timeline",
]


def require_torch() -> None:
    """Raise MissingExtraError naming the ``trace`` extra when torch is not installed."""
    from vramlens.errors import MissingExtraError

    try:
        import torch  # noqa: F401
    except ImportError:
        raise MissingExtraError("torch", "trace") from None
    try:
        import transformers  # noqa: F401
    except ImportError:
        raise MissingExtraError("transformers", "trace") from None


def trace(model: Any, workload=None, **kwargs: Any) -> TraceResult:
    """Trace ``model`` under ``workload``; see :func:`vramlens.trace.api.trace`."""
    require_torch()
    from vramlens.trace.api import trace as _trace

    return _trace(model, workload, **kwargs)


def __getattr__(name: str) -> Any:
    if name == "TraceResult":
        require_torch()
        from vramlens.trace.result import TraceResult

        return TraceResult
    raise AttributeError(f"module 'vramlens.trace' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
