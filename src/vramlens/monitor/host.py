"""What the host says: resident memory of this process and its children (/proc), the device's used
memory (NVML), and the user's frames of the Python stack. No torch at import."""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path
from types import FrameType

#: Linux's page size: /proc/PID/statm counts pages.
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _rss_of(pid: int) -> int:
    with open(f"/proc/{pid}/statm", "rb") as f:
        return int(f.read().split()[1]) * PAGE_BYTES


def _children(pid: int) -> list[int]:
    """Child pids of ``pid`` from /proc/PID/task/*/children (kernel >= 3.5 with CONFIG_PROC_CHILDREN)."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                out += [int(c) for c in f.read().split()]
        except OSError:
            continue
    return out


def host_rss_bytes(pid: int | None = None) -> int | None:
    """Resident bytes of ``pid`` (default: this process) and all its descendants (DataLoader workers
    included); None where /proc is absent. Shared pages count in each process, as in ``ps``."""
    pid = os.getpid() if pid is None else pid
    try:
        total = _rss_of(pid)
    except (OSError, ValueError, IndexError):
        return None
    todo = _children(pid)
    seen = {pid}
    while todo:
        c = todo.pop()
        if c in seen:
            continue
        seen.add(c)
        try:
            total += _rss_of(c)
        except (OSError, ValueError, IndexError):  # the child ended between the two reads
            continue
        todo += _children(c)
    return total


class Nvml:
    """The device's used memory through NVML (pynvml), or None when NVML cannot answer."""

    def __init__(self, index: int = 0):
        self.handle = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            self._info = pynvml.nvmlDeviceGetMemoryInfo
        except Exception:  # noqa: BLE001 - no pynvml, no driver, no device: the figure is None
            self.handle = None

    def used_bytes(self) -> int | None:
        if self.handle is None:
            return None
        try:
            return int(self._info(self.handle).used)
        except Exception:  # noqa: BLE001
            return None


def _skipped_roots() -> tuple[tuple[str, ...], str | None]:
    """(package folders of vramlens and torch, the standard library's folder)."""
    import vramlens

    roots = [str(Path(vramlens.__file__).resolve().parent) + os.sep]
    torch_file = getattr(sys.modules.get("torch"), "__file__", None)
    if torch_file:
        roots.append(str(Path(torch_file).resolve().parent) + os.sep)
    stdlib = sysconfig.get_paths().get("stdlib")
    return tuple(roots), (str(Path(stdlib).resolve()) + os.sep) if stdlib else None


class UserFrames:
    """The user's frames of the current stack: the innermost frames outside torch, vramlens and
    the standard library (third-party packages such as transformers count as user code, so a
    leak inside a model's forward names its line). Filenames are judged once each."""

    def __init__(self, depth: int = 3):
        self.depth = depth
        self._roots = _skipped_roots()
        self._user: dict[str, bool] = {}

    def _is_user(self, filename: str) -> bool:
        known = self._user.get(filename)
        if known is None:
            path = os.path.realpath(filename) if not filename.startswith("<") else filename
            packages, stdlib = self._roots
            in_stdlib = stdlib is not None and path.startswith(stdlib) and "site-packages" not in path
            known = not (path.startswith("<") or path.startswith(packages) or in_stdlib)
            self._user[filename] = known
        return known

    def stack(self) -> tuple[str, ...]:
        frame: FrameType | None = sys._getframe(1)
        out: list[str] = []
        while frame is not None and len(out) < self.depth:
            code = frame.f_code
            if self._is_user(code.co_filename):
                out.append(f"{code.co_filename}:{frame.f_lineno} in {code.co_name}")
            frame = frame.f_back
        return tuple(out)
