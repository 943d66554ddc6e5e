"""Real CPU tensors: the recorder's peak against PyTorch's own MemTracker, counted independently."""

import pytest
import torch
from tests.trace.conftest import tiny_llama

from vramlens.trace import trace


def memtracker_peak(cfg: dict, *, batch: int, seq: int, steps: int, attention: str) -> int:
    from torch.distributed._tools.mem_tracker import MemTracker

    from vramlens.trace.build import build_hf
    from vramlens.trace.runner import make_optimizer
    from vramlens.workload import make_workload

    wl = make_workload(mode="train", dtype="fp32", batch=batch, seq=seq, attention=attention)
    model = build_hf(cfg, wl).model
    opt = make_optimizer("adamw", [p for p in model.parameters() if p.requires_grad])
    mt = MemTracker()
    mt.track_external(model, opt)
    with mt:
        for _ in range(steps):
            ids = torch.randint(0, cfg["vocab_size"], (batch, seq))
            labels = torch.randint(0, cfg["vocab_size"], (batch, seq))
            loss = model(input_ids=ids, labels=labels).loss
            loss.backward()
            del loss
            opt.step()
            opt.zero_grad(set_to_none=True)
            mt.reset_mod_stats()
    return int(max(v["Total"] for v in mt.get_tracker_snapshot("peak").values()))


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_real_cpu_peak_matches_memtracker(attention):
    cfg = tiny_llama()
    r = trace(cfg, backend="real-cpu", mode="train", dtype="fp32", batch=2, seq=128, attention=attention)
    independent = memtracker_peak(cfg, batch=2, seq=128, steps=2, attention=attention)
    assert r.backend == "real-cpu"
    print(attention, r.peak_allocated, independent)
    assert abs(r.peak_allocated / independent - 1) < 0.01


def test_cuda_backend_needs_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: tests/trace/test_cuda.py territory (scripts/gpu_validate.py)")
    from vramlens.errors import TraceError

    with pytest.raises(TraceError, match="mode=cuda needs a CUDA GPU"):
        trace(tiny_llama(), backend="cuda", mode="train", seq=16)
