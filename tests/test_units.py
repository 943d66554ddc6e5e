"""vramlens.units: the one home of the 512-byte block, rounding, GiB text and timeline thinning."""

import pytest

from vramlens.units import BLOCK, ceil_div, format_gib, peak_indices, round_up


def test_rounding_by_hand():
    assert BLOCK == 512  # kMinBlockSize in c10/cuda/CUDACachingAllocator.cpp
    assert (ceil_div(0, 512), ceil_div(1, 512), ceil_div(512, 512), ceil_div(513, 512)) == (0, 1, 1, 2)
    assert (round_up(0, BLOCK), round_up(1, BLOCK), round_up(512, BLOCK), round_up(513, BLOCK)) == (0, 512, 512, 1024)


def test_format_gib_by_hand():
    n = 1013 * 2**30 + 2**29  # 1013.5 GiB
    assert format_gib(n) == "1,013.50 GiB"
    assert format_gib(n, unit=False) == "1,013.50"
    assert format_gib(n, unit=False, grouped=False) == "1013.50"
    assert format_gib(None) == ""


def test_peak_indices_by_hand():
    totals = [1, 5, 2, 2, 9, 0, 3, 3, 1, 0]
    assert peak_indices(totals, 20) == list(range(10))
    assert peak_indices(totals, 3) == [1, 4, 8]  # runs of 4: [1,5,2,2] [9,0,3,3] [1,0]: each run's first largest
    # keep_last: 2 runs of 5 over the first 9 points, [1,5,2,2,9] [0,3,3,1], then the last point
    assert peak_indices(totals, 3, keep_last=True) == [4, 6, 9]
    assert peak_indices(totals, 1) == [4]
    assert peak_indices(totals, 1, keep_last=True) == [4]  # one point: the peak wins
    with pytest.raises(ValueError, match="max_points=0 must be >= 1"):
        peak_indices(totals, 0)


hypothesis = pytest.importorskip("hypothesis", reason="property tests need hypothesis (the dev extra)")
st = hypothesis.strategies


@hypothesis.settings(max_examples=300, deadline=None)
@hypothesis.given(totals=st.lists(st.integers(-(2**40), 2**40), min_size=1, max_size=300),
                  max_points=st.integers(1, 50), keep_last=st.booleans())
def test_thinning_keeps_the_exact_peak_within_the_budget(totals, max_points, keep_last):
    keep = peak_indices(totals, max_points, keep_last=keep_last)
    assert max(totals[i] for i in keep) == max(totals)
    assert len(keep) <= max_points
    assert keep == sorted(set(keep)) and 0 <= keep[0] and keep[-1] < len(totals)
    if keep_last and max_points > 1:
        assert keep[-1] == len(totals) - 1
