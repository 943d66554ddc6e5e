"""Memoization of the estimator's per-spec parts (one home, used by every estimate module)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable

#: Entries kept per memoized function: a sweep touches a few specs, each with a few hundred keys.
CACHE_ENTRIES = 512


def identity_cache(fn: Callable) -> Callable:
    """Memoize on the spec's identity: hashing a frozen spec would hash its whole inventory."""
    cache: OrderedDict = OrderedDict()

    def wrapper(spec, *args):
        key = (id(spec), *args)
        hit = cache.get(key)
        if hit is not None and hit[0] is spec:
            return hit[1]
        value = fn(spec, *args)
        cache[key] = (spec, value)
        if len(cache) > CACHE_ENTRIES:
            cache.popitem(last=False)
        return value

    wrapper.__wrapped__ = fn
    wrapper.__doc__ = fn.__doc__
    return wrapper
