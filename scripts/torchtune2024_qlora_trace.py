"""Trace torchtune's 2024 QLoRA recipe from the model's construction to two steps with torchtune's and torchao's own
code of the time, under fake tensors, and replay the events through vramlens' caching-allocator port.

Checks the set-up that vramlens replays with ``--quantize-on-device`` (vramlens.estimator.ondevice,
``torchtune_nf4_setup_events``) for the cases torchtune-readme-2024-03/-04-llama2-7b-qlora-1gpu. torchtune and the
torchao NF4 of the time are not installed: extract them from mirrors of pytorch/torchtune and pytorch/ao::

    git --git-dir=<torchtune mirror> archive 412a4ecd torchtune | tar -x -C /tmp/tt412
    git --git-dir=<ao mirror> show 185236c82:torchao/dtypes/nf4tensor.py > /tmp/nf4tensor.py
    PYTHONPATH=src python scripts/torchtune2024_qlora_trace.py --torchtune-src /tmp/tt412 --nf4 /tmp/nf4tensor.py

(fef3ed10 with torchao v0.1's nf4tensor.py: add ``--no-state-dict``, that recipe calls no ``model.state_dict()``
before loading; ``--lora``: the bf16 LoRA config, best with ``--no-state-dict``: under fake tensors the recorder counts
the state dict's detached views of bf16 weights, and a view of any storage it has not registered, as new storages.) What runs is torchtune's: ``lora_llama2`` with qlora_llama2_7b's arguments on the (fake) device under
``set_default_dtype(bf16)``, so each quantized LoRALinear quantizes there and TransformerDecoder deep-copies the block
through torchtune's NF4 ``clone`` override; ``set_trainable_params``, ``set_activation_checkpointing``; at 412a4ecd
``model.state_dict()`` (validate_state_dict_for_lora's keys: its hook dequantizes every NF4 weight and moves it to the
host); ``load_state_dict`` from a host state dict through torchtune's NF4 ``copy_`` override; AdamW (foreach) and two
steps of the recipe's loop at batch 2 x 512 tokens. Stood in for: the checkpoint's host tensors and the hook's
``.cpu()`` copies (tagged ``host``, not counted) and the ``.to(device)`` of a host weight (a device copy). NF4Tensor's
``__torch_dispatch__`` runs its table's functions with the dispatch modes off; they are run with the recorder pushed
again so that what torchao allocates inside a ``clone`` or a ``copy_`` is seen.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from typing import Any

from torchtune_recipe_trace import STUBS, _StubFinder, _StubModule

MiB = 2**20
# torchtune/models/llama2/_model_builders.py (lora_llama2_7b) and recipes/configs/qlora_finetune_single_device.yaml
LLAMA2_7B = dict(vocab_size=32_000, num_heads=32, num_kv_heads=32, embed_dim=4096, max_seq_len=4096)
QLORA = dict(lora_attn_modules=["q_proj", "v_proj", "k_proj", "output_proj"], apply_lora_to_mlp=True,
             apply_lora_to_output=False, lora_rank=8, lora_alpha=16, lora_dropout=0.05, quantize_base=True)
# recipes/configs/lora_finetune_single_device.yaml (--lora): the bf16 model, adapters on q and v
LORA = dict(QLORA, lora_attn_modules=["q_proj", "v_proj"], apply_lora_to_mlp=False, quantize_base=False)
BATCH, SEQ, VOCAB = 2, 512, 32_000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--torchtune-src", required=True)
    ap.add_argument("--nf4", required=True, help="torchao/dtypes/nf4tensor.py of the time")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--no-state-dict", action="store_true", help="no model.state_dict() before loading (fef3ed10)")
    ap.add_argument("--lora", action="store_true", help="lora_finetune_single_device.yaml's bf16 LoRA instead")
    args = ap.parse_args()
    peft = LORA if args.lora else QLORA

    sys.path.insert(0, args.torchtune_src)
    finder = _StubFinder()
    sys.meta_path.insert(0, finder)
    import torchtune_recipe_trace

    torchtune_recipe_trace.STUBS = (*STUBS, "pkg_resources")  # torchtune/utils/precision.py of the time
    # torchtune/utils/quantization.py (fef3ed10) imports torchao quantizers of the time, never called here
    sys.modules["torchtune.utils.quantization"] = _StubModule("torchtune.utils.quantization")
    spec = importlib.util.spec_from_file_location("torchao.dtypes.nf4tensor", args.nf4)
    assert spec is not None and spec.loader is not None
    nf4 = importlib.util.module_from_spec(spec)
    sys.modules["torchao.dtypes.nf4tensor"] = nf4
    spec.loader.exec_module(nf4)

    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._python_dispatch import _pop_mode, _push_mode
    from torchtune import modules, utils
    from torchtune.models.llama2 import _component_builders as builders
    from torchtune.modules.peft.peft_utils import get_adapter_params, set_trainable_params

    from vramlens.allocator.simulator import simulate
    from vramlens.estimator.ondevice import torchtune_nf4_setup_events
    from vramlens.models import load_model
    from vramlens.published import CASES
    from vramlens.trace.events import HOST_TAGS
    from vramlens.trace.recorder import Recorder
    from vramlens.workload import Workload

    rec = Recorder()
    host: set[int] = set()
    tensor_to = torch.Tensor.to

    def to_device(self: torch.Tensor, *a: Any, **k: Any) -> torch.Tensor:
        if id(self) in host and a and isinstance(a[0], (str, torch.device)):  # a host weight's .to(device)
            return self.clone()
        return tensor_to(self, *a, **k)

    def to_host(self: torch.Tensor, *a: Any, **k: Any) -> torch.Tensor:  # the state-dict hook's .cpu()
        out = torch.empty_like(self)
        rec.mark((out,), "host")
        return out

    def seen(fn: Any) -> Any:
        def run(func: Any, *a: Any, **k: Any) -> Any:
            _push_mode(rec)
            try:
                return fn(func, *a, **k)
            finally:
                _pop_mode()
        return run

    for op, fn in list(nf4.NF4_OPS_TABLE.items()):
        nf4.NF4_OPS_TABLE[op] = seen(fn)
    torch.Tensor.to = to_device  # type: ignore[method-assign,assignment]
    torch.Tensor.cpu = to_host  # type: ignore[method-assign,assignment]

    cfg = dict(LLAMA2_7B, num_layers=args.layers)
    marks: list[tuple[str, int]] = []
    with FakeTensorMode(allow_non_fake_inputs=True):
        with utils.set_default_dtype(torch.bfloat16), torch.device("meta"):
            shapes = {k: v.shape for k, v in builders.lora_llama2(**cfg, **{**peft, "quantize_base": False})
                      .state_dict().items() if "lora_" not in k}
        checkpoint = {k: torch.empty(s, dtype=torch.bfloat16, device="cpu") for k, s in shapes.items()}
        with rec:
            rec.mark(list(checkpoint.values()), "host")
            host.update(id(t) for t in checkpoint.values())
            with utils.set_default_dtype(torch.bfloat16):
                model = builders.lora_llama2(**cfg, **peft)
            marks.append(("built", len(rec.events())))
            set_trainable_params(model, get_adapter_params(model))
            utils.set_activation_checkpointing(model, auto_wrap_policy={modules.TransformerDecoderLayer})
            if not args.no_state_dict:
                keys = list(model.state_dict().keys())
                del keys
            model.load_state_dict(checkpoint, strict=False)
            marks.append(("loaded", len(rec.events())))
            opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-4, weight_decay=0.01,
                                    foreach=True)
            loss_fn = torch.nn.CrossEntropyLoss()
            for step in range(2):
                rec.set_phase("forward", step)
                tokens = torch.randint(0, VOCAB, (BATCH, SEQ))
                labels = torch.randint(0, VOCAB, (BATCH, SEQ))
                logits = model(tokens)
                logits = logits[..., :-1, :].contiguous().transpose(1, 2)
                loss = loss_fn(logits, labels[..., 1:].contiguous())
                rec.set_phase("backward", step)
                loss.backward()
                rec.set_phase("optimizer", step)
                opt.step()
                opt.zero_grad(set_to_none=True)
                del logits, loss
            marks.append(("two steps", len(rec.events())))

    events = [(e.action, e.storage, e.nbytes) for e in rec.events() if e.tag not in HOST_TAGS]
    seqs = [e.seq for e in rec.events() if e.tag not in HOST_TAGS]
    print(f"torchtune {args.torchtune_src} lora_llama2 ({args.layers} layers), {'LoRA' if args.lora else 'QLoRA'}, "
          f"batch {BATCH} x {SEQ}"
          + (", no state_dict() pass" if args.no_state_dict else ""))
    for name, n in marks:
        r = simulate([e for e, s in zip(events, seqs, strict=True) if s < n], max_points=2)
        print(f"  after {name:9s}: allocated {r.final_allocated_bytes / MiB:9,.1f} MiB, peak reserved "
              f"{r.peak_reserved_bytes / MiB:9,.1f} MiB ({r.peak_reserved_bytes / 1e9:.2f} GB)")
    if args.layers == 32 and not args.lora:
        case = CASES["torchtune-readme-2024-04-llama2-7b-qlora-1gpu"]
        w = Workload(**case.settings).validated()
        r = simulate(torchtune_nf4_setup_events(load_model(case.model), w), max_points=2)
        print(f"  vramlens' replay of the set-up (--quantize-on-device): {r.peak_reserved_bytes / MiB:,.1f} MiB")


if __name__ == "__main__":
    main()
