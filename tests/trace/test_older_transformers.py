"""Older transformers releases on real torch ops and the tracer: the mechanism behind Workload.legacy_score_clamp
(transformers <= 4.48 OPTAttention clamps its masked scores with ``torch.max(scores + mask, torch.tensor(finfo.min))``,
modeling_opt.py lines 200-203 of the v4.48.0 wheel, and maximum's backward keeps its input; adding the mask keeps
nothing), and the per-block buffers of ModelSpec.legacy_buffers_before, emulated by the tracer."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the saved-tensor count needs the trace extra (torch)")


def _saved_bytes(fn, x):
    saved = []

    def pack(t):
        saved.append(t.untyped_storage().nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(x)
    return sum(saved)


def test_clamp_keeps_the_masked_scores():
    b, a, s = 1, 4, 64
    scores = torch.randn(b, a, s, s, dtype=torch.float16, requires_grad=True)
    mask = torch.triu(torch.full((s, s), torch.finfo(torch.float16).min, dtype=torch.float16), 1)[None, None]
    floor = torch.tensor(torch.finfo(torch.float16).min, dtype=torch.float16)
    assert _saved_bytes(lambda x: x + mask, scores) == 0
    # the masked scores (b, a, s, s) in fp16, and the 0-dim floor: 2 x 4 x 64 x 64 + 2 = 32,770 B
    assert _saved_bytes(lambda x: torch.max(x + mask, floor), scores) == 2 * b * a * s * s + 2 == 32_770


@pytest.mark.slow  # two models traced twice (about 10 s on 2 cores)
def test_older_per_block_buffers_match_trace():
    pytest.importorskip("transformers", reason="tracing needs the trace extra (transformers)")
    from vramlens.estimator import estimate
    from vramlens.trace import trace

    kw = dict(mode="train", dtype="fp16", optimizer="none", loss="logits-sum", batch=1, seq=64, attention="sdpa")
    for name, version, extra in (
        ("gpt2", "4.42", 12 * (1024 * 1024 + 512)),  # 12 blocks: (1, 1, 1,024, 1,024) bool + masked_bias
        # 12 blocks: (1, 1, 2,048, 2,048) bool + masked_bias + inv_freq + two fp32 (2,048, 16) caches
        ("pythia-160m", "4.42", 12 * (2048 * 2048 + 512 + 512 + 2 * 131_072)),
    ):
        today = trace(name, **kw).breakdown
        old = trace(name, **kw, transformers_version=version).breakdown
        assert old["weights"] - today["weights"] == extra
        assert old["weights"] == estimate(name, **kw, transformers_version=version).breakdown["weights"]


@pytest.mark.slow  # OPT-125m traced twice
def test_opt_score_clamp_matches_trace():
    """The tracer runs today's OPTAttention with the clamp of transformers <= 4.48 (build._clamped_eager_attention)."""
    pytest.importorskip("transformers", reason="tracing needs the trace extra (transformers)")
    from vramlens.estimator import estimate
    from vramlens.trace import trace

    kw = dict(mode="train", dtype="fp16", optimizer="none", loss="logits-sum", batch=1, seq=256, attention="eager")
    traced = [trace("opt-125m", **kw, transformers_version=v).breakdown["activations"] for v in (None, "4.45")]
    estimated = [estimate("opt-125m", **kw, transformers_version=v).breakdown["activations"] for v in (None, "4.45")]
    # 12 blocks x (the fp16 masked scores 2 x 12 x 256 x 256 + the 0-dim floor's 512 B block) = 18,880,512 B; the
    # previous step's (key, value) tuples 4.45 returns are as large as the DynamicCache today's returns (both held by
    # the loop: 12 x 2 x 2 B x 768 x 256 = 9,437,184 B in the tracer's activations at the forward's peak)
    assert estimated[1] - estimated[0] == 12 * (2 * 12 * 256 * 256 + 512) == 18_880_512
    assert traced[1] - traced[0] == 18_880_512


@pytest.mark.slow  # SmolLM2-135M traced twice
def test_older_llama_rotary_caches_match_trace():
    pytest.importorskip("transformers", reason="tracing needs the trace extra (transformers)")
    from vramlens.estimator import estimate
    from vramlens.trace import trace

    kw = dict(mode="inference", dtype="fp16", batch=1, seq=64)
    today = trace("smollm2-135m", **kw).breakdown
    old = trace("smollm2-135m", **kw, transformers_version="4.40").breakdown
    # 30 blocks: inv_freq (32 fp32, one 512 B block) and fp16 cos/sin caches of (8,192, 64): 2 x 1,048,576 B
    assert old["weights"] - today["weights"] == 30 * (512 + 2 * 8192 * 64 * 2) == 62_929_920
    assert old["weights"] == estimate("smollm2-135m", **kw, transformers_version="4.40").breakdown["weights"]


@pytest.mark.slow  # SmolLM2-135M traced twice
def test_plain_forward_logits_upcast_matches_trace():
    pytest.importorskip("transformers", reason="tracing needs the trace extra (transformers)")
    from vramlens.estimator import estimate
    from vramlens.trace import trace

    kw = dict(mode="inference", dtype="fp16", batch=2, seq=256, attention="sdpa")
    traced = [trace("smollm2-135m", **kw, transformers_version=v).breakdown.peak_allocated for v in ("4.44", "4.45")]
    est = [estimate("smollm2-135m", **kw, transformers_version=v).breakdown.peak_allocated for v in ("4.44", "4.45")]
    # LlamaForCausalLM before 4.45: every logit upcast to fp32 beside the fp16 ones, 4 B x 49,152 x 2 x 256
    assert traced[0] - traced[1] == est[0] - est[1] == 4 * 49_152 * 2 * 256 == 100_663_296


@pytest.mark.slow  # three models, two attentions, each traced at two releases (about a minute on 2 cores)
@pytest.mark.parametrize("name", ["gpt2", "pythia-160m", "opt-125m"])
@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_legacy_presents_match_trace(name, attention):
    """transformers 4.42's forward returns each block's (key, value) tuple, which the logits-sum loop holds until the
    next forward returns (ModelSpec.legacy_presents; build._hook_legacy_presents and the emulated eager attentions):
    what that adds to each phase's peak, traced against the estimate (with the other 4.42 behaviours: GPT-NeoX's
    fp32 q and k under eager, OPT's score clamp and contiguous heads, the per-block buffers)."""
    pytest.importorskip("transformers", reason="tracing needs the trace extra (transformers)")
    from vramlens.estimator import estimate
    from vramlens.trace import trace

    kw = dict(mode="train", dtype="fp16", optimizer="none", loss="logits-sum", batch=2, seq=512, attention=attention)
    deltas = []
    for run in (trace, estimate):
        phases = [dict(run(name, **kw, transformers_version=v, **({"steps": 2} if run is trace else {})).breakdown.phases)
                  for v in (None, "4.42")]
        deltas.append({p: phases[1][p] - phases[0][p] for p in ("forward", "backward")})
    traced, estimated = deltas
    # today's loop holds a DynamicCache of as many bytes (Workload.outputs_held): kept by the cache as each block's
    # backward frees what SDPA saved, so in backward the two releases differ by where their peaks fall: the same to
    # within 1 MiB (OPT-125m under SDPA: 684,032 B)
    assert traced["forward"] == estimated["forward"], deltas
    assert abs(traced["backward"] - estimated["backward"]) <= 2**20, deltas
