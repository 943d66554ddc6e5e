"""The server's defences, in-process (httpx's ASGI transport): every error is one JSON line, no
request reaches a 500, the budgets hold, and only this machine's pages may talk to the server."""

from __future__ import annotations

import json

import pytest
from web_helpers import TINY_LLAMA, allocate, ask, assert_json_error

pytest.importorskip("fastapi", reason="the web app needs the [web] extra (fastapi)")

from vramlens.web import create_app  # noqa: E402
from vramlens.web.app import openapi_app  # noqa: E402
from vramlens.web.budget import Budget, OverBudget, Pool  # noqa: E402

J = {"content-type": "application/json"}
BODY = 'send a JSON object such as {"config": {...}, "mode": "train"}'


@pytest.fixture(scope="module")
def app():
    a = create_app(offline=True)
    yield a
    openapi_app(a).state.pool.close()


# ---- no 500: every bad input is one JSON line ------------------------------------------------
@pytest.mark.parametrize("url, status, message", [
    ("/api/estimate?params=7B&batch=1" + "0" * 400, 422,
     "batch='10000000000000000000000000000000000000000000000000000000000...(403 chars): "
     "Input should be less than or equal to 1048576"),
    ("/api/fit?params=7B&gpus=1" + "0" * 400, 422,
     "gpus='10000000000000000000000000000000000000000000000000000000000...(403 chars): "
     "Input should be less than or equal to 1048576"),
    ("/api/fit?params=7B&top=" + "9" * 5000, 422, "top: Unable to parse input string as an integer, exceeded maximum size"),
    ("/api/estimate?params=7B&headroom=1e400", 422, "headroom='1e400': Input should be a finite number"),
    ("/api/estimate?params=7B&seq=-1", 422, "seq='-1': Input should be greater than or equal to 0"),
    ("/api/estimate?params=7B&batch=many", 422, "batch: Input should be a valid integer, unable to parse string as an integer"),
    ("/api/estimate?params=7B&gpu=" + "A" * 300, 422,
     "gpu='AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA...(302 chars): "
     "String should have at most 256 characters"),
    ("/api/estimate?params=7B&mode=%0d%0aX-Injected:%201", 422, "mode='\\r\\nX-Injected: 1' is not one of: inference, train"),
    ("/api/estimate?model=nobody/not-a-model", 422,
     "cannot reach the Hugging Face hub for 'nobody/not-a-model' and it is not in the local cache: use a catalog "
     "name (vramlens models), a local config.json / model folder, or go online (HF_HUB_OFFLINE is set)"),
    ("/nope", 404, "no such page: '/nope': the page is at / and the API under /api (listed at /docs)"),
    ("/static/../../etc/passwd", 404, "no such page: '/etc/passwd': the page is at / and the API under /api (listed at /docs)"),
    ("/static/%2e%2e%2fpyproject.toml", 404,
     "no such page: '/static/../pyproject.toml': the page is at / and the API under /api (listed at /docs)"),
    ("/static/index.html", 404, "no such file: '/static/index.html': the page's files are app.js, serving.js, style.css"),
    # fuzz3: the last of a repeated parameter won silently (an answer for a GPU the user may not mean)
    ("/api/estimate?params=7B&gpu=A100-80GB&gpu=RTX-4090", 400,
     "query parameter 'gpu' is given 2 times: give each parameter once"),
])
def test_bad_query_is_one_json_line(app, url, status, message):
    r = ask(app, "GET", url)
    assert assert_json_error(r, status) == message
    assert "x-injected" not in r.headers


@pytest.mark.parametrize("content, headers, status, message", [
    (b'{"config": {}, "batch": 1' + b"0" * 400 + b"}", J, 422,
     "batch=a 401-digit number: Input should be less than or equal to 1048576"),
    (b'{"config": {"hidden_size": 1' + b"0" * 400 + b"}}", J, 422,
     "hidden_size=a 401-digit number in the pasted config has more than 30 digits: no model has such a size; "
     "check the config"),
    (b'{"config": {}, "batch": 1' + b"0" * 5000 + b"}", J, 400,
     "the request body could not be read: send UTF-8 JSON (numbers under 4,300 digits) with "
     "Content-Type: application/json"),
    (b'{"config": "{\\"n\\": 1' + b"0" * 5000 + b'}"}', J, 422,
     "the pasted config: an integer of 5,001 digits is over the limit of 30 digits; check the config"),
    (b'\xff\xfe{"config": {}}', J, 422, "the request body is not valid JSON (Expecting value): " + BODY),
    (b"{bad", J, 422, "the request body is not valid JSON (Expecting property name enclosed in double quotes): " + BODY),
    (b"[1]", J, 422, "the request body must be a JSON object of settings: " + BODY),
    (b"", J, 422, "the request body is missing: " + BODY),
    (b'{"config": {}, "batch": "many"}', J, 422,
     "batch: Input should be a valid integer, unable to parse string as an integer"),
    (b'{"config": {}, "nope": 1}', J, 422, "nope: Extra inputs are not permitted"),
    (b'{"config": {}}', {"content-type": "text/plain"}, 415,
     "Content-Type 'text/plain' is not accepted: send the body as JSON with Content-Type: application/json"),
    (b"config=1", {"content-type": "application/x-www-form-urlencoded"}, 415,
     "Content-Type 'application/x-www-form-urlencoded' is not accepted: send the body as JSON with "
     "Content-Type: application/json"),
    (b'{"config": {}}', {}, 415,
     "Content-Type (none) is not accepted: send the body as JSON with Content-Type: application/json"),
])
def test_bad_body_is_one_json_line(app, content, headers, status, message):
    for path in ("/api/estimate", "/api/fit"):
        r = ask(app, "POST", path, content=content, headers=headers)
        assert assert_json_error(r, status) == message


def test_deep_pasted_config_is_refused(app):
    deep: dict = {}
    node = deep
    for _ in range(70):
        node["a"] = {}
        node = node["a"]
    r = ask(app, "POST", "/api/estimate", json={"config": deep})
    assert assert_json_error(r, 422).startswith("the pasted config nests deeper than 64 levels at a.a.a.")


def test_method_not_allowed_names_the_method(app):
    r = ask(app, "PUT", "/api/estimate", json={})
    assert assert_json_error(r, 405) == "PUT is not allowed on '/api/estimate': use GET, POST"
    r = ask(app, "DELETE", "/api/health")
    assert assert_json_error(r, 405) == "DELETE is not allowed on '/api/health': use GET"


# ---- who may talk to the server ---------------------------------------------------------------
@pytest.mark.parametrize("host", ["evil.example", "evil.example:8000", "127.0.0.1.evil.example", "localhost:80:80",
                                  "[::1", "127.0.0.2"])
def test_foreign_host_is_421(app, host):
    r = ask(app, "GET", "/api/health", headers={"host": host})
    assert assert_json_error(r, 421).startswith(f"Host {host!r} is not this server's address (DNS-rebinding protection)")


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.1:8000", "localhost", "LOCALHOST:1", "[::1]:8000"])
def test_local_host_is_answered(app, host):
    assert ask(app, "GET", "/api/health", headers={"host": host}).json() == {"status": "ok"}


def test_the_configured_host_is_answered():
    a = create_app(host="box.lan", allow_hosts=("vram.example",))
    for host in ("box.lan:8000", "vram.example"):
        assert ask(a, "GET", "/api/health", headers={"host": host}).status_code == 200
    assert ask(a, "GET", "/api/health", headers={"host": "other.lan"}).status_code == 421


def test_cross_site_post_is_403(app):
    r = ask(app, "POST", "/api/estimate", json={"config": TINY_LLAMA}, headers={"origin": "http://evil.example"})
    assert assert_json_error(r, 403) == (
        "Origin 'http://evil.example' is not this server (http://127.0.0.1): the API takes no cross-site requests; "
        "use the vramlens page, or call it without an Origin header (curl, scripts)")
    assert ask(app, "POST", "/api/estimate", json={"config": TINY_LLAMA}, headers={"origin": "null"}).status_code == 403
    same = ask(app, "POST", "/api/estimate", json={"config": TINY_LLAMA}, headers={"origin": "http://127.0.0.1"})
    assert same.status_code == 200, same.text


@pytest.mark.parametrize("url", ["/", "/api/health", "/api/gpus", "/nope", "/docs", "/static/app.js"])
def test_security_headers_everywhere(app, url):
    r = ask(app, "GET", url)
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["referrer-policy"] == "no-referrer"
    assert r.headers["x-frame-options"] == "DENY"
    csp = r.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp and "unsafe-eval" not in csp


def test_page_has_no_inline_script(app):
    import re

    doc = ask(app, "GET", "/").text
    assert "script-src 'self'" in ask(app, "GET", "/").headers["content-security-policy"]
    scripts = re.findall(r"<script\b([^>]*)>(.*?)</script>", doc, re.S | re.I)
    assert scripts and all('src="/static/' in attrs and not body.strip() for attrs, body in scripts)
    assert not re.search(r"\son[a-z]+\s*=", doc, re.I)  # no inline event handlers
    assert "<style" not in doc
    js = ask(app, "GET", "/static/app.js")
    assert js.status_code == 200 and js.headers["content-type"].startswith("text/javascript")
    assert "looking up " in js.text


def test_head_favicon_and_offline_docs(app):
    head = ask(app, "HEAD", "/")
    assert head.status_code == 200 and head.headers["content-type"].startswith("text/html")
    assert ask(app, "GET", "/favicon.ico").status_code == 204
    docs = ask(app, "GET", "/docs")
    assert docs.status_code == 200
    assert "<code>GET /api/estimate</code>" in docs.text and "<code>POST /api/fit</code>" in docs.text
    assert "<script" not in docs.text and "http" not in docs.text.replace("http://", "x")  # nothing from a CDN
    assert "cdn" not in docs.text.lower()


# ---- budgets ----------------------------------------------------------------------------------
def test_request_over_its_time_budget_is_503_and_the_server_goes_on():
    a = create_app(budget=Budget(seconds=0.0), offline=True)
    try:
        r = ask(a, "POST", "/api/estimate", json={"config": TINY_LLAMA})
        assert assert_json_error(r, 503) == ("the request went over its time budget of 0 s and was stopped: ask for "
                                             "less (a smaller model, fewer GPUs, a shorter sequence)")
        assert r.headers["retry-after"] == "5"
        assert ask(a, "GET", "/api/health").status_code == 200
        assert openapi_app(a).state.pool.pids() == []  # the worker was killed, not kept
    finally:
        openapi_app(a).state.pool.close()


def test_fit_for_a_million_gpus_stops_at_its_budget():
    a = create_app(budget=Budget(seconds=1.0), offline=True)
    try:
        r = ask(a, "GET", "/api/fit", params={"params": "7B", "gpu": "24GB", "mode": "train", "gpus": 1_000_000})
        assert assert_json_error(r, 503).startswith("the request went over its time budget of 1 s")
    finally:
        openapi_app(a).state.pool.close()


def test_worker_over_its_memory_budget_is_replaced():
    pool = Pool(Budget(memory_bytes=64 * 1024**2, workers=1))
    try:
        assert pool.run(allocate, 1024) == 1024
        (first,) = pool.pids()
        with pytest.raises(OverBudget) as e:
            pool.run(allocate, 2 * 1024**3)
        assert str(e.value) == ("the request went over its memory budget of 64 MiB and was stopped: ask for less "
                                "(a smaller model, fewer GPUs, a shorter sequence)")
        assert pool.pids() == []
        assert pool.run(allocate, 1024) == 1024  # a fresh worker
        assert pool.pids() != [first]
    finally:
        pool.close()


def test_valid_requests_still_answer(app):
    r = ask(app, "POST", "/api/estimate", json={"config": TINY_LLAMA, "mode": "train", "batch": 2})
    assert r.status_code == 200 and r.json()["workload"]["batch"] == 2
    r = ask(app, "POST", "/api/fit", json={"config": json.dumps(TINY_LLAMA), "mode": "train", "gpu": "1GB", "top": 2})
    assert r.status_code == 200 and 1 <= len(r.json()["plans"]) <= 2
