"""watch() on real CPU tensors: steps, categories, explicit steps, the decorator, the report's forms."""

import pytest

pytest.importorskip("torch", reason="vramlens.watch runs inside a torch process (the trace extra)")

import json  # noqa: E402
import re  # noqa: E402

import torch  # noqa: E402
from tests.monitor.loops import BATCH, IN, tiny_model, train  # noqa: E402

import vramlens  # noqa: E402
from vramlens.monitor import CATEGORIES, StepRecord, WatchReport  # noqa: E402

# 64*128 + 128 (first Linear) + 128*1 + 1 (second) = 8_449 float32 parameters
PARAM_BYTES = 8_449 * 4  # 33_796
# AdamW: exp_avg and exp_avg_sq like each parameter, plus a float32 step counter per parameter (4 of them)
ADAMW_BYTES = 2 * PARAM_BYTES + 4 * 4  # 67_608


def test_steps_come_from_the_optimizer_with_exact_categories():
    model = tiny_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with vramlens.watch(model, opt) as w:
        train(model, opt, 5)
    report = w.report
    assert isinstance(report, WatchReport) and report.backend == "cpu"
    assert [s.step for s in report.steps] == [1, 2, 3, 4, 5]
    for s in report.steps[1:]:  # step 1 makes the optimizer state inside its own step
        assert s.categories["parameters"] == PARAM_BYTES
        assert s.categories["gradients"] == PARAM_BYTES
        assert s.categories["optimizer_states"] == ADAMW_BYTES
        assert s.categories["other"] == 0
        assert sum(s.categories.values()) == s.peak_allocated_bytes
        assert s.peak_reserved_bytes is None and s.device_total_bytes is None
        assert s.host_rss_bytes > 0
    # after each steady step: parameters, gradients (zero_grad runs after the hook), state, x and the loss
    assert {s.live_bytes for s in report.steps[1:]} == {PARAM_BYTES * 2 + ADAMW_BYTES + BATCH * IN * 4 + 4}
    assert report.leak is None and report.oom is None
    assert w.steps == report.steps  # the Watch reads through to its report once the block ends


def test_the_peak_is_the_forward_activations_plus_the_state():
    """The steady peak is in backward: everything that lives across steps plus this step's tensors."""
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    with vramlens.watch(model, opt) as w:
        train(model, opt, 3)
    s = w.report.steps[-1]
    assert s.categories["optimizer_states"] == 0  # plain SGD keeps no state
    assert s.categories["activations_and_temporaries"] >= BATCH * IN * 4 + BATCH * 128 * 4  # x and the hidden layer
    assert s.peak_allocated_bytes > s.live_bytes


def test_explicit_steps_and_every():
    model = tiny_model()
    with vramlens.watch(model, every=2) as w:
        for _ in range(6):
            with torch.no_grad():
                model(torch.randn(BATCH, IN))
            w.step()
    assert [s.step for s in w.report.steps] == [2, 4, 6]
    assert all(s.categories["parameters"] == PARAM_BYTES for s in w.report.steps)
    # inference: x (8_192 B), the hidden layer (16_384 B) and the output (128 B) at most
    assert all(s.peak_allocated_bytes - PARAM_BYTES <= 8_192 + 16_384 + 128 + 16_384 for s in w.report.steps)


def test_only_the_given_optimizer_counts():
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    other = torch.optim.SGD([torch.nn.Parameter(torch.zeros(4))], lr=1e-3)
    with vramlens.watch(model, opt) as w:
        train(model, opt, 2)
        other.step()
    assert len(w.report.steps) == 2


def test_as_a_decorator():
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    w = vramlens.watch(model, opt)

    @w
    def run():
        train(model, opt, 3)
        return "done"

    assert run() == "done"
    assert len(w.report.steps) == 3


def test_without_a_model_the_optimizer_names_the_parameters():
    model = tiny_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with vramlens.watch() as w:
        train(model, opt, 3)
    assert w.report.steps[-1].categories["optimizer_states"] == ADAMW_BYTES
    assert w.report.steps[-1].categories["parameters"] == PARAM_BYTES


def test_no_step_says_so():
    with vramlens.watch() as w:
        torch.ones(3)
    assert w.report.steps == ()
    assert any("no optimizer step was seen" in n for n in w.report.notes)


def test_to_dict_is_json_and_html_is_self_contained():
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    with vramlens.watch(model, opt) as w:
        train(model, opt, 3)
    d = json.loads(json.dumps(w.report.to_dict()))
    assert d["steps"][0]["categories"].keys() == set(CATEGORIES)
    assert d["environment"]["torch"] == torch.__version__
    html = w.report.to_html()
    assert html.startswith("<!DOCTYPE html>") and "<script" not in html
    assert re.search(r"(src|href)=[\"']?https?:", html) is None  # nothing fetched: it opens offline
    assert 'id="timeline"' in html and 'id="steps"' in html and "No leak" in html
    again = vramlens.monitor.report_from_dict(d)
    assert again.steps[0] == StepRecord(**d["steps"][0])


def test_bad_arguments_name_the_value():
    with pytest.raises(ValueError, match=r"every=0 must be >= 1"):
        vramlens.watch(every=0)
    with pytest.raises(ValueError, match=r"backend='tpu' is not one of: auto, cpu, cuda"):
        vramlens.watch(backend="tpu")


def test_each_name_means_one_thing():
    """``vramlens.watch`` is the function whatever was imported before; the package is vramlens.monitor."""
    import vramlens.monitor as pkg
    import vramlens.serving  # noqa: F401

    assert vramlens.watch is pkg.watch and callable(vramlens.watch)
    assert vramlens.capacity is vramlens.serving.capacity
    w = vramlens.watch(store=False)
    assert type(w).__name__ == "Watch"
