"""Watched runs in tests store into a temporary runs database, never the user's cache."""

import pytest


@pytest.fixture(autouse=True)
def vramlens_home(tmp_path, monkeypatch):
    home = tmp_path / "vramlens-home"
    monkeypatch.setenv("VRAMLENS_HOME", str(home))
    return home
