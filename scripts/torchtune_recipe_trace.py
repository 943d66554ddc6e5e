"""Trace one steady-state step of torchtune's ``lora_finetune_single_device`` with torchtune's own code, under
fake tensors, and print it beside vramlens' estimate of the matching published case.

Checks the torchtune README "Optimization flags" LoRA row (torchtune-readme-llama3.2-3b-lora: commit 1814feb1,
Llama 3.2 3B, batch 2 packed to 4,096 tokens, bf16) against the code that produced it. torchtune is not installed:
point ``--torchtune-src`` at a source tree of that commit::

    git --git-dir=<mirror of pytorch/torchtune> archive 1814feb17a9038e1a8053ce93111bd26774a8db6 torchtune \\
        | tar -x -C /tmp/tt
    PYTHONPATH=src python scripts/torchtune_recipe_trace.py --torchtune-src /tmp/tt --layers 28

What runs is torchtune's: ``lora_llama3_2`` with the 3B builder's arguments and the config's LoRA settings
(rank 64, alpha 128, q/v/output_proj and the MLP, dropout 0), ``set_trainable_params``,
``set_activation_checkpointing`` on every ``TransformerSelfAttentionLayer``, ``get_act_offloading_ctx_manager``
(``OffloadActivations`` with its defaults: streams on, as torch >= 2.5 runs it, 5-tensor forward stash, the output
layer under ``NoOpManager``), ``set_num_output_chunks(8)`` and ``CEWithChunkedOutputLoss``, the recipe's
``labels`` shift and ``del logits``, ``torch.optim.AdamW(fused=True)``, ``zero_grad(set_to_none=True)``.
Stood in for: the CUDA stream calls (no-ops), the pinned host copies (allocations tagged ``host``, not counted) and
the bring-back ``.to("cuda")`` (a copy); ``compute_cross_entropy`` is captured with vramlens' compile backend
(inductor's decompositions and min-cut partitioner) and the saved tensors are checked; with ``--loss-kernels
fused`` (the default) it then runs as what inductor's kernels allocate (forward: the two fp32 row statistics;
backward: the chunk's bf16 gradient while the saved chunk is read), with ``aten`` the captured graphs run op by op
(an upper bound: unfused fp32 temporaries). The blocks run eagerly (the row compiles each checkpointed layer; the
peak is at the loss). The packed batch's block-causal mask is left out, as the estimate leaves it.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.abc
import importlib.machinery
import sys
import types
from collections import Counter
from collections.abc import Callable
from typing import Any

MiB = 2**20
# torchtune/models/llama3_2/_model_builders.py (lora_llama3_2_3b) and recipes/configs/llama3_2/3B_lora_single_device.yaml
LLAMA3_2_3B = dict(vocab_size=128_256, num_heads=24, num_kv_heads=8, embed_dim=3072, max_seq_len=131_072,
                   intermediate_dim=8192, attn_dropout=0.0, norm_eps=1e-5, rope_base=500_000, scale_factor=32)
LORA = dict(lora_attn_modules=["q_proj", "v_proj", "output_proj"], apply_lora_to_mlp=True, apply_lora_to_output=False,
            lora_rank=64, lora_alpha=128, lora_dropout=0.0, use_dora=False, quantize_base=False)
BATCH, SEQ, CHUNKS, VOCAB = 2, 4096, 8, 128_256
# what torchtune imports at package import time and this trace never calls
STUBS = ("omegaconf", "datasets", "sentencepiece", "tiktoken", "blobfile", "huggingface_hub", "kagglehub",
         "torchdata", "PIL", "torchvision")


class _Anything(type):
    def __getattr__(cls, name: str) -> Any:
        return _Anything(name, (), {})

    def __call__(cls, *a: Any, **k: Any) -> Any:
        return cls

    def __getitem__(cls, k: Any) -> Any:
        return cls


class _StubModule(types.ModuleType):
    __path__: list[str] = []

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything(name, (), {})


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):  # type: ignore[no-untyped-def]
        top = fullname.split(".")[0]
        if top in STUBS and importlib.machinery.PathFinder.find_spec(top) is None:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):  # type: ignore[no-untyped-def]
        return _StubModule(spec.name)

    def exec_module(self, module):  # type: ignore[no-untyped-def]
        pass


def import_torchtune(src: str) -> None:
    """torchtune of late 2024 against today's torchao: NF4 under its old module name; QAT quantizers stubbed."""
    sys.path.insert(0, src)
    sys.meta_path.insert(0, _StubFinder())
    sys.modules["torchao.dtypes.nf4tensor"] = importlib.import_module(
        "torchao.quantization.quantize_.workflows.nf4.nf4_tensor")
    sys.modules["torchtune.training.quantization"] = _StubModule("torchtune.training.quantization")


def fused_chunk_ce() -> Callable[[Any, Any], Any]:
    """``compute_cross_entropy`` as inductor's kernels allocate it: forward keeps the bf16 chunk, its labels and two
    fp32 (rows, 1) statistics; backward writes the chunk's bf16 gradient while the saved chunk is read."""
    import torch

    class FusedCE(torch.autograd.Function):
        @staticmethod
        def forward(ctx, logits, labels):  # type: ignore[no-untyped-def]
            rows = logits.shape[0]
            amax, lse = (torch.empty(rows, 1, dtype=torch.float32) for _ in range(2))
            ctx.save_for_backward(logits, labels, amax, lse)
            return torch.empty((), dtype=torch.float32)

        @staticmethod
        def backward(ctx, g):  # type: ignore[no-untyped-def]
            logits, _labels, _amax, _lse = ctx.saved_tensors
            return torch.empty_like(logits), None

    return lambda logits, labels: FusedCE.apply(logits, labels)


def recipe_step(model: Any, loss_fn: Any, opt: Any, vocab: int, batch: int, seq: int,
                forward_context: Callable[[], Any] = contextlib.nullcontext) -> Callable[[Any], None]:
    """One step of torchtune's single-device recipes (``_loss_step`` then the optimizer): random tokens, the labels
    shifted with an ignored last position, the logits dropped before backward. ``step(rec)`` sets ``rec``'s phases
    when given (None for the warm-up step); ``forward_context`` wraps the forward (the activation-offload context)."""
    import torch

    def step(rec: Any) -> None:
        tokens = torch.randint(0, vocab, (batch, seq))
        labels = torch.randint(0, vocab, (batch, seq))
        if rec:
            rec.set_phase("forward")
        with forward_context():
            logits = model(tokens)
        labels = torch.hstack((labels[..., 1:], torch.full((batch, 1), -100)))
        loss = loss_fn(logits, labels)
        del logits
        if rec:
            rec.set_phase("backward")
        loss.backward()
        if rec:
            rec.set_phase("optimizer")
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def print_phase_peaks(rec: Any, min_bytes: int = 32 * MiB) -> None:
    """Each phase's peak of device bytes (host copies left out), by tag, and the tensors of ``min_bytes`` or more
    alive there (weights aside)."""
    from vramlens.trace.events import HOST_TAGS, live_at

    events = rec.events()
    live, peaks = 0, {}
    for e in events:
        if e.tag in HOST_TAGS:
            continue
        live += e.nbytes if e.action == "alloc" else -e.nbytes
        if live > peaks.get(e.phase, (0, 0))[0]:
            peaks[e.phase] = (live, e.seq)
    for phase, (peak, seq) in peaks.items():
        by_tag: Counter[str] = Counter()
        big: Counter[tuple[str, int]] = Counter()
        for x in live_at(events, seq).values():
            by_tag[x.tag] += x.nbytes
            if x.tag != "weights" and x.nbytes >= min_bytes:
                big[(x.op, x.nbytes)] += 1
        print(f"  {phase:9s} {peak / MiB:10,.1f} MiB: " + ", ".join(f"{t} {b / MiB:,.1f}" for t, b in by_tag.most_common())
              + f"; >= {min_bytes / MiB:g} MiB: " + ", ".join(f"{n} x {op} {b / MiB:,.1f}"
                                                            for (op, b), n in big.most_common()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--torchtune-src", required=True)
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--loss-kernels", choices=("fused", "aten"), default="fused")
    args = ap.parse_args()
    import_torchtune(args.torchtune_src)

    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torchtune import modules, training
    from torchtune.models.llama3_2 import _component_builders as builders
    from torchtune.modules.loss import CEWithChunkedOutputLoss
    from torchtune.modules.peft import get_adapter_params, set_trainable_params

    from vramlens.trace.compiled import Captured, capture_backend
    from vramlens.trace.recorder import Recorder

    class _Stream:
        def wait_stream(self, *a: Any) -> None: ...
        def wait_event(self, *a: Any) -> None: ...
        def record_event(self, *a: Any) -> None: ...

    recorder: list[Recorder] = []
    empty_like, tensor_to = torch.empty_like, torch.Tensor.to

    def host_empty_like(t, *a, pin_memory=False, device=None, **k):  # type: ignore[no-untyped-def]
        out = empty_like(t, *a, device=device, **k)
        if device == "cpu" and recorder:  # OffloadActivations' pinned host copy
            recorder[0].mark((out,), "host")
        return out

    def to_device(self, *a, **k):  # type: ignore[no-untyped-def]
        if a and isinstance(a[0], str) and a[0] == "cuda":  # the bring-back: a new device copy
            return self.clone()
        return tensor_to(self, *a, **k)

    torch.cuda.default_stream = lambda *a, **k: _Stream()  # type: ignore[assignment]
    torch.cuda.Stream = lambda *a, **k: _Stream()  # type: ignore[assignment,misc]
    torch.cuda.stream = lambda *a, **k: contextlib.nullcontext()  # type: ignore[assignment]
    torch.Tensor.record_stream = lambda self, s: None  # type: ignore[assignment,method-assign]
    torch.empty_like = host_empty_like  # type: ignore[assignment]
    torch.Tensor.to = to_device  # type: ignore[assignment,method-assign]

    with training.set_default_dtype(torch.bfloat16), torch.device("meta"):
        model = builders.lora_llama3_2(num_layers=args.layers, **LLAMA3_2_3B, **LORA)
    set_trainable_params(model, get_adapter_params(model))
    training.set_activation_checkpointing(model, auto_wrap_policy={modules.TransformerSelfAttentionLayer})
    fake = FakeTensorMode(allow_non_fake_inputs=True)
    with fake:
        model.to_empty(device="cpu")
        for m in model.modules():  # Llama3ScaledRoPE.rope_init returns early on meta; the recipe builds it on the GPU
            if hasattr(m, "build_rope_cache") and not m.is_cache_built:
                m.register_buffer("theta", torch.empty(m.dim // 2, dtype=torch.float32), persistent=False)
                m.build_rope_cache(m.max_seq_len)
                m.is_cache_built = True
    offload = training.get_act_offloading_ctx_manager(model, True)
    loss_fn = CEWithChunkedOutputLoss(num_output_chunks=CHUNKS)
    model.set_num_output_chunks(CHUNKS)
    captured = Captured()
    loss_fn.compute_cross_entropy = torch.compile(loss_fn.compute_cross_entropy, backend=capture_backend(captured))
    with fake:
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-4, weight_decay=0.01,
                                fused=True)

    step = recipe_step(model, loss_fn, opt, VOCAB, BATCH, SEQ, forward_context=lambda: offload)

    with fake:
        step(None)  # compiles the loss, creates AdamW's states
        rows = BATCH * SEQ // CHUNKS
        saved = captured.saved()
        want = [((rows, VOCAB), "bfloat16"), ((rows,), "int64"), ((rows, 1), "float32"), ((rows, 1), "float32")]
        if saved != want:
            raise SystemExit(f"the partition saves {saved}, not {want}")
        call = captured.calls[0][0]
        loss_fn.compute_cross_entropy = (  # type: ignore[method-assign]
            fused_chunk_ce() if args.loss_kernels == "fused"
            else (lambda logits, labels: call(logits, labels)[0]))
        rec = Recorder()
        recorder.append(rec)
        rec.mark(list(model.parameters()) + list(model.buffers()), "weights")
        rec.mark([t for st in opt.state.values() for t in st.values() if torch.is_tensor(t)], "optimizer_state")
        with rec:
            step(rec)

    print(f"torchtune 1814feb1 lora_llama3_2 ({args.layers} layers), loss kernels {args.loss_kernels}; "
          "no cuBLAS workspaces")
    print_phase_peaks(rec)
    if args.layers == 28:
        from vramlens.estimator import estimate
        from vramlens.hardware.catalog import get_gpu
        from vramlens.models import load_model
        from vramlens.published import CASES

        case = CASES["torchtune-readme-llama3.2-3b-lora"]
        gpu = get_gpu(case.gpu) if case.gpu else None
        bd = estimate(load_model(case.model), gpu=gpu, **case.settings).breakdown
        print(f"  vramlens (cuBLAS workspaces of the {case.gpu} included): "
              + ", ".join(f"{p} {b / MiB:,.1f} MiB" for p, b in bd.phases))


if __name__ == "__main__":
    main()
