"""scripts/derive_fragmentation.py: what the analytic reserve must allow for the short-lived tensors.

A worked example pins the arithmetic (allocator.analytic's terms); two traced rows pin what the
script measures; the slow test re-runs the whole derivation and checks that the constants in
allocator.analytic are its medians: per byte of the loss' largest tensor over every depth, and as a
share of the short-lived bytes (inference's allowance) at 28 blocks.
"""

from types import SimpleNamespace

import pytest

from script_module import load_script
from vramlens.allocator.analytic import (
    EXPANDABLE_FRAGMENTATION,
    EXPANDABLE_LOSS_TENSOR_ALLOWANCE,
    LOSS_TENSOR_ALLOWANCE,
    TRANSIENT_FRAGMENTATION,
)

MiB = 1024 * 1024
EXPANDABLE = "expandable_segments:True"


@pytest.fixture(scope="module")
def script():
    return load_script("derive_fragmentation")


def _ev(action, storage, nbytes, tag):
    return SimpleNamespace(action=action, storage=storage, nbytes=nbytes, tag=tag)


def test_share_by_hand(script):
    # an 8 MiB weight, a 30 MiB activation freed, then a 40 MiB temporary (the allocated peak: 8 + 40 MiB)
    events = [_ev("alloc", 1, 8 * MiB, "parameter"), _ev("alloc", 2, 30 * MiB, "activation"),
              _ev("free", 2, 0, "activation"), _ev("alloc", 3, 40 * MiB, "temporary")]
    # the 40 MiB temporary taken as the loss' largest tensor
    r = script.allowance(events, None, 40 * MiB)
    # default: the weight in a 20 MiB segment; the cached 30 MiB segment cannot hold 40 MiB: a new one, 90 MiB
    assert (r["peak_reserved"], r["persistent_reserved"], r["short_lived"]) == (90 * MiB, 20 * MiB, 40 * MiB)
    # 90 - 20 - (20 + 2) partly used segments - 40 = 8 MiB, over 40 MiB short-lived and over the 40 MiB tensor
    assert r["excess"] == 8 * MiB
    assert r["share"] == r["per_loss_tensor"] == pytest.approx(8 / 40)
    r = script.allowance(events, EXPANDABLE, 40 * MiB)
    # one segment grown by 20 MiB pages: the 40 MiB temporary reuses the freed 30 MiB and maps up to 48 MiB: 60 MiB
    assert (r["peak_reserved"], r["persistent_reserved"]) == (60 * MiB, 20 * MiB)
    assert r["share"] == r["per_loss_tensor"] == pytest.approx((60 - 20 - 20 - 40) / 40)
    assert script.allowance(events, None)["per_loss_tensor"] == 0.0  # no loss tensor given


@pytest.mark.parametrize("name, loss_mib, default, expandable", [
    # measured when the constants were derived (scripts/derive_fragmentation.py --layers 4: the configs as written):
    # (excess per loss tensor, share of the short-lived bytes)
    ("llama-d1024 fp32 b2 s512", 125, (1.0394, 0.1511), (0.4794, 0.0697)),
    ("gpt2-d768 bf16 ckpt b8 s1024", 1571, (0.4701, 0.1541), (0.5541, 0.1817)),
])
def test_traced_rows(script, name, loss_mib, default, expandable):
    pytest.importorskip("torch", reason="the steps are traced with torch (the trace extra)")
    from vramlens.trace import trace

    cfg, fields = next((c, f) for n, c, f in script.WORKLOADS if n == name)
    w = script.workload(fields)
    events = trace(cfg, w, steps=2).events
    # fp32 logits (b*s*V*4: 2 x 512 x 32,000 x 4 B = 125 MiB); GPT-2's fp32 upcast (8 x 1024 x 50,257 x 4 B)
    loss = script.loss_tensor(cfg, w)
    assert round(loss / MiB) == loss_mib
    for conf, (per_loss, share) in ((None, default), (EXPANDABLE, expandable)):
        r = script.allowance(events, conf, loss)
        assert r["per_loss_tensor"] == pytest.approx(per_loss, abs=5e-4)
        assert r["share"] == pytest.approx(share, abs=5e-4)


@pytest.mark.slow  # 27 workloads traced at 4, 12 and 28 blocks, two steps each: about 7 minutes on 2 cores
def test_constants_are_the_derivations_medians(script):
    pytest.importorskip("torch", reason="the steps are traced with torch (the trace extra)")

    rows = script.derive()
    assert len(rows) == 3 * len(script.WORKLOADS) >= 72
    every = script.medians(rows)
    assert round(every["default"]["per_loss_tensor"], 2) == LOSS_TENSOR_ALLOWANCE
    assert round(every["expandable"]["per_loss_tensor"], 2) == EXPANDABLE_LOSS_TENSOR_ALLOWANCE
    # inference's share of the short-lived bytes: the 28-block rows
    deep = script.medians([r for r in rows if r["layers"] == 28])
    assert round(deep["default"]["share"], 2) == TRANSIENT_FRAGMENTATION
    assert round(deep["expandable"]["share"], 2) == EXPANDABLE_FRAGMENTATION
