"""The web app in-process (no open port)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def client():
    pytest.importorskip("fastapi", reason="the web app needs the [web] extra (fastapi)")
    from fastapi.testclient import TestClient

    from vramlens.web import create_app

    with TestClient(create_app(offline=True), base_url="http://127.0.0.1") as c:
        yield c


@pytest.fixture(scope="session")
def server():
    """A real server on a free localhost port (offline: no hub), for the browser tests."""
    import threading
    import time

    uvicorn = pytest.importorskip("uvicorn", reason="the web app needs the [web] extra (uvicorn)")
    from web_helpers import free_port

    from vramlens.web import create_app

    port = free_port()
    config = uvicorn.Config(create_app(offline=True), host="127.0.0.1", port=port, log_level="warning", ws="none",
                            lifespan="off")
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not srv.started:
        if time.monotonic() > deadline or not thread.is_alive():
            pytest.fail("the server did not start within 15 s")
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(timeout=10)
