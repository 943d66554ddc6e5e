"""Per-request budgets: the estimate and fit work runs in a small pool of worker processes.

A thread cannot be stopped from outside, so the work that grows with the request (building a
model's inventory, the advisor's search) runs in a separate process: over its time budget the
process is killed and replaced, over its memory budget (``RLIMIT_AS``) it fails with MemoryError
and is replaced, and in both cases the server's own memory never held the work. The server
keeps answering other requests meanwhile (the waiting happens in FastAPI's thread pool).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vramlens.limits import SEARCH_BUDGET_S

log = logging.getLogger("vramlens.web")

#: Wall-clock seconds one estimate or fit may take: the advisor's own search budget
#: (limits.SEARCH_BUDGET_S, after which it returns what it has) plus 5 s to build the answer.
REQUEST_SECONDS = SEARCH_BUDGET_S + 5.0
#: Address space a worker may add to what it holds after its imports. A guess, not yet measured:
#: the tests' estimate and fit of llama-2-7b run inside it; the largest models are not checked.
REQUEST_MEMORY_BYTES = 1024**3
#: Worker processes: requests beyond this many wait (up to their time budget) for a free one.
WORKERS = 2
#: Seconds a client may take to send its whole request body (slowloris protection):
#: a 256 KiB body over a slow 1 Mbit/s link takes 2 s.
BODY_SECONDS = 10.0
#: Seconds a fresh worker may take to import vramlens (spawned, on a loaded machine).
STARTUP_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class Budget:
    """What one request may spend. ``vramlens serve`` uses the defaults; tests shrink them."""

    seconds: float = REQUEST_SECONDS
    memory_bytes: int | None = REQUEST_MEMORY_BYTES
    workers: int = WORKERS
    body_seconds: float = BODY_SECONDS


class OverBudget(Exception):
    """The request went over its time or memory budget, or no worker was free in time (503)."""


class JobError(Exception):
    """A vramlens error raised in the worker: ``kind`` is its class name, the message its first line."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


class _Worker:
    def __init__(self, memory_bytes: int | None, env: dict[str, str]):
        ctx = multiprocessing.get_context("spawn")  # never fork a threaded server
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child, memory_bytes, env), daemon=True,
                                   name="vramlens-web-worker")
        self.process.start()
        child.close()
        if not self.conn.poll(STARTUP_SECONDS) or self.conn.recv() != "ready":
            self.kill()
            raise OverBudget(f"a worker process did not start within {STARTUP_SECONDS:g} s: try again")

    def kill(self) -> None:
        self.process.kill()
        self.process.join(timeout=5)
        self.conn.close()


class Pool:
    """At most ``budget.workers`` worker processes, started on demand; each runs one job at a time."""

    def __init__(self, budget: Budget = Budget(), env: dict[str, str] | None = None):
        self.budget = budget
        self.env = dict(env or {})  # set in each worker before it imports anything
        self._slots = threading.BoundedSemaphore(budget.workers)
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()

    def run(self, func: Callable[..., Any], *args: Any) -> Any:
        """``func(*args)`` in a worker, within the budget.

        Raises:
            OverBudget: over the time or memory budget, or every worker busy for the whole budget.
            JobError: the job raised a vramlens error (or an ArithmeticError from huge values).
        """
        b = self.budget
        if not self._slots.acquire(timeout=b.seconds):
            raise OverBudget(f"all {b.workers} workers stayed busy for the request budget of {b.seconds:g} s: "
                             "try again when the other requests finish")
        worker = None
        try:
            with self._lock:
                worker = self._idle.pop() if self._idle else None
            if worker is None:
                worker = _Worker(b.memory_bytes, self.env)
            try:
                worker.conn.send((func, args))
                done = worker.conn.poll(b.seconds)
                reply = worker.conn.recv() if done else None
            except (EOFError, OSError):  # the worker died (killed by the OS for memory, say)
                reply = ("memory", "")
            if reply is None:
                worker.kill()
                worker = None
                raise OverBudget(f"the request went over its time budget of {b.seconds:g} s and was stopped: "
                                 "ask for less (a smaller model, fewer GPUs, a shorter sequence)")
            status, *rest = reply
            if status == "memory":
                worker.kill()
                worker = None
                mib = (b.memory_bytes or 0) // 1024**2
                raise OverBudget(f"the request went over its memory budget of {mib} MiB and was stopped: "
                                 "ask for less (a smaller model, fewer GPUs, a shorter sequence)")
            if status == "error":
                raise JobError(*rest)
            if status == "internal":
                raise RuntimeError(f"worker failed: {rest[0]}")
            return rest[0]
        finally:
            if worker is not None:
                with self._lock:
                    self._idle.append(worker)
            self._slots.release()

    def close(self) -> None:
        """Stop every idle worker (busy ones are daemons and end with the server)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for w in idle:
            w.kill()

    def pids(self) -> list[int]:
        """Process ids of the idle workers (for tests: a worker over budget is replaced)."""
        with self._lock:
            return [w.process.pid for w in self._idle if w.process.pid is not None]  # all started


def _address_space() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _serve(conn, memory_bytes: int | None, env: dict[str, str]) -> None:  # pragma: no cover - in the worker
    os.environ.update(env)
    # import what the jobs use before the limit, so the limit bounds the job, not the imports
    import vramlens.advise  # noqa: F401
    import vramlens.estimator  # noqa: F401
    import vramlens.models.inventory  # noqa: F401
    from vramlens.errors import VramlensError

    if memory_bytes:
        try:
            import resource

            limit = _address_space() + memory_bytes
            resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
        except (ImportError, OSError, ValueError) as e:  # not Linux: the time budget still holds
            log.warning("no memory budget for the web workers: %s", e)
    conn.send("ready")
    while True:
        try:
            func, args = conn.recv()
        except (EOFError, OSError):  # the server is gone
            return
        try:
            reply: tuple[Any, ...] = ("ok", func(*args))
        except MemoryError:
            reply = ("memory",)
        except VramlensError as e:
            reply = ("error", type(e).__name__, (str(e).splitlines() or [type(e).__name__])[0])
        except ArithmeticError as e:  # overflow from a value far beyond any real model
            reply = ("error", "InputError", f"a value is too large to compute with ({e}): use realistic sizes")
        except Exception as e:  # noqa: BLE001 - reported to the server, which logs it and answers 500
            reply = ("internal", f"{type(e).__name__}: {e}"[:500])
        try:
            conn.send(reply)
        except MemoryError:
            conn.send(("memory",))
        if reply[0] == "memory":
            return  # start afresh: the server replaces this worker


__all__ = ["Budget", "JobError", "OverBudget", "Pool"]
