"""The CUDA backend: PyTorch's own counters, exact per-step peaks, weak registries, the OOM observer.

Not run by the test suite on a CPU-only machine except through a stand-in ``cuda`` namespace
(tests/monitor/test_cuda_backend.py): the counter logic is tested, the calls into a real CUDA
build (the OOM observer, memory history, snapshots, NVML) are not.

Exact peaks without an observer effect: the caching allocator keeps one peak counter per
device, and DeepSpeed, torchtune or HF Trainer reset it under each other. While watching,
``torch.cuda.reset_peak_memory_stats`` is wrapped: a reset by other code first folds the peak so
far into the step's peak, and ``max_memory_allocated``/``max_memory_reserved`` are wrapped so
that other code still reads the peak since its own last reset, not since vramlens' step boundary.
``memory_stats()`` is not wrapped: its ``*.peak`` entries restart at each step while watching.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from vramlens.monitor.records import CATEGORIES
from vramlens.monitor.storage import storages

ACT = "activations_and_temporaries"
_REGISTERED = ("parameters", "gradients", "optimizer_states")


class Registry:
    """Bytes of storages by category, held weakly: a freed storage leaves its category by itself."""

    def __init__(self) -> None:
        self.by_cat: dict[str, int] = dict.fromkeys(_REGISTERED, 0)
        self._entry: dict[int, tuple[str, int, weakref.ref]] = {}

    def register(self, tensors, category: str) -> None:
        entry = self._entry
        for key, st in storages(tensors):
            old = entry.get(key)
            if old is not None:
                if old[0] == category:
                    continue
                self.by_cat[old[0]] -= old[1]
                entry[key] = (category, old[1], old[2])
                self.by_cat[category] += old[1]
                continue
            n = st.nbytes()
            self_ref = weakref.ref(self)

            def freed(_ref, key=key):
                me = self_ref()
                if me is not None:
                    gone = me._entry.pop(key, None)
                    if gone is not None:
                        me.by_cat[gone[0]] -= gone[1]

            entry[key] = (category, n, weakref.ref(st, freed))
            self.by_cat[category] += n

    def total(self) -> int:
        return sum(self.by_cat.values())


class CudaBackend:
    """Per-step figures from ``torch.cuda``'s counters.

    Args:
        cuda: the ``torch.cuda`` namespace (a stand-in in tests).
        history: arm memory history recording (Python stacks, for the snapshot written at an OOM).
        max_entries: the history's ring buffer size.
    """

    name = "cuda"

    def __init__(self, cuda: Any = None, *, history: bool = True, max_entries: int = 100_000):
        self.cuda = cuda if cuda is not None else torch.cuda
        self.registry = Registry()
        self.history = history
        self.max_entries = max_entries
        self.device = ""
        self.oom_seen: dict[str, int] | None = None
        self.notes: list[str] = []
        self._patched: list[tuple[Any, str, Any]] = []
        self._other = 0

    # ---- lifetime -------------------------------------------------------------------------
    def start(self) -> None:
        c = self.cuda
        try:
            self.device = str(c.get_device_name())
        except Exception:  # noqa: BLE001 - a stand-in without a name
            self.device = "cuda"
        self._real_reset = c.reset_peak_memory_stats
        self._real_max_alloc = c.max_memory_allocated
        self._real_max_res = c.max_memory_reserved
        self._other = max(0, int(c.memory_allocated()) - self.registry.total())
        self._seen_alloc = int(self._real_max_alloc())  # what other code has read as the peak so far
        self._seen_res = int(self._real_max_res())
        self._carry_alloc = 0
        self._carry_res = 0
        for module in {id(c): c, id(getattr(c, "memory", c)): getattr(c, "memory", c)}.values():
            for name, fn in (("reset_peak_memory_stats", self._reset_by_others),
                             ("max_memory_allocated", self._max_alloc_for_others),
                             ("max_memory_reserved", self._max_res_for_others)):
                if hasattr(module, name):
                    self._patched.append((module, name, getattr(module, name)))
                    setattr(module, name, fn)
        self._real_reset()
        self._arm_oom()

    def stop(self) -> None:
        for module, name, fn in reversed(self._patched):
            setattr(module, name, fn)
        self._patched = []
        if self.history and self.cuda is torch.cuda:
            try:
                torch.cuda.memory._record_memory_history(enabled=None)
            except Exception:  # noqa: BLE001 - best effort: history was never armed
                pass

    # ---- what other code sees ---------------------------------------------------------------
    def _reset_by_others(self, device=None) -> None:
        self._carry_alloc = max(self._carry_alloc, int(self._real_max_alloc()))
        self._carry_res = max(self._carry_res, int(self._real_max_res()))
        self._seen_alloc = 0
        self._seen_res = 0
        self._real_reset()

    def _max_alloc_for_others(self, device=None) -> int:
        return max(self._seen_alloc, int(self._real_max_alloc()))

    def _max_res_for_others(self, device=None) -> int:
        return max(self._seen_res, int(self._real_max_res()))

    # ---- steps ----------------------------------------------------------------------------
    def register(self, tensors, category: str) -> None:
        self.registry.register(tensors, category)

    def end_step(self) -> tuple[int, int, int, dict[str, int]]:
        """(peak allocated, peak reserved, live, categories at the peak) since the last call.

        Categories at the peak are the registries at the step's end, ``other`` as at the start,
        and the rest of the peak as activations and temporaries (the counters say how much, not what).
        """
        c = self.cuda
        real_alloc, real_res = int(self._real_max_alloc()), int(self._real_max_res())
        peak_alloc = max(self._carry_alloc, real_alloc)
        peak_res = max(self._carry_res, real_res)
        self._seen_alloc = max(self._seen_alloc, real_alloc)
        self._seen_res = max(self._seen_res, real_res)
        self._carry_alloc = self._carry_res = 0
        live = int(c.memory_allocated())
        self._real_reset()
        cats = dict.fromkeys(CATEGORIES, 0)
        cats.update(self.registry.by_cat)
        cats["other"] = self._other
        cats[ACT] = max(0, peak_alloc - sum(cats.values()))
        return peak_alloc, peak_res, live, cats

    def reset_peak(self) -> None:
        """Start a new peak interval now (calibrate), keeping what other code reads as the peak."""
        real_alloc, real_res = int(self._real_max_alloc()), int(self._real_max_res())
        self._seen_alloc = max(self._seen_alloc, real_alloc)
        self._seen_res = max(self._seen_res, real_res)
        self._carry_alloc = self._carry_res = 0
        self._real_reset()

    def current_peak(self) -> int:
        """The peak allocated since the last step or reset (no reset here)."""
        return max(self._carry_alloc, int(self._real_max_alloc()))

    def live_categories(self) -> tuple[int, dict[str, int]]:
        live = int(self.cuda.memory_allocated())
        cats = dict.fromkeys(CATEGORIES, 0)
        cats.update(self.registry.by_cat)
        cats["other"] = self._other
        cats[ACT] = max(0, live - sum(cats.values()))
        return live, cats

    # ---- OOM (needs a CUDA build: untested here) -------------------------------------------
    def _arm_oom(self) -> None:
        if self.cuda is not torch.cuda:
            return
        attach = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
        if attach is None:
            self.notes.append("this torch has no CUDA OOM observer: the failing allocation is read from the error")
        else:
            def observer(device, alloc, device_allocated, device_free):
                self.oom_seen = {"device": int(device), "requested": int(alloc),
                                 "allocated": int(device_allocated), "free": int(device_free)}

            try:
                attach(observer)
            except Exception as e:  # noqa: BLE001
                self.notes.append(f"the CUDA OOM observer could not be attached: {e}")
        if self.history:
            try:
                torch.cuda.memory._record_memory_history(max_entries=self.max_entries)
            except Exception as e:  # noqa: BLE001
                self.history = False
                self.notes.append(f"memory history could not be recorded: {e}")

    def dump_snapshot(self, path: str) -> str | None:
        if not self.history or self.cuda is not torch.cuda:
            return None
        try:
            torch.cuda.memory._dump_snapshot(path)
        except Exception:  # noqa: BLE001
            return None
        return path
