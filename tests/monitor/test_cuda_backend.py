"""The CUDA backend's counter logic, through a stand-in for ``torch.cuda`` (no GPU here).

What is not run: the real OOM observer, memory history and snapshots (scripts would need a GPU)."""

import pytest

pytest.importorskip("torch", reason="vramlens.watch runs inside a torch process (the trace extra)")

from vramlens.monitor.cuda import CudaBackend  # noqa: E402


class FakeCuda:
    """The caching allocator's counters: allocated now, the peak since the last reset, reserved."""

    def __init__(self):
        self.allocated = 0
        self.peak = 0
        self.reserved = 0
        self.peak_reserved = 0

    def alloc(self, n):
        self.allocated += n
        self.reserved = max(self.reserved, self.allocated)
        self.peak = max(self.peak, self.allocated)
        self.peak_reserved = max(self.peak_reserved, self.reserved)

    def free(self, n):
        self.allocated -= n

    def memory_allocated(self, device=None):
        return self.allocated

    def max_memory_allocated(self, device=None):
        return self.peak

    def max_memory_reserved(self, device=None):
        return self.peak_reserved

    def reset_peak_memory_stats(self, device=None):
        self.peak = self.allocated
        self.peak_reserved = self.reserved

    def get_device_name(self, device=None):
        return "Fake GPU"


def test_a_reset_by_other_code_does_not_lose_the_step_peak():
    cuda = FakeCuda()
    backend = CudaBackend(cuda, history=False)
    backend.start()
    cuda.alloc(1_000)
    cuda.free(1_000)
    cuda.reset_peak_memory_stats()  # e.g. HF Trainer's memory tracker, mid-step
    cuda.alloc(300)
    peak, reserved, live, cats = backend.end_step()
    assert (peak, reserved, live) == (1_000, 1_000, 300)
    assert cats["activations_and_temporaries"] == 1_000
    # the next step starts at what is alive
    cuda.alloc(200)
    assert backend.end_step()[:3] == (500, 1_000, 500)
    backend.stop()
    assert cuda.reset_peak_memory_stats.__func__ is FakeCuda.reset_peak_memory_stats


def test_other_code_reads_the_peak_since_its_own_reset():
    cuda = FakeCuda()
    backend = CudaBackend(cuda, history=False)
    cuda.alloc(700)
    cuda.free(700)
    backend.start()
    assert cuda.max_memory_allocated() == 700  # vramlens' own reset at start is not seen
    cuda.alloc(100)
    backend.end_step()                          # nor the reset at each step boundary
    assert cuda.max_memory_allocated() == 700
    cuda.reset_peak_memory_stats()
    assert cuda.max_memory_allocated() == 100
    backend.stop()
