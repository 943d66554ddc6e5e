"""Fuzzing the API's settings with Hypothesis: any values give a Workload or one ConfigError, and any
in-range workload gives figures or one line."""

from __future__ import annotations

import pytest

pytest.importorskip("hypothesis", reason="property tests need hypothesis (the dev extra)")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import vramlens  # noqa: E402
from vramlens.errors import ConfigError, VramlensError  # noqa: E402
from vramlens.workload import Workload, make_workload  # noqa: E402

_values = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), st.booleans(), st.none(), st.sampled_from(["train", "lora", "bf16", "adamw", "full"]),
)
_FIELDS = [f for f in Workload.__dataclass_fields__]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(_FIELDS), _values, max_size=5))
def test_any_settings_give_a_workload_or_a_config_error(kw):
    """Fuzzing the API's keyword arguments (the CLI's and the web page's values arrive here)."""
    try:
        w = make_workload(**kw)
    except ConfigError as e:
        assert e.problems and all(isinstance(p, str) and p for p in e.problems)
        return
    except TypeError:  # lora_targets given as a number: not iterable
        assert "lora_targets" in kw
        return
    assert w.validated() is w


_small = st.fixed_dictionaries({}, optional={
    "mode": st.sampled_from(["inference", "train"]), "method": st.sampled_from(["full", "lora", "qlora"]),
    "batch": st.integers(1, 2**20), "seq": st.integers(1, 2**22), "new_tokens": st.integers(0, 4096),
    "gpus": st.sampled_from([1, 2, 8, 64]), "tp": st.sampled_from([1, 2, 4]), "zero": st.sampled_from([0, 1, 2, 3]),
    "lora_rank": st.integers(1, 4096), "kv_block": st.integers(0, 1024),
    "checkpointing": st.sampled_from(["none", "full", "selective", "selective-op", "every:2", "every:0", "every:x"]),
})


@settings(max_examples=150, deadline=None)
@given(_small, st.sampled_from(["gpt2", "llama-2-7b", "t5-small", "bert-base-uncased", "mixtral-8x7b"]))
def test_estimate_of_any_in_range_workload_is_a_figure_or_one_error(kw, model):
    try:
        est = vramlens.estimate(model, gpu="H100-80GB", **kw)
    except VramlensError as e:
        assert str(e) and "\n" not in str(e)
        return
    b = est.breakdown
    assert 0 < b.peak_allocated <= b.peak_reserved <= b.device_total
