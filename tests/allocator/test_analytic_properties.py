"""The persistent-packing model equals the simulator on random size lists (hypothesis)."""

import pytest

pytest.importorskip("hypothesis", reason="property tests need hypothesis (the dev extra)")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from vramlens.allocator import simulate  # noqa: E402
from vramlens.allocator.analytic import persistent_reserved  # noqa: E402

MiB = 1024 * 1024


sizes = st.lists(st.one_of(st.integers(1, MiB), st.integers(MiB, 12 * MiB), st.integers(10 * MiB, 80 * MiB)),
                 min_size=1, max_size=40)


@settings(max_examples=200, deadline=None)
@given(sizes=sizes)
def test_persistent_packing_equals_the_simulator(sizes):
    assert persistent_reserved(sizes) == simulate([("alloc", i, s) for i, s in enumerate(sizes)]).peak_reserved_bytes
