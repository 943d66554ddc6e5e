"""Trace one steady-state step of torchtune's ``lora_finetune_single_device`` as the README's "Memory and training
speed" table (commit 30b8519e, September 2024) ran its Llama 3.1 8B LoRA and QLoRA rows, with torchtune's own code,
under fake tensors, and print it beside vramlens' estimate of the same case at the same depth.

Checks torchtune-readme-2024-09-llama3.1-8b-lora-4090 and -qlora-4090 (batch 2 packed to 2,048 tokens, bf16).
torchtune is not installed: point ``--torchtune-src`` at a source tree of that commit::

    git --git-dir=<mirror of pytorch/torchtune> archive 30b8519e86d2094879576e16ab1f8d21a6f6f9f7 torchtune \\
        | tar -x -C /tmp/tt30
    PYTHONPATH=src python scripts/torchtune_2409_trace.py --torchtune-src /tmp/tt30 --method qlora --layers 8

What runs is torchtune's: ``lora_llama3_1`` with the 8B builder's arguments and the config's LoRA settings
(llama3_1/8B_lora_single_device: q_proj and v_proj; 8B_qlora_single_device: q, k, v, output_proj and the MLP,
``quantize_base=True``, each a torchao NF4 weight dequantized by ``linear_nf4``; rank 8, alpha 16, dropout 0),
``set_trainable_params``, ``set_activation_checkpointing`` on every ``TransformerSelfAttentionLayer``,
``set_num_output_chunks(8)`` and ``CEWithChunkedOutputLoss`` with ``compute_cross_entropy`` as inductor's kernels
allocate it (torchtune_recipe_trace.fused_chunk_ce), the recipe's ``labels`` shift and ``del logits``,
``torch.optim.AdamW(fused=True)``, ``zero_grad(set_to_none=True)``. Stood in for: ``Llama3ScaledRoPE.rope_init``'s
frequency scaling (data-dependent, so not traceable under fake tensors: an empty fp32 ``theta`` of the same size,
then torchtune's ``build_rope_cache``). The blocks run eagerly (the row compiles each layer) and the NF4 code is the
installed torchao's, not the one of September 2024. ``--layers`` (default 8) keeps the trace small: a block adds
the same bytes to the trace and to the estimate.
"""

from __future__ import annotations

import argparse

from torchtune_recipe_trace import fused_chunk_ce, import_torchtune, print_phase_peaks, recipe_step

MiB = 2**20
# torchtune/models/llama3_1/_model_builders.py (lora_llama3_1_8b, qlora_llama3_1_8b) at 30b8519e
LLAMA3_1_8B = dict(vocab_size=128_256, num_heads=32, num_kv_heads=8, embed_dim=4096, max_seq_len=131_072,
                   intermediate_dim=14_336, attn_dropout=0.0, norm_eps=1e-5, rope_base=500_000.0)
# recipes/configs/llama3_1/8B_lora_single_device.yaml and 8B_qlora_single_device.yaml at 30b8519e
ADAPTERS = {
    "lora": dict(lora_attn_modules=["q_proj", "v_proj"], apply_lora_to_mlp=False, quantize_base=False),
    "qlora": dict(lora_attn_modules=["q_proj", "v_proj", "k_proj", "output_proj"], apply_lora_to_mlp=True,
                  quantize_base=True),
}
BATCH, SEQ, CHUNKS, VOCAB = 2, 2048, 8, 128_256


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--torchtune-src", required=True)
    ap.add_argument("--method", choices=tuple(ADAPTERS), default="qlora")
    ap.add_argument("--layers", type=int, default=8)
    args = ap.parse_args()
    import_torchtune(args.torchtune_src)

    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torchtune import modules, training
    from torchtune.models.llama3_1 import _component_builders as builders
    from torchtune.models.llama3_1._position_embeddings import Llama3ScaledRoPE
    from torchtune.modules.loss import CEWithChunkedOutputLoss
    from torchtune.modules.peft import get_adapter_params, set_trainable_params

    from vramlens.estimator import estimate
    from vramlens.models import load_model
    from vramlens.published import CASES
    from vramlens.trace.recorder import Recorder

    def rope_init(self: Llama3ScaledRoPE) -> None:
        self.register_buffer("theta", torch.empty(self.dim // 2, dtype=torch.float32), persistent=False)
        self.build_rope_cache(self.max_seq_len)
        self.is_cache_built = True

    Llama3ScaledRoPE.rope_init = rope_init  # type: ignore[method-assign]
    fake = FakeTensorMode(allow_non_fake_inputs=True)
    with fake, training.set_default_dtype(torch.bfloat16):
        model = builders.lora_llama3_1(num_layers=args.layers, **LLAMA3_1_8B, **ADAPTERS[args.method],
                                       apply_lora_to_output=False, lora_rank=8, lora_alpha=16, lora_dropout=0.0)
    set_trainable_params(model, get_adapter_params(model))
    training.set_activation_checkpointing(model, auto_wrap_policy={modules.TransformerSelfAttentionLayer})
    loss_fn = CEWithChunkedOutputLoss(num_output_chunks=CHUNKS)
    loss_fn.compute_cross_entropy = fused_chunk_ce()  # type: ignore[method-assign]
    model.set_num_output_chunks(CHUNKS)
    with fake:
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-4, weight_decay=0.01,
                                fused=True)

    step = recipe_step(model, loss_fn, opt, VOCAB, BATCH, SEQ)

    with fake:
        step(None)  # creates AdamW's states
        rec = Recorder()
        rec.mark(list(model.parameters()) + list(model.buffers()), "weights")
        rec.mark([t for st in opt.state.values() for t in st.values() if torch.is_tensor(t)], "optimizer_state")
        with rec:
            step(rec)
    print(f"torchtune 30b8519e lora_llama3_1 ({args.method}, {args.layers} layers); no cuBLAS workspaces; the weights "
          "include the fp32 RoPE cache (64 MiB), which the estimate leaves out")
    print_phase_peaks(rec, min_bytes=16 * MiB)
    case = CASES[f"torchtune-readme-2024-09-llama3.1-8b-{args.method}-4090"]
    base = load_model(case.model)
    spec = load_model({**base.config, "num_hidden_layers": args.layers})
    bd = estimate(spec, **case.settings).breakdown  # no GPU: no cuBLAS workspace, as the trace
    print(f"  vramlens at {args.layers} layers: " + ", ".join(f"{p} {b / MiB:,.1f} MiB" for p, b in bd.phases))


if __name__ == "__main__":
    main()
