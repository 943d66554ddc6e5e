"""A tiny real Estimate, built without the model catalog (a hand-written Llama config)."""

from __future__ import annotations

import pytest

from tiny_configs import TINY_LLAMA  # noqa: F401  (re-exported for this folder's tests)


@pytest.fixture
def tiny_estimate():
    from vramlens.estimator import estimate_spec
    from vramlens.hardware.catalog import get_gpu
    from vramlens.models.inventory import spec_from_config
    from vramlens.workload import make_workload

    spec = spec_from_config(TINY_LLAMA, name="tiny-llama")
    return estimate_spec(spec, make_workload(mode="train", batch=2, seq=128), get_gpu("24GB"))
