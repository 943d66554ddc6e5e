"""``--compile``: the training step of a ``torch.compile``d model, traced under fake tensors.

Dynamo does not compile while a TorchDispatchMode (the Recorder) is active: it runs the frame
eagerly, and code compiled outside the mode fails its guards inside it (the dispatch key set
differs). So the compiled step is captured first, in an unrecorded warm-up, and replayed under the
Recorder without dynamo:

* capture: ``torch.compile`` of the model's call (:func:`model_call`) with a backend that is
  inductor's graph partitioning without inductor's code generation: ``aot_module_simplified`` with
  the min-cut rematerialization partitioner (``torch._functorch.partitioners.
  min_cut_rematerialization_partition``, the one inductor uses for training, ``torch/_inductor/
  compile_fx.py``), whose forward and backward compilers return the FX GraphModules boxed, to run
  op by op. The backend keeps what AOT autograd returns and the dynamo graph's inputs (each with its
  source, such as ``L['model']._modules['lm_head']._parameters['weight']``).
* replay: each recorded step evaluates those sources on the model and the step's inputs and calls
  AOT autograd's function: its forward graph runs, and what it returns besides the model's outputs
  is exactly what the partitioner saved for backward (FX's generated code drops each value after
  its last use, so the graph's temporaries die where a kernel's would); backward runs the
  backward graph.

What this does not see: inductor fuses pointwise ops into kernels, so a compiled run's in-graph
temporaries are fewer and smaller than those of the aten graph run op by op (the trace's are an
upper bound); the saved tensors, which the partitioner decides, are the same. A model dynamo splits
into several graphs (graph breaks) is refused: the replay needs the one graph's inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from vramlens.errors import TraceError


@dataclass
class Captured:
    """What the capture saw: AOT autograd's function for each dynamo graph, with the sources of its inputs,
    and the partitioned forward and backward GraphModules."""

    calls: list[tuple[Any, tuple[str, ...]]] = field(default_factory=list)
    forward: list[Any] = field(default_factory=list)
    backward: list[Any] = field(default_factory=list)

    def saved(self) -> list[tuple[tuple[int, ...], str]]:
        """(shape, dtype) of every tensor the backward graphs take that is not a gradient (``tangents_*``):
        the tensors the partitioner saved, parameters included."""
        out: list[tuple[tuple[int, ...], str]] = []
        for g in self.backward:
            for n in g.graph.nodes:
                if n.op != "placeholder" or n.name.startswith("tangents"):
                    continue
                v = n.meta.get("val")
                if isinstance(v, torch.Tensor):
                    out.append((tuple(int(x) for x in v.shape), str(v.dtype).replace("torch.", "")))
        return out


def model_call(model: nn.Module, inputs: dict[str, Any]) -> tuple[Any, ...]:
    """The call that is compiled: the model's forward on keyword inputs, its output as a tuple (the loss
    first, as transformers' ``ModelOutput.to_tuple`` orders it)."""
    out = model(**inputs)
    return tuple(out.to_tuple()) if hasattr(out, "to_tuple") else (out,)


def boxed(gm: Any) -> Any:
    """``gm`` under AOT autograd's boxed calling convention, as inductor's compiled code takes it: the
    argument list is emptied as the graph reads it and each value is dropped after its last use
    (``torch.fx.Interpreter.boxed_run``), so a saved tensor dies in backward where the graph last reads
    it, not when the graph returns."""
    def run(args: list[Any]) -> Any:
        return torch.fx.Interpreter(gm).boxed_run(args)

    run._boxed_call = True  # type: ignore[attr-defined]  # AOT autograd's marker for the boxed convention
    return run


def capture_backend(captured: Captured):
    """A torch.compile backend: AOT autograd with inductor's min-cut partitioner, the graphs run eagerly."""
    from torch._functorch.aot_autograd import aot_module_simplified
    from torch._inductor.compile_fx import partition_fn
    from torch._inductor.decomposition import select_decomp_table

    def fw(gm, _inputs):
        captured.forward.append(gm)
        return boxed(gm)

    def bw(gm, _inputs):
        captured.backward.append(gm)
        return boxed(gm)

    def backend(gm, example_inputs):
        from torch._guards import detect_fake_mode
        from torch._inductor.virtualized import V

        sources = []
        for n in gm.graph.nodes:
            if n.op == "placeholder":
                arg = n.meta.get("grapharg")
                src = getattr(arg, "source", None)
                sources.append(src.name if src is not None else "")
        # inductor's passes before the partition (its random-op replacement among them) read its fake mode
        with V.set_fake_mode(detect_fake_mode(example_inputs)):
            call = aot_module_simplified(gm, example_inputs, fw_compiler=fw, bw_compiler=bw,
                                         decompositions=select_decomp_table(), partition_fn=partition_fn)
        captured.calls.append((call, tuple(sources)))
        return call

    return backend


def capture(model: nn.Module, inputs: dict[str, Any], captured: Captured) -> tuple[Any, ...]:
    """Compile :func:`model_call` with the capturing backend and run it once (the caller runs backward).

    Dynamo's caches are reset first: each traced model is a new one, and the same code compiled for
    many models would reach dynamo's recompile limit and fall back to eager.
    """
    import logging

    import torch._dynamo

    torch._dynamo.reset()
    compiled = torch.compile(model_call, backend=capture_backend(captured))
    try:
        # transformers' loss lookup logs through logger.warning_once when the class name names no loss
        # type (GPT2LMHeadModel), a graph break in a real run that splits the loss into its own graph:
        # dynamo's ignore_logging_functions (a setting users have too) keeps one graph
        # (transformers.utils.logging adds warning_once to logging.Logger)
        once = getattr(logging.Logger, "warning_once", None)
        with torch._dynamo.config.patch(ignore_logging_functions={once} if once is not None else set()):
            return compiled(model, inputs)
    finally:
        torch._dynamo.reset()


def block_call(block: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The call that is compiled under ``--compile-scope blocks``: one decoder block's own forward, as
    ``layer.compile()`` compiles it (torchtune's ``training.compile_model``, torchtitan's
    ``apply_compile``); the module's ``__call__`` (its hooks, transformers' checkpointing) stays eager."""
    return type(block).forward(block, *args, **kwargs)


@dataclass
class CompiledBlocks:
    """``--compile-scope blocks``: every block's forward goes through the compiled :func:`block_call`.

    In the unrecorded warm-up each block's call is compiled (dynamo compiles a graph the first time and
    reuses it for the next blocks whose guards pass); ``graph_of[i]`` is the graph block ``i`` ran. Then
    :meth:`replay` calls AOT autograd's function of that graph on the block's own parameters and inputs."""

    captured: Captured = field(default_factory=Captured)
    graph_of: list[int] = field(default_factory=list)
    #: each block call's graph count before and after it (graph breaks: more than one graph per call)
    breaks: int = 0
    replaying: bool = False

    def run(self, index: int, block: nn.Module, compiled: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if self.replaying:
            return self.replay(index, block, args, kwargs)
        before = len(self.captured.calls)
        out = compiled(block, args, kwargs)
        made = len(self.captured.calls) - before
        if made > 1:
            self.breaks += 1
        if made == 0 and not self.captured.calls:
            self.breaks += 1  # dynamo ran the block eagerly: nothing to replay
        while len(self.graph_of) <= index:
            self.graph_of.append(-1)
        self.graph_of[index] = len(self.captured.calls) - 1
        if not isinstance(out, torch.Tensor):
            self.breaks += 1  # a block returning a structure: the replay returns one tensor
        return out

    def replay(self, index: int, block: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        call, sources = self.captured.calls[self.graph_of[index]]
        env = {"L": {"block": block, "args": args, "kwargs": kwargs}}
        # dynamo's own names for the graph's inputs, on block_call's three arguments (check_blocks)
        outs = call(*[eval(src, {"__builtins__": {}}, env) for src in sources])  # noqa: S307
        return outs[0]


def compile_blocks(blocks: list[nn.Module], state: CompiledBlocks) -> None:
    """Route each block's forward through the compiled :func:`block_call` (capture) or its replay."""
    import torch._dynamo

    torch._dynamo.reset()
    compiled = torch.compile(block_call, backend=capture_backend(state.captured))
    for i, block in enumerate(blocks):
        def forward(*args: Any, _i: int = i, _block: nn.Module = block, **kwargs: Any) -> Any:
            return state.run(_i, _block, compiled, args, kwargs)

        block.forward = forward  # type: ignore[method-assign]  # an instance attribute over the class's


def check_blocks(state: CompiledBlocks, n_blocks: int) -> None:
    """Refuse what the block replay cannot run: graph breaks, a block dynamo did not compile, inputs from
    outside the block's call."""
    if state.breaks or len(state.graph_of) != n_blocks or min(state.graph_of, default=-1) < 0:
        raise TraceError("torch.compile did not compile each block into one graph returning one tensor (graph breaks "
                         "or an eager fallback); trace without --compile, or use `vramlens estimate --compile`")
    for _call, sources in state.captured.calls:
        bad = [s for s in sources if not s.startswith("L[")]
        if bad:
            raise TraceError(f"the compiled block reads {bad[0]!r}, which is neither the block nor its inputs; "
                             "trace without --compile, or use `vramlens estimate --compile`")


def replay(captured: Captured, model: nn.Module, inputs: dict[str, Any]) -> tuple[Any, ...]:
    """One forward of the captured graph on ``inputs``, through AOT autograd's function (no dynamo)."""
    call, sources = captured.calls[0]
    env = {"L": {"model": model, "inputs": inputs}}
    # the sources are dynamo's own names for the graph's inputs (a subscript and attribute path on the
    # call's two arguments), checked by check_replayable
    args = [eval(src, {"__builtins__": {}}, env) for src in sources]  # noqa: S307
    return tuple(call(*args))


_RNG_REGISTERED: list[type] = []


def register_rng_ops(mode_cls: type) -> None:
    """Let ``mode_cls`` (the Recorder) run the graphs' RNG higher-order ops.

    A checkpointed region in a compiled graph runs its random ops (SDPA's philox seed among them)
    through ``run_and_save_rng_state`` in forward and ``run_with_rng_state`` in the recomputation
    (torch/_prims/rng_prims.py), which have no rule for a user's dispatch mode. Each rule here does
    what the CPU one does, with the mode pushed back so that the op inside is recorded."""
    if mode_cls in _RNG_REGISTERED:
        return
    from torch._prims.rng_prims import run_and_save_rng_state, run_with_rng_state
    from torch.utils._python_dispatch import TorchDispatchMode

    # the base class's enter and exit push and pop the mode alone (the Recorder's own also install its hooks)
    @run_and_save_rng_state.py_impl(mode_cls)
    def _save(mode, op, *args, **kwargs):
        TorchDispatchMode.__enter__(mode)
        try:
            return torch.get_rng_state(), op(*args, **kwargs)
        finally:
            TorchDispatchMode.__exit__(mode, None, None, None)

    @run_with_rng_state.py_impl(mode_cls)
    def _with(mode, _rng_state, op, *args, **kwargs):
        TorchDispatchMode.__enter__(mode)
        try:
            return op(*args, **kwargs)  # the state is a fake run's: there are no values to reproduce
        finally:
            TorchDispatchMode.__exit__(mode, None, None, None)

    _RNG_REGISTERED.append(mode_cls)


def check_replayable(captured: Captured) -> None:
    """Refuse what the replay cannot run: graph breaks (several graphs), an input without a local source."""
    n = len(captured.calls)
    if n != 1:
        raise TraceError(f"torch.compile split this model into {n} graphs (graph breaks); the compiled trace "
                         "replays one graph: trace without --compile, or use `vramlens estimate --compile`")
    bad = [s for s in captured.calls[0][1] if not s.startswith("L[")]
    if bad:
        raise TraceError(f"the compiled graph reads {bad[0]!r}, which is neither the model nor its inputs; "
                         "trace without --compile, or use `vramlens estimate --compile`")


def compile_failure(exc: BaseException) -> TraceError:
    """One line for a model torch.compile cannot capture here."""
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if len(msg) > 200:
        msg = msg[:200] + "..."
    return TraceError(f"torch.compile could not capture this model under fake tensors ({type(exc).__name__}: {msg}); "
                      "trace without --compile, or use `vramlens estimate --compile`")


def describe(captured: Captured) -> str:
    """The note a compiled trace carries: the graph and how many tensors it saves."""
    saved = captured.saved()
    return (f"compile: torch.compile with AOT autograd and the min-cut partitioner (inductor's), one graph, "
            f"{len(saved)} tensors saved for backward (parameters included); the graph runs op by op, so in-graph "
            "temporaries are the aten graph's, an upper bound on inductor's fused kernels'; no module hook runs inside "
            "the graph, so its tensors are the model's, not a block's (--layers gives the per-block figures)")
