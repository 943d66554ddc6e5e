"""The runs database: every watched run, its environment and per-step figures, in SQLite (no torch).

The file is ``$VRAMLENS_HOME/runs.sqlite3``; ``VRAMLENS_HOME`` defaults to
``$XDG_CACHE_HOME/vramlens`` (``~/.cache/vramlens``). A database that is locked or corrupt raises
:class:`RunsDatabaseError` with one line naming the file and the fix; ``watch()`` prints it and the
run goes on.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from vramlens.errors import InputError, VramlensError
from vramlens.monitor.records import WatchReport, report_from_dict

#: Seconds a writer waits for a lock held by another process before giving up (sqlite3's timeout).
LOCK_TIMEOUT_S = 2.0
SCHEMA_VERSION = 1
SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created TEXT NOT NULL,
    label TEXT,
    backend TEXT NOT NULL,
    device TEXT NOT NULL,
    torch TEXT,
    gpu_name TEXT,
    steps INTEGER NOT NULL,
    peak_allocated_bytes INTEGER NOT NULL,
    leak_bytes_per_step INTEGER,
    oom INTEGER NOT NULL,
    report TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS steps (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    step INTEGER NOT NULL,
    peak_allocated_bytes INTEGER NOT NULL,
    peak_reserved_bytes INTEGER,
    live_bytes INTEGER NOT NULL,
    host_rss_bytes INTEGER,
    PRIMARY KEY (run_id, step)
);
"""


class RunsDatabaseError(VramlensError):
    """The runs database cannot be used (locked, corrupt, not writable)."""


@dataclass(frozen=True, slots=True)
class RunRow:
    """One stored run, as ``runs list`` shows it."""

    id: int
    created: str
    label: str | None
    backend: str
    device: str
    steps: int
    peak_allocated_bytes: int
    leak_bytes_per_step: int | None
    oom: bool

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}


def home() -> Path:
    """The folder vramlens keeps its runs in (``VRAMLENS_HOME`` overrides): :func:`vramlens.cache.home`."""
    from vramlens.cache import home as vramlens_home

    return vramlens_home()


def database_path() -> Path:
    return home() / "runs.sqlite3"


def _connect() -> sqlite3.Connection:
    path = database_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        con = sqlite3.connect(path, timeout=LOCK_TIMEOUT_S)
        con.executescript(SCHEMA)
        con.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    except sqlite3.OperationalError as e:
        raise _error(path, e) from None
    except sqlite3.DatabaseError as e:
        raise _error(path, e) from None
    except OSError as e:
        raise RunsDatabaseError(f"runs database {path} cannot be created: {e.strerror or e}: set VRAMLENS_HOME "
                                "to a writable folder") from None
    return con


def _error(path: Path, e: Exception) -> RunsDatabaseError:
    text = str(e)
    if "locked" in text or "busy" in text:
        return RunsDatabaseError(f"runs database {path} is locked by another process ({text}): the run was not "
                                 "stored; try again when the other vramlens ends")
    return RunsDatabaseError(f"runs database {path} cannot be read ({text}): move it away (a new one is made) "
                             "or set VRAMLENS_HOME to another folder")


def save_run(report: WatchReport, *, label: str | None = None) -> int:
    """Store ``report``; returns its run id.

    Raises:
        RunsDatabaseError: the database is locked, corrupt or not writable.
    """
    path = database_path()
    con = _connect()
    try:
        with con:
            cur = con.execute(
                "INSERT INTO runs (created, label, backend, device, torch, gpu_name, steps, peak_allocated_bytes, "
                "leak_bytes_per_step, oom, report) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (datetime.now(timezone.utc).isoformat(timespec="seconds"), label, report.backend, report.device,
                 report.environment.get("torch"), report.environment.get("gpu_name"), len(report.steps),
                 report.peak_allocated_bytes, report.leak.bytes_per_step if report.leak else None,
                 int(report.oom is not None), json.dumps(report.to_dict())))
            run_id = int(cur.lastrowid or 0)
            con.executemany(
                "INSERT INTO steps VALUES (?, ?, ?, ?, ?, ?)",
                [(run_id, s.step, s.peak_allocated_bytes, s.peak_reserved_bytes, s.live_bytes, s.host_rss_bytes)
                 for s in report.steps])
        return run_id
    except sqlite3.DatabaseError as e:
        raise _error(path, e) from None
    finally:
        con.close()


def list_runs(limit: int = 50) -> list[RunRow]:
    """The most recent ``limit`` runs, newest first."""
    path = database_path()
    if not path.exists():
        return []
    con = _connect()
    try:
        rows = con.execute("SELECT id, created, label, backend, device, steps, peak_allocated_bytes, "
                           "leak_bytes_per_step, oom FROM runs ORDER BY id DESC LIMIT ?", (limit,)).fetchall()
    except sqlite3.DatabaseError as e:
        raise _error(path, e) from None
    finally:
        con.close()
    return [RunRow(id=r[0], created=r[1], label=r[2], backend=r[3], device=r[4], steps=r[5],
                   peak_allocated_bytes=r[6], leak_bytes_per_step=r[7], oom=bool(r[8])) for r in rows]


def load_run(run_id: int) -> WatchReport:
    """The stored report of run ``run_id``.

    Raises:
        InputError: no such run.
        RunsDatabaseError: the database cannot be read.
    """
    path = database_path()
    if not path.exists():
        raise InputError(f"run {run_id} not found: {path} has no runs yet (watch a run first)")
    con = _connect()
    try:
        row = con.execute("SELECT report FROM runs WHERE id = ?", (run_id,)).fetchone()
    except sqlite3.DatabaseError as e:
        raise _error(path, e) from None
    finally:
        con.close()
    if row is None:
        raise InputError(f"run {run_id} not found in {path}: see vramlens runs list")
    try:
        data = json.loads(row[0])
    except ValueError:
        raise RunsDatabaseError(f"run {run_id} in {path} is damaged: its report is not JSON") from None
    data["run_id"] = run_id
    return report_from_dict(data)


def compare(a: WatchReport, b: WatchReport) -> dict[str, Any]:
    """Two runs side by side: the peak and, at each run's peak step, each category (bytes, b - a)."""
    def at_peak(r: WatchReport) -> dict[str, int]:
        if not r.steps:
            return {}
        return dict(max(r.steps, key=lambda s: s.peak_allocated_bytes).categories)

    ca, cb = at_peak(a), at_peak(b)
    rows = {"peak_allocated_bytes": (a.peak_allocated_bytes, b.peak_allocated_bytes)}
    for c in dict.fromkeys([*ca, *cb]):
        rows[c] = (ca.get(c, 0), cb.get(c, 0))
    return {"runs": [a.run_id, b.run_id],
            "rows": {k: {"a": x, "b": y, "difference": y - x} for k, (x, y) in rows.items()},
            "leak_bytes_per_step": [a.leak.bytes_per_step if a.leak else None,
                                    b.leak.bytes_per_step if b.leak else None]}
