"""vramlens.cache: the folder, the content keys, and files that are missing, damaged or unwritable."""

import json

from vramlens import cache


def test_home_is_vramlens_home_else_the_xdg_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("VRAMLENS_HOME", str(tmp_path / "vh"))
    assert cache.home() == tmp_path / "vh"
    monkeypatch.delenv("VRAMLENS_HOME")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.home() == tmp_path / "xdg" / "vramlens"


def test_runs_database_lives_in_the_same_home(monkeypatch, tmp_path):
    from vramlens.monitor.runs import home

    monkeypatch.setenv("VRAMLENS_HOME", str(tmp_path))
    assert home() == cache.home() == tmp_path


def test_key_depends_on_content_not_on_key_order():
    a = cache.key_of({"config": {"x": 1, "y": [1, 2]}, "v": "0.1.0"})
    assert a == cache.key_of({"v": "0.1.0", "config": {"y": [1, 2], "x": 1}})
    assert a != cache.key_of({"config": {"x": 1, "y": [1, 3]}, "v": "0.1.0"})
    assert a != cache.key_of({"config": {"x": 1, "y": [1, 2]}, "v": "0.1.1"})
    assert len(a) == 64 and int(a, 16) >= 0


def test_write_then_read_round_trips(monkeypatch, tmp_path):
    monkeypatch.setenv("VRAMLENS_HOME", str(tmp_path))
    assert cache.read("k", "abc") == cache.Lookup(None, "")
    assert cache.write("k", "abc", {"a": [1, 2], "b": {"c": 3}}) == ""
    assert cache.read("k", "abc") == cache.Lookup({"a": [1, 2], "b": {"c": 3}})
    assert json.loads((tmp_path / "k" / "abc.json").read_text()) == {"key": "abc", "value": {"a": [1, 2], "b": {"c": 3}}}
    assert [p.name for p in (tmp_path / "k").iterdir()] == ["abc.json"]  # no temporary file left behind


def test_a_damaged_file_is_a_miss_with_a_note(monkeypatch, tmp_path):
    monkeypatch.setenv("VRAMLENS_HOME", str(tmp_path))
    (tmp_path / "k").mkdir()
    (tmp_path / "k" / "abc.json").write_text('{"key": "abc", "value": {"a": 1')
    got = cache.read("k", "abc")
    assert got.value is None
    assert got.note.startswith("cache file $VRAMLENS_HOME/k/abc.json ignored (not valid JSON")
    (tmp_path / "k" / "abc.json").write_text('{"key": "other", "value": {"a": 1}}')
    assert cache.read("k", "abc") == cache.Lookup(
        None, "cache file $VRAMLENS_HOME/k/abc.json ignored (not a vramlens cache entry for this key)")
    (tmp_path / "k" / "abc.json").unlink()
    (tmp_path / "k" / "abc.json").mkdir()
    assert cache.read("k", "abc").note == "cache file $VRAMLENS_HOME/k/abc.json ignored (Is a directory)"


def test_an_unwritable_home_is_a_note_not_an_error(monkeypatch, tmp_path):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("VRAMLENS_HOME", str(tmp_path / "file"))  # a file where the folder should be
    note = cache.write("k", "abc", {"a": 1})
    assert note.startswith("not cached: $VRAMLENS_HOME/k cannot be written (")
    assert note.endswith("); set VRAMLENS_HOME to a writable folder")
    assert cache.read("k", "abc").value is None
