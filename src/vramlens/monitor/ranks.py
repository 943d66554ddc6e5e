"""What ``vramlens run`` says about a command: its exit and one watch report per process (per rank
under torchrun), merged into one view with a column per rank. Pure Python, no torch."""

from __future__ import annotations

import signal as signals
from dataclasses import dataclass
from typing import Any

from vramlens.monitor.records import WatchReport, report_from_dict
from vramlens.units import human_bytes

#: The exit status a shell gives a process ended by signal N.
SIGNAL_EXIT_BASE = 128


@dataclass(frozen=True, slots=True)
class RankReport:
    """One watched process of the command: its rank (None outside torchrun), pid and report."""

    rank: int | None
    pid: int
    report: WatchReport
    final: bool = True          # False: written by a SIGTERM/SIGINT handler before the process ended

    @property
    def name(self) -> str:
        return f"rank {self.rank}" if self.rank is not None else f"pid {self.pid}"

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "pid": self.pid, "final": self.final, "report": self.report.to_dict()}


def rank_report_from_dict(d: dict[str, Any]) -> RankReport:
    """Read one process's file (the form :meth:`RankReport.to_dict` writes)."""
    return RankReport(d.get("rank"), int(d["pid"]), report_from_dict(d["report"]), bool(d.get("final", True)))


@dataclass(frozen=True, slots=True)
class RunReport:
    """A command run under ``vramlens run``.

    Attributes:
        command: the command line, as run.
        returncode: the child's status as ``subprocess`` gives it: the exit code, or -N when
            signal N ended it.
        ranks: one report per watched process that trained (sorted by rank, then pid).
        notes: what could not be measured, one line each.
    """

    command: tuple[str, ...]
    returncode: int
    ranks: tuple[RankReport, ...]
    notes: tuple[str, ...] = ()

    @property
    def exit_code(self) -> int:
        """What ``vramlens run`` exits with: the command's code, or 128 + N for signal N (as a shell)."""
        return self.returncode if self.returncode >= 0 else SIGNAL_EXIT_BASE - self.returncode

    @property
    def signal(self) -> int | None:
        return -self.returncode if self.returncode < 0 else None

    @property
    def peak_allocated_bytes(self) -> int:
        return max((r.report.peak_allocated_bytes for r in self.ranks), default=0)

    def exit_text(self) -> str | None:
        """One line when the command did not end by itself (a signal), else None."""
        sig = self.signal
        if sig is None:
            return None
        try:
            name = signals.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        if sig == signals.SIGKILL:
            return ("vramlens run: the command was killed by signal 9 (SIGKILL): host OOM or killed "
                    "(the kernel's OOM killer sends SIGKILL when the host runs out of memory: see `dmesg`; "
                    "the report holds the steps written before it)")
        return f"vramlens run: the command was ended by signal {sig} ({name})"

    def steps_table(self) -> list[dict[str, Any]]:
        """Per step, each rank's peak allocated bytes (None where that rank has no record of the step)."""
        by_step: dict[int, dict[str, int | None]] = {}
        names = [r.name for r in self.ranks]
        for r in self.ranks:
            for s in r.report.steps:
                by_step.setdefault(s.step, dict.fromkeys(names))[r.name] = s.peak_allocated_bytes
        return [{"step": step, "peak_allocated_bytes": row} for step, row in sorted(by_step.items())]

    def text(self) -> str:
        lines = [f"vramlens run: {' '.join(self.command)} exited with {self.exit_code}"]
        if len(self.ranks) == 1:
            lines.append(self.ranks[0].report.text())
        else:
            for r in self.ranks:
                lines.append(f"[{r.name}] " + r.report.text().replace("\n", f"\n[{r.name}] "))
        sig = self.exit_text()
        if sig:
            lines.append(sig)
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "command": list(self.command),
            "returncode": self.returncode,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "peak_allocated_bytes": self.peak_allocated_bytes,
            "ranks": [r.to_dict() for r in self.ranks],
            "steps": self.steps_table(),
            "notes": list(self.notes),
        }

    def to_html(self) -> str:
        from vramlens.monitor.html import render_run

        return render_run(self.to_dict())


def merge(command: tuple[str, ...], returncode: int, reports: list[RankReport]) -> RunReport:
    """One RunReport from the processes' files: ranked processes first, in rank order; a process
    with no step (torchrun's launcher) is left out when others trained."""
    notes: list[str] = []
    trained = [r for r in reports if r.report.steps or r.report.oom]
    kept = trained or reports
    kept = sorted(kept, key=lambda r: (r.rank is None, r.rank if r.rank is not None else 0, r.pid))
    if not kept:
        notes.append("no process wrote a report: the command never imported torch, or it was killed before "
                     "it could write one")
    for r in kept:
        if not r.final:
            notes.append(f"{r.name} was interrupted: its report holds the steps up to the signal")
    peaks = [r.report.peak_allocated_bytes for r in kept if r.report.steps]
    if len(peaks) > 1 and max(peaks) > min(peaks):
        notes.append(f"the ranks' peaks differ by {human_bytes(max(peaks) - min(peaks))}")
    return RunReport(tuple(command), returncode, tuple(kept), tuple(notes))
