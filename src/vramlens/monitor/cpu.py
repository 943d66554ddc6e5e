"""The CPU backend: live storages of real CPU tensors counted by a TorchDispatchMode.

The same design as the tracer's recorder (vramlens.trace.recorder), cut down to what a long run
can afford: per op only the outputs are looked at; a storage not seen before is an allocation
(views share their base's storage, so they count once); a weakref callback on the untyped
storage (PyTorch keeps one Python object per live storage) is its free. Nothing is logged: the
mode keeps running totals by category, the peak since the last step and its categories, and per
live storage its size, category, birth step and (only once a leak is suspected, or at an OOM)
the allocating module and user frames. Memory is O(live storages), not O(events).

A cap (``limit_bytes``) makes an allocation over it raise :class:`CpuOutOfMemoryError`, a
subclass of ``torch.OutOfMemoryError``, so that the OOM path can be tested without a GPU.
"""

from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from vramlens.monitor.host import UserFrames
from vramlens.monitor.records import CATEGORIES
from vramlens.monitor.storage import storages

ACT = "activations_and_temporaries"


class CpuOutOfMemoryError(torch.OutOfMemoryError):
    """An allocation would take the live total over the CPU backend's cap."""

    def __init__(self, message: str, requested_bytes: int, live_bytes: int, limit_bytes: int):
        super().__init__(message)
        self.requested_bytes = requested_bytes
        self.live_bytes = live_bytes
        self.limit_bytes = limit_bytes


class CpuCounter(TorchDispatchMode):
    """Count live storages by category; see the module docstring.

    Args:
        limit_bytes: raise CpuOutOfMemoryError when an allocation would take the live total over it.
        module_names: id(module) -> dotted path, for the allocating module of each storage.
    """

    def __init__(self, *, limit_bytes: int | None = None, module_names: dict[int, str] | None = None):
        super().__init__()
        self.limit_bytes = limit_bytes
        self.module_names = module_names or {}
        self.live = 0
        self.by_cat: dict[str, int] = dict.fromkeys(CATEGORIES, 0)
        self.peak = 0
        self.peak_cats: dict[str, int] = dict(self.by_cat)
        self.step = 0
        #: record the user frames of each new storage (the second pass of leak finding)
        self.capture = False
        self._size: dict[int, int] = {}      # id(storage) -> bytes, while alive
        self._cat: dict[int, str] = {}       # id(storage) -> category, when not ACT
        self._born: dict[int, int] = {}      # id(storage) -> step it was allocated in (ACT only)
        self._refs: dict[int, weakref.ref] = {}
        self._stack: dict[int, tuple[str, ...]] = {}
        self._module: dict[int, str] = {}
        self._mod_stack: list[str] = [""]
        self._frames = UserFrames()
        self._hooks: list = []
        #: bytes alive by category and by module when the cap was hit (None before)
        self.oom_categories: dict[str, int] | None = None
        self.oom_modules: dict[str, int] | None = None

    # ---- storages ---------------------------------------------------------------------------
    def _add(self, st, category: str = ACT, module_name: str | None = None) -> None:
        key = id(st)
        n = st.nbytes()
        size = self._size
        if self.limit_bytes is not None and self.live + n > self.limit_bytes:
            self.oom_categories = dict(self.by_cat)
            self.oom_modules = self.by_module()
            raise CpuOutOfMemoryError(
                f"vramlens.watch CPU cap: tried to allocate {n:,} bytes with {self.live:,} alive of the "
                f"cpu_limit_bytes={self.limit_bytes:,} cap", n, self.live, self.limit_bytes)
        size[key] = n
        self.live += n
        by_cat = self.by_cat
        by_cat[category] += n
        if category == ACT:
            self._born[key] = self.step
            if self.capture:
                self._stack[key] = self._frames.stack()
        else:
            self._cat[key] = category
        if self.module_names:
            self._module[key] = module_name if module_name is not None else (
                "<backward>" if torch._C._current_autograd_node() is not None else self._mod_stack[-1])
        if self.live > self.peak:
            self.peak = self.live
            self.peak_cats = dict(by_cat)
        cat, born, refs, stack, module = self._cat, self._born, self._refs, self._stack, self._module
        self_ref = weakref.ref(self)

        def freed(_ref, key=key, n=n):
            me = self_ref()
            if me is None:
                return
            size.pop(key, None)
            refs.pop(key, None)
            born.pop(key, None)
            stack.pop(key, None)
            module.pop(key, None)
            me.live -= n
            me.by_cat[cat.pop(key, ACT)] -= n

        refs[key] = weakref.ref(st, freed)

    def register(self, tensors, category: str, module: str | None = None) -> None:
        """File the storages of ``tensors`` under ``category`` (counted now if not seen yet, as
        allocated by ``module`` when given)."""
        size = self._size
        for key, st in storages(tensors):
            if key not in size:
                self._add(st, category, module)
                continue
            old = self._cat.get(key, ACT)
            if old == category:
                continue
            n = size[key]
            self.by_cat[old] -= n
            self.by_cat[category] += n
            if category == ACT:
                del self._cat[key]
                self._born[key] = self.step
            else:
                self._cat[key] = category
                self._born.pop(key, None)
                self._stack.pop(key, None)

    # ---- dispatch -----------------------------------------------------------------------
    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # TorchDispatchMode wraps a subclass's __torch_dispatch__ in torch._disable_dynamo when this
        # says so: a Python frame switch around every op, about half of this mode's cost per op
        # (benchmarks/bench_watch.py). The mode never runs under torch.compile's tracing (it is
        # entered around the user's eager loop), so the guard buys nothing here.
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **kwargs) if kwargs else func(*args)
        if isinstance(out, torch.Tensor):
            # in-place ops (add_, the optimizer's updates) return their first argument: nothing new
            if args and out is args[0]:
                return out
            st = out.untyped_storage()
            if id(st) not in self._size:
                self._add(st)
            return out
        if isinstance(out, (tuple, list)):
            size = self._size
            for t in out:
                if isinstance(t, torch.Tensor):
                    ts: tuple | list = (t,)
                elif isinstance(t, (tuple, list)):  # foreach ops return lists
                    ts = t
                else:
                    continue
                for u in ts:
                    if isinstance(u, torch.Tensor):
                        st = u.untyped_storage()
                        if id(st) not in size:
                            self._add(st)
        return out

    # ---- modules (only when a model is watched) -----------------------------------------------
    def _pre(self, module, _args):
        name = self.module_names.get(id(module))
        if name is not None:
            self._mod_stack.append(name)

    def _post(self, module, _args, _output):
        if id(module) in self.module_names and len(self._mod_stack) > 1:
            self._mod_stack.pop()

    def __enter__(self):
        if self.module_names:
            mm = torch.nn.modules.module
            self._hooks = [mm.register_module_forward_pre_hook(self._pre),
                           mm.register_module_forward_hook(self._post, always_call=True)]
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            for h in self._hooks:
                h.remove()
            self._hooks = []

    # ---- steps --------------------------------------------------------------------------
    def end_step(self) -> tuple[int, dict[str, int]]:
        """(peak, categories at the peak) since the last call; the next interval starts at the live total."""
        out = (self.peak, self.peak_cats)
        self.step += 1
        self.peak = self.live
        self.peak_cats = dict(self.by_cat)
        return out

    def reset_peak(self) -> None:
        """Start a new peak interval at the live total without ending the step."""
        self.peak = self.live
        self.peak_cats = dict(self.by_cat)

    def retained_bytes(self) -> int:
        """Live bytes of storages allocated in an earlier step and in no registry."""
        step, size = self.step, self._size
        return sum(size[k] for k, b in self._born.items() if b < step)

    def sites(self, top: int = 5) -> list[tuple[tuple[str, ...], int, int]]:
        """(user frames, bytes, count) of retained storages whose stack was captured, largest first."""
        groups: dict[tuple[str, ...], list[int]] = {}
        step, size = self.step, self._size
        for k, frames in self._stack.items():
            if self._born.get(k, step) < step and frames:
                g = groups.setdefault(frames, [0, 0])
                g[0] += size[k]
                g[1] += 1
        ranked = sorted(groups.items(), key=lambda kv: (-kv[1][0], kv[0]))
        return [(frames, b, n) for frames, (b, n) in ranked[:top]]

    def by_module(self) -> dict[str, int]:
        """Live bytes by allocating module, largest first (empty when no model is watched): parameters
        under the module that holds them, what backward allocates under ``<backward>``, and what
        runs outside the model's modules under ``""``."""
        out: dict[str, int] = {}
        size = self._size
        for k, m in self._module.items():
            out[m] = out.get(m, 0) + size.get(k, 0)
        return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))
