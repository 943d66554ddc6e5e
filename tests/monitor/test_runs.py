"""The runs database and `vramlens runs`: every watched run stored; a locked or corrupt file is one line."""

import pytest

pytest.importorskip("torch", reason="vramlens.watch runs inside a torch process (the trace extra)")

import json  # noqa: E402
import sqlite3  # noqa: E402

import torch  # noqa: E402
from tests.monitor.loops import tiny_model, train  # noqa: E402

import vramlens  # noqa: E402
from vramlens.cli.main import main  # noqa: E402
from vramlens.monitor import runs  # noqa: E402


def watched(steps: int, label: str | None = None, **kw):
    model = tiny_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with vramlens.watch(model, opt, label=label, **kw) as w:
        train(model, opt, steps)
    return w.report


def cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_each_run_is_stored_with_its_steps_and_environment(vramlens_home):
    a = watched(3, label="first")
    b = watched(4)
    assert (a.run_id, b.run_id) == (1, 2)
    assert runs.database_path() == vramlens_home / "runs.sqlite3"
    rows = runs.list_runs()
    assert [(r.id, r.steps, r.label, r.oom) for r in rows] == [(2, 4, None, False), (1, 3, "first", False)]
    again = runs.load_run(1)
    assert again.steps == a.steps and again.environment["torch"] == torch.__version__
    with sqlite3.connect(runs.database_path()) as con:
        assert con.execute("SELECT COUNT(*) FROM steps WHERE run_id = 2").fetchone() == (4,)


def test_the_cli_lists_shows_compares_and_exports(capsys, tmp_path):
    watched(3, label="first")
    watched(3)
    code, out, err = cli(capsys, "runs", "list", "--json")
    assert code == 0, err
    assert [r["id"] for r in json.loads(out)["runs"]] == [2, 1]
    code, out, _ = cli(capsys, "runs", "list")
    assert code == 0 and " first" in out.splitlines()[2]
    code, out, _ = cli(capsys, "runs", "show", "1", "--json")
    assert json.loads(out)["run_id"] == 1 and len(json.loads(out)["steps"]) == 3
    code, out, _ = cli(capsys, "runs", "show", "1")
    assert out.startswith("run 1\nvramlens watch (cpu, cpu): 3 step record(s)")
    code, out, _ = cli(capsys, "runs", "compare", "1", "2", "--json")
    d = json.loads(out)
    # the same loop twice: the same bytes in every category
    assert d["rows"]["parameters"] == {"a": 33_796, "b": 33_796, "difference": 0}
    assert d["rows"]["peak_allocated_bytes"]["difference"] == 0
    code, out, _ = cli(capsys, "runs", "export", "2")
    assert json.loads(out)["steps"][0]["step"] == 1
    code, out, _ = cli(capsys, "runs", "export", "2", "--html", str(tmp_path / "r.html"))
    assert code == 0 and (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")


def test_an_unknown_run_is_one_line(capsys):
    watched(1)
    code, out, err = cli(capsys, "runs", "show", "9")
    assert code == 2 and out == ""
    assert err == f"error: run 9 not found in {runs.database_path()}: see vramlens runs list\n"


def test_a_corrupt_database_is_reported_and_the_run_goes_on(vramlens_home, capsys):
    vramlens_home.mkdir(parents=True)
    (vramlens_home / "runs.sqlite3").write_bytes(b"this is not a database" * 100)
    report = watched(3)
    assert len(report.steps) == 3 and report.run_id is None
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"vramlens: runs database {vramlens_home / 'runs.sqlite3'} cannot be read (file is not a "
                          "database): move it away")
    assert any("cannot be read" in n for n in report.notes)
    code, out, err = cli(capsys, "runs", "list")
    assert code == 2 and len(err.splitlines()) == 1


def test_a_locked_database_is_reported_and_the_run_goes_on(monkeypatch, capsys):
    watched(1)
    monkeypatch.setattr(runs, "LOCK_TIMEOUT_S", 0.05)
    holder = sqlite3.connect(runs.database_path())
    holder.execute("BEGIN EXCLUSIVE")
    try:
        report = watched(2)
    finally:
        holder.rollback()
        holder.close()
    assert len(report.steps) == 2 and report.run_id is None
    assert "is locked by another process" in capsys.readouterr().err


def test_store_false_writes_nothing(vramlens_home):
    watched(1, store=False)
    assert not (vramlens_home / "runs.sqlite3").exists()


@pytest.mark.parametrize("action", [["list"], ["show", "1"], ["compare", "1", "2"], ["export", "1"]])
def test_every_action_takes_json(action, capsys):
    assert main(["runs", *action, "--help"]) == 0
    assert "--json" in capsys.readouterr().out
