"""The OOM post-mortem, driven on CPU by the CPU backend's cap."""

import pytest

pytest.importorskip("torch", reason="vramlens.watch runs inside a torch process (the trace extra)")

import torch  # noqa: E402
from tests.monitor.loops import tiny_model, train  # noqa: E402

import vramlens  # noqa: E402
from vramlens.monitor.cpu import CpuOutOfMemoryError  # noqa: E402

# parameters 33_796 B (see test_watch_cpu.py); the 8_192 B input and a 16_384 B hidden layer do not fit beside them
CAP = 50_000


def test_a_cap_raises_torchs_oom_with_a_post_mortem():
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    w = vramlens.watch(model, opt, cpu_limit_bytes=CAP)
    with pytest.raises(torch.OutOfMemoryError) as info, w:
        train(model, opt, 3)
    assert isinstance(info.value, CpuOutOfMemoryError)
    oom = w.report.oom
    assert oom.kind == "cpu_limit" and oom.limit_bytes == CAP and oom.step == 0
    # x (8_192 B) fits beside the parameters; the first Linear's output (32*128*4 = 16_384 B) does not
    assert oom.requested_bytes == 16_384
    assert oom.live_bytes == 33_796 + 8_192
    assert oom.categories["parameters"] == 33_796
    assert oom.categories["activations_and_temporaries"] == 8_192
    assert oom.by_module == {"0": 33_280, "": 8_192, "2": 516}  # parameters by module; x outside the model
    text = oom.text()
    assert "failing allocation: 16.00 KiB (16,384 B) with 41.00 KiB alive of 48.83 KiB" in text
    assert "pass model_name= and workload= to watch()" in text
    assert text in "\n".join(getattr(info.value, "__notes__", []))  # the traceback carries it


def test_the_module_that_allocated_is_named():
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    # room for the forward but not for backward's gradients
    w = vramlens.watch(model, opt, cpu_limit_bytes=33_796 + 8_192 + 2 * 16_384 + 128 + 128 + 4)
    with pytest.raises(torch.OutOfMemoryError), w:
        train(model, opt, 1)
    oom = w.report.oom
    assert oom.by_module["0"] == (64 * 128 + 128) * 4  # Linear 0's parameters; its output died in ReLU
    assert oom.by_module["1"] == 32 * 128 * 4            # ReLU's output, saved for backward
    assert oom.by_module["2"] == (128 + 1) * 4           # Linear 2's parameters (its output died in pow's backward)
    assert oom.by_module[""] == 8_192 + 4 + 4            # x, the loss and backward's seed 1.0, outside the model
    assert oom.by_module["<backward>"] == 32 * 128 * 4 + 32 * 4  # gradients of the ReLU output and the output
    assert sum(oom.by_module.values()) == oom.live_bytes


def test_the_estimate_and_three_fixes_come_with_a_workload():
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    w = vramlens.watch(model, opt, cpu_limit_bytes=CAP, model_name="gpt2",
                       workload={"mode": "train", "batch": 64, "seq": 1024}, gpu="8GB")
    with pytest.raises(torch.OutOfMemoryError), w:
        train(model, opt, 1)
    oom = w.report.oom
    est = vramlens.estimate("gpt2", mode="train", batch=64, seq=1024, gpu="8GB")
    assert oom.estimate_bytes == est.breakdown.device_total
    assert len(oom.fixes) == 3 and all(f.fits for f in oom.fixes)
    assert all(f.device_total_bytes <= 8 * 10**9 for f in oom.fixes)
    assert all(f.flags and f.flags[0].startswith("--") for f in oom.fixes)
    assert "--mode" not in oom.fixes[0].flags  # only what changes
    assert "fix 1: vramlens estimate ... --" in oom.text()


def test_a_bad_workload_is_a_note_not_a_second_error():
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    w = vramlens.watch(model, opt, cpu_limit_bytes=CAP, model_name="gpt2", workload={"batch_size": 4}, gpu="8GB")
    with pytest.raises(torch.OutOfMemoryError), w:
        train(model, opt, 1)
    (note,) = w.report.oom.notes
    assert note.startswith("the estimate and fixes could not be made: unknown workload setting 'batch_size'")
