"""torchtitan's compiled loss (``torch.compile(cross_entropy_loss)``, torchtitan/components/loss.py since March
2025; vramlens ``--compile-scope blocks+loss``): what AOT autograd's partitioner saves and what inductor's generated
kernels allocate, against vramlens.estimator.losses (the compiled figures with one chunk of the whole sequence)."""

from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch", reason="the compiled loss is captured with torch.compile")

import torch.nn.functional as F  # noqa: E402

from vramlens.estimator.losses import loss_figures  # noqa: E402
from vramlens.models import load_model  # noqa: E402
from vramlens.trace.compiled import Captured, capture_backend  # noqa: E402
from vramlens.units import BLOCK, round_up  # noqa: E402
from vramlens.workload import Workload  # noqa: E402


def cross_entropy_loss(pred: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    # torchtitan's loss: the (b, s, V) logits flattened and upcast, the mean over the tokens
    return F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))


B, S, V = 2, 64, 1000


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    pred = torch.randn(B, S, V, dtype=torch.bfloat16, requires_grad=True)
    return pred, torch.randint(0, V, (B, S))


def test_partitioner_saves_the_logits_and_two_row_statistics():
    captured = Captured()
    torch._dynamo.reset()
    try:
        loss_fn = torch.compile(cross_entropy_loss, backend=capture_backend(captured))
        pred, labels = _inputs()
        loss_fn(pred, labels).backward()
    finally:
        torch._dynamo.reset()
    rows = B * S
    saved = sorted(captured.saved())
    # the logits as given (bf16, a view of the input: no copy), the labels, the row max and log-sum-exp in fp32;
    # no (rows, V) fp32 tensor (eager keeps the fp32 log_softmax)
    assert ((rows, V), "float32") not in saved
    # (and the mean's fp32 divisor, a scalar)
    assert sorted(x for x in saved if x[1] == "float32") == [((), "float32"), ((rows, 1), "float32"),
                                                             ((rows, 1), "float32")]
    assert any(shape in ((rows, V), (B, S, V)) and dtype == "bfloat16" for shape, dtype in saved)


def _buffers(code: str) -> list[tuple[int, str]]:
    """(elements, dtype) of each buffer the generated wrapper allocates."""
    out = []
    for shape, dtype in re.findall(r"= empty_strided_\w+\(\(([^)]*)\), \([^)]*\), torch\.(\w+)\)", code):
        n = 1
        for d in (x for x in shape.split(",") if x.strip()):
            n *= int(d)
        out.append((n, dtype))
    return out


@pytest.mark.slow
def test_inductor_kernels_hold_no_fp32_logits_and_write_one_bf16_gradient():
    """Inductor's own kernels (its CPU backend here; the scheduler's fusion is the same for CUDA): the forward is
    reductions that read the bf16 logits (the row max and log-sum-exp, (rows, 1) fp32 each), the backward one
    pointwise kernel that writes the gradient in bf16 (the one-hot scatter becomes a ``where``:
    joint_graph.scatter_upon_const_tensor)."""
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    try:
        loss_fn = torch.compile(cross_entropy_loss)
        pred, labels = _inputs()

        def step() -> None:
            loss_fn(pred, labels).backward()

        try:
            _, codes = run_and_get_code(step)
        except Exception as e:  # no C++ toolchain for inductor's CPU backend
            pytest.skip(f"inductor could not build its CPU kernels here: {type(e).__name__}")
    finally:
        torch._dynamo.reset()
    assert len(codes) == 2
    forward, backward = (_buffers(c) for c in codes)
    rows = B * S
    # forward: nothing as large as a row of logits per token beyond (rows, 1) statistics and scalars
    assert max(n for n, _ in forward) == rows
    assert sorted(x for x in forward if x[0] == rows) == [(rows, "float32"), (rows, "float32")]
    # backward: the gradient (rows x V, bf16) is the only large buffer
    large = [x for x in backward if x[0] > rows]
    assert large == [(rows * V, "bfloat16")]
    # the estimate: the logits' gradient in the compute dtype is the loss' backward, the logits and the two
    # statistics what it keeps
    spec = load_model("llama-3.1-8b")
    w = Workload(mode="train", dtype="bf16", batch=B, seq=S, compile=True, compile_scope="blocks+loss")
    f = loss_figures(spec, w, B, S)
    assert f is not None
    logits = round_up(2 * spec.vocab_size * rows, BLOCK)
    assert f.backward == logits
    assert f.saved == f.peak == logits + 2 * round_up(4 * rows, BLOCK)


def test_compiled_loss_against_eager_at_torchtitans_size():
    spec = load_model("llama-3.1-8b")
    common = dict(mode="train", dtype="fp32", amp="bf16", fsdp=True, gpus=8, batch=2, seq=8192, compile=True)
    eager = loss_figures(spec, Workload(**common, compile_scope="blocks"), 2, 8192)
    compiled = loss_figures(spec, Workload(**common, compile_scope="blocks+loss"), 2, 8192)
    assert eager is None  # transformers' own loss figures: logits, fp32 upcast, fp32 log_softmax
    assert compiled is not None
    t = 2 * 8192
    # the bf16 logits (4.2 GB at V = 128,256) and 2 x 4 B per token; the backward one bf16 gradient
    assert compiled.saved == round_up(2 * 128_256 * t, BLOCK) + 2 * round_up(4 * t, BLOCK) == 4_202_823_680
    assert compiled.backward == 4_202_692_608
