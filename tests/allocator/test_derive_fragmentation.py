"""scripts/derive_fragmentation.py: the share of short-lived bytes the analytic reserve must allow.

A worked example pins the arithmetic (allocator.analytic's terms); two traced rows pin what the
script measures; the slow test re-runs the whole derivation and checks that the constants in
allocator.analytic are its medians.
"""

import importlib.util
import statistics
from pathlib import Path
from types import SimpleNamespace

import pytest

from vramlens.allocator.analytic import EXPANDABLE_FRAGMENTATION, TRANSIENT_FRAGMENTATION

MiB = 1024 * 1024
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "derive_fragmentation.py"
EXPANDABLE = "expandable_segments:True"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("derive_fragmentation", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _ev(action, storage, nbytes, tag):
    return SimpleNamespace(action=action, storage=storage, nbytes=nbytes, tag=tag)


def test_share_by_hand(script):
    # an 8 MiB weight, a 30 MiB activation freed, then a 40 MiB temporary (the allocated peak: 8 + 40 MiB)
    events = [_ev("alloc", 1, 8 * MiB, "parameter"), _ev("alloc", 2, 30 * MiB, "activation"),
              _ev("free", 2, 0, "activation"), _ev("alloc", 3, 40 * MiB, "temporary")]
    r = script.allowance(events, None)
    # default: the weight in a 20 MiB segment; the cached 30 MiB segment cannot hold 40 MiB: a new one, 90 MiB
    assert (r["peak_reserved"], r["persistent_reserved"], r["short_lived"]) == (90 * MiB, 20 * MiB, 40 * MiB)
    # (90 - 20 - (20 + 2) partly used segments - 40) / 40
    assert r["share"] == pytest.approx(8 / 40)
    r = script.allowance(events, EXPANDABLE)
    # one segment grown by 20 MiB pages: the 40 MiB temporary reuses the freed 30 MiB and maps up to 48 MiB: 60 MiB
    assert (r["peak_reserved"], r["persistent_reserved"]) == (60 * MiB, 20 * MiB)
    assert r["share"] == pytest.approx((60 - 20 - 20 - 40) / 40)


@pytest.mark.parametrize("name, default, expandable", [
    # measured when the constants were derived (scripts/derive_fragmentation.py --layers 4: the configs as written)
    ("llama-d1024 fp32 b2 s512", 0.1511, 0.0697),
    ("gpt2-d768 bf16 ckpt b8 s1024", 0.1541, 0.1817),
])
def test_traced_rows(script, name, default, expandable):
    pytest.importorskip("torch", reason="the steps are traced with torch (the trace extra)")
    from vramlens.trace import trace
    from vramlens.workload import make_workload

    cfg, fields = next((c, f) for n, c, f in script.WORKLOADS if n == name)
    events = trace(cfg, make_workload(mode="train", optimizer="adamw", **fields), steps=2).events
    assert script.allowance(events, None)["share"] == pytest.approx(default, abs=5e-4)
    assert script.allowance(events, EXPANDABLE)["share"] == pytest.approx(expandable, abs=5e-4)


@pytest.mark.slow  # 27 traced 28-block workloads, two steps each: about 4 minutes on 2 cores
def test_constants_are_the_derivations_medians(script):
    pytest.importorskip("torch", reason="the steps are traced with torch (the trace extra)")
    from vramlens.trace import trace
    from vramlens.workload import make_workload

    shares = {"default": [], "expandable": []}
    for _, cfg, fields in script.WORKLOADS:
        events = trace(script.with_layers(cfg, script.DERIVATION_LAYERS), make_workload(mode="train", optimizer="adamw", **fields), steps=2).events
        for setting, conf in script.SETTINGS.items():
            shares[setting].append(script.allowance(events, conf)["share"])
    assert len(shares["default"]) >= 24
    assert round(statistics.median(shares["default"]), 2) == TRANSIENT_FRAGMENTATION
    assert round(statistics.median(shares["expandable"]), 2) == EXPANDABLE_FRAGMENTATION
