"""The watch inside a process started by ``vramlens run`` (or ``vramlens calibrate``).

The generated ``sitecustomize`` calls :func:`install` in every Python process of the run. Nothing
heavy happens then: torch is not imported (a helper script that never imports torch pays
nothing); a finder on ``sys.meta_path`` starts the watch when the program itself imports torch.
The watch has no model: torch.optim's global step hook finds the parameters in the optimizers'
``param_groups`` at the first step.

The report is written as JSON into ``VRAMLENS_RUN_DIR`` (one file per process, named by its rank
under torchrun) at exit (``atexit``), on an uncaught exception (the excepthook writes it, with an
OOM post-mortem added to the exception's notes, then lets the original hook print the traceback)
and on SIGTERM/SIGINT (written, then the signal's previous behaviour: the default SIGTERM still
kills the process, SIGINT still raises KeyboardInterrupt). A process that saw no optimizer step
and is not the command itself (torchrun's workers' launcher, a DataLoader worker) writes nothing.
"""

from __future__ import annotations

import atexit
import importlib.abc
import importlib.util
import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

#: The environment ``vramlens run`` sets for its child processes.
ENV_DIR = "VRAMLENS_RUN_DIR"            # where each process writes its report
ENV_PARENT = "VRAMLENS_RUN_PARENT"      # pid of `vramlens run`: its direct child is the command
ENV_OPTIONS = "VRAMLENS_RUN_OPTIONS"    # JSON: keyword arguments of watch() (label, cpu_limit_bytes, ...)
ENV_STOP_AFTER = "VRAMLENS_RUN_STOP_AFTER"  # calibrate: end the process after this many optimizer steps


def rank() -> int | None:
    """This process's rank under torchrun (RANK, else LOCAL_RANK), None outside a distributed run."""
    for name in ("RANK", "LOCAL_RANK"):
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return None


def install() -> None:
    """Watch this process from the moment it imports torch (called by the generated sitecustomize)."""
    if not os.environ.get(ENV_DIR):
        return
    if "torch" in sys.modules:
        start()
    else:
        sys.meta_path.insert(0, TorchFinder())


class TorchFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when ``torch`` is imported, wraps its loader so that the watch starts
    right after ``torch/__init__`` has run."""

    def find_spec(self, name, path=None, target=None):  # noqa: ANN001 - the importlib protocol
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        spec.loader = StartAfter(spec.loader)
        return spec


class StartAfter(importlib.abc.Loader):
    """A loader that runs the real one, then starts the watch."""

    def __init__(self, loader: Any):
        self.loader = loader

    def create_module(self, spec):  # noqa: ANN001
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:  # noqa: ANN001
        self.loader.exec_module(module)
        try:
            start()
        except Exception as e:  # noqa: BLE001 - the run goes on unwatched, never broken by vramlens
            print(f"vramlens run: the watch could not start in this process: {e}", file=sys.stderr)

    def __getattr__(self, name: str) -> Any:  # get_resource_reader, is_package ... of the real loader
        return getattr(self.loader, name)


_session: Session | None = None


def start() -> Session | None:
    """Start watching this process (once) and arrange for its report to be written."""
    global _session
    if _session is None:
        _session = Session(Path(os.environ[ENV_DIR]))
    return _session


class Session:
    """One watched process: the Watch, its report file and the exit paths that write it."""

    def __init__(self, out_dir: Path):
        from torch.optim.optimizer import register_optimizer_step_post_hook

        from vramlens.monitor.session import Watch

        options: dict[str, Any] = json.loads(os.environ.get(ENV_OPTIONS) or "{}")
        self.out_dir = out_dir
        self.rank = rank()
        self.is_command = str(os.getppid()) == os.environ.get(ENV_PARENT)
        self.stop_after = int(os.environ.get(ENV_STOP_AFTER) or 0)
        label = options.pop("label", None)
        if self.rank is not None:
            label = f"{label or 'vramlens run'} rank {self.rank}"
        self.watch = Watch(label=label, **options)
        self.done = False
        self.watch.__enter__()
        # registered after the watch's own hook, so the step is recorded before it may end the process
        self._stop_hook = register_optimizer_step_post_hook(self._after_step) if self.stop_after else None
        self.interrupted = False
        atexit.register(self._end_like_python)  # registered first, so it runs after finish (LIFO)
        atexit.register(self.finish)
        self._previous_hook = sys.excepthook
        sys.excepthook = self._excepthook
        self._previous_signals: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._previous_signals[sig] = signal.getsignal(sig)
                signal.signal(sig, self._on_signal)

    @property
    def path(self) -> Path:
        who = f"rank{self.rank}" if self.rank is not None else "process"
        return self.out_dir / f"{who}-{os.getpid()}.json"

    def _write(self, report: Any, *, final: bool) -> None:
        if not (report.steps or self.is_command or report.oom):
            return  # a launcher or a worker process that trained nothing: no report of its own
        doc = {"rank": self.rank, "pid": os.getpid(), "final": final, "report": report.to_dict()}
        tmp = self.path.with_suffix(".tmp")
        try:
            tmp.write_text(json.dumps(doc), encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError as e:
            print(f"vramlens run: cannot write the report {self.path}: {e.strerror or e}", file=sys.stderr)

    def finish(self, exc: BaseException | None = None) -> None:
        """End the watch (adding the OOM post-mortem to ``exc``'s notes) and write the report, once."""
        if self.done:
            return
        self.done = True
        if self._stop_hook is not None:
            self._stop_hook.remove()
        self.watch.__exit__(type(exc) if exc is not None else None, exc, exc.__traceback__ if exc else None)
        if self.watch.report is not None:
            self._write(self.watch.report, final=True)

    def _excepthook(self, kind, exc, tb) -> None:  # noqa: ANN001
        self.interrupted = isinstance(exc, KeyboardInterrupt)
        try:
            self.finish(exc)
        finally:
            self._previous_hook(kind, exc, tb)

    def _end_like_python(self) -> None:
        # Python ends by SIGINT (status 130 in a shell) after an uncaught KeyboardInterrupt; ending the
        # watch inside the excepthook loses that, so the last exit handler restores it.
        if self.interrupted:
            sys.stdout.flush()
            sys.stderr.flush()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)

    def _on_signal(self, signum: int, frame: Any) -> None:
        # The watch is not ended here (a signal can land inside the dispatch mode): the report so far
        # is written, then the signal does what it did before; exit paths that follow write it again.
        if not self.done:
            self._write(self.watch.report_so_far(), final=False)
        previous = self._previous_signals.get(signum, signal.SIG_DFL)
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    def _after_step(self, _opt, _args, _kwargs) -> None:
        if self.watch.steps_done >= self.stop_after:
            self.finish()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)  # calibrate has what it came for; the rest of the script need not run
