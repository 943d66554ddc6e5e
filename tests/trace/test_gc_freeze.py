"""The tracer leaves the objects that exist before a trace out of its collections (trace.api.older_objects_frozen)."""

import contextlib
import gc

import pytest
from tests.trace.conftest import tiny_llama

import vramlens.trace.api as api
from vramlens.trace import trace


def _events(**kw):
    r = trace(tiny_llama(), mode="train", dtype="bf16", batch=2, seq=32, steps=2, checkpointing="full", **kw)
    return [(e.seq, e.action, e.storage, e.nbytes, e.tag, e.module, e.phase, e.step) for e in r.events], (r.breakdown.peak_allocated, r.breakdown.peak_reserved)


def test_the_frozen_objects_change_no_event(monkeypatch):
    frozen = _events()
    monkeypatch.setattr(api, "older_objects_frozen", contextlib.nullcontext)
    walked = _events()
    assert frozen == walked
    assert len(frozen[0]) > 100  # a real trace: allocations and frees of two steps


def test_the_process_collector_is_left_as_it_was():
    assert gc.get_freeze_count() == 0
    with api.older_objects_frozen():
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0
    _events()
    assert gc.get_freeze_count() == 0


def test_a_process_that_froze_objects_itself_keeps_them_frozen():
    gc.freeze()
    try:
        before = gc.get_freeze_count()
        with api.older_objects_frozen():
            assert gc.get_freeze_count() == before
        assert gc.get_freeze_count() == before
    finally:
        gc.unfreeze()


def test_an_error_inside_unfreezes():
    with pytest.raises(RuntimeError), api.older_objects_frozen():
        raise RuntimeError("boom")
    assert gc.get_freeze_count() == 0
