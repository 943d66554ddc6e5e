"""--holds-outputs traced on the real modules: the loop keeps ``outputs = model(**batch)`` (its logits and the
DynamicCache today's transformers builds with the config's use_cache) until the next forward returns. What holding
adds to each phase, traced, equals what it adds to the estimate (tests/estimator/test_holds_outputs.py has the
arithmetic)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="tracing needs the trace extra (torch)")
pytest.importorskip("transformers", reason="tracing needs the trace extra (transformers)")

from vramlens.estimator import estimate  # noqa: E402
from vramlens.trace import trace  # noqa: E402

BASE = dict(mode="train", dtype="bf16", batch=2, seq=64)


def _added(model: str, held: str = "next-forward", **kw) -> tuple[dict[str, int], dict[str, int]]:
    """(traced, estimated) bytes that --holds-outputs HELD adds to each phase's peak."""
    def traced(h: str) -> dict[str, int]:
        return {p: b for s, p, b in trace(model, **BASE, **kw, holds_outputs=h, steps=2).phase_peaks if s == 2}

    def estimated(h: str) -> dict[str, int]:
        return dict(estimate(model, **BASE, **kw, holds_outputs=h).breakdown.phases)

    t0, t1, e0, e1 = traced("none"), traced(held), estimated("none"), estimated(held)
    phases = ("forward", "backward", "optimizer")
    return {p: t1[p] - t0[p] for p in phases}, {p: e1[p] - e0[p] for p in phases}


@pytest.mark.parametrize("model, kw", [
    ("tiny-llama", {}),                              # separate projections, GQA under SDPA: nothing beyond autograd
    ("tiny-llama", {"attention": "eager"}),          # repeat_kv's copies kept: the cache's copies on top
    ("tiny-llama", {"checkpointing": "full"}),       # gradient checkpointing turns use_cache off: the logits only
    ("tiny-llama", {"method": "lora"}),
    ("tiny-gpt2", {}),                               # q a view of c_attn's output: the copies on top
    ("tiny-gpt2", {"attention": "eager"}),
])
def test_what_holding_adds_is_traced(model, kw):
    traced, estimated = _added(model, **kw)
    assert traced["optimizer"] > 0
    for phase in traced:
        # each tensor of the estimate is counted in 512-byte blocks; the tiny models' cache layers are under one
        assert abs(traced[phase] - estimated[phase]) <= 2 * 512 * 4, (phase, traced, estimated)


@pytest.mark.parametrize("model", ["tiny-llama", "tiny-gpt2"])
def test_held_through_its_own_step_only(model):
    # --holds-outputs step (``del outputs`` once backward is done): this step's outputs in backward, nothing of the
    # previous step at the next forward and nothing left for the optimizer step, traced as estimated
    traced, estimated = _added(model, "step")
    assert traced["backward"] > 0 and traced["optimizer"] == 0
    for phase in traced:
        assert abs(traced[phase] - estimated[phase]) <= 2 * 512 * 4, (phase, traced, estimated)
