"""identity_cache: memoized on the spec's identity, arguments (positional or keyword) in the key."""

from vramlens.estimator.memo import CACHE_ENTRIES, identity_cache


class Spec:
    """Unhashable by value on purpose: the cache keys on identity."""

    __hash__ = None  # type: ignore[assignment]


def test_memoizes_on_identity_and_arguments():
    calls = []

    @identity_cache
    def f(spec: Spec, b: int) -> int:
        """Doc kept."""
        calls.append(b)
        return b

    s, t = Spec(), Spec()
    assert [f(s, 1), f(s, 1), f(t, 1), f(s, 2)] == [1, 1, 1, 2]
    assert calls == [1, 1, 2]  # the second f(s, 1) is a hit; another spec is a miss
    assert f.__doc__ == "Doc kept."
    assert f.__wrapped__(s, 1) == 1  # type: ignore[attr-defined]
    assert calls == [1, 1, 2, 1]  # __wrapped__ bypasses the cache


def test_keywords_are_part_of_the_key():
    calls = []

    @identity_cache
    def f(spec: Spec, *args: object, **kwargs: object) -> str:
        calls.append(1)
        return "keywords" if kwargs else "positional"

    s = Spec()
    assert f(s, a=1, b=2) == "keywords"
    assert f(s, b=2, a=1) == "keywords"  # the same entry: keywords sorted by name
    # the positional tuples that spell the same items are another key, not a false hit
    assert f(s, ("a", 1), ("b", 2)) == "positional"
    assert len(calls) == 2


def test_keyword_calls_hit_their_own_entries():
    calls = []

    @identity_cache
    def f(spec: Spec, b: int = 0) -> int:
        calls.append(b)
        return b

    s = Spec()
    assert [f(s, b=3), f(s, b=3), f(s, 3)] == [3, 3, 3]
    assert calls == [3, 3]  # f(s, b=3) twice is one entry; f(s, 3) is another key


def test_evicts_the_oldest_beyond_cache_entries():
    calls = []

    @identity_cache
    def f(spec: Spec, b: int) -> int:
        calls.append(b)
        return b

    s = Spec()
    for b in range(CACHE_ENTRIES + 1):
        f(s, b)
    f(s, CACHE_ENTRIES)  # the newest is kept
    f(s, 0)  # the oldest was evicted
    assert calls == [*range(CACHE_ENTRIES + 1), 0]
