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
