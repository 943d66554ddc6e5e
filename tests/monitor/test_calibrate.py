"""calibrate: the fit (exact arithmetic) and, on real CPU steps, max_batch against a real binary search."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="vramlens.watch runs inside a torch process (the trace extra)")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

import vramlens  # noqa: E402
from vramlens.monitor.calibration import Point, fit  # noqa: E402
from vramlens.monitor.cpu import CpuOutOfMemoryError  # noqa: E402

# ---- the fit ------------------------------------------------------------------------------------


def test_linear_fit_and_max_batch():
    # 1,000 B fixed + 300 B per sample; capacity 10,000 B with 10% kept: (9,000 - 1,000) // 300 = 26
    c = fit([Point(1, None, 1_300), Point(2, None, 1_600)], capacity_bytes=10_000, margin=0.1)
    assert (c.fixed_bytes, c.per_sample_bytes, c.max_batch, c.max_seq) == (1_000, 300, 26, None)
    assert c.predict(26) == 8_800 <= c.usable_bytes == 9_000 < c.predict(27)


def test_quadratic_fit_recovers_alpha_beta_and_max_seq():
    # peak = 500 + b * (4 * s + 0.5 * s**2)
    def peak(b, s):
        return int(500 + b * (4 * s + 0.5 * s * s))

    pts = [Point(b, s, peak(b, s)) for s in (16, 32) for b in (1, 2)]
    c = fit(pts, capacity_bytes=100_000, margin=0.0)
    assert (c.fixed_bytes, c.alpha_bytes, c.beta_bytes, c.seq_ref) == (500, 4.0, 0.5, 16)
    # per sample at s=16: 64 + 128 = 192; (100,000 - 500) // 192 = 518
    assert c.max_batch == 518
    # at b=1: 0.5 s^2 + 4 s <= 99,500 -> s = 442 (0.5*442^2 + 4*442 = 99,450; s = 443 gives 99,896.5)
    assert c.max_seq == 442


def test_bad_points_and_margin_are_refused():
    with pytest.raises(ValueError, match="margin=1.5 must be in"):
        fit([Point(1, None, 1), Point(2, None, 2)], capacity_bytes=10, margin=1.5)
    with pytest.raises(ValueError, match="two batch sizes"):
        fit([Point(1, None, 1)], capacity_bytes=10)


def test_bad_sizes_are_refused_in_one_message():
    with pytest.raises(ValueError) as e:
        vramlens.calibrate(lambda b: None, batch_sizes=(2, 1), seq_lens=(8,), margin=-1)
    assert str(e.value) == ("batch_sizes=(2, 1) must be two whole numbers >= 1, smallest first, such as (1, 2); "
                            "seq_lens=(8,) must be two whole numbers >= 1, smallest first, such as (1, 2); "
                            "margin=-1 must be in [0, 1): e.g. 0.1 keeps 10% of the capacity free")


def test_no_capacity_answers_nothing_and_says_so():
    c = fit([Point(1, None, 1_300), Point(2, None, 1_600)], capacity_bytes=None)
    assert c.max_batch is None
    assert c.notes == ("no capacity given: pass gpu= or capacity_bytes= for max_batch and max_seq",)


# ---- real CPU steps ----------------------------------------------------------------------------

IN, HIDDEN = 256, 512


def setup():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(b: int) -> None:
        loss = model(torch.randn(b, IN)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()

    return model, opt, step


def fits_under_cap(model, opt, step, b: int, cap: int) -> bool:
    try:
        with vramlens.watch(model, opt, backend="cpu", cpu_limit_bytes=cap, store=False):
            step(b)
    except CpuOutOfMemoryError:
        return False
    return True


def largest_batch_under_cap(model, opt, step, cap: int) -> int:
    """The real answer: double until the cap raises, then bisect."""
    lo, hi = 0, 1
    while fits_under_cap(model, opt, step, hi, cap):
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits_under_cap(model, opt, step, mid, cap) else (lo, mid)
    return lo


def test_max_batch_matches_a_real_binary_search_under_a_cpu_cap():
    model, opt, step = setup()
    # 394,753 parameters (256*512 + 512 + 512*512 + 512 + 513) x 4 B = 1,579,012 B each for the weights,
    # gradients and two Adam moments: 6.3 MB; the rest of the cap for activations
    cap = 12_000_000
    # The step's peak is the largest of its phases' peaks, each linear in the batch: up to a batch of about
    # 300 it is Adam's update (8.4 MB, the same for every batch), then a phase growing 7,168 B per sample,
    # from about 450 backward's 9,216 B per sample (2,304 floats). A two-point fit extrapolates the phase
    # it measured, so the sizes measured are in the last one, as near the answer as one can run.
    c = vramlens.calibrate(step, batch_sizes=(512, 640), model=model, optimizer=opt, backend="cpu",
                           capacity_bytes=cap, margin=0.0)
    real = largest_batch_under_cap(model, opt, step, cap)
    assert real > 640  # the answer is an extrapolation, not one of the measured sizes
    assert c.max_batch is not None and abs(c.max_batch - real) <= max(1, real // 100), (c.max_batch, real, c.text())
    # with the default 10% margin the answer is below the real limit
    safe = vramlens.calibrate(step, batch_sizes=(512, 640), model=model, optimizer=opt, backend="cpu",
                              capacity_bytes=cap)
    assert safe.max_batch is not None and safe.max_batch < real
    assert fits_under_cap(model, opt, step, safe.max_batch, cap)


def test_max_seq_matches_a_real_search_with_eager_attention():
    torch.manual_seed(0)
    d = 32
    proj = nn.Linear(d, d)
    opt = torch.optim.SGD(proj.parameters(), lr=0.1)

    def step(b: int, s: int) -> None:
        x = proj(torch.randn(b, s, d))
        scores = (x @ x.transpose(1, 2)).softmax(-1)   # (b, s, s): eager attention's scores
        (scores @ x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()

    def fits(s: int, cap: int) -> bool:
        try:
            with vramlens.watch(proj, opt, backend="cpu", cpu_limit_bytes=cap, store=False):
                step(1, s)
        except CpuOutOfMemoryError:
            return False
        return True

    # From s = 128 the peak per sample is 384 s + 12 s^2 bytes (three (s, s) float32 tensors alive in
    # backward); below it another phase makes the peak, so the lengths measured are 256 and 512.
    cap = 13_000_000
    c = vramlens.calibrate(step, batch_sizes=(1, 2), seq_lens=(256, 512), model=proj, optimizer=opt,
                           backend="cpu", capacity_bytes=cap, margin=0.0)
    assert (c.alpha_bytes, c.beta_bytes) == (384.0, 12.0)
    lo, hi = 512, 2048  # fits(512) and not fits(2048): 12 * 2048^2 alone is 50 MB
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid, cap) else (lo, mid)
    assert c.max_seq is not None and abs(c.max_seq - lo) <= lo // 100, (c.max_seq, lo, c.text())


def test_the_analytic_estimate_is_beside_the_measurement():
    model, opt, step = setup()
    c = vramlens.calibrate(step, model=model, optimizer=opt, backend="cpu", capacity_bytes=10_000_000,
                           model_name="gpt2", workload={"mode": "train", "seq": 128})
    assert all(p.estimate_bytes is not None and p.estimate_bytes > 0 for p in c.points)
    assert "estimate" in c.text()


# ---- the command ------------------------------------------------------------------------------

SCRIPT = """
import argparse, torch, torch.nn as nn
ap = argparse.ArgumentParser()
ap.add_argument("--batch-size", type=int, default=8)
a = ap.parse_args()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(100):
    model(torch.randn(a.batch_size, 64)).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
print("ran to the end")
"""


def test_calibrate_command_runs_the_script_at_two_sizes(tmp_path, capfd):
    import json
    import sys

    from vramlens.cli.calibrate_cmd import with_value
    from vramlens.cli.main import main

    assert with_value(["t.py", "--batch-size=3"], "--batch-size", 8) == ["t.py", "--batch-size=8"]
    assert with_value(["t.py"], "--batch-size", 8) == ["t.py", "--batch-size", "8"]
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    code = main(["calibrate", "--json", "--cpu-limit", "4MB", "--margin", "0", "--batch-sizes", "64", "128",
                 "--", sys.executable, str(path), "--batch-size", "8"])
    out, _err = capfd.readouterr()
    assert code == 0
    assert "ran to the end" not in out  # stopped after the warm-up and two steps
    d = json.loads(out[out.index("{"):])
    assert [(p["batch"], p["seq"]) for p in d["points"]] == [(64, None), (128, None)]
    a, b = (p["peak_bytes"] for p in d["points"])
    per = b - a
    assert per % 64 == 0 and d["per_sample_bytes"] == per // 64
    assert d["max_batch"] == (4_000_000 - (a - 64 * (per // 64))) // (per // 64)
