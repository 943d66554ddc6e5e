"""bitsandbytes' 32-bit and paged optimizers: fp32 states whatever the parameters' dtype, and the
paged ones' large states in CUDA unified memory (outside the caching allocator)."""

from __future__ import annotations

from vramlens.estimator import estimate
from vramlens.estimator.optimizer import BNB_PAGED_MIN_NUMEL, trained_param_numels
from vramlens.models import load_model
from vramlens.units import BLOCK, round_up
from vramlens.workload import make_workload

MODEL = "llama-2-7b"


def _est(optimizer: str, gpu: str | None = "H100-SXM-80GB", **kw):
    w = make_workload(mode="train", dtype="bf16", optimizer=optimizer, **kw)
    return estimate(load_model(MODEL), w, gpu=gpu)


def _big(spec):
    return [n for n in trained_param_numels(spec) if n >= BNB_PAGED_MIN_NUMEL]


def test_bnb_32bit_states_are_fp32_under_bf16_weights():
    """PagedAdamW and Lion (optim_bits 32) allocate fp32 states; torch's AdamW follows the parameter."""
    spec = load_model(MODEL)
    n = sum(trained_param_numels(spec))
    adamw = _est("adamw").breakdown["optimizer_states"]
    assert _est("paged-adamw").breakdown["optimizer_states"] == 2 * adamw
    assert _est("lion").breakdown["optimizer_states"] == adamw
    assert 2 * 4 * n <= 2 * adamw < 2 * 4 * n + 2 * len(trained_param_numels(spec)) * 4 * BLOCK


def test_paged_states_leave_the_allocator_and_stay_in_the_device_total():
    spec = load_model(MODEL)
    plain, paged = _est("adamw-8bit").breakdown, _est("paged-adamw-8bit").breakdown
    moved_alloc = sum(2 * round_up(n, BLOCK) for n in _big(spec))  # two uint8 states per large tensor
    moved_exact = sum(2 * n for n in _big(spec))
    assert paged["optimizer_states"] == plain["optimizer_states"]  # the same states, elsewhere
    assert plain.peak_allocated - paged.peak_allocated == moved_alloc
    assert paged.peak_reserved < plain.peak_reserved
    # nvidia-smi: the allocator's reserve plus the resident unified memory plus the same runtime
    assert paged["runtime"] == plain["runtime"]
    outside = paged.device_total - paged.peak_reserved
    assert outside - (plain.device_total - plain.peak_reserved) == moved_exact
    assert any("CUDA unified memory" in n for n in paged.notes)


def test_paging_instead_of_out_of_memory_is_said():
    """PagedAdamW on a 7B model in bf16: the allocator's peak fits an 80 GB GPU, the resident states do not."""
    e = _est("paged-adamw")
    b = e.breakdown
    assert not e.fits and b.peak_reserved < e.gpu.capacity_bytes * 0.9
    assert any("driver keeps" in n and "host RAM" in n for n in b.notes)
    assert not any("driver keeps" in n for n in _est("paged-adamw", gpu="H200-141GB").breakdown.notes)


def test_small_models_page_nothing():
    """Tensors under 1e5 elements keep torch.zeros_like states: a tiny model's paged optimizer is the plain one."""
    from _specs import llama_config

    cfg = llama_config(hidden_size=64, intermediate_size=128, num_hidden_layers=2, vocab_size=500)
    spec = load_model(cfg)
    assert not _big(spec)
    w = make_workload(mode="train", dtype="bf16", optimizer="paged-adamw")
    a = estimate(spec, w, gpu="H100-SXM-80GB").breakdown
    b = estimate(spec, w.replace(optimizer="lion"), gpu="H100-SXM-80GB").breakdown
    assert a["optimizer_states"] == 2 * b["optimizer_states"]
    assert not any("unified memory" in n for n in a.notes)


def test_optimizer_in_backward_reserves_one_gradient_not_one_per_parameter():
    """torchtune's low-memory config (PagedAdamW stepped in backward): one gradient exists at a time, so the
    allocator's reserve for the persistent tensors holds it once (before, a gradient per parameter: +13.5 GB)."""
    from vramlens.estimator.state import train_state

    spec = load_model(MODEL)

    def floor(in_backward: bool) -> int:
        w = make_workload(mode="train", dtype="bf16", batch=2, seq=512, optimizer="paged-adamw",
                          optimizer_in_backward=in_backward, checkpointing="full")
        return train_state(spec, w, None).reserve_floor

    per_param = 13_476_831_232  # the bf16 parameters (or their gradients), each in 512-byte blocks
    small_states = 2_129_920  # PagedAdamW's states of the tensors under 1e5 elements (the norms), not paged
    assert floor(False) == 2 * per_param + small_states == 26_955_792_384
    # the largest gradient, the (32,000 x 4,096) embedding's or output layer's 262,144,000 B, held once
    assert floor(True) == per_param + 262_144_000 + small_states == 13_741_105_152
