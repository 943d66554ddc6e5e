"""``watch()``: the live run's session, one interface over the CUDA and CPU backends.

Steps come from torch.optim's global step post hook (every optimizer, or only the one given) or
from :meth:`Watch.step`. At each step the session files the optimizer's state and the gradients
in the registries, reads the backend's peak and live figures, and every ``every`` steps keeps a
:class:`StepRecord`. Nothing on the hot path calls ``gc.collect``, ``empty_cache`` or
``synchronize``.
"""

from __future__ import annotations

import contextlib
import os
import platform
import sys
from pathlib import Path
from typing import Any, Literal

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from vramlens.monitor.cpu import CpuCounter, CpuOutOfMemoryError
from vramlens.monitor.host import Nvml, host_rss_bytes
from vramlens.monitor.leak import find_growth, is_rising
from vramlens.monitor.oom import advise, requested_from_message
from vramlens.monitor.records import CATEGORIES, Leak, LeakSite, OomReport, StepRecord, WatchReport


class Watch(contextlib.ContextDecorator):
    """Watch a training or inference loop; see :func:`vramlens.monitor.watch` for the arguments."""

    def __init__(self, model: Any = None, optimizer: Any = None, every: int = 1, *, backend: str = "auto",
                 cpu_limit_bytes: int | None = None, model_name: Any = None, workload: Any = None,
                 gpu: Any = None, store: bool = True, label: str | None = None, html: str | None = None,
                 json_path: str | None = None, oom_history: bool = True, cuda: Any = None,
                 live: bool | None = None, live_stream: Any = None):
        if every < 1:
            raise ValueError(f"every={every} must be >= 1 (record every N-th optimizer step)")
        if backend not in ("auto", "cpu", "cuda"):
            raise ValueError(f"backend={backend!r} is not one of: auto, cpu, cuda")
        if cpu_limit_bytes is not None and cpu_limit_bytes < 1:
            raise ValueError(f"cpu_limit_bytes={cpu_limit_bytes} must be a positive number of bytes")
        self.model = model
        self.optimizer = optimizer
        self.every = every
        self.backend_name = ("cuda" if cuda is not None or torch.cuda.is_available() else "cpu") \
            if backend == "auto" else backend
        self.cpu_limit_bytes = cpu_limit_bytes
        self.model_name = model_name
        self.workload = workload
        self.gpu = gpu
        self.store = store
        self.label = label
        self.html = html
        self.json_path = json_path
        self.oom_history = oom_history
        self._cuda = cuda
        self.live = live
        self.live_stream = live_stream
        self.report: WatchReport | None = None
        self._active = False

    # ---- lifetime -------------------------------------------------------------------------
    def __enter__(self) -> Watch:
        self._steps_done = 0
        self._records: list[StepRecord] = []
        self._after: list[tuple[int, int]] = []      # (step, retained or live bytes after it)
        self._peaks: list[tuple[int, int]] = []
        self._sites: tuple[LeakSite, ...] = ()
        self._leak: Leak | None = None
        self._notes: list[str] = []
        self._oom: OomReport | None = None
        self._hooks: list = []
        self._watched_params: set[int] = set()
        self._nvml = None
        self._acc_peak: int = -1
        self._run_peak = 0
        self._acc_reserved: int | None = None
        self._acc_cats: dict[str, int] = {}
        names = {id(m): n for n, m in self.model.named_modules()} if self.model is not None else {}
        if self.backend_name == "cpu":
            # exactly one backend is set (backend_name says which): typed Any so that each use site need
            # not re-check what __enter__ already decided
            self.cpu: Any = CpuCounter(limit_bytes=self.cpu_limit_bytes, module_names=names)
            self.cuda_backend: Any = None
        else:
            from vramlens.monitor.cuda import CudaBackend

            self.cpu = None
            self.cuda_backend = CudaBackend(self._cuda, history=self.oom_history)
            if self._cuda is None:
                self._nvml = Nvml(torch.cuda.current_device())
        self._register_model()
        if self.cpu is not None:
            self.cpu.__enter__()
        else:
            self.cuda_backend.start()
            self._notes += self.cuda_backend.notes
        self._hooks.append(register_optimizer_step_post_hook(self._on_optimizer_step))
        self._line = None
        if self.live is not False:  # None: drawn when stderr is a terminal
            from vramlens.monitor.live import LiveLine

            line = LiveLine(self._capacity(), self.live_stream)
            self._line = line if line.active else None
        self._active = True
        return self

    def _capacity(self) -> int | None:
        if self.cpu is not None:
            return self.cpu_limit_bytes
        if self._cuda is None:
            try:
                return int(torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory)
            except Exception:  # noqa: BLE001 - no bar, only the figures
                return None
        return None

    def __exit__(self, exc_type, exc, tb) -> Literal[False]:
        if not self._active:
            return False
        self._active = False
        try:
            if exc is not None and isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
                self._oom = self._post_mortem(exc)
                if hasattr(exc, "add_note"):
                    exc.add_note(self._oom.text())
        finally:
            for h in self._hooks:
                h.remove()
            self._hooks = []
            if self._line is not None:
                self._line.close()
            if self.cpu is not None:
                if self._leak is not None and self.cpu.capture:
                    self._sites = self._leak_sites() or self._sites
                self.cpu.__exit__(exc_type, exc, tb)
            else:
                self.cuda_backend.stop()
            self.report = self._build_report()
            self._finish()
        return False

    def _finish(self) -> None:
        """Store the run and write the files; a failure here is one line on stderr, never the run's end."""
        if self.store:
            from vramlens.monitor.runs import RunsDatabaseError, save_run

            assert self.report is not None  # _finish runs after the report is made
            try:
                run_id = save_run(self.report, label=self.label)
                self.report = _with(self.report, run_id=run_id)
            except RunsDatabaseError as e:
                print(f"vramlens: {e}", file=sys.stderr)
                self.report = _with(self.report, notes=self.report.notes + (str(e),))
        report = self.report
        assert report is not None
        for path, text in ((self.html, lambda: report.to_html()),
                           (self.json_path, lambda: _json(report.to_dict()))):
            if path:
                try:
                    Path(path).write_text(text(), encoding="utf-8")
                except OSError as e:
                    print(f"vramlens: cannot write {path}: {e.strerror or e}", file=sys.stderr)

    # ---- registries -----------------------------------------------------------------------
    def _backend_register(self, tensors, category: str) -> None:
        if self.cpu is not None:
            self.cpu.register(tensors, category)
        else:
            self.cuda_backend.register(tensors, category)

    def _register_model(self) -> None:
        params: list = []
        if self.model is not None:
            params += list(self.model.parameters())
            if self.cpu is not None:  # each parameter and buffer under the module that holds it
                for name, m in self.model.named_modules():
                    self.cpu.register([*m.parameters(recurse=False), *m.buffers(recurse=False)], "parameters", name)
            self._backend_register(self.model.buffers(), "parameters")
        if self.optimizer is not None:
            params += [p for g in self.optimizer.param_groups for p in g["params"]]
        self._watch_params(params)
        if self.optimizer is not None:
            self._register_optimizer(self.optimizer)

    def _watch_params(self, params) -> None:
        fresh = [p for p in params if id(p) not in self._watched_params]
        if not fresh:
            return
        self._backend_register(fresh, "parameters")
        for p in fresh:
            self._watched_params.add(id(p))
            if p.grad is not None:
                self._backend_register((p.grad,), "gradients")
            if p.requires_grad and hasattr(p, "register_post_accumulate_grad_hook"):
                try:
                    self._hooks.append(p.register_post_accumulate_grad_hook(self._on_grad))
                except RuntimeError:  # a non-leaf or frozen tensor: the step's sweep files its grad
                    pass

    def _on_grad(self, p) -> None:
        if p.grad is not None:
            self._backend_register((p.grad,), "gradients")

    def _register_optimizer(self, opt) -> None:
        for state in opt.state.values():
            self._backend_register(state.values(), "optimizer_states")
        for g in opt.param_groups:
            self._backend_register((p.grad for p in g["params"] if p.grad is not None), "gradients")

    # ---- steps ----------------------------------------------------------------------------
    def _on_optimizer_step(self, opt, _args, _kwargs) -> None:
        if self.optimizer is not None and opt is not self.optimizer:
            return
        if self.optimizer is None:
            self._watch_params([p for g in opt.param_groups for p in g["params"]])
        self._register_optimizer(opt)
        self.step()

    def step(self) -> None:
        """End a step by hand (loops without torch.optim, inference); optimizer steps call it."""
        if not self._active:
            raise RuntimeError("Watch.step() outside the with block: steps are counted only while watching")
        self._steps_done += 1
        n = self._steps_done
        if self.cpu is not None:
            after = self.cpu.retained_bytes()  # before end_step: this step's tensors are not retained
            peak, cats = self.cpu.end_step()
            reserved, live = None, self.cpu.live
        else:
            peak, reserved, live, cats = self.cuda_backend.end_step()
            after = live
        self._after.append((n, after))
        self._peaks.append((n, peak))
        self._interval_max(peak, reserved, cats)
        self._run_peak = max(self._run_peak, peak)
        if self._line is not None:
            self._line.update(n, live, self._run_peak)
        if n % self.every == 0:
            self._records.append(StepRecord(
                step=n, peak_allocated_bytes=self._acc_peak, peak_reserved_bytes=self._acc_reserved,
                live_bytes=live, retained_bytes=after if self.cpu is not None else None,
                device_total_bytes=self._nvml.used_bytes() if self._nvml is not None else None,
                host_rss_bytes=host_rss_bytes(), categories=self._acc_cats))
            self._acc_peak, self._acc_reserved = -1, None
        self._check_leak()

    @property
    def steps_done(self) -> int:
        """Optimizer steps (or ``step()`` calls) seen so far."""
        return self.__dict__.get("_steps_done", 0)

    def report_so_far(self) -> WatchReport:
        """The report of the steps so far, without ending the watch (a signal handler writes it)."""
        if not self._active:
            if self.report is None:
                raise RuntimeError("Watch.report_so_far() before the with block began")
            return self.report
        return self._build_report()

    # ---- measurement intervals (calibrate) -----------------------------------------------------
    def mark(self) -> None:
        """Start an interval: :meth:`peak_since_mark` is the largest live total from now on."""
        if not self._active:
            raise RuntimeError("Watch.mark() outside the with block")
        self._mark = len(self._peaks)
        if self.cpu is not None:
            self.cpu.reset_peak()
        else:
            self.cuda_backend.reset_peak()

    def peak_since_mark(self) -> int:
        """The largest live total since :meth:`mark`, across the steps that ended in between."""
        current = self.cpu.peak if self.cpu is not None else self.cuda_backend.current_peak()
        return max([current, *(p for _, p in self._peaks[getattr(self, "_mark", 0):])])

    @property
    def current_leak(self) -> Leak | None:
        """The leak found so far (None while what survives each step does not grow)."""
        return self._leak if self._active else (self.report.leak if self.report else None)

    @property
    def records(self) -> tuple[StepRecord, ...]:
        """The step records so far (while watching; after the block, ``report.steps``)."""
        return tuple(self._records) if self._active else (self.report.steps if self.report else ())

    def _interval_max(self, peak: int, reserved: int | None, cats: dict[str, int]) -> None:
        if peak > self._acc_peak:
            self._acc_peak, self._acc_cats = peak, dict(cats)
        if reserved is not None:
            self._acc_reserved = max(reserved, self._acc_reserved or 0)

    def _check_leak(self) -> None:
        steps = [s for s, _ in self._after]
        values = [v for _, v in self._after]
        if self.cpu is not None and not self.cpu.capture and is_rising(steps, values):
            self.cpu.capture = True  # the second pass: stacks only from now on, only while it grows
        growth = find_growth(steps, values)
        if growth is None:
            self._leak = None
            return
        first = self._leak is None
        if self.cpu is not None and (first or not self._sites):
            self._sites = self._leak_sites()
        self._leak = Leak(growth.bytes_per_step, "retained" if self.cpu is not None else "live",
                          growth.first_step, growth.last_step, self._sites)

    def _leak_sites(self) -> tuple[LeakSite, ...]:
        return tuple(LeakSite(frames[0], frames, b, n) for frames, b, n in self.cpu.sites())

    # ---- OOM ------------------------------------------------------------------------------
    def _post_mortem(self, exc: BaseException) -> OomReport:
        requested = limit = None
        by_module: dict[str, int] = {}
        snapshot = None
        if isinstance(exc, CpuOutOfMemoryError):
            kind = "cpu_limit"
            requested, limit, live = exc.requested_bytes, exc.limit_bytes, exc.live_bytes
            cats = dict(self.cpu.oom_categories or self.cpu.by_cat)
            by_module = dict(self.cpu.oom_modules or {})
            gpu = self.gpu or f"{limit}B"
        elif isinstance(exc, MemoryError):
            kind = "host"
            live, cats = self._live()
            gpu = self.gpu
        else:
            kind = "device"
            seen = self.cuda_backend.oom_seen if self.cuda_backend is not None else None
            requested = seen["requested"] if seen else requested_from_message(str(exc))
            live, cats = self._live()
            gpu = self.gpu
            if self.cuda_backend is not None and self._cuda is None:
                try:
                    limit = int(torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory)
                except Exception:  # noqa: BLE001
                    limit = None
                path = os.path.abspath(f"vramlens-oom-snapshot-rank{os.environ.get('RANK', '0')}.pickle")
                snapshot = self.cuda_backend.dump_snapshot(path)
            gpu = gpu or (f"{limit}B" if limit else None)
        advice = advise(self.model_name, self.workload, gpu) if (self.model_name is None or gpu) else None
        notes = advice.notes if advice else ("no GPU known for the fixes: pass gpu= to watch()",)
        return OomReport(kind=kind, requested_bytes=requested, limit_bytes=limit, live_bytes=live,
                         categories={c: cats.get(c, 0) for c in CATEGORIES}, by_module=by_module,
                         step=self._steps_done, estimate_bytes=advice.estimate_bytes if advice else None,
                         fixes=advice.fixes if advice else (), error=str(exc).splitlines()[0] if str(exc) else "",
                         notes=notes, snapshot_path=snapshot)

    def _live(self) -> tuple[int, dict[str, int]]:
        if self.cpu is not None:
            return self.cpu.live, dict(self.cpu.by_cat)
        return self.cuda_backend.live_categories()

    # ---- results --------------------------------------------------------------------------
    def _build_report(self) -> WatchReport:
        notes = list(self._notes)
        if self._leak is None and self.cpu is not None:
            peaks = find_growth([s for s, _ in self._peaks], [p for _, p in self._peaks])
            if peaks is not None:
                notes.append(f"the peak grows by {peaks.bytes_per_step:,} B per step while nothing survives "
                             "from one step to the next: the inputs grow, this is not a leak")
        if not self._steps_done:
            notes.append("no optimizer step was seen: call w.step() at the end of each step of a loop "
                         "without torch.optim")
        if self.cpu is not None and self.cpu_limit_bytes is None and self.model is None and self.optimizer is None \
                and not self._watched_params:
            notes.append("no model or optimizer given: parameters count as activations until an optimizer steps")
        return WatchReport(
            backend=self.backend_name,
            device=self.cuda_backend.device if self.cuda_backend is not None else "cpu",
            steps=tuple(self._records), leak=self._leak, oom=self._oom,
            environment=environment(self.backend_name, self.cuda_backend.device if self.cuda_backend else "cpu"),
            notes=tuple(notes))

    def __getattr__(self, name: str) -> Any:
        # w.steps, w.leak, w.to_dict() ... read the report once the block has ended
        if name in ("steps", "leak", "oom", "to_dict", "to_html", "text", "peak_allocated_bytes"):
            report = self.__dict__.get("report")
            if report is None:
                raise AttributeError(f"Watch.{name} is there once the with block has ended (see Watch.report)")
            return getattr(report, name)
        raise AttributeError(name)


def environment(backend: str, device: str) -> dict[str, Any]:
    """What the run ran on: versions and device names (no host names, no paths)."""
    return {"torch": torch.__version__, "cuda": getattr(torch.version, "cuda", None), "backend": backend,
            "device": device, "gpu_name": device if backend == "cuda" else None,
            "python": platform.python_version(), "platform": platform.platform(terse=True)}


def _with(report: WatchReport, **changes: Any) -> WatchReport:
    from dataclasses import replace

    return replace(report, **changes)


def _json(d: dict) -> str:
    import json

    return json.dumps(d, indent=2) + "\n"
