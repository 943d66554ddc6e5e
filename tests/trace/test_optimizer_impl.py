"""--optimizer-impl in the tracer: torch.optim's foreach, fused and per-tensor paths run as asked, and what each
holds in the step agrees with the estimate (estimator.optimizer.optimizer_step_temporary)."""

import pytest

from vramlens.estimator import estimate
from vramlens.models import load_model
from vramlens.trace import trace
from vramlens.trace.runner import make_optimizer

torch = pytest.importorskip("torch")


def _optimizer_phase(result) -> int:
    """The traced peak of the optimizer step."""
    return max(v for name, v in result.breakdown.phases if name.startswith("optimizer"))


@pytest.mark.parametrize("name", ["adamw", "adam", "sgd", "sgd-momentum"])
@pytest.mark.parametrize("impl", ["foreach", "fused", "loop"])
def test_make_optimizer_takes_the_implementation(name, impl):
    opt = make_optimizer(name, [torch.nn.Parameter(torch.zeros(4))], impl)
    group = opt.param_groups[0]
    assert group["foreach"] is (impl == "foreach")
    assert bool(group.get("fused")) is (impl == "fused")


def test_each_implementation_traces_what_the_estimate_counts():
    """fp32 AdamW on a tiny Llama: foreach holds sqrt(exp_avg_sq) of every parameter, the per-tensor loop the square
    root and its quotient of the largest one, fused nothing; traced, the optimizer step's peak differs by the same
    bytes as the estimate's temporaries."""
    spec = load_model("vramlens/tiny-llama")
    kw = dict(mode="train", dtype="fp32", batch=2, seq=64)
    traced, est = {}, {}
    for impl in ("foreach", "fused", "loop"):
        traced[impl] = _optimizer_phase(trace(spec, optimizer_impl=impl, **kw))
        est[impl] = _optimizer_phase(estimate(spec, optimizer_impl=impl, **kw))
    assert traced["foreach"] > traced["fused"] and traced["loop"] > traced["fused"]
    for a, b in (("foreach", "fused"), ("loop", "fused"), ("foreach", "loop")):
        assert traced[a] - traced[b] == pytest.approx(est[a] - est[b], rel=0.02, abs=4096), (a, b, traced, est)
