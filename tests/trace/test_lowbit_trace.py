"""torchao's optimizers under the tracer: the states its own code allocates equal the estimate's
per-tensor layout (vramlens.trace.crosscheck.OPTIMIZER_ROWS)."""

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchao.optim", reason="torchao's optimizers need torchao")

from vramlens.trace.crosscheck import OPTIMIZER_ROWS, render, run_optimizer_rows  # noqa: E402

pytestmark = pytest.mark.slow  # each row traces two steps of a shrunk model


@pytest.mark.parametrize("optimizer", ["adamw-8bit-torchao", "adamw-4bit-torchao", "adamw-fp8-torchao",
                                       "adamw-cpu-offload-torchao"])
def test_states_equal_the_trace(optimizer):
    rows = run_optimizer_rows(optimizer=optimizer)
    assert len(rows) == 5
    for r in rows:
        # every state tensor torchao made (codes, scales, maps, or zeros_like), each rounded to 512 B
        assert r.estimate["optimizer_states"] == r.traced["optimizer_states"], render(rows)
        for c in ("weights", "gradients", "master_weights"):
            assert r.estimate[c] == pytest.approx(r.traced[c], rel=0.01, abs=4096), (c, render(rows))


def test_cpu_offload_puts_the_large_states_on_the_host():
    rows = run_optimizer_rows(optimizer="adamw-cpu-offload-torchao")
    for r in rows:
        if r.workload["method"] == "lora":
            # r=8 adapters of the shrunk model have 8 x 256 = 2,048 elements, under minimal_size: all on the GPU
            # (the trace's host bytes are the fused AdamW's step counters)
            assert r.estimate_host == 0 and r.traced_host < 64 * 1024, render(rows)
        else:
            # the emulation's host tensors: parameter and gradient copies and AdamW states, 512-byte rounded;
            # the estimate rounds the pinned copies up to powers of two, so it is the larger
            assert r.traced_host > 1024 * 1024 and r.estimate_host >= r.traced_host, render(rows)
        # what stays on the GPU is the step's peak without the states: the peaks agree
        assert abs(r.peak_error) <= 0.05, render(rows)


def test_rows_cover_the_thresholds():
    kinds = {(row["dtype"], row["method"], name) for name, row in OPTIMIZER_ROWS}
    assert ("fp32", "full", "gpt2") in kinds and ("bf16", "lora", "llama-2-7b") in kinds
    assert ("bf16", "full", "mixtral-8x7b") in kinds
