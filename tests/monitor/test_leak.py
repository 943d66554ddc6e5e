"""Leak detection: Theil-Sen on what survives each step, the allocation site of the survivors."""

import pytest

pytest.importorskip("torch", reason="vramlens.watch runs inside a torch process (the trace extra)")

from pathlib import Path  # noqa: E402

import torch  # noqa: E402
from tests.monitor.loops import tiny_model, train  # noqa: E402

import vramlens  # noqa: E402
from vramlens.monitor.leak import find_growth, theil_sen  # noqa: E402

LOOPS = Path(__file__).with_name("loops.py")
LEAK_LINE = next(i for i, line in enumerate(LOOPS.read_text().splitlines(), 1) if "# LEAK" in line)


def test_theil_sen_is_the_median_pairwise_slope():
    assert theil_sen([0, 2, 4, 6]) == 2.0
    # one outlier (a checkpoint save) does not move it: slopes 1 except those touching the 100
    assert theil_sen([0, 1, 2, 100, 4, 5, 6]) == 1.0
    assert theil_sen([5]) == 0.0
    assert theil_sen([3, 1], [2, 4]) == -1.0


def test_find_growth_needs_a_steady_rise_after_warmup():
    steps = list(range(1, 21))
    assert find_growth(steps, [10_000 * s for s in steps]).bytes_per_step == 10_000
    assert find_growth(steps, [5_000] * 20) is None
    # a step up and a plateau: the median slope is 0
    assert find_growth(steps, [0] * 10 + [1_000_000] * 10) is None
    # warm-up steps alone cannot make a leak
    assert find_growth(steps, [1_000_000 if s <= 2 else 0 for s in steps]) is None
    # too few points after warm-up
    assert find_growth(steps[:9], [10_000 * s for s in steps[:9]]) is None


def test_a_kept_graph_is_found_within_50_steps_with_its_line():
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    history: list = []
    with vramlens.watch(model, opt) as w:
        train(model, opt, 50, history=history)
    leak = w.report.leak
    assert leak is not None and leak.measured == "retained"
    # each kept graph holds what its backward would need: x for the first Linear (32*64*4 = 8_192 B),
    # the ReLU output for ReLU and the second Linear (32*128*4 = 16_384 B), the output for pow
    # (32*1*4 = 128 B), and the kept mean itself (4 B): 24_708 B
    assert leak.bytes_per_step == 24_708
    top = leak.sites[0]
    assert top.where == f"{LOOPS}:{LEAK_LINE} in train"
    assert w.report.leak.first_step <= 50


def test_a_clean_loop_has_no_leak():
    model = tiny_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with vramlens.watch(model, opt) as w:
        train(model, opt, 30)
    assert w.report.leak is None
    assert {s.retained_bytes for s in w.report.steps[2:]} == {0}


def test_inputs_that_grow_are_not_a_leak():
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    with vramlens.watch(model, opt) as w:
        train(model, opt, 20, grow_batch=True)
    assert w.report.leak is None
    peaks = [s.peak_allocated_bytes for s in w.report.steps]
    assert peaks[-1] > peaks[2] * 5
    assert any("the inputs grow, this is not a leak" in n for n in w.report.notes)


@pytest.mark.parametrize("steps", [12])
def test_the_leak_text_names_the_site(steps):
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    history: list = []
    with vramlens.watch(model, opt) as w:
        train(model, opt, steps, history=history)
    assert f"loops.py:{LEAK_LINE} in train" in w.report.text()
