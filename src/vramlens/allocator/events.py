"""The event stream the simulator replays, and the shapes it accepts.

One event is one call into the caching allocator:

- ``Event(id, size, action="alloc", stream=0, tag=None, module=None)``: the frozen type below;
- a tuple ``(action, id, size)`` or ``(action, id, size, stream)``;
- any object with attributes ``action`` (or ``kind``), ``id`` (or ``storage_id``, ``storage``, ``addr``),
  ``size`` (or ``nbytes``) and optionally ``stream`` -- the tracer's own event type
  (vramlens.trace.events.Event: ``action``, ``storage``, ``nbytes``) fits as is;
- a mapping with the same keys.

``action`` is "alloc" (``size`` = the bytes requested, before any rounding), "free" (``size``
ignored; the id must be live) or "empty_cache" (``torch.cuda.empty_cache()``; id and size
ignored). ``id`` is any hashable that names one allocation while it lives (a storage id, a data
pointer); it may be reused after its free. ``stream`` is any hashable naming a CUDA stream
(default stream: 0). ``tag`` and ``module`` ride along for reports and are not used here.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from vramlens.errors import InputError

ALLOC, FREE, EMPTY_CACHE = "alloc", "free", "empty_cache"
ACTIONS = (ALLOC, FREE, EMPTY_CACHE)


@dataclass(frozen=True, slots=True)
class Event:
    """One allocator call (see the module docstring for its fields)."""

    id: Hashable
    size: int
    action: str = ALLOC
    stream: Hashable = 0
    tag: str | None = None
    module: str | None = None


def _first(obj: Any, names: tuple[str, ...], default: Any = None) -> Any:
    for n in names:
        if isinstance(obj, dict):
            if n in obj:
                return obj[n]
        elif hasattr(obj, n):
            return getattr(obj, n)
    return default


def normalize(events: Iterable[Any]) -> Iterator[tuple[str, Hashable, int, Hashable]]:
    """Yield ``(action, id, size, stream)`` for every accepted event shape.

    Raises:
        InputError: an event of no accepted shape, an unknown action, or a negative size
            (the message gives the event's position).
    """
    for n, e in enumerate(events):
        if type(e) is Event:
            action, ident, size, stream = e.action, e.id, e.size, e.stream
        elif type(e) is tuple:
            if len(e) == 4:
                action, ident, size, stream = e
            elif len(e) == 3:
                action, ident, size = e
                stream = 0
            else:
                raise InputError(f"event #{n} {e!r}: a tuple must be (action, id, size[, stream])")
        else:
            action = _first(e, ("action", "kind"))
            ident = _first(e, ("id", "storage_id", "storage", "addr"))
            size = _first(e, ("size", "nbytes"), 0)
            stream = _first(e, ("stream",), 0)
            if action is None:
                raise InputError(f"event #{n} {e!r}: no 'action' (alloc, free or empty_cache)")
        if action not in ACTIONS:
            raise InputError(f"event #{n}: action {action!r} is not one of alloc, free, empty_cache")
        if action == ALLOC and (not isinstance(size, int) or size < 0):
            raise InputError(f"event #{n}: size {size!r} must be a whole number of bytes >= 0")
        yield action, ident, size, stream
