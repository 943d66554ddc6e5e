"""The recorder: a TorchDispatchMode that sees every storage created and freed in a step.

Design (kept light so a 7B step traces in seconds):

* Per op, only the outputs are looked at: a storage not seen before is an allocation. Views
  share their base's storage, so they count once. Frees come from a weakref callback on the
  untyped storage object (PyTorch keeps one Python object per live storage).
* Nothing is classified per op. The recorder keeps raw facts (bytes, op, module, phase, step)
  and the runner marks storages at step boundaries (parameters, gradients, optimizer state,
  KV cache, inputs); ``saved_tensors_hooks`` marks what autograd saves. Tags are resolved once,
  at the end (:meth:`Recorder.events`).
* The module path comes from global forward pre/post hooks (a stack). In backward, the
  autograd node being run names the module: forward post-hooks label the new graph nodes
  with the module that made them.
"""

from __future__ import annotations

import functools
import sys
import weakref
from collections.abc import Callable, Iterable
from typing import Any, cast

import torch
from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass

from vramlens.trace.events import PHASES, Event, round_storage
from vramlens.units import BLOCK

_ALLOC, _FREE = 0, 1
_TO_COPY = torch.ops.aten._to_copy.default
_SCALAR = torch.ops.aten._local_scalar_dense.default
#: funcol's wait returns its input on a GPU (torch/csrc/distributed/c10d/Functional.cpp ``wait_tensor``:
#: ``return tensor;``), but its fake/meta kernel returns ``torch.empty_like(self)``
#: (torch/distributed/_functional_collectives.py ``_wait_tensor_meta``): a second buffer per collective
_WAIT = torch.ops._c10d_functional.wait_tensor.default if hasattr(torch.ops, "_c10d_functional") else None
_META_KEY = "vramlens_module"
_MISSING = object()


def _metadata(node: torch.autograd.graph.Node) -> dict[str, str]:
    """The node's metadata dict: a property on autograd's C++ nodes, declared a method in torch's
    Python stub (torch/autograd/graph.py), so the cast is the stub's correction."""
    return cast("dict[str, str]", node.metadata)


class Recorder(TorchDispatchMode):
    """Record storage allocations and frees; see the module docstring.

    Args:
        round_to: round each storage up to this many bytes (512 to behave like the CUDA
            caching allocator; 1 for raw sizes on real CPU tensors).
        module_names: id(module) -> dotted path, for module attribution.
    """

    def __init__(self, *, round_to: int = BLOCK, module_names: dict[int, str] | None = None):
        super().__init__()
        self.round_to = round_to
        self.module_names: dict[int, str] = dict(module_names or {})
        self.phase = "setup"
        self.step = 0
        self.last_op = ""
        self.root_name = ""  # "<ModelClass>", set by the runner: names the failure outside every module
        self._mod_stack: list[str] = [""]
        self._ids: dict[int, int] = {}  # id(untyped storage) -> storage number (while alive)
        self._refs: dict[int, weakref.ref] = {}  # storage number -> weakref (keeps callbacks alive)
        # per storage number
        self._nbytes: list[int] = []
        self._op: list[str] = []
        self._module: list[str] = []
        self._born: list[tuple[str, int]] = []
        # (storage number, action, phase, step), in order
        self._log: list[tuple[int, int, str, int]] = []
        self._marks: dict[int, str] = {}  # storage number -> tag marked by the runner (first wins)
        self._saved: set[int] = set()
        self._held: set[int] = set()  # alive from a forward into its backward
        self._cast_of: dict[int, int] = {}  # autocast copy -> its source storage
        self._closed = False
        self.stub_optimizer_scalars = False  # fake mode: see __torch_dispatch__
        #: fake mode under peft's LoHa and LoKr: their module-dropout draw reads a one-element bool (see __torch_dispatch__)
        self.stub_module_dropout = False
        self.autocast = False  # set by the runner when --amp runs forward under autocast
        self.failed_at: tuple[str, str] | None = None  # (module, op) of the first failing op
        self._hooks: list = []
        self._saved_hooks = None
        #: tag given to every storage created while it is set (e.g. "comm_buffer" inside FSDP's
        #: all-gather); the first tag a storage gets is kept, as with :meth:`mark`
        self.tag_new: str | None = None
        self._resize_patched = False
        #: see inside DTensor's ops (set for the parallel traces, vramlens.trace.ranks): a dispatch mode
        #: sees an op on DTensors once, before DTensor's ``__torch_dispatch__``, which then runs the local
        #: ops with the mode switched off, so what a DTensor op allocates and frees inside (loss_parallel's
        #: ``_log_softmax`` temporaries, a redistribution's buffers) was invisible. Returning NotImplemented
        #: for DTensor arguments hands the op to DTensor with the mode still on, so its local ops are seen;
        #: the fake tensors its sharding propagation makes are left out (below)
        self.inside_dtensor = False
        self._propagating = 0
        self._propagation_saved: Callable[..., Any] | None = None

    # ---- storages -----------------------------------------------------------------------
    def _storages(self, t: torch.Tensor) -> Iterable:
        if is_traceable_wrapper_subclass(t):
            attrs, _ = t.__tensor_flatten__()
            for a in attrs:
                inner = getattr(t, a)
                if isinstance(inner, torch.Tensor):
                    yield from self._storages(inner)
            return
        try:
            yield t.untyped_storage()
        except (NotImplementedError, RuntimeError):  # sparse, nested: no single storage
            return

    def _new(self, st, op: str) -> int:
        sid = len(self._nbytes)
        key = id(st)
        self._ids[key] = sid
        self._nbytes.append(round_storage(st.nbytes(), self.round_to))
        self._op.append(op)
        self._module.append(self._mod_stack[-1] if self.phase != "backward" else self._backward_module())
        self._born.append((self.phase, self.step))
        self._log.append((sid, _ALLOC, self.phase, self.step))
        if self.tag_new is not None:
            self._marks[sid] = self.tag_new
        log, ids = self._log, self._ids

        def freed(_ref, sid=sid, key=key, self_ref=weakref.ref(self)):
            rec = self_ref()
            if rec is None or rec._closed:
                return
            ids.pop(key, None)
            rec._refs.pop(sid, None)
            log.append((sid, _FREE, rec.phase, rec.step))

        self._refs[sid] = weakref.ref(st, freed)
        return sid

    def _resized(self, st) -> None:
        """``UntypedStorage.resize_`` ran on ``st`` (FSDP2 frees and re-allocates the unsharded
        parameters this way): the old block is freed and a block of the new size allocated.
        The storage object stays the same, so the weakref callback cannot see this."""
        if self._closed:
            return
        key = id(st)
        sid = self._ids.pop(key, None)
        if sid is not None:
            self._refs.pop(sid, None)  # the weakref dies with its callback: no second free
            self._log.append((sid, _FREE, self.phase, self.step))
        if st.nbytes() > 0:
            self._new(st, "resize_")

    def sid_of(self, t: torch.Tensor, *, register_as: str = "external") -> list[int]:
        """Storage numbers of ``t`` (registered now, with op ``register_as``, if unseen)."""
        out = []
        for st in self._storages(t):
            sid = self._ids.get(id(st))
            if sid is None:
                sid = self._new(st, register_as)
            out.append(sid)
        return out

    def mark(self, tensors: Iterable, tag: str) -> None:
        """Tag the storages of ``tensors`` (the first tag a storage gets is kept)."""
        marks = self._marks
        for t in tensors:
            if isinstance(t, torch.Tensor):
                for sid in self.sid_of(t, register_as=f"<{tag}>"):
                    marks.setdefault(sid, tag)

    def end_forward(self) -> None:
        """Everything this forward allocated that is still alive is held for backward."""
        born, step, held = self._born, self.step, self._held
        for sid in self._ids.values():
            if born[sid] == ("forward", step):
                held.add(sid)

    # ---- dispatch -----------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.inside_dtensor:
            if self._propagating:  # DTensor's sharding propagation: fake tensors in a real run, no memory
                return func(*args, **(kwargs or {}))
            if any(issubclass(t, _dtensor_types()) for t in types):
                return NotImplemented  # DTensor dispatches it; its local ops come back here
        f8 = _float8_types()
        if f8 and any(issubclass(t, f8) for t in types):
            # torchao's Float8TrainingTensor: its own __torch_dispatch__ (float8_ops.py) runs the matmul, whose
            # allocations (preprocess_addmm's row-major copies of the operands, the reciprocal scales, the rowwise
            # recipes' fp32 output scaling, torch._scaled_mm's output) come back here as plain-tensor ops; handled
            # here, the subclass would run them with this mode off and only the result would be seen
            return NotImplemented
        if func is _WAIT and args and isinstance(args[0], torch.Tensor):
            return args[0]  # what the GPU kernel returns (see _WAIT)
        name = func.__name__
        self.last_op = name
        if func is _SCALAR and self.stub_optimizer_scalars and self.phase == "optimizer":
            # Fake tensors have no values. torch.optim reads scalars (Adafactor's norms, step
            # counts) only for arithmetic, never for shapes, so any value gives the same memory.
            t = args[0]
            return 1 if not (t.is_floating_point() or t.is_complex()) else 1.0
        if func is _SCALAR and self.stub_module_dropout and args[0].dtype == torch.bool and args[0].numel() == 1:
            # peft's LoHa and LoKr forwards draw ``torch.rand(1) > module_dropout`` (a CPU tensor on a GPU run) to decide
            # whether the adapter runs; vramlens models module_dropout 0, where it always does
            return True
        try:
            out = func(*args, **(kwargs or {}))
        except Exception:
            if self.failed_at is None:
                where = {"backward": self._backward_module(), "optimizer": "<optimizer>"}.get(self.phase, self.module)
                self.failed_at = (where, name)
            raise
        ids = self._ids
        if isinstance(out, torch.Tensor):
            outs: tuple = (out,)
        elif isinstance(out, (tuple, list)):
            outs = out
        else:
            return out
        for t in outs:
            if not isinstance(t, torch.Tensor):
                if isinstance(t, (tuple, list)):  # foreach ops return lists
                    for u in t:
                        if isinstance(u, torch.Tensor):
                            for st in self._storages(u):
                                if id(st) not in ids:
                                    self._new(st, name)
                continue
            for st in self._storages(t):
                if id(st) not in ids:
                    sid = self._new(st, name)
                    if func is _TO_COPY and self.autocast and self.phase == "forward" and args:
                        # autocast's cached_cast of an fp32 leaf weight (autocast itself is
                        # switched off inside its kernel, so the run says autocast is on)
                        src = args[0]
                        if isinstance(src, torch.Tensor) and src.is_leaf and src.requires_grad:
                            self._cast_of[sid] = ids.get(id(src.untyped_storage()), -1)
        return out

    # ---- modules ------------------------------------------------------------------------
    def _pre(self, module, _args):
        name = self.module_names.get(id(module))
        if name is not None:
            self._mod_stack.append(name)

    def _post(self, module, _args, output):
        name = self.module_names.get(id(module))
        if name is None:
            return
        if len(self._mod_stack) > 1:
            self._mod_stack.pop()
        if self.phase == "forward" and torch.is_grad_enabled():
            self._label_graph(output, name)

    def _label_graph(self, output, name: str) -> None:
        # Label graph nodes made by this module (inner modules ran first and labelled theirs).
        stack = []
        if isinstance(output, torch.Tensor):
            stack.append(output.grad_fn)
        elif isinstance(output, (tuple, list)):
            stack.extend(o.grad_fn for o in output if isinstance(o, torch.Tensor))
        elif hasattr(output, "values"):
            try:
                stack.extend(o.grad_fn for o in output.values() if isinstance(o, torch.Tensor))
            except Exception:  # noqa: BLE001 - a ModelOutput with odd values: skip labels
                pass
        budget = 10_000
        while stack and budget:
            node = stack.pop()
            if node is None:
                continue
            md = _metadata(node)
            if _META_KEY in md:
                continue
            md[_META_KEY] = name
            budget -= 1
            stack.extend(n for n, _ in node.next_functions)

    def _backward_module(self) -> str:
        node = torch._C._current_autograd_node()
        if node is None:
            return ""
        return _metadata(node).get(_META_KEY, "")

    def _pack(self, t: torch.Tensor):
        for st in self._storages(t):
            sid = self._ids.get(id(st))
            if sid is not None:
                self._saved.add(sid)
        return t

    def note_saved(self, t: torch.Tensor) -> None:
        """Record ``t`` as saved for backward (for saved-tensor hooks that replace the recorder's own)."""
        self._pack(t)

    def saved_tensors_hooks(self):
        """A fresh context of the recorder's own saved-tensor hooks (only the innermost hooks run)."""
        return torch.autograd.graph.saved_tensors_hooks(self._pack, _unpack)

    # ---- lifetime -----------------------------------------------------------------------
    def __enter__(self):
        mm = torch.nn.modules.module
        self._hooks = [
            mm.register_module_forward_pre_hook(self._pre),
            mm.register_module_forward_hook(self._post, always_call=True),
        ]
        self._saved_hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, _unpack)
        self._saved_hooks.__enter__()
        self._patch_resize()
        self._patch_propagation()
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            self._unpatch_propagation()
            self._unpatch_resize()
            self._saved_hooks.__exit__(*exc)
            for h in self._hooks:
                h.remove()
            self._hooks = []

    def _patch_resize(self) -> None:
        # Storage resizes are not dispatcher ops, so the mode never sees them: wrap the method
        # in effect (torch's own, or one another tool such as MemTracker put there).
        cls = torch.UntypedStorage
        current = cls.__dict__.get("resize_", _MISSING)
        if getattr(current, "_vramlens_recorder", False):  # an outer recorder's wrapper
            return
        inner = cls.resize_
        self_ref = weakref.ref(self)

        def resize_(st, size):
            out = inner(st, size)
            rec = self_ref()
            if rec is not None:
                rec._resized(st)
            return out

        resize_._vramlens_recorder = True  # type: ignore[attr-defined]  # marks our wrapper (see above)
        cls.resize_ = resize_  # type: ignore[method-assign]  # the patch is the point: frees by resize_(0)
        self._resize_saved = current
        self._resize_patched = True

    def _unpatch_resize(self) -> None:
        if not self._resize_patched:
            return
        self._resize_patched = False
        if self._resize_saved is _MISSING:
            del torch.UntypedStorage.resize_
        else:
            torch.UntypedStorage.resize_ = self._resize_saved  # type: ignore[method-assign]

    def _patch_propagation(self) -> None:
        # DTensor derives each output's global shape by running the op on fake tensors
        # (torch/distributed/tensor/_sharding_prop.py ``_propagate_tensor_meta_non_cached``): no memory on a
        # GPU, but fake CPU storages of the global shape here, so they are not recorded
        if not self.inside_dtensor or self._propagation_saved is not None:
            return
        from torch.distributed.tensor._sharding_prop import ShardingPropagator

        inner = ShardingPropagator._propagate_tensor_meta_non_cached
        self_ref = weakref.ref(self)

        def propagate(prop, op_schema):
            rec = self_ref()
            if rec is not None:
                rec._propagating += 1
            try:
                return inner(prop, op_schema)
            finally:
                if rec is not None:
                    rec._propagating -= 1

        self._propagation_saved = inner
        ShardingPropagator._propagate_tensor_meta_non_cached = propagate  # type: ignore[method-assign]

    def _unpatch_propagation(self) -> None:
        if self._propagation_saved is None:
            return
        from torch.distributed.tensor._sharding_prop import ShardingPropagator

        ShardingPropagator._propagate_tensor_meta_non_cached = self._propagation_saved  # type: ignore[method-assign]
        self._propagation_saved = None

    def close(self) -> None:
        """Stop listening for frees (storages alive now stay alive in the trace)."""
        self._closed = True

    def set_phase(self, phase: str, step: int | None = None) -> None:
        assert phase in PHASES, phase
        self.phase = phase
        if step is not None:
            self.step = step

    @property
    def module(self) -> str:
        return self._mod_stack[-1]

    # ---- results ------------------------------------------------------------------------
    def tag_of(self, sid: int) -> str:
        tag = self._marks.get(sid)
        if tag is not None:
            return tag
        src = self._cast_of.get(sid)
        if src is not None and self._marks.get(src) == "parameter":
            return "autocast_cache"
        phase = self._born[sid][0]
        if phase in ("forward", "backward") and (sid in self._saved or sid in self._held):
            return "activation"
        return "temporary"

    def events(self) -> list[Event]:
        """The event stream with final tags."""
        tags = [self.tag_of(i) for i in range(len(self._nbytes))]
        nb, op, mod = self._nbytes, self._op, self._module
        return [
            Event(i, "alloc" if a == _ALLOC else "free", sid, nb[sid], tags[sid], mod[sid], ph, st, op[sid])
            for i, (sid, a, ph, st) in enumerate(self._log)
        ]

    @property
    def n_storages(self) -> int:
        return len(self._nbytes)


def _unpack(t):
    return t


@functools.cache
def _float8_types() -> tuple[type, ...]:
    """torchao's Float8TrainingTensor when torchao's float8 training is loaded (--fp8 traces), else nothing."""
    mod = sys.modules.get("torchao.float8.float8_training_tensor")
    return (mod.Float8TrainingTensor,) if mod is not None else ()


def _dtensor_types() -> tuple[type, ...]:
    """DTensor and funcol's AsyncCollectiveTensor (which wraps a collective's output until waited on)."""
    from torch.distributed._functional_collectives import AsyncCollectiveTensor
    from torch.distributed.tensor import DTensor

    return (DTensor, AsyncCollectiveTensor)
