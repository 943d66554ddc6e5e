"""Random values for every query field of the estimate and fit endpoints: 200 or one JSON error
line in 4xx, never a 500. (A valid but huge question, fit for 60,000 GPUs say, may go over the
request's time budget: that 503 is the budget working, and it is the only 5xx allowed.)"""

from __future__ import annotations

import pytest

pytest.importorskip("hypothesis", reason="property tests need hypothesis (the dev extra)")
pytest.importorskip("fastapi", reason="the web app needs the [web] extra (fastapi)")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from web_helpers import ask, assert_json_error  # noqa: E402

from vramlens.web import create_app  # noqa: E402
from vramlens.web.app import FitQuery, openapi_app  # noqa: E402

FIELDS = sorted(FitQuery.model_fields)  # every query field of /api/estimate, plus top

VALUES = st.one_of(
    st.integers(min_value=-(10**400), max_value=10**400).map(str),
    st.integers(min_value=-2, max_value=70_000).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["", "true", "false", "nan", "inf", "-0", "1e400", "7B", "24GB", "1" + "0" * 5000 + "B",
                     "llama-2-7b", "nobody/not-a-model", "../etc/passwd", "train", "lora", "A100-80GB", "\r\nX: 1"]),
    st.text(max_size=40),
)
QUERY = st.dictionaries(st.sampled_from(FIELDS), VALUES, max_size=6)


@pytest.fixture(scope="module")
def app():
    a = create_app(offline=True)
    yield a
    openapi_app(a).state.pool.close()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(path=st.sampled_from(["/api/estimate", "/api/fit", "/api/estimate.svg"]), query=QUERY)
def test_random_query_is_200_or_a_json_error(app, path, query):
    r = ask(app, "GET", path, params=query)
    if r.status_code == 503:
        assert assert_json_error(r, 503).startswith("the request went over its time budget")
    elif r.status_code != 200:
        assert_json_error(r, tuple(range(400, 500)))
