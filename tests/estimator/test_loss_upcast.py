"""--no-loss-upcast: LitGPT's chunked_cross_entropy (F.cross_entropy on each bf16 logits chunk, no .float()) against
torchtune's CEWithChunkedOutputLoss (each chunk upcast to fp32). Qwen2.5 0.5B's vocabulary (151,936) at 2 x 256
tokens in 2 chunks of 256 tokens."""

import pytest

from vramlens.errors import ConfigError
from vramlens.estimator import estimate
from vramlens.estimator.losses import loss_figures
from vramlens.models import load_model
from vramlens.units import BLOCK, round_up
from vramlens.workload import make_workload

RUN = dict(mode="train", dtype="bf16", method="lora", lora_dtype="bf16", batch=2, seq=256, loss_chunks=2)
V, CHUNK = 151_936, 2 * 128  # tokens per chunk: batch 2 x 128


def test_the_log_softmax_stays_in_the_logits_dtype():
    spec = load_model("qwen2.5-0.5b")
    up = loss_figures(spec, make_workload(**RUN), 2, 256)
    down = loss_figures(spec, make_workload(**RUN, loss_upcast=False), 2, 256)
    assert up is not None and down is not None
    lc, fc = round_up(2 * V * CHUNK, BLOCK), round_up(4 * V * CHUNK, BLOCK)
    assert (up.saved, down.saved) == (2 * fc, 2 * lc) == (311_164_928, 155_582_464)
    assert up.peak == 2 * lc + 2 * fc + fc and down.peak == 4 * lc  # no fp32 upcast
    # the last chunk's two gradients beside the first chunk's logit gradient (in the logits' dtype), 2 chunks
    assert (up.backward, down.backward) == (lc + 2 * fc, 3 * lc)
    assert (up.backward_over, down.backward_over) == (2 * fc, 2 * lc)  # beyond the saved log_softmax outputs
    assert "LitGPT's chunked_cross_entropy" in down.formula


def test_refused_without_a_chunked_cross_entropy():
    with pytest.raises(ConfigError, match="loss_upcast=false describes a chunked cross-entropy"):
        make_workload(mode="train", loss_upcast=False)
    with pytest.raises(ConfigError, match="loss_upcast=false"):
        make_workload(mode="train", loss_chunks=4, loss="fused-linear", loss_upcast=False)


@pytest.mark.slow
def test_the_tracer_sees_the_same_difference():
    """The tracer runs the chunked loss with and without .float() on the real module: the peak moves by the
    estimate's figure (the estimate's own peak is 69 MB over the trace's either way, at this small size)."""
    pytest.importorskip("torch", reason="the tracer needs torch")
    from vramlens.trace import trace

    peaks = {}
    for upcast in (True, False):
        t = trace("qwen2.5-0.5b", **RUN, loss_upcast=upcast)
        e = estimate("qwen2.5-0.5b", **RUN, loss_upcast=upcast)
        peaks[upcast] = (t.breakdown.peak_allocated, e.breakdown.peak_allocated)
    traced = peaks[True][0] - peaks[False][0]
    estimated = peaks[True][1] - peaks[False][1]
    assert abs(traced - estimated) <= 64 * 1024, (traced, estimated)


def test_fabric_output_upcast_holds_fp32_logits():
    """--output-upcast (Lightning Fabric's convert_output in LitGPT's loop): every chunk's fp32 copy held by the loop
    and its fp32 log_softmax kept; the half chunks and the previous step's copies only beside the cast."""
    spec = load_model("qwen2.5-0.5b")
    lc, f32 = round_up(2 * V * CHUNK, BLOCK), round_up(4 * V * CHUNK, BLOCK)
    step = loss_figures(spec, make_workload(**RUN, loss_upcast=False, output_upcast=True, holds_outputs="step"), 2, 256)
    nxt = loss_figures(spec, make_workload(**RUN, loss_upcast=False, output_upcast=True, holds_outputs="next-forward"),
                       2, 256)
    # held through backward at least: a loop said to hold nothing is the step's
    assert loss_figures(spec, make_workload(**RUN, loss_upcast=False, output_upcast=True), 2, 256) == step
    assert step is not None and nxt is not None
    # 2 chunks: the fp32 copies (2 x 155,582,464 B) held, and the two fp32 log_softmax outputs
    assert (step.saved, step.held, step.backward) == (4 * f32, 2 * f32, 2 * f32) == (622_329_856, 311_164_928,
                                                                                     311_164_928)
    assert step.peak == 4 * f32  # the cast's moment (2 half + 2 fp32 chunks) is below the loss'
    assert nxt.peak == 2 * lc + 2 * f32 + 2 * f32  # ... unless the previous step's fp32 copies are still held
    assert "Lightning Fabric's convert_output" in step.formula


def test_fabric_output_upcast_refused_without_litgpt_chunked_loss():
    with pytest.raises(ConfigError, match="output_upcast=true describes LitGPT's chunked logits"):
        make_workload(**RUN, output_upcast=True)  # the loss upcasts each chunk itself
    with pytest.raises(ConfigError, match="output_upcast=true describes"):
        make_workload(mode="train", output_upcast=True)
    with pytest.raises(ConfigError, match="output_upcast='always' must be true or false"):
        make_workload(**RUN, loss_upcast=False, output_upcast="always")
