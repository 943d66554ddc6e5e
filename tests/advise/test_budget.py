"""A spent time budget: searches return the best found so far, say so, and never time anything.

``budget_s=0`` runs exactly one unit of work (a structure, a layout, a placement round, one
evaluation), so every assertion here is about counts, not seconds.
"""

from __future__ import annotations

import pytest
from advise_specs import llama7b

from vramlens.advise import search
from vramlens.advise.budget import Budget, stopped_line
from vramlens.advise.inverse import max_batch
from vramlens.advise.place import place
from vramlens.advise.search import min_gpus
from vramlens.cli.fit import render_result
from vramlens.cli.place import render_placement
from vramlens.errors import InputError
from vramlens.hardware.catalog import get_gpu
from vramlens.limits import SEARCH_BUDGET_S
from vramlens.workload import Workload

TRAIN = Workload(mode="train", batch=8, seq=2048)


def test_a_full_search_is_not_partial_and_examines_every_candidate():
    r = search(llama7b(), TRAIN, get_gpu("A100-80GB"))
    assert not r.partial and r.evaluated == r.candidates > 0
    assert r.budget_s == SEARCH_BUDGET_S
    assert r.to_dict()["partial"] is False and r.stopped == ""
    assert "search stopped" not in render_result(r)


@pytest.mark.parametrize("w,gpus", [(TRAIN, 8), (Workload(mode="inference", batch=8, seq=4096, new_tokens=512), 4)])
def test_a_spent_budget_returns_the_best_so_far_marked_partial(w, gpus):
    spec, g = llama7b(), get_gpu("A100-80GB")
    full = search(spec, w, g, gpus=gpus, optimize="speed")  # the inference workload fits as it is
    r = search(spec, w, g, gpus=gpus, budget_s=0, optimize="speed")
    assert r.partial and 0 < r.evaluated < r.candidates == full.candidates
    assert r.plans or r.closest  # the best found in the first structure (7B full training fits none)
    d = r.to_dict()
    assert d["partial"] is True and d["candidates"] == full.candidates and d["evaluated"] == r.evaluated
    line = (f"search stopped after 0 s: {r.evaluated:,} of {r.candidates:,} candidates examined; "
            "the plans shown are the best found so far")
    assert r.stopped == line
    assert render_result(r).splitlines()[1] == line


def test_largest_with_a_spent_budget_keeps_a_value_that_fits():
    spec, g = llama7b(), get_gpu("RTX-4090")
    w = Workload(mode="inference", seq=2048, new_tokens=256)
    r = max_batch(spec, w, g, budget_s=0)
    assert r.partial and r.limited_by == "budget" and r.value == 1
    assert r.to_dict()["partial"] is True
    assert not max_batch(spec, w, g).partial


def test_min_gpus_with_a_spent_budget_says_it_stopped():
    r = min_gpus(llama7b(), TRAIN, get_gpu("A100-40GB"), method_locked=True, forbid=["offload"], budget_s=0)
    assert r.partial and r.gpus is None and r.result is None


def test_place_with_a_spent_budget_is_partial():
    spec = llama7b()
    w = Workload(mode="inference", seq=2048, new_tokens=512, batch=4)
    full = place(spec, get_gpu("RTX-3060"), workload=w, host_ram=64 * 2**30)
    assert not full.partial and full.rounds > 3  # the hybrid option re-places once blocks are offloaded
    p = place(spec, get_gpu("RTX-3060"), workload=w, host_ram=64 * 2**30, budget_s=0)
    assert p.partial and p.to_dict()["partial"] is True
    assert p.rounds < full.rounds and p.max_rounds == full.max_rounds
    assert render_placement(p).splitlines()[1] == stopped_line(0, p.rounds, p.max_rounds, "placement rounds")


@pytest.mark.parametrize("bad", [-1, float("inf"), float("nan"), "10"])
def test_a_bad_budget_is_refused(bad):
    with pytest.raises(InputError) as e:
        Budget.begin(bad)
    assert str(e.value) == f"budget_s={bad!r} must be a number of seconds >= 0 (default 10)"
