"""Memoization of the estimator's per-spec parts (one home, used by every estimate module)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from functools import update_wrapper
from typing import Concatenate, ParamSpec, TypeVar

#: Entries kept per memoized function: a sweep touches a few specs, each with a few hundred keys.
CACHE_ENTRIES = 512

S = TypeVar("S")
P = ParamSpec("P")
R = TypeVar("R")

#: Separates the positional arguments from the keyword ones in a key, so f(s, 1) and f(s, b=1) never collide.
_KEYWORDS = object()


def identity_cache(fn: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], R]:
    """Memoize on the spec's identity: hashing a frozen spec would hash its whole inventory.

    The spec is the first argument; the others are hashed as they are. The wrapper keeps ``fn``'s
    signature for type checkers (ParamSpec), and ``__wrapped__`` reaches the unmemoized function.
    """
    cache: OrderedDict[tuple[object, ...], tuple[S, R]] = OrderedDict()

    def wrapper(spec: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        key: tuple[object, ...] = (id(spec), *args)
        if kwargs:
            key += (_KEYWORDS, *sorted(kwargs.items()))
        hit = cache.get(key)
        if hit is not None and hit[0] is spec:
            return hit[1]
        value = fn(spec, *args, **kwargs)
        cache[key] = (spec, value)
        if len(cache) > CACHE_ENTRIES:
            cache.popitem(last=False)
        return value

    # __doc__ and __wrapped__ only (update_wrapper always sets __wrapped__), as before
    update_wrapper(wrapper, fn, assigned=("__doc__",), updated=())
    return wrapper
