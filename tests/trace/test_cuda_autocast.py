"""CUDA autocast's op policy on fake CPU tensors (vramlens.trace.cuda_autocast)."""

import pytest

torch = pytest.importorskip("torch", reason="tracing needs the trace extra (torch)")

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from vramlens.trace.cuda_autocast import (  # noqa: E402
    SAME_ON_CPU,
    autocast_region,
    cpu_listed,
    cuda_autocast_policy,
    cuda_listed,
)

BF16, F32 = torch.bfloat16, torch.float32


class Ops(TorchDispatchMode):
    """The aten ops run below autocast, with their outputs' dtypes."""

    def __init__(self):
        super().__init__()
        self.seen: list[tuple[str, torch.dtype | None]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.namespace == "prim":
            return out
        self.seen.append((func.__name__, out.dtype if isinstance(out, torch.Tensor) else None))
        return out

    def names(self) -> list[str]:
        return [n for n, _ in self.seen]


def _aten_with(key: str) -> set[str]:
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    return {n.removeprefix("aten::") for n in torch._C._dispatch_get_all_op_names()
            if n.startswith("aten::") and has(n, key)}


def test_the_lists_are_what_this_torch_registers_for_cuda():
    """Every aten op with an AutocastCUDA kernel in the installed torch (CPU builds register them
    too) is in the lists, and every listed op this torch has is registered there."""
    registered = _aten_with("AutocastCUDA")
    existing = set(torch._C._dispatch_get_all_op_names())
    listed = {n for n in cuda_listed() if "aten::" + n in existing}
    assert registered - cuda_listed() == set(), "ops CUDA autocasts that the lists miss"
    assert listed - registered == set(), "listed ops CUDA does not autocast"


def test_shared_ops_are_on_both_devices_lists():
    assert SAME_ON_CPU <= cuda_listed()
    assert SAME_ON_CPU <= cpu_listed()
    assert cpu_listed() == _aten_with("AutocastCPU")


def _run(fn, dtype=BF16):
    with FakeTensorMode(), cuda_autocast_policy(), autocast_region(dtype):
        ops = Ops()
        with ops:
            out = fn()
    return out, ops


def test_fp32_list_casts_to_fp32():
    def fn():
        x = torch.randn(4, 8, dtype=BF16)
        return torch.pow(x, 3), torch.nn.functional.layer_norm(x, (8,)), x.exp(), x.rsqrt()

    outs, ops = _run(fn)
    assert [o.dtype for o in outs] == [F32] * 4
    assert ops.seen[1] == ("_to_copy.default", F32)  # the cast is an op of its own, as on CUDA


def test_set_opt_dtype_runs_in_fp32_unless_a_dtype_is_given():
    def fn():
        x = torch.randn(4, 8, dtype=BF16)
        return x.softmax(-1), x.softmax(-1, dtype=BF16), x.sum(), x.sum(-1), torch.log_softmax(x, -1)

    outs, _ = _run(fn)
    assert [o.dtype for o in outs] == [F32, BF16, F32, F32, F32]


def test_half_softmax_to_float_makes_no_copy():
    """SoftMax.cpp: a half input asked for float output runs the kernel with half_to_float."""
    out, ops = _run(lambda: torch.randn(4, 8, dtype=torch.float16).softmax(-1), torch.float16)
    assert out.dtype == F32
    assert "_to_copy.default" not in ops.names()
    assert "_softmax.default" in ops.names()


def test_cross_entropy_keeps_half_log_softmax_and_nll_loss_fp32_copy():
    """CUDA does not list cross_entropy_loss: log_softmax keeps the logits' dtype, nll_loss casts."""
    def fn():
        logits = torch.randn(4, 10, dtype=BF16, requires_grad=True)
        return torch.nn.functional.cross_entropy(logits, torch.zeros(4, dtype=torch.long))

    loss, ops = _run(fn)
    assert loss.dtype == F32
    loss_ops = [op for op in ops.seen if op[0] in ("_log_softmax.default", "_to_copy.default", "nll_loss_forward.default")]
    assert loss_ops == [("_log_softmax.default", BF16), ("_to_copy.default", F32), ("nll_loss_forward.default", None)]


def test_ops_only_cpu_lists_fall_through():
    """cat is on CPU's promote list, on none of CUDA's: no cast of the half input first."""
    out, ops = _run(lambda: torch.cat([torch.randn(2, 2, dtype=BF16), torch.randn(2, 2)]))
    assert out.dtype == F32  # type promotion inside cat
    assert "_to_copy.default" not in ops.names()


def test_lower_precision_ops_keep_cpu_kernels_and_casts():
    def fn():
        w = torch.randn(8, 8, requires_grad=True)
        x = torch.randn(4, 8)
        return x @ w, torch.einsum("ij,jk->ik", x, w), torch.einsum("ij,jk->ik", x, w)

    outs, ops = _run(fn)
    assert [o.dtype for o in outs] == [BF16] * 3
    # the weight is cast once per autocast region (cached_cast's cache), x once per call: x, w for
    # mm; x for each einsum (mm's C++ cache and the einsum kernels' cache are separate: w again once)
    assert ops.names().count("_to_copy.default") == 5


def test_the_cache_is_dropped_when_the_region_exits():
    from vramlens.trace import cuda_autocast as ca

    with FakeTensorMode(), cuda_autocast_policy():
        w = torch.randn(8, 8, requires_grad=True)
        with autocast_region(BF16):
            torch.einsum("ij,jk->ik", torch.randn(4, 8), w)
            assert len(ca._CACHE.casts) == 1
        assert len(ca._CACHE.casts) == 0


def test_binary_cross_entropy_is_refused_as_on_cuda():
    with pytest.raises(RuntimeError, match="binary_cross_entropy is unsafe to autocast"):
        _run(lambda: torch.nn.functional.binary_cross_entropy(torch.rand(4, dtype=BF16), torch.rand(4)))


def test_cpu_policy_comes_back_afterwards_and_nesting_is_allowed():
    x = torch.randn(4, 8, dtype=BF16)
    with cuda_autocast_policy():
        with cuda_autocast_policy(), torch.autocast("cpu", dtype=BF16):
            assert torch.pow(x, 3).dtype == F32
        with torch.autocast("cpu", dtype=BF16):
            assert torch.pow(x, 3).dtype == F32
    with torch.autocast("cpu", dtype=BF16):
        assert torch.pow(x, 3).dtype == BF16  # CPU's own policy again
        assert torch.nn.functional.cross_entropy(x, torch.zeros(4, dtype=torch.long)).dtype == F32
