"""A scanner's requests against a real server (uvicorn in a subprocess on a free 127.0.0.1 port),
over raw sockets so nothing normalizes them first. After each, the server still answers."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

pytest.importorskip("uvicorn", reason="the web app needs the [web] extra (uvicorn)")

#: Seconds the live server gives a request body to arrive (the test's slowloris outlasts it).
BODY_SECONDS = 1.0
SERVER = """
import sys, uvicorn
from vramlens.web import create_app
from vramlens.web.budget import Budget
uvicorn.run(create_app(budget=Budget(body_seconds={body}), offline=True), host="127.0.0.1", port=int(sys.argv[1]),
            log_level="warning", server_header=False)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def raw(port: int, request: bytes, timeout: float = 30) -> tuple[int, dict[str, str], bytes]:
    """Send ``request`` as is; the status, headers and body of the answer (read to the close)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data or not _complete(data):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return int(lines[0].split()[1]), headers, body


def _complete(data: bytes) -> bool:
    head, _, body = data.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":")[1])
    return False


def get(port: int, target: str, host: str = "127.0.0.1", extra: str = "") -> tuple[int, dict[str, str], bytes]:
    return raw(port, f"GET {target} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n".encode("latin-1"))


def post(port: int, body: bytes, *, ctype: str = "application/json", extra: str = "",
         path: str = "/api/estimate") -> tuple[int, dict[str, str], bytes]:
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
            f"{extra}Connection: close\r\n\r\n")
    return raw(port, head.encode("latin-1") + body)


def error_of(status: int, headers: dict[str, str], body: bytes) -> str:
    assert headers["content-type"].startswith("application/json"), (status, headers, body)
    d = json.loads(body)
    assert set(d) == {"error"} and d["error"] and "\n" not in d["error"], d
    assert headers["x-content-type-options"] == "nosniff"
    return d["error"]


@pytest.fixture(scope="module")
def port():
    p = _free_port()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen([sys.executable, "-c", SERVER.format(body=BODY_SECONDS), str(p)], env=env)
    deadline = time.monotonic() + 60
    while True:
        try:
            if get(p, "/api/health")[0] == 200:
                break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail("the server did not start within 60 s")
        time.sleep(0.1)
    yield p
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(autouse=True)
def still_up(port):
    yield
    status, _, body = get(port, "/api/health")
    assert (status, json.loads(body)) == (200, {"status": "ok"})


@pytest.mark.parametrize("target", ["/static/../../etc/passwd", "/static/..%2f..%2fetc%2fpasswd",
                                    "/static/%2e%2e/%2e%2e/etc/passwd", "/static/....//....//etc/passwd",
                                    "/static/%252e%252e%252fetc%252fpasswd", "/..%5c..%5cetc%5cpasswd",
                                    "//etc/passwd", "/static/app.js/../../../pyproject.toml"])
def test_path_traversal_reads_nothing(port, target):
    status, headers, body = get(port, target)
    assert status in (400, 404), (status, body)
    error_of(status, headers, body)
    assert b"root:" not in body and b"[project]" not in body


def test_body_over_the_limit_is_413(port):
    status, headers, body = post(port, b" " * (256 * 1024 + 1))
    assert status == 413
    assert error_of(status, headers, body) == "request body over 256 KiB: paste a config.json, not a checkpoint"


def test_body_declared_but_never_sent_times_out(port):
    head = b"POST /api/estimate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
    status, headers, body = raw(port, head)
    assert status == 408
    assert error_of(status, headers, body) == ("the request body did not arrive within 1 s: send the whole body at once")


def test_slowloris_body_times_out_while_others_are_answered(port):
    result: dict = {}

    def trickle():
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(b"POST /api/estimate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 100000\r\n\r\n")
            data = b""
            try:
                for _ in range(1000):  # a byte at a time, far slower than the body budget allows
                    s.sendall(b" ")
                    s.settimeout(0.05)
                    try:
                        chunk = s.recv(65536)
                    except TimeoutError:
                        continue
                    if not chunk:
                        break
                    data += chunk
                    if _complete(data):
                        break
            except OSError:  # the server closed the connection
                pass
            result["data"] = data

    t = threading.Thread(target=trickle)
    t.start()
    assert get(port, "/api/health")[0] == 200  # answered while the body trickles
    t.join(timeout=60)
    assert not t.is_alive()
    assert result["data"].startswith(b"HTTP/1.1 408"), result["data"][:200]


def test_crlf_in_a_query_value_is_not_reflected_into_headers(port):
    status, headers, body = get(port, "/api/estimate?params=7B&mode=%0d%0aX-Injected:%201")
    assert status == 422 and "x-injected" not in headers
    assert error_of(status, headers, body) == "mode='\\r\\nX-Injected: 1' is not one of: inference, train"


def test_cross_site_post_is_refused(port):
    status, headers, body = post(port, b'{"params": "7B", "config": {}}', extra="Origin: http://evil.example\r\n")
    assert status == 403 and error_of(status, headers, body).startswith("Origin 'http://evil.example' is not this server")
    status, headers, body = post(port, b'{"config": {}}', ctype="text/plain")
    assert status == 415


def test_rebinding_host_is_refused(port):
    status, headers, body = get(port, "/api/gpus", host="evil.example")
    assert status == 421 and error_of(status, headers, body).startswith("Host 'evil.example' is not this server's")


def test_invalid_utf8_is_a_json_error(port):
    status, headers, body = post(port, b'{"config": "\xff\xfe"}')
    assert status in (400, 422)
    error_of(status, headers, body)
    status, headers, body = get(port, "/api/estimate?params=7B&gpu=%ff%fe")
    assert status == 422
    error_of(status, headers, body)


def test_method_not_allowed_is_a_json_error(port):
    status, headers, body = raw(port, b"DELETE /api/estimate HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    assert status == 405
    assert error_of(status, headers, body) == "DELETE is not allowed on '/api/estimate': use GET, POST"


def test_huge_integer_is_a_json_error(port):
    status, headers, body = post(port, b'{"config": {}, "gpus": 1' + b"0" * 400 + b"}", path="/api/fit")
    assert status == 422
    assert error_of(status, headers, body) == "gpus=a 401-digit number: Input should be less than or equal to 1048576"
