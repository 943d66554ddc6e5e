"""peft's LoRA-FA, VeRA, AdaLoRA and prefix tuning: the estimate against the tracer running peft's own modules (and
LoRA-FA's own optimizer) on shrunk models (vramlens.trace.crosscheck.PEFT_WIDE_ROWS): peak within 5%, every
component within 10%."""

import pytest
from tests.trace.conftest import check_rows

from vramlens.trace.crosscheck import PEFT_WIDE_ROWS, run_row, run_rows

pytestmark = pytest.mark.slow  # each row traces two steps of a shrunk model


def _row_id(row) -> str:
    name, w = row
    return name + "".join(f"-{k}={v}" for k, v in w.items() if k not in ("mode", "attention", "dtype"))


@pytest.mark.parametrize("row", PEFT_WIDE_ROWS, ids=_row_id)
def test_peft_wide_rows_match_trace(row):
    rows = run_rows((row,))
    check_rows(rows)


def test_lora_fa_step_matches_trace():
    """LoraFAOptimizer's step (a Python loop over the parameters: B's projected gradient, sqrt(exp_avg_sq_B)) in the
    optimizer phase, and what LoRA-FA removes: A's gradient and states, and A's saved input."""
    row = {"mode": "train", "method": "lora", "attention": "sdpa", "checkpointing": "none", "dtype": "bf16",
           "lora_rank": 32, "lora_targets": ("q_proj", "v_proj")}
    fa, lora = run_row("llama-3-8b", {**row, "lora_fa": True}), run_row("llama-3-8b", row)
    assert abs(fa.estimate_phases["optimizer"] / fa.traced_phases["optimizer"] - 1) <= 0.01
    for c in ("gradients", "optimizer_states", "activations"):
        assert fa.traced[c] < lora.traced[c]
        assert lora.estimate[c] - fa.estimate[c] == pytest.approx(lora.traced[c] - fa.traced[c], rel=0.05), c
