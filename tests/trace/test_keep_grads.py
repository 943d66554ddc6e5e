"""zero_grad(set_to_none=False) keeps the gradients through the next forward: traced and estimated."""

from vramlens.estimator import estimate
from vramlens.estimator.runtime import runtime
from vramlens.models import load_model
from vramlens.trace import trace


def test_kept_gradients_raise_the_peak_by_the_gradients_in_trace_and_estimate():
    spec = load_model("vramlens/tiny-llama")
    kw = dict(mode="train", dtype="fp32", batch=2, seq=64)
    peaks = {}
    for keep in (False, True):
        traced = trace(spec, keep_grads=keep, **kw).breakdown
        est = estimate(spec, keep_grads=keep, **kw)
        est_peak = est.breakdown.peak_allocated - runtime(est.gpu, est.workload).workspace_bytes
        assert abs(est_peak / traced.peak_allocated - 1) < 0.05, (keep, est_peak, traced.peak_allocated)
        peaks[keep] = (traced.peak_allocated, est_peak, traced["gradients"])
    # the forward of step 2 now also holds every gradient
    assert peaks[True][0] > peaks[False][0] and peaks[True][1] > peaks[False][1]
