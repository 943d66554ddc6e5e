"""torchtune's chunked loss under ``compile=True`` (``training.compile_loss`` compiles
``CEWithChunkedOutputLoss.compute_cross_entropy``): what AOT autograd's min-cut partitioner, after inductor's
decompositions, saves for one chunk, against vramlens.estimator.losses.compiled_chunks."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the compiled loss is captured with torch.compile")

import torch.nn.functional as F  # noqa: E402

from vramlens.estimator.losses import compiled_chunks, seq_chunks  # noqa: E402
from vramlens.trace.compiled import Captured, capture_backend  # noqa: E402
from vramlens.units import BLOCK, round_up  # noqa: E402


def compute_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    # torchtune/modules/loss/ce_chunked_output_loss.py: the upcast and the loss of one chunk
    return F.cross_entropy(logits.float(), labels, ignore_index=-100, reduction="sum")


def test_compiled_chunk_saves_its_logits_and_two_row_statistics_not_the_fp32_log_softmax():
    b, size, vocab = 2, 32, 1000
    rows = b * size
    captured = Captured()
    torch._dynamo.reset()
    try:
        loss_fn = torch.compile(compute_cross_entropy, backend=capture_backend(captured))
        logits = torch.randn(rows, vocab, dtype=torch.bfloat16, requires_grad=True)
        labels = torch.randint(0, vocab, (rows,))
        loss_fn(logits, labels).backward()
    finally:
        torch._dynamo.reset()
    saved = sorted(captured.saved())
    # the chunk's logits (bf16, the graph's input), the labels (int64), the row max and the log of the
    # exponentials' sum (fp32, one per row): no (rows, vocab) fp32 tensor
    assert saved == sorted([((rows, vocab), "bfloat16"), ((rows,), "int64"), ((rows, 1), "float32"),
                            ((rows, 1), "float32")])
    # the estimate's per-chunk saved bytes: the logits in the compute dtype and the two fp32 statistics
    lc = round_up(2 * rows * vocab, BLOCK)
    figures = compiled_chunks(b, size, 1, lc, 0, 0)
    assert figures.saved == lc + 2 * round_up(4 * rows, BLOCK)  # 128,000 B + 2 x 512 B
    assert figures.saved == 129_024


def test_loss_figures_compiled_chunks_keep_bf16_logits_not_fp32_log_softmax():
    from vramlens.estimator.losses import loss_figures
    from vramlens.models import load_model
    from vramlens.workload import Workload

    spec = load_model("llama-3.2-3b")
    common = dict(mode="train", dtype="bf16", batch=2, seq=4096, loss_chunks=8, checkpointing="full")
    eager = loss_figures(spec, Workload(**common), 2, 4096)
    compiled = loss_figures(spec, Workload(compile=True, **common), 2, 4096)
    assert eager is not None and compiled is not None
    size, n = seq_chunks(4096, 8)
    # per chunk of 2 x 512 tokens: eager keeps the fp32 log_softmax (4 B x V per token), compiled the bf16
    # logits (2 B x V) and two fp32 statistics (8 B per token)
    assert eager.saved == n * round_up(4 * 128_256 * 2 * size, BLOCK) == 4_202_692_608
    assert compiled.saved == n * (round_up(2 * 128_256 * 2 * size, BLOCK) + 2 * round_up(4 * 2 * size, BLOCK))
    assert compiled.saved == 2_101_411_840
    # the backward holds one chunk's gradient in bf16, not two fp32 ones
    assert compiled.backward == round_up(2 * 128_256 * 2 * size, BLOCK) == 262_668_288
