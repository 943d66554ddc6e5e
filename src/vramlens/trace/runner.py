"""Run training or inference steps under the Recorder, in fake, real-CPU or real-CUDA mode.

Training step (repeated ``steps`` times, at least two so step 1, where the optimizer creates
its state, and the steady state both show): forward (under autocast with ``--amp``), the
loss, backward, the optimizer step, ``zero_grad(set_to_none=not keep_grads)``. Inference: a prefill
over ``seq`` tokens with the model's own DynamicCache, then ``new_tokens`` decode steps of one
token each (``logits_to_keep=1`` as ``generate`` does); with ``new_tokens=0`` one forward
over the whole sequence (all logits). An older ``--transformers-version`` is emulated with the
installed transformers: before 4.42 each decode forward runs while every layer's previous keys and
values, and the previous forward's logits, are still referenced (generate()'s tuple cache and
``outputs``); before 4.45 the prefill makes every prompt token's logits, upcast to fp32 for the
classes that did (``LEGACY_LOGITS_FP32``).
"""

from __future__ import annotations

import contextlib
import gc
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

from vramlens.errors import InputError, TraceError, VramlensError
from vramlens.models.families.llama import LEGACY_LOGITS_FP32
from vramlens.trace.build import TORCH_DTYPES, Built, accepts, build_factory, build_hf, is_factory
from vramlens.trace.caches import cache_tensors, make_cache, offloaded_on_fake
from vramlens.trace.cuda_autocast import autocast_region, cuda_autocast_policy
from vramlens.trace.cuda_like import cuda_like_attention, expanded_gqa
from vramlens.trace.masks import masks_as_cuda
from vramlens.trace.recorder import Recorder
from vramlens.units import BLOCK
from vramlens.workload import Workload

MODES = ("fake", "real-cpu", "cuda")


def make_optimizer(name: str, params: Sequence[torch.Tensor], impl: str = "foreach"):
    """A torch.optim optimizer for ``--optimizer name`` with ``--optimizer-impl impl``: ``foreach`` (CUDA's
    default, torch/optim/optimizer.py ``_default_to_fused_or_foreach``), ``fused`` (one in-place kernel per
    parameter group: ``torch._fused_adamw_``; Adafactor has none, so it steps per tensor) or ``loop`` (the
    per-tensor ``_single_tensor_*`` paths)."""
    o = torch.optim
    if impl == "transformers":
        raise TraceError("optimizer_impl='transformers' is transformers' own AdamW, which transformers 5 removed: "
                         "trace with --optimizer-impl loop (torch's per-tensor AdamW holds one more temporary of the "
                         "largest parameter), or use `vramlens estimate`")
    foreach, fused = impl == "foreach", (True if impl == "fused" else None)
    if name in ("adamw", "adam"):
        cls = o.AdamW if name == "adamw" else o.Adam
        return cls(params, lr=1e-4, foreach=foreach, fused=fused)
    if name == "sgd":
        return o.SGD(params, lr=1e-3, foreach=foreach, fused=fused)
    if name == "sgd-momentum":
        return o.SGD(params, lr=1e-3, momentum=0.9, foreach=foreach, fused=fused)
    if name == "adafactor":
        if not hasattr(o, "Adafactor"):
            raise TraceError("torch.optim.Adafactor needs torch >= 2.5: upgrade torch or use `vramlens estimate`")
        return o.Adafactor(params, lr=1e-2, foreach=impl == "foreach")
    if name in ("lion", "adamw-8bit", "paged-adamw", "paged-adamw-8bit"):
        try:
            import bitsandbytes as bnb  # noqa: F401
        except Exception:  # noqa: BLE001 - bitsandbytes fails in many ways without CUDA
            raise TraceError(
                f"optimizer={name} comes from bitsandbytes, which cannot be imported here (it needs CUDA): "
                "use `vramlens estimate` for it, or trace with --optimizer adamw"
            ) from None
        cls = {"lion": bnb.optim.Lion, "adamw-8bit": bnb.optim.AdamW8bit,
               "paged-adamw": bnb.optim.PagedAdamW, "paged-adamw-8bit": bnb.optim.PagedAdamW8bit}[name]
        return cls(params, lr=1e-4)
    if name in TORCHAO_CLASSES:
        return EagerSteps(getattr(_torchao_optim(name), TORCHAO_CLASSES[name])(params, lr=1e-4))
    if name == "adamw-cpu-offload-torchao":
        _torchao_optim(name)  # the same package as a real run needs, though its class cannot run here
        return CPUOffloadAdamW(params)
    raise InputError(f"optimizer={name!r} cannot be traced")


def make_lorafa_optimizer(model: nn.Module, wl: Workload):
    """peft's LoRA-FA (``peft.optimizers.create_lorafa_optimizer``), as PEFT's MetaMathQA builds it (r, lora_alpha,
    lr, weight_decay): it sets requires_grad_(False) on every lora_A and returns a LoraFAOptimizer over all the
    model's named parameters, stepping B with its projected gradient."""
    try:
        from peft.optimizers import create_lorafa_optimizer
    except ImportError:
        from vramlens.errors import MissingExtraError

        raise MissingExtraError("peft", "trace") from None
    from peft import PeftModel

    if not isinstance(model, PeftModel):
        raise TraceError("lora_fa: peft's create_lorafa_optimizer needs the PeftModel get_peft_model makes")
    # build.apply_lora's LoraConfig: lora_alpha = 2 r
    return create_lorafa_optimizer(model, r=wl.lora_rank, lora_alpha=2 * wl.lora_rank, lr=1e-4, weight_decay=0.1)


#: vramlens optimizer -> torchao.optim class (torchao/optim/adam.py).
TORCHAO_CLASSES = {"adamw-8bit-torchao": "AdamW8bit", "adamw-4bit-torchao": "AdamW4bit", "adamw-fp8-torchao": "AdamWFp8"}


def _torchao_optim(name: str) -> Any:
    """torchao.optim, with the quantization maps of its 8-bit and 4-bit states computed.

    The maps (subclass_8bit/4bit ``get_qmap_signed``/``get_qmap_unsigned``) are Python lists built
    with torch ops and cached on first use; under fake tensors they would have no values, so they
    are built here on real CPU tensors. Each state then copies its map into a tensor of its own
    (``torch.tensor(qmap_list)``), which the trace records as torchao allocates it.
    """
    try:
        import torchao.optim as ao_optim
        from torchao.optim import subclass_4bit, subclass_8bit
    except Exception as e:  # noqa: BLE001 - torchao fails to import in several ways
        raise TraceError(f"optimizer={name} comes from torchao, which cannot be imported here ({type(e).__name__}): "
                         "pip install torchao, or use `vramlens estimate` for it") from None
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():
        for mod in (subclass_8bit, subclass_4bit):
            mod.get_qmap_signed()
            mod.get_qmap_unsigned()
    return ao_optim


class EagerSteps:
    """A torchao low-bit optimizer whose steps run eagerly.

    torchao steps each parameter through ``torch.compile(single_param_adam)``, and torch.compile
    refuses to run under a TorchDispatchMode (the Recorder). Under ``set_stance("force_eager")``
    the same function runs op by op on the same state tensors: the states the trace records are
    torchao's own (codes, scales and maps, created by torchao's ``_new_buffer``), but the step's
    temporaries are eager ones (the fp32 copies of every intermediate), not the compiled kernel's,
    and the recorder does not see what runs inside a tensor subclass's ``__torch_dispatch__`` (the
    quantization's own temporaries). The estimate models the compiled step instead
    (vramlens.estimator.optimizer.TORCHAO_LOW_BIT), so the trace is no reference for that figure.
    """

    def __init__(self, inner: Any):
        self.inner = inner

    @property
    def state(self) -> Any:
        return self.inner.state

    def step(self) -> None:
        with torch.compiler.set_stance("force_eager"):
            self.inner.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.inner.zero_grad(set_to_none=set_to_none)


class CPUOffloadAdamW:
    """torchao's CPUOffloadOptimizer(params, torch.optim.AdamW, fused=True), emulated.

    The class asserts a CUDA or XPU device, so it cannot run under fake CPU tensors; this follows
    torchao/optim/cpu_offload.py: a parameter of at least ``minimal_size=4096`` elements gets a host
    copy and a host gradient (``torch.empty_like(p, device="cpu", pin_memory=True)``) and its own
    AdamW over the host copy; its gradient is copied to the host, the host AdamW steps, and the
    parameter is copied back in place. Smaller parameters step with one fused AdamW on the device.
    The host tensors are tagged ``host`` (``host_tensors``); pinned memory's power-of-two rounding is
    not modelled here (the estimate's host figure has it).
    """

    MINIMAL_SIZE = 4096

    def __init__(self, params: Sequence[torch.Tensor]):
        self.big = [p for p in params if p.numel() >= self.MINIMAL_SIZE]
        small = [p for p in params if p.numel() < self.MINIMAL_SIZE]
        self.host: dict[torch.Tensor, torch.Tensor] = {}
        self.host_opt: dict[torch.Tensor, Any] = {}
        for p in self.big:
            h = torch.empty_like(p.detach())
            h.grad = torch.empty_like(h)
            self.host[p] = h
            self.host_opt[p] = torch.optim.AdamW([h], lr=1e-4, fused=True)
        self.d_opt = torch.optim.AdamW(small, lr=1e-4, fused=True) if small else None
        self.params = list(params)

    @property
    def state(self) -> dict:
        return dict(self.d_opt.state) if self.d_opt is not None else {}

    def host_tensors(self) -> list[torch.Tensor]:
        out: list[torch.Tensor] = []
        for p, h in self.host.items():
            out.append(h)
            if h.grad is not None:
                out.append(h.grad)
            for st in self.host_opt[p].state.values():
                out.extend(v for v in st.values() if isinstance(v, torch.Tensor))
        return out

    @torch.no_grad()
    def step(self) -> None:
        if self.d_opt is not None:
            self.d_opt.step()
        for p, h in self.host.items():
            if p.grad is None:
                continue
            assert h.grad is not None
            h.grad.copy_(p.grad)
            self.host_opt[p].step()
            p.copy_(h)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()


class InBackwardOptimizer:
    """torchtune's ``optimizer_in_bwd`` (torchtune/training/memory.py ``register_optim_in_bwd_hooks``):
    one optimizer per parameter, stepped by ``Tensor.register_post_accumulate_grad_hook`` as soon
    as the gradient is accumulated, then ``zero_grad()`` (set_to_none) frees the gradient."""

    def __init__(self, name: str, params: list[nn.Parameter], rec: Recorder, impl: str = "foreach"):
        self.rec = rec
        self.per_param = {p: make_optimizer(name, [p], impl) for p in params}
        self.handles = [p.register_post_accumulate_grad_hook(self._step) for p in params]

    def _step(self, p: nn.Parameter) -> None:
        if p.grad is not None:
            self.rec.mark((p.grad,), "gradient")
        opt = self.per_param[p]
        opt.step()
        for state in opt.state.values():
            for k, v in state.items():
                if isinstance(v, torch.Tensor):
                    self.rec.mark((v,), "host" if k == "step" and v.numel() == 1 else "optimizer_state")
        opt.zero_grad(set_to_none=True)


def _module_names(model: nn.Module) -> dict[int, str]:
    return {id(m): n for n, m in model.named_modules(remove_duplicate=False)}


def require_backend(mode: str) -> None:
    """Refuse a backend this machine cannot run (``cuda`` without a CUDA GPU and build)."""
    if mode == "cuda" and not torch.cuda.is_available():
        raise TraceError("mode=cuda needs a CUDA GPU and a CUDA build of torch; none here: use fake mode")


class Runner:
    """One traced run: build, steps, and the recorder that saw them."""

    def __init__(self, wl: Workload, *, mode: str = "fake", steps: int = 2, progress: Callable[[str], None] | None = None):
        if mode not in MODES:
            raise InputError(f"mode={mode!r} is not one of: {', '.join(MODES)}")
        if wl.training and steps < 1:
            raise InputError(f"steps={steps} must be >= 1")
        self.wl = wl
        self.mode = mode
        self.steps = steps
        self.progress = progress or (lambda s: None)
        self.notes: list[str] = wl.ignored()  # settings given that do not apply, as estimate says
        self.cuda_stats: dict[str, int] = {}
        #: --output-upcast: the fp32 logits the loop holds (LitGPT's ``logits = model(...)``), rebound by each forward
        self.held_logits: list[Any] = []
        self.fake_mode = None
        if mode == "fake":
            from torch._subclasses.fake_tensor import FakeTensorMode

            self.fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
        require_backend(mode)
        self.rec = Recorder(round_to=1 if mode == "real-cpu" else BLOCK)
        self.rec.autocast = wl.amp is not None and wl.amp != wl.dtype and not wl.fsdp_mixed_precision
        self.rec.stub_optimizer_scalars = mode == "fake"
        self.rec.stub_module_dropout = mode == "fake" and wl.method in ("loha", "lokr")  # OFT draws nothing
        #: called as before_record(built, optimizer) inside the tensor mode, after the optimizer
        #: is made and before recording starts (FSDP's unrecorded warm-up step)
        self.before_record: Callable[[Built, Any], None] | None = None
        #: --compile: the captured compiled step the recorded steps replay (vramlens.trace.compiled)
        self.captured: Any = None

    # ---- building ---------------------------------------------------------------------------
    def build(self, source: Any, *, layers: int | None = None, input_shape=None) -> Built:
        wl = self.wl
        if is_factory(source):
            built = build_factory(source, input_shape=input_shape, dtype=TORCH_DTYPES[wl.dtype], fake_mode=self.fake_mode)
        else:
            cfg = config_of(source)
            built = build_hf(cfg, wl, fake_mode=self.fake_mode, layers=layers,
                             device="cuda" if self.mode == "cuda" else None)
        if self.mode == "cuda":
            built.model = built.model.to("cuda")
        self.notes.extend(built.notes)
        if built.audio is not None:
            # Whisper: every sample's 30-second windows are batch rows, --seq the decoder's tokens
            # (vramlens.estimator.audio, the same arithmetic as the estimate)
            from vramlens.estimator.audio import DEFAULT_SEQ

            a = built.audio
            n = a.windows(wl.audio_seconds if wl.audio_seconds is not None else a.window_seconds)
            seq = a.target_positions if wl.seq == DEFAULT_SEQ else wl.seq
            if seq + (0 if wl.training else wl.new_tokens) > a.target_positions:
                raise TraceError(f"seq={seq + (0 if wl.training else wl.new_tokens)} decoder tokens exceed "
                                 f"max_target_positions={a.target_positions}: give --seq (and --new-tokens) "
                                 f"totalling {a.target_positions} or less")
            self.wl = replace(wl, batch=wl.batch * n, seq=seq)
        return built

    def _ctx(self):
        stack = contextlib.ExitStack()
        if self.fake_mode is not None:
            stack.enter_context(self.fake_mode)
            stack.enter_context(cuda_like_attention())
            stack.enter_context(cuda_autocast_policy())
            stack.enter_context(masks_as_cuda(self.wl.padded))
            if not self.wl.training and self.wl.cache == "offloaded":
                stack.enter_context(offloaded_on_fake(self.rec))
        if self.wl.gqa_expand:
            stack.enter_context(expanded_gqa())
        return stack

    def _autocast(self):
        if self.wl.amp is None or self.wl.amp == self.wl.dtype or self.wl.fsdp_mixed_precision:
            # FSDP2's mixed-precision policy casts the parameters itself (vramlens.trace.fsdp)
            return contextlib.nullcontext()
        if self.mode == "fake":
            return autocast_region(TORCH_DTYPES[self.wl.amp])  # CUDA's op policy: cuda_autocast
        device = "cuda" if self.mode == "cuda" else "cpu"
        return torch.autocast(device_type=device, dtype=TORCH_DTYPES[self.wl.amp])

    def _device(self) -> str:
        return "cuda" if self.mode == "cuda" else "cpu"

    # ---- inputs -------------------------------------------------------------------------------
    def _inputs(self, built: Built, seq: int) -> dict[str, Any] | tuple:
        b, dev = self.wl.batch, self._device()
        if self.wl.padded and (not built.is_hf or built.kind != "causal-lm" or built.vlm_images is not None
                               or built.image is not None or built.audio is not None):
            raise TraceError(f"padded is traced for a text causal LM's batch; this model runs {built.kind}: "
                             "drop --padded")
        if built.inputs is not None:
            return built.inputs(b, seq)
        if built.audio is not None:
            # input_features as WhisperFeatureExtractor returns them, cast to the weights' dtype (the model
            # card's ``input_features.to(device, dtype=torch_dtype)``): (rows, n_mels, 3000)
            a = built.audio
            feats = torch.randn(b, a.mel_bins, a.frames, device=dev, dtype=TORCH_DTYPES[self.wl.run_dtype])
            kw_audio: dict[str, Any] = {"input_features": feats}
            ids = torch.randint(0, max(2, built.vocab_size), (b, seq), device=dev)
            if self.wl.training:
                kw_audio["labels"] = ids  # decoder_input_ids = shift_tokens_right(labels)
            else:
                kw_audio["decoder_input_ids"] = ids[:, : (seq if not self.wl.new_tokens else 1)]
            return kw_audio
        if built.image is not None:
            # pixel_values as an image processor returns them: fp32 (b, C, H, W)
            kw_img: dict[str, Any] = {"pixel_values": torch.randn(b, *built.image, device=dev)}
            if built.interpolate:
                kw_img["interpolate_pos_encoding"] = True
            if self.wl.training and built.kind == "image-classification":
                kw_img["labels"] = torch.zeros(b, dtype=torch.long, device=dev)
            return kw_img
        vocab = max(2, built.vocab_size)
        kw: dict[str, Any] = {}
        if built.vlm_images is not None:
            # a VLM processor's output: each image's tokens in input_ids (after the first token), text ids
            # below the image token id, and the images as fp32 (b * images, C, side, side) pixel_values
            token, per_image, channels, side = built.vlm_images
            n = self.wl.images * per_image
            extra = self.wl.images * built.vlm_specials  # Llama 4's prompt: special tokens around each image's
            ids = torch.randint(0, max(2, min(vocab, token)), (b, seq + n + extra), device=dev)
            ids[:, 1:1 + n] = token
            seq += n + extra
            if built.vlm_anyres is not None:
                # LLaVA-NeXT: each image's 1 + tiles crops, and its size as a list (transformers reads it back
                # with .tolist(), which a fake tensor cannot answer; a list is what that call returns)
                crops, hq, wq = built.vlm_anyres
                kw["pixel_values"] = torch.randn(b * self.wl.images, crops, channels, side, side, device=dev)
                kw["image_sizes"] = [[hq, wq]] * (b * self.wl.images)
            else:
                pixels = torch.randn(b * self.wl.images * built.vlm_tiles, channels, side, side, device=dev)
                if built.vlm_pixels_cast:  # Llama 4: the caller casts the processor's fp32 pixels to the weights' dtype
                    pixels = pixels.to(next(built.model.parameters()).dtype)
                kw["pixel_values"] = pixels
        else:
            ids = torch.randint(0, vocab, (b, seq), device=dev)
        kw["input_ids"] = ids
        if built.kind == "embedding" and self.wl.training:
            # (anchor, positive) pairs: batch sequences per text column
            kw["positive_ids"] = torch.randint(0, vocab, (b, seq), device=dev)
            kw["attention_mask_positive"] = torch.ones(b, seq, dtype=torch.long, device=dev)
        if built.kind == "embedding":
            # sentence-transformers' features: the ids go to the model, the mask to the pooling (every
            # sequence fills seq tokens, so the model gets no padding mask, as with an all-ones mask)
            kw["attention_mask"] = torch.ones(b, seq, dtype=torch.long, device=dev)
        if self.wl.training and self.wl.loss == "logits-sum":
            if built.kind not in ("causal-lm", "masked-lm"):
                raise InputError(f"loss=logits-sum sums a language model's logits; this model trains {built.kind}")
        elif self.wl.training:
            if built.kind in ("causal-lm", "masked-lm", "seq2seq-lm"):
                kw["labels"] = torch.randint(0, vocab, (b, seq), device=dev)
            elif built.kind == "sequence-classification":
                kw["labels"] = torch.zeros(b, dtype=torch.long, device=dev)
            elif built.kind == "token-classification":
                kw["labels"] = torch.zeros(b, seq, dtype=torch.long, device=dev)
            elif built.kind == "question-answering":
                kw["start_positions"] = torch.zeros(b, dtype=torch.long, device=dev)
                kw["end_positions"] = torch.zeros(b, dtype=torch.long, device=dev)
        elif built.kind == "seq2seq-lm":
            kw["decoder_input_ids"] = torch.zeros(b, seq if not self.wl.new_tokens else 1, dtype=torch.long, device=dev)
        if self.wl.padded:
            kw.update(self._padding(built, kw, b, seq))
        return kw

    def _padding(self, built: Built, kw: dict[str, Any], b: int, seq: int) -> dict[str, Any]:
        """A padded batch (Workload.padded) as a padding collator makes it: the last sample is shorter by an
        eighth of the sequence, its attention_mask zeros there and its labels -100."""
        mask = torch.ones(b, seq, dtype=torch.long, device=self._device())
        mask[-1, seq - max(1, seq // 8):] = 0
        out: dict[str, Any] = {"attention_mask": mask}
        if "labels" in kw:
            out["labels"] = kw["labels"].masked_fill(mask == 0, -100)
        return out

    # ---- running ------------------------------------------------------------------------------
    def run(self, built: Built) -> Recorder:
        rec = self.rec
        model = built.model
        rec.module_names = _module_names(model)
        rec.root_name = f"<{type(model).__name__}>"
        wl = self.wl
        if self.mode == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        with self._ctx():
            lorafa = make_lorafa_optimizer(model, wl) if wl.training and wl.lora_fa else None  # freezes lora_A
            params = [p for p in model.parameters()]
            trainable = [p for p in params if p.requires_grad]
            master = None
            opt = None
            if lorafa is not None:
                opt = lorafa
            elif wl.training and wl.optimizer != "none" and wl.optimizer_in_backward:
                opt = InBackwardOptimizer(wl.optimizer, trainable, rec, wl.optimizer_impl)
            elif wl.training and wl.optimizer != "none":
                if wl.amp is not None and wl.amp == wl.dtype:
                    # DeepSpeed/Megatron-style: half weights and grads, fp32 master copy in the optimizer
                    master = [p.detach().clone().float().requires_grad_(True) for p in trainable]
                    opt = make_optimizer(wl.optimizer, master, wl.optimizer_impl)
                else:
                    opt = make_optimizer(wl.optimizer, trainable, wl.optimizer_impl)
            if self.before_record is not None:
                self.before_record(built, opt)
            if wl.compile and wl.training:
                self._compile(built, trainable)
            with rec:
                rec.mark(params, "parameter")
                # peft's BOFT registers its permutation matrix boft_P on the BOFT layer itself, which neither
                # _move_adapter_to_device_of_base_layer nor _replace_module moves: it stays in host RAM, and each
                # forward copies it to the GPU (``self.boft_P.to(x)``, src/peft/tuners/boft/layer.py)
                rec.mark((b for n, b in model.named_buffers() if n.endswith("boft_P")), "host")
                rec.mark(model.buffers(), "buffer")
                if master is not None:
                    rec.mark(master, "master_weight")
                try:
                    if wl.training:
                        self._train(built, opt, master, trainable)
                    else:
                        self._infer(built)
                finally:
                    rec.close()
        if self.mode == "cuda":
            torch.cuda.synchronize()
            self.cuda_stats = {
                "max_memory_allocated": torch.cuda.max_memory_allocated(),
                "max_memory_reserved": torch.cuda.max_memory_reserved(),
            }
        return rec

    def _compile(self, built: Built, trainable) -> None:
        """--compile: capture the compiled step in one unrecorded forward and backward; the recorded steps
        replay its graph (vramlens.trace.compiled). The gradients the capture made are dropped."""
        from vramlens.trace.compiled import (
            Captured,
            capture,
            check_replayable,
            describe,
            register_rng_ops,
        )

        wl = self.wl
        if (not built.is_hf or built.kind == "embedding" or wl.loss_chunks > 1 or wl.loss != "cross-entropy"
                or wl.activation_offload):
            raise TraceError("compile is traced for a transformers model's own forward and loss (no --loss-chunks, "
                             "--loss fused-linear, --activation-offload, embedding pairs or factories): use "
                             "`vramlens estimate`")
        if wl.compile_scope == "blocks+loss":
            raise TraceError("--compile-scope blocks+loss: the tracer runs transformers' loss inside the model's "
                             "forward, not a loss compiled on its own (torchtitan's): trace --compile-scope blocks; "
                             "the estimate's compiled loss is inductor's kernels (tests/trace/test_compiled_loss.py)")
        if wl.compile_scope == "blocks":
            self._compile_blocks(built, trainable)
            return
        captured = Captured()
        self._capture_step(built, trainable, lambda inputs: capture(built.model, inputs, captured)[0])
        check_replayable(captured)
        register_rng_ops(Recorder)
        self.captured = captured
        self.notes.append(describe(captured))

    def _capture_step(self, built: Built, trainable, loss_of: Callable[[dict[str, Any]], Any]) -> None:
        """One unrecorded forward (``loss_of(inputs)``, under the run's autocast) and backward, which compiles
        what --compile captures; the gradients it made are dropped."""
        from vramlens.trace.compiled import compile_failure

        try:
            inputs = self._inputs(built, self.wl.seq)
            assert isinstance(inputs, dict)  # transformers models take keywords
            with self._autocast():
                loss = loss_of(inputs)
            loss.backward()
        except VramlensError:
            raise
        except Exception as e:  # noqa: BLE001 - dynamo and AOT autograd fail in many ways
            raise compile_failure(e) from e
        del loss, inputs
        for p in trainable:
            p.grad = None
        gc.collect()

    def _compile_blocks(self, built: Built, trainable) -> None:
        """--compile-scope blocks: each decoder block compiled on its own (torchtune's compile_model,
        torchtitan's apply_compile), captured in one unrecorded step; the recorded steps replay each
        block's graph, the rest of the model runs eagerly (vramlens.trace.compiled.CompiledBlocks)."""
        import torch._dynamo

        from vramlens.trace.checkpoint import blocks
        from vramlens.trace.compiled import (
            CompiledBlocks,
            check_blocks,
            compile_blocks,
            register_rng_ops,
        )

        found = blocks(built.model)
        if not found:
            raise TraceError(f"{type(built.model).__name__} has no transformers decoder blocks "
                             "(GradientCheckpointingLayer) to compile one by one: use --compile-scope model")
        state = CompiledBlocks()
        compile_blocks(found, state)
        try:
            self._capture_step(built, trainable, lambda inputs: built.model(**inputs).loss)
        finally:
            torch._dynamo.reset()
        check_blocks(state, len(found))
        register_rng_ops(Recorder)
        state.replaying = True
        n_saved = len(state.captured.saved())
        self.notes.append(f"compile: each of the {len(found)} blocks compiled on its own (--compile-scope blocks) "
                          f"with AOT autograd and the min-cut partitioner (inductor's): {len(state.captured.calls)} "
                          f"graph(s), {n_saved} tensors saved for backward per graph (parameters included), run op "
                          "by op; the embedding, final norm, output layer and loss eager")

    def _forward(self, built: Built, inputs) -> Any:
        if built.kind == "embedding" and isinstance(inputs, dict) and "input_ids" in inputs:
            out = built.model(input_ids=inputs["input_ids"])
            if not self.wl.training:
                return out
            # a second text column (the positives): its own forward, both graphs kept until backward
            from vramlens.trace.pooling import mean_pooling, multiple_negatives_ranking_loss

            reps = [mean_pooling(out.last_hidden_state, inputs["attention_mask"])]
            del out
            out = built.model(input_ids=inputs["positive_ids"])
            reps.append(mean_pooling(out.last_hidden_state, inputs["attention_mask_positive"]))
            del out
            return SimpleNamespace(loss=multiple_negatives_ranking_loss(reps))
        wl = self.wl
        if wl.training and (wl.loss_chunks > 1 or wl.loss == "fused-linear"):
            from vramlens.trace.losses import chunked_cross_entropy, fused_linear_cross_entropy, through_root

            if built.kind != "causal-lm" or not isinstance(inputs, dict):
                raise InputError(f"loss={wl.loss} loss_chunks={wl.loss_chunks} apply to causal LMs only")
            ids, labels = inputs["input_ids"], inputs["labels"]
            if wl.loss == "fused-linear":
                def run() -> Any:
                    return fused_linear_cross_entropy(built.model, ids, labels)
            else:
                def run() -> Any:
                    return chunked_cross_entropy(built.model, ids, labels, wl.loss_chunks, wl.loss_upcast,
                                                 held=self.held_logits if wl.output_upcast else None)
            return SimpleNamespace(loss=through_root(built.model, run) if wl.fsdp else run())
        if self.captured is not None:
            from vramlens.trace.compiled import replay

            return SimpleNamespace(loss=replay(self.captured, built.model, inputs)[0])
        if isinstance(inputs, dict):
            return built.model(**inputs)
        return built.model(*inputs)

    def _offloaded_forward(self, built: Built, inputs) -> tuple[Any, torch.Tensor]:
        """torchtune's recipe: the model's forward under OffloadActivations (the output layer under
        NoOpManager), the loss outside it (transformers' own causal-LM loss on the logits)."""
        from vramlens.trace.offload import OffloadActivations, no_offload_around

        model: Any = built.model  # a transformers or peft model: untyped
        hf = model.get_base_model() if hasattr(model, "get_base_model") else model
        if built.kind != "causal-lm" or not isinstance(inputs, dict) or not hasattr(hf, "loss_function"):
            raise TraceError("activation_offload is traced for causal LMs (torchtune's recipes); "
                             "use `vramlens estimate` for other heads")
        if self.wl.loss_chunks > 1 or self.wl.loss != "cross-entropy":
            raise TraceError("activation_offload with --loss-chunks or --loss fused-linear is not traced: "
                             "use `vramlens estimate`")
        if getattr(self, "offloader", None) is None:
            self.offloader = OffloadActivations(self.rec, model)
            no_offload_around(hf.get_output_embeddings(), self.rec)
        labels = inputs["labels"]
        with self.offloader:
            out = model(**{k: v for k, v in inputs.items() if k != "labels"})
        loss = hf.loss_function(logits=out.logits, labels=labels, vocab_size=hf.config.vocab_size)
        return out, loss

    def _loss(self, out) -> torch.Tensor:
        if self.wl.loss == "logits-sum":
            # the SDPA benchmarks' ``outputs.logits.sum()``: SumBackward hands back a stride-0 expand of
            # the scalar's gradient, which CUDA's matmuls clone dense (prepare_matrix_for_cublas,
            # aten/src/ATen/native/cuda/Blas.cpp) for the output layer's backward; the CPU kernels read it
            # as it is, so the clone is made here, alive while that backward runs as on CUDA
            logits = out.logits
            logits.register_hook(lambda g: g.contiguous())
            return logits.sum()
        loss = getattr(out, "loss", None)
        if isinstance(loss, torch.Tensor):
            return loss
        if isinstance(out, torch.Tensor):
            return out.float().sum() if not out.is_floating_point() else out.sum()
        first = out[0] if isinstance(out, (tuple, list)) else getattr(out, "last_hidden_state", None)
        if isinstance(first, torch.Tensor):
            return first.sum()
        raise TraceError(f"cannot find a loss in the model's output ({type(out).__name__}): return a tensor or .loss")

    def _train(self, built: Built, opt, master, trainable) -> None:
        rec, wl = self.rec, self.wl
        held: list[Any] = []
        for step in range(1, self.steps + 1):
            t0 = time.perf_counter()
            for _micro in range(max(1, wl.grad_accum)):  # gradient accumulation: micro-batches add into .grad
                rec.set_phase("setup", step)
                inputs = self._inputs(built, wl.seq)
                rec.mark(_tensors(inputs), "input")
                rec.set_phase("forward", step)
                with self._autocast():
                    if wl.activation_offload:
                        out, loss = self._offloaded_forward(built, inputs)
                    else:
                        out = self._forward(built, inputs)
                        held.clear()  # Workload.outputs_held: the loop's ``outputs = model(...)`` rebinds here
                        loss = self._loss(out)
                if wl.outputs_held:
                    held.append(out)  # ... and keeps this step's outputs (Workload.holds_outputs)
                    if built.presents:  # an older release's (key, value) tuples, in the outputs too
                        held.append(list(built.presents))
                        built.presents.clear()
                del out  # as the HF Trainer does: only the loss survives the forward
                rec.end_forward()
                rec.set_phase("backward", step)
                loss.backward()
                if not wl.holds_next:  # holds_outputs "step": what the loop holds goes with its backward
                    held.clear()
                    self.held_logits.clear()  # (Fabric's fp32 logits are held through backward at least)
                if wl.activation_offload:
                    self.offloader.end_backward()
                del loss, inputs
                rec.mark((p.grad for p in trainable if p.grad is not None), "gradient")
            rec.set_phase("optimizer", step)
            if isinstance(opt, InBackwardOptimizer):
                pass  # every parameter was stepped, and its gradient freed, during backward
            elif opt is not None:
                if master is not None:
                    for m, p in zip(master, trainable):
                        m.grad = None if p.grad is None else p.grad.float()
                    # fp32 copies made for the step and dropped with zero_grad: temporaries of the step
                    rec.mark((m.grad for m in master if m.grad is not None), "temporary")
                    for p in trainable:
                        p.grad = None
                opt.step()
                self._mark_optimizer(opt)
                if wl.method == "adalora":
                    self._adalora_update(built.model, step)
                opt.zero_grad(set_to_none=not wl.keep_grads)
                if master is not None:
                    with torch.no_grad():
                        for m, p in zip(master, trainable):
                            p.copy_(m)
            elif not wl.keep_grads:
                for p in trainable:
                    p.grad = None
            gc.collect()
            self.progress(f"step {step}/{self.steps} traced in {time.perf_counter() - t0:.1f} s")

    def _adalora_update(self, model: Any, step: int) -> None:
        """What PEFT's MetaMathQA loop runs after ``optimizer.step()`` under AdaLoRA (run.py at d787f51b):
        ``model.base_model.update_and_allocate(step)``; its RankAllocator keeps ipt, exp_avg_ipt and exp_avg_unc
        per adapter tensor across steps (rebuilt at each), state beside the optimizer's."""
        base = model.base_model
        base.update_and_allocate(step)
        alloc = base.rankallocator
        self.rec.mark((t for d in (alloc.ipt, alloc.exp_avg_ipt, alloc.exp_avg_unc) for t in d.values()),
                      "optimizer_state")

    def _mark_optimizer(self, opt) -> None:
        rec = self.rec
        host_tensors = getattr(opt, "host_tensors", None)
        if host_tensors is not None:
            rec.mark(host_tensors(), "host")  # torchao's CPU offload: host copies and states
        for state in opt.state.values():
            for k, v in state.items():
                if isinstance(v, torch.Tensor):
                    # step counters stay on the host in a CUDA run (not capturable/fused)
                    rec.mark((v,), "host" if k == "step" and v.numel() == 1 else "optimizer_state")

    def _infer(self, built: Built) -> None:
        rec, wl = self.rec, self.wl
        model = built.model
        rec.set_phase("setup", 1)
        inputs = self._inputs(built, wl.seq)
        rec.mark(_tensors(inputs), "input")
        with torch.no_grad(), self._autocast():
            if not built.is_hf or (not wl.new_tokens and wl.cache == "dynamic"):
                rec.set_phase("prefill", 1)
                # transformers < 4.45 (Workload.legacy_logits_upcast): LlamaForCausalLM and its copies upcast every
                # logit to fp32 right after the lm_head (logits.float()), the final hidden state and the
                # compute-dtype logits alive while it runs: a hook on the output layer makes that copy
                get_head = getattr(model, "get_output_embeddings", None) if built.is_hf else None
                head = get_head() if callable(get_head) else None
                hook = None
                if (head is not None and wl.legacy_logits_upcast
                        and getattr(built.config, "model_type", None) in LEGACY_LOGITS_FP32):
                    hook = head.register_forward_hook(_upcast_copy)
                try:
                    out = self._forward(built, inputs)
                finally:
                    if hook is not None:
                        hook.remove()
                # a plain forward with use_cache (transformers' default) returns a cache: tag it as one
                cache = out_cache(out) if built.is_hf else None
                if cache is not None:
                    rec.mark(cache_tensors(cache), "kv_cache")
                del out, cache
                return
            cfg = built.config
            cache = make_cache(wl.cache, cfg, wl.max_cache_len or wl.seq + wl.new_tokens,
                               seq2seq=built.kind == "seq2seq-lm")
            # generate() keeps only the last position's logits; with a static cache it passes its
            # attention mask (ones over the tokens so far), which transformers pads to max_cache_len
            extra = {"logits_to_keep": 1} if accepts(model, "logits_to_keep") and wl.new_tokens else {}
            # transformers < 4.45 (Workload.prefill_all_logits): the prefill makes every prompt token's logits,
            # which LlamaForCausalLM and its copies upcast to fp32 (logits.float()); < 4.42 generate() keeps each
            # forward's output until the next forward returns
            upcast = wl.prefill_all_logits and getattr(cfg, "model_type", None) in LEGACY_LOGITS_FP32
            masked = wl.cache == "static"
            ckey = "cache" if accepts(model, "cache") else "past_key_values"
            rec.set_phase("prefill", 1)
            assert isinstance(inputs, dict)  # transformers models take keywords (only factories give a tuple)
            seen = wl.seq
            mask = {"attention_mask": torch.ones(wl.batch, seen, dtype=torch.long, device=self._device())} if masked else {}
            out = model(**inputs, **mask, **{ckey: cache}, use_cache=True, **({} if wl.prefill_all_logits else extra))
            cache = out_cache(out)
            rec.mark(cache_tensors(cache), "kv_cache")
            logits = out.logits.float() if upcast else out.logits
            nxt = logits[:, -1:].argmax(-1)
            enc = getattr(out, "encoder_last_hidden_state", None)
            del out
            kept = [logits] if wl.legacy_cache else []  # generate()'s ``outputs`` of transformers < 4.42
            del logits
            for i in range(wl.new_tokens):
                rec.set_phase("decode", 1)
                # transformers < 4.42 (Workload.legacy_cache): generate() holds the previous step's cache
                # (a tuple of every layer's keys and values) until the forward that builds the next returns
                held = cache_tensors(cache) if wl.legacy_cache else []
                if built.kind == "seq2seq-lm":
                    from transformers.modeling_outputs import BaseModelOutput

                    out = model(encoder_outputs=BaseModelOutput(last_hidden_state=enc), decoder_input_ids=nxt,
                                **{ckey: cache}, use_cache=True)
                else:
                    seen += 1
                    mask = ({"attention_mask": torch.ones(wl.batch, seen, dtype=torch.long, device=self._device())}
                            if masked else {})
                    out = model(input_ids=nxt, **mask, **{ckey: cache}, use_cache=True, **extra)
                del held
                cache = out_cache(out)
                rec.mark(cache_tensors(cache), "kv_cache")
                logits = out.logits.float() if upcast else out.logits
                nxt = logits[:, -1:].argmax(-1)
                del out
                kept[:] = [logits] if wl.legacy_cache else []  # the previous step's, freed only now
                del logits
                if (i + 1) % 64 == 0:
                    self.progress(f"decoded {i + 1}/{wl.new_tokens} tokens")


def _upcast_copy(_module, _inputs, output) -> None:
    """A forward hook making (and dropping) the fp32 copy of a layer's output, as ``logits.float()`` did."""
    upcast = output.float()
    del upcast


def out_cache(out):
    cache = getattr(out, "cache", None)
    return cache if cache is not None else getattr(out, "past_key_values", None)


def _tensors(x) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, dict):
        x = list(x.values())
    if isinstance(x, (tuple, list)):
        return [t for t in x if isinstance(t, torch.Tensor)]
    return []


def config_of(source: Any) -> dict:
    """config.json fields of a ModelSpec, a dict, a catalog name or a path."""
    cfg = getattr(source, "config", None)
    if isinstance(cfg, dict) and cfg:
        return cfg
    if isinstance(source, dict):
        return source
    if isinstance(source, str):
        from vramlens.models import load_model
        from vramlens.models.catalog import find_config

        found = find_config(source)
        if found is not None:
            return {**found[1], "_name_or_path": found[0]}
        spec = load_model(source)
        if spec.config:
            return spec.config
        raise TraceError(f"model {source!r} has no config.json fields to build it from: use a config.json")
    raise InputError(f"cannot trace {type(source).__name__}: give a ModelSpec, a config dict, a name or package.module:factory")


def describe_failure(rec: Recorder, exc: BaseException) -> str:
    """One line naming the module and op where tracing failed, and what to do instead."""
    module, op = rec.failed_at or (rec.module, rec.last_op)
    module, op = module or rec.root_name or "<top>", op or "?"
    kind = type(exc).__name__
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else kind
    if len(msg) > 200:
        msg = msg[:200] + "..."
    hint = "try --real-cpu (real tensors, small shapes) or the analytic `vramlens estimate`"
    name = kind
    from torch._subclasses.fake_tensor import (
        DataDependentOutputException,
        DynamicOutputShapeException,
        UnsupportedOperatorException,
    )

    if isinstance(exc, (DataDependentOutputException, DynamicOutputShapeException)):
        name = "data-dependent shape"
    elif isinstance(exc, UnsupportedOperatorException):
        name = "op without a fake implementation"
    return f"cannot trace module {module!r} at op {op!r} ({name}: {msg}); {hint}"


def _print_progress(msg: str) -> None:
    print(f"vramlens trace: {msg}", file=sys.stderr, flush=True)
