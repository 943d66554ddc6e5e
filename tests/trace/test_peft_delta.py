"""peft's LoHa, LoKr, OFT and BOFT on the real module (vramlens.trace.crosscheck.PEFT_DELTA_ROWS): peak within 5%, every component
within 10%, as tests/trace/test_techniques.py checks the other methods."""

import pytest
from tests.trace.conftest import check_rows

from vramlens.trace.crosscheck import PEFT_DELTA_ROWS, render, run_rows

pytestmark = pytest.mark.slow  # each row traces two steps of a shrunk model


def _row_id(row) -> str:
    name, w = row
    return f"{w['method']}-{name}" + "".join(f"-{k}={v}" for k, v in w.items()
                                             if k not in ("mode", "method", "attention", "dtype", "checkpointing"))


@pytest.mark.parametrize("row", PEFT_DELTA_ROWS, ids=_row_id)
def test_delta_methods_match_trace(row):
    """get_peft_model(LoHaConfig / LoKrConfig / OFTConfig(...), autocast_adapter_dtype=True) traced against the
    estimate."""
    pytest.importorskip("peft")
    rows = run_rows((row,))
    check_rows(rows)
    for r in rows:
        if r.traced_host > 64 * 1024:  # BOFT's permutation matrices in host RAM
            assert abs(r.estimate_host / r.traced_host - 1) <= 0.10, render(rows)
