"""The cross-check: the analytic estimate against the tracer, on a matrix of architectures.

Architectures come from the catalog, shrunk so that the whole matrix runs in the test suite.
The shrink keeps each family's structure (the config class, the attention kind: MHA, GQA or
MQA, gated or plain MLP, MoE routing with its top-k, tied or untied embeddings, the
encoder-decoder split, the position scheme and the dropouts) and changes only sizes:
hidden size 256 with 4 query heads of 64 (KV heads 4 for MHA, 2 for GQA, 1 for MQA), the MLP
scaled by the same factor as the hidden size, 2 blocks per stack, a 4,096-token vocabulary,
at most 4 experts (top-k at most 2). Sizes stay well above the allocator's 512-byte rounding so
that the comparison is about formulas, not rounding. Layouts that vary along the depth keep
both kinds in the 2 blocks: one local and one global block (a sliding window of SEQ / 2, so
that it binds in training and caps the cache in inference), one dense and one MoE block.
Multi-head latent attention keeps DeepSeek's head proportions at d_head 64 (nope 64, rope 32,
v 64) and scales its low ranks with the hidden size (DeepSeek-V3: kv_lora_rank 24, q_lora_rank 56).

Rows (a covering subset of inference/training x checkpointing x eager/sdpa x fp32/bf16-mixed
x full/LoRA; each value of each axis appears for every architecture):

=========  ==========  ========  =========  ==============  ======
mode       method      attention checkpoint  precision       steps
=========  ==========  ========  =========  ==============  ======
inference  full        sdpa      none       bf16            prefill + 4 decode (decoders)
train      full        sdpa      none       bf16 weights    2
train      full        eager     full       fp32 + amp bf16 2
train      lora        sdpa      full       bf16 weights    2
train      lora        eager     none       fp32 + amp bf16 2
=========  ==========  ========  =========  ==============  ======
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from vramlens.errors import InputError
from vramlens.estimator.breakdown import ALLOCATOR_COMPONENTS
from vramlens.models.families import UNWRAP
from vramlens.models.heads import tasks_of

#: catalog name -> (what it stands for, KV heads after the shrink, LoRA targets)
ARCHITECTURES: dict[str, tuple[str, int, tuple[str, ...]]] = {
    "llama-2-7b": ("decoder, MHA, untied embeddings", 4, ("q_proj", "v_proj")),
    "llama-3-8b": ("decoder, GQA, untied", 2, ("q_proj", "v_proj")),
    "qwen2.5-0.5b": ("decoder, GQA, tied embeddings, qkv bias", 2, ("q_proj", "v_proj")),
    "mixtral-8x7b": ("decoder, MoE top-2, GQA", 2, ("q_proj", "v_proj")),
    "gpt2": ("decoder, MHA, tied, Conv1D, learned positions", 4, ("c_attn",)),
    "starcoderbase-1b": ("decoder, MQA (gpt_bigcode)", 1, ("c_attn",)),
    "bert-base-uncased": ("encoder-only, MHA", 4, ("query", "value")),
    "t5-small": ("encoder-decoder, relative position bias", 4, ("q", "v")),
    "pythia-160m": ("decoder, fused QKV kept alive by v, partial rotary (gpt_neox)", 4, ("query_key_value",)),
    "distilbert-base-uncased": ("encoder-only, DistilBERT: q_lin/out_lin, one residual dropout per block", 4,
                                ("q_lin", "v_lin")),
    "xlm-roberta-base": ("encoder-only, RoBERTa layout, head registered first (xlm-roberta)", 4, ("query", "value")),
    "electra-small-discriminator": ("encoder-only, embeddings projected 128 -> 256, replaced-token detection", 4,
                                    ("query", "value")),
    "deberta-v3-base": ("encoder-only, disentangled attention (c2p, p2c; eager only)", 4,
                        ("query_proj", "value_proj")),
    "modernbert-base": ("encoder-only, pre-norm, fused Wqkv, GeGLU, rotary per layer type, sliding-window blocks",
                        4, ("Wqkv",)),
    "gemma-3-1b-it": ("decoder, sliding local and global layers (1:1 when shrunk), q/k norms, sandwich norms, MQA",
                      1, ("q_proj", "v_proj")),
    "gemma-2-2b": ("decoder, attention and final-logit softcapping (tanh), sliding and global layers, no SDPA path, "
                   "sandwich norms, GQA", 2, ("q_proj", "v_proj")),
    "deepseek-v3": ("decoder, multi-head latent attention, MoE top-2 of 4 with a shared expert, a dense first block",
                    4, ("q_b_proj", "kv_b_proj")),
    "deepseek-v2-lite": ("decoder, MLA with one q_proj, softmax-routed MoE with 2 shared experts", 4,
                         ("q_proj", "kv_b_proj")),
    "olmo-2-1124-13b": ("decoder, post-norm blocks, full-width q/k norms", 4, ("q_proj", "v_proj")),
    "gpt-oss-20b": ("decoder, attention sinks (eager only), sliding and full layers, biased router and experts, "
                    "clamped SwiGLU, MoE top-2 of 4", 2, ("q_proj", "v_proj")),
    "llama-4-scout": ("decoder, chunked local attention with rotary and L2 q/k norms, a global NoPE block with "
                      "temperature tuning, a dense block and an MoE block (top-1 of 4, every expert on every token, "
                      "a shared expert)", 2, ("q_proj", "v_proj")),
}

#: Models that only the task rows use: catalog name -> (what it stands for, KV heads, LoRA targets).
TASK_ARCHITECTURES: dict[str, tuple[str, int, tuple[str, ...]]] = {
    "roberta-base": ("encoder-only, RoBERTa classification head", 4, ("query", "value")),
}

#: Task heads (--task), shrunk like the matrix: (catalog name, workload). The head decides the
#: inventory, what the head and its loss keep, and (embedding) two forwards per step.
def _task_row(name: str, task: str, **changes: Any) -> tuple[str, dict[str, Any]]:
    """A full fine-tune with SDPA and no checkpointing, the task and ``changes`` on top."""
    base = {"task": task, "mode": "train", "method": "full", "attention": "sdpa", "checkpointing": "none"}
    return name, {**base, **changes}


TASK_ROWS: tuple[tuple[str, dict[str, Any]], ...] = (
    _task_row("bert-base-uncased", "embedding", dtype="fp32"),
    _task_row("bert-base-uncased", "embedding", dtype="bf16"),
    _task_row("bert-base-uncased", "embedding", mode="inference", dtype="bf16"),
    _task_row("roberta-base", "sequence-classification", dtype="bf16"),
    _task_row("roberta-base", "sequence-classification", attention="eager", dtype="fp32", amp="bf16"),
    _task_row("bert-base-uncased", "token-classification", dtype="fp32"),
    _task_row("bert-base-uncased", "question-answering", dtype="bf16"),
    _task_row("gpt2", "causal-lm", dtype="bf16"),
    # fp32 weights under bf16 autocast: the dtypes CUDA's autocast gives NewGELU's pow, BERT's MLM
    # LayerNorm and cross-entropy (vramlens.trace.cuda_autocast)
    _task_row("gpt2", "causal-lm", dtype="fp32", amp="bf16"),
    _task_row("bert-base-uncased", "masked-lm", dtype="fp32", amp="bf16"),
    # the encoder families' own heads: DistilBERT's pre_classifier and qa_dropout, ELECTRA's
    # classification head, DeBERTa's token classifier (its sequence classifier's loss calls nonzero,
    # which fake tensors cannot run), ModernBERT's mean-pooled head and its sliding-window masks at 512
    _task_row("distilbert-base-uncased", "sequence-classification", dtype="fp32"),
    _task_row("distilbert-base-uncased", "question-answering", dtype="bf16"),
    _task_row("electra-small-discriminator", "sequence-classification", dtype="bf16"),
    _task_row("deberta-v3-base", "token-classification", dtype="bf16"),
    _task_row("modernbert-base", "sequence-classification", dtype="bf16"),
    _task_row("modernbert-base", "embedding", mode="inference", dtype="bf16", seq=512),
)

#: Vision encoders (issue 11), on tiny configs of their own (the shrink is for text models): 2 blocks, hidden 256
#: in 4 heads, MLP 1024, 32x32 images in patches of 8 (16 patches, + a class token for ViT and CLIP), batch 8.
VISION_TINY = dict(hidden_size=256, intermediate_size=1024, num_hidden_layers=2, num_attention_heads=4, image_size=32,
                   patch_size=8)
VISION_CONFIGS: dict[str, dict[str, Any]] = {
    "vit-tiny": {"model_type": "vit", "architectures": ["ViTForImageClassification"], **VISION_TINY,
                 "num_labels": 10, "_name_or_path": "vit-tiny"},
    "clip-vision-tiny": {"model_type": "clip_vision_model", "architectures": ["CLIPVisionModel"], **VISION_TINY,
                         "_name_or_path": "clip-vision-tiny"},
    "siglip-vision-tiny": {"model_type": "siglip_vision_model", "architectures": ["SiglipVisionModel"],
                           **VISION_TINY, "_name_or_path": "siglip-vision-tiny"},
}
VISION_ROWS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("vit-tiny", {"mode": "inference", "dtype": "bf16", "attention": "sdpa", "batch": 8}),
    ("vit-tiny", {"mode": "train", "method": "full", "task": "image-classification", "dtype": "bf16",
                  "attention": "sdpa", "checkpointing": "none", "batch": 8}),
    ("vit-tiny", {"mode": "train", "method": "full", "task": "image-classification", "dtype": "fp32",
                  "attention": "sdpa", "checkpointing": "none", "batch": 8}),
    ("vit-tiny", {"mode": "inference", "dtype": "bf16", "attention": "sdpa", "batch": 8, "image_size": (48, 64)}),
    ("clip-vision-tiny", {"mode": "inference", "dtype": "bf16", "attention": "sdpa", "batch": 8}),
    ("siglip-vision-tiny", {"mode": "inference", "dtype": "bf16", "attention": "sdpa", "batch": 8}),
)


def _config_row(name: str, cfg: dict[str, Any], row: dict[str, Any], **spec_kw: Any) -> Row:
    """The estimate of the config ``cfg`` (built with ``spec_kw``) against its trace (two steps)."""
    from vramlens.estimator import estimate
    from vramlens.models.inventory import spec_from_config
    from vramlens.trace import trace

    e = estimate(spec_from_config(cfg, name=name, **spec_kw), **row)
    est = e.breakdown
    tr = trace(dict(cfg), steps=2, **row).breakdown
    return Row(
        model=name, workload=dict(row),
        estimate={c: est[c] for c in ALLOCATOR_COMPONENTS},
        traced={c: tr[c] for c in ALLOCATOR_COMPONENTS},
        estimate_peak=est.peak_allocated - _workspace_bytes(e), traced_peak=tr.peak_allocated,
    )


def run_vision_row(name: str, row: dict[str, Any]) -> Row:
    """One VISION_ROWS row: the estimate of VISION_CONFIGS[name] against its trace."""
    return _config_row(name, VISION_CONFIGS[name], row)


#: Whisper (speech encoder-decoder, --audio-seconds) on a shrunk config of its own: whisper-tiny's layout (80 mel
#: bins, 1,500 encoder positions, 448 decoder positions, vocabulary 51,865, tied proj_out) with 2 + 2 blocks of
#: hidden 256 in 4 heads, MLP 1024. Rows: full and LoRA fine-tunes (seq2seq loss over the transcript), a plain
#: forward, generate(), a 12-second clip (padded to one window) and a 45-second one (two windows, two rows).
AUDIO_CONFIGS: dict[str, dict[str, Any]] = {
    "whisper-shrunk": {"model_type": "whisper", "architectures": ["WhisperForConditionalGeneration"], "d_model": 256,
                       "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
                       "decoder_attention_heads": 4, "encoder_ffn_dim": 1024, "decoder_ffn_dim": 1024,
                       "vocab_size": 51_865, "num_mel_bins": 80, "max_source_positions": 1500,
                       "max_target_positions": 448, "_name_or_path": "whisper-shrunk"},
}
AUDIO_ROWS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("whisper-shrunk", {"mode": "train", "method": "full", "dtype": "bf16", "batch": 2, "seq": 64}),
    ("whisper-shrunk", {"mode": "train", "method": "full", "dtype": "fp32", "batch": 1, "seq": 32}),
    ("whisper-shrunk", {"mode": "train", "method": "lora", "dtype": "bf16", "batch": 2, "seq": 64}),
    # Seq2SeqTrainer's usual Whisper fine-tune: fp32 weights under autocast, or every block checkpointed
    ("whisper-shrunk", {"mode": "train", "method": "full", "dtype": "fp32", "amp": "bf16", "batch": 2, "seq": 64}),
    ("whisper-shrunk", {"mode": "train", "method": "full", "dtype": "bf16", "batch": 2, "seq": 64,
                        "checkpointing": "full"}),
    ("whisper-shrunk", {"mode": "train", "method": "full", "dtype": "bf16", "batch": 1, "seq": 32,
                        "audio_seconds": 45}),
    ("whisper-shrunk", {"mode": "inference", "dtype": "bf16", "batch": 2, "seq": 64}),
    ("whisper-shrunk", {"mode": "inference", "dtype": "bf16", "batch": 2, "seq": 4, "new_tokens": 20}),
    ("whisper-shrunk", {"mode": "inference", "dtype": "fp16", "batch": 1, "seq": 16, "audio_seconds": 12}),
)


def run_audio_row(name: str, row: dict[str, Any]) -> Row:
    """One AUDIO_ROWS row: the estimate of AUDIO_CONFIGS[name] against its trace."""
    return _config_row(name, AUDIO_CONFIGS[name], row)


#: Vision-language models on tiny configs that keep each kind of block: LLaVA (a CLIP tower of 3 blocks with its
#: pre-norm, hidden 128, 64x64 images in patches of 8: 64 image tokens, the 2-layer GELU projector, a 2-block Llama
#: of 256) and Gemma 3 (a SigLIP tower of 2 blocks, 64x64 in patches of 4 avg-pooled to 16 tokens, RMSNorm and
#: matmul projector, a Gemma 3 text model with a sliding and a global block); batch 4, 64 text tokens, 2 images.
VLM_CONFIGS: dict[str, dict[str, Any]] = {
    "llava-tiny": {"model_type": "llava", "architectures": ["LlavaForConditionalGeneration"],
                   "text_config": {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
                                   "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 1000},
                   "vision_config": {"model_type": "clip_vision_model", "hidden_size": 128, "intermediate_size": 512,
                                     "num_hidden_layers": 3, "num_attention_heads": 4, "image_size": 64,
                                     "patch_size": 8},
                   "image_token_index": 999, "_name_or_path": "llava-tiny"},
    "gemma3-vlm-tiny": {"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"],
                        "text_config": {"model_type": "gemma3_text", "hidden_size": 256, "intermediate_size": 512,
                                        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                                        "head_dim": 64, "vocab_size": 1000, "sliding_window": 32,
                                        "layer_types": ["sliding_attention", "full_attention"]},
                        "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 128,
                                          "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
                                          "image_size": 64, "patch_size": 4, "vision_use_head": False},
                        "mm_tokens_per_image": 16, "image_token_index": 999, "_name_or_path": "gemma3-vlm-tiny"},
    # LLaVA-NeXT: llava-tiny's tower and projector over 64x64 crops with pinpoints of 64x128, 128x64 and 128x128, a
    # 2-block Mistral; at --image-size 128x96 the best fit is 128x128 (2x2 tiles: 5 crops a image), the tiles' 16x16
    # patch grid unpadded to 16x12: 192 + 16 newlines + 64 base = 272 image tokens an image
    "llava-next-tiny": {"model_type": "llava_next", "architectures": ["LlavaNextForConditionalGeneration"],
                        "text_config": {"model_type": "mistral", "hidden_size": 256, "intermediate_size": 512,
                                        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                                        "vocab_size": 1000},
                        "vision_config": {"model_type": "clip_vision_model", "hidden_size": 128,
                                          "intermediate_size": 512, "num_hidden_layers": 3, "num_attention_heads": 4,
                                          "image_size": 64, "patch_size": 8},
                        "image_grid_pinpoints": [[64, 128], [128, 64], [128, 128]],
                        "image_token_index": 999, "_name_or_path": "llava-next-tiny"},
    # Llama 4 whole: a tower of 3 blocks of 128 over 56x56 tiles in patches of 14 (16 patches and the class token,
    # pixel-shuffled to 4 image tokens a tile), the adapter's MLP and the projector, a 2-block text model (a chunked
    # rotary block with a dense MLP, a NoPE block with the MoE)
    "llama4-vlm-tiny": {"model_type": "llama4", "architectures": ["Llama4ForConditionalGeneration"],
                        "text_config": {"hidden_size": 256, "intermediate_size": 256, "intermediate_size_mlp": 512,
                                        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                                        "head_dim": 64, "vocab_size": 1000, "num_local_experts": 4,
                                        "num_experts_per_tok": 1, "interleave_moe_layer_step": 2,
                                        "no_rope_layers": [1, 0], "attention_chunk_size": 32},
                        "vision_config": {"hidden_size": 128, "intermediate_size": 512, "num_hidden_layers": 3,
                                          "num_attention_heads": 4, "image_size": 56, "patch_size": 14,
                                          "vision_output_dim": 128, "projector_input_dim": 128,
                                          "projector_output_dim": 128},
                        "image_token_index": 999, "_name_or_path": "llama4-vlm-tiny"},
}
_VLM_TRAIN = {"mode": "train", "method": "full", "dtype": "bf16", "attention": "sdpa", "checkpointing": "none",
              "batch": 4, "seq": 64, "images": 2}
_VLM_INFER = {"mode": "inference", "dtype": "bf16", "attention": "sdpa", "batch": 4, "seq": 64, "images": 2}
VLM_ROWS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("llava-tiny", _VLM_TRAIN),
    ("llava-tiny", _VLM_INFER),
    ("gemma3-vlm-tiny", _VLM_TRAIN),
    ("gemma3-vlm-tiny", _VLM_INFER),
    # LoRA: peft's q_proj/v_proj match the CLIP tower's attention too; all-linear adapts LLaVA's projector as well
    ("llava-tiny", {**_VLM_TRAIN, "method": "lora"}),
    ("llava-tiny", {**_VLM_TRAIN, "method": "lora", "lora_targets": ("all-linear",)}),
    ("gemma3-vlm-tiny", {**_VLM_TRAIN, "method": "lora", "lora_targets": ("all-linear",)}),
    ("llava-next-tiny", {**_VLM_TRAIN, "image_size": (128, 96)}),
    ("llava-next-tiny", {**_VLM_TRAIN, "image_size": (128, 96), "method": "lora"}),
    ("llava-next-tiny", {**_VLM_INFER, "image_size": (128, 96)}),
    # Llama 4: one 56x56 tile per image by default; 112x112 is a 2x2 canvas and the global tile (5 tower rows an
    # image), 112x56 a 2x1 canvas and the global tile (3); fc1/fc2/linear_1 adapt the tower's MLPs, the adapter's and
    # the projector (all-linear would adapt Llama4Router, an nn.Linear returning a tuple, which peft's forward breaks on)
    ("llama4-vlm-tiny", _VLM_TRAIN),
    ("llama4-vlm-tiny", _VLM_INFER),
    ("llama4-vlm-tiny", {**_VLM_TRAIN, "method": "lora"}),
    ("llama4-vlm-tiny", {**_VLM_TRAIN, "method": "lora", "lora_targets": ("q_proj", "v_proj", "fc1", "fc2", "linear_1"),
                         "image_size": (112, 56)}),
    ("llama4-vlm-tiny", {**_VLM_TRAIN, "image_size": (112, 112)}),
    ("llama4-vlm-tiny", {**_VLM_INFER, "image_size": (112, 56)}),
)


def run_vlm_row(name: str, row: dict[str, Any]) -> Row:
    """One VLM_ROWS row: the estimate of VLM_CONFIGS[name] (built whole, multimodal) against its trace."""
    return _config_row(name, VLM_CONFIGS[name], row, multimodal=True)


#: The catalog's VLMs at full size, traced on 2 and 3 text blocks under the whole tower and extrapolated (--layers 3).
VLM_CATALOG_ROWS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("llava-1.5-7b", {"mode": "train", "method": "full", "dtype": "bf16", "batch": 1, "seq": 512, "images": 1}),
    ("llava-1.5-7b", {"mode": "inference", "dtype": "bf16", "batch": 1, "seq": 512, "images": 2}),
    ("gemma-3-4b-it-vision", {"mode": "train", "method": "full", "dtype": "bf16", "batch": 1, "seq": 512,
                              "images": 1}),
    ("gemma-3-4b-it-vision", {"mode": "inference", "dtype": "bf16", "batch": 1, "seq": 512, "images": 2}),
    # Llama 4 Scout whole: one 336x336 tile, and 672x672 as a 2x2 canvas and the global tile (5 tower rows)
    ("llama-4-scout-vision", {"mode": "train", "method": "full", "dtype": "bf16", "batch": 1, "seq": 512, "images": 1}),
    ("llama-4-scout-vision", {"mode": "inference", "dtype": "bf16", "batch": 1, "seq": 512, "images": 1,
                              "image_size": (672, 672)}),
)


def run_vlm_catalog_row(name: str, row: dict[str, Any], layers: int = 3) -> Row:
    """One VLM_CATALOG_ROWS row: the estimate of a catalog VLM against its extrapolated trace."""
    from vramlens.estimator import estimate
    from vramlens.models import load_model
    from vramlens.trace import trace

    spec = load_model(name)
    e = estimate(spec, **row)
    est = e.breakdown
    tr = trace(spec, steps=2, layers=layers, **row).breakdown
    return Row(
        model=name, workload=dict(row),
        estimate={c: est[c] for c in ALLOCATOR_COMPONENTS},
        traced={c: tr[c] for c in ALLOCATOR_COMPONENTS},
        estimate_peak=est.peak_allocated - _workspace_bytes(e), traced_peak=tr.peak_allocated,
    )


#: Memory techniques of training stacks (torchtune, torchtitan, Liger), each run by the tracer the
#: way its stack runs it: (catalog name, workload). A row may set batch and seq (a short sequence
#: puts the peak where the technique acts rather than at the loss).
TECHNIQUE_ROWS: tuple[tuple[str, dict[str, Any]], ...] = (
    # optimizer in backward (torchtune optimizer_in_bwd): untied and tied output layers, autocast, LoRA
    ("llama-2-7b", {"mode": "train", "method": "full", "attention": "sdpa", "checkpointing": "none", "dtype": "bf16",
                    "optimizer_in_backward": True}),
    ("llama-2-7b", {"mode": "train", "method": "full", "attention": "sdpa", "checkpointing": "none", "dtype": "bf16",
                    "optimizer_in_backward": True, "batch": 1, "seq": 16}),
    ("qwen2.5-0.5b", {"mode": "train", "method": "full", "attention": "sdpa", "checkpointing": "none",
                      "dtype": "bf16", "optimizer_in_backward": True, "batch": 1, "seq": 16}),
    ("gpt2", {"mode": "train", "method": "full", "attention": "eager", "checkpointing": "none", "dtype": "fp32",
              "amp": "bf16", "optimizer_in_backward": True, "batch": 1, "seq": 16}),
    ("llama-3-8b", {"mode": "train", "method": "full", "attention": "sdpa", "checkpointing": "full", "dtype": "bf16",
                    "optimizer": "sgd-momentum", "optimizer_in_backward": True, "batch": 1, "seq": 16}),
    ("llama-2-7b", {"mode": "train", "method": "lora", "attention": "sdpa", "checkpointing": "none", "dtype": "bf16",
                    "optimizer_in_backward": True}),
    # FP8 training (torchao convert_to_float8_training, torchtitan's [float8]: every linear but the output
    # layer, dims multiples of 16): the plain loss keeps the peak at the logits; the fused loss puts it at
    # the down projection's float8 backward (and a recomputed block's)
    ("llama-3-8b", {"mode": "train", "method": "full", "attention": "sdpa", "checkpointing": "none", "dtype": "bf16",
                    "fp8": True}),
    ("llama-3-8b", {"mode": "train", "method": "full", "attention": "sdpa", "checkpointing": "full", "dtype": "bf16",
                    "fp8": True}),
    ("llama-3-8b", {"mode": "train", "method": "full", "attention": "sdpa", "checkpointing": "none", "dtype": "bf16",
                    "fp8": True, "loss": "fused-linear", "batch": 2, "seq": 512}),
    ("llama-3-8b", {"mode": "train", "method": "full", "attention": "sdpa", "checkpointing": "full", "dtype": "bf16",
                    "fp8": True, "loss": "fused-linear", "batch": 2, "seq": 512}),
    ("llama-3-8b", {"mode": "train", "method": "full", "attention": "sdpa", "checkpointing": "every:2",
                    "dtype": "bf16", "fp8": True, "loss": "fused-linear", "batch": 2, "seq": 512}),
    ("llama-3-8b", {"mode": "train", "method": "full", "attention": "sdpa", "checkpointing": "selective-op",
                    "dtype": "bf16", "fp8": True, "loss": "fused-linear", "batch": 2, "seq": 512}),
    # torchao's rowwise recipes (Float8LinearConfig.from_recipe_name): rowwise adds the vectors of scales to the
    # tensorwise casts; rowwise_with_gw_hp casts neither operand of grad_weight (its peaks: the gradient's first cast,
    # and under full checkpointing the recomputed forward's cast of the down projection's input)
    ("llama-3-8b", {"mode": "train", "method": "full", "attention": "sdpa", "checkpointing": "none", "dtype": "bf16",
                    "fp8": True, "fp8_recipe": "rowwise", "loss": "fused-linear", "batch": 2, "seq": 512}),
    ("llama-3-8b", {"mode": "train", "method": "full", "attention": "sdpa", "checkpointing": "full", "dtype": "bf16",
                    "fp8": True, "fp8_recipe": "rowwise", "loss": "fused-linear", "batch": 2, "seq": 512}),
    ("llama-3-8b", {"mode": "train", "method": "full", "attention": "sdpa", "checkpointing": "none", "dtype": "bf16",
                    "fp8": True, "fp8_recipe": "rowwise_with_gw_hp", "loss": "fused-linear", "batch": 2, "seq": 512}),
    ("llama-3-8b", {"mode": "train", "method": "full", "attention": "sdpa", "checkpointing": "full", "dtype": "bf16",
                    "fp8": True, "fp8_recipe": "rowwise_with_gw_hp", "loss": "fused-linear", "batch": 2, "seq": 512}),
    # activation offloading (torchtune OffloadActivations, its defaults: streams, 5-tensor stash, >= 1 KiB)
    ("llama-2-7b", {"mode": "train", "method": "full", "attention": "sdpa", "checkpointing": "none", "dtype": "bf16",
                    "activation_offload": True}),
    ("llama-3-8b", {"mode": "train", "method": "full", "attention": "sdpa", "checkpointing": "none", "dtype": "bf16",
                    "activation_offload": True, "batch": 1, "seq": 512}),
    ("qwen2.5-0.5b", {"mode": "train", "method": "full", "attention": "sdpa", "checkpointing": "none",
                      "dtype": "bf16", "activation_offload": True}),
    ("gpt2", {"mode": "train", "method": "full", "attention": "eager", "checkpointing": "none", "dtype": "fp32",
              "amp": "bf16", "activation_offload": True}),
    ("llama-2-7b", {"mode": "train", "method": "lora", "attention": "sdpa", "checkpointing": "full", "dtype": "bf16",
                    "activation_offload": True}),
    ("llama-2-7b", {"mode": "train", "method": "lora", "attention": "eager", "checkpointing": "none", "dtype": "fp32",
                    "amp": "bf16", "activation_offload": True}),
    # GQA expansion: eager attention's repeat_kv of the whole cache at every decode step (MHA: no copy)
    ("llama-3-8b", {"mode": "inference", "method": "full", "attention": "eager", "checkpointing": "none",
                    "dtype": "bf16", "seq": 16, "new_tokens": 256}),
    ("qwen2.5-0.5b", {"mode": "inference", "method": "full", "attention": "eager", "checkpointing": "none",
                      "dtype": "bf16", "seq": 16, "new_tokens": 256}),
    ("llama-2-7b", {"mode": "inference", "method": "full", "attention": "eager", "checkpointing": "none",
                    "dtype": "bf16", "seq": 16, "new_tokens": 256}),
    # GQA keys and values expanded before the kernel by the stack (torchtune's MultiHeadAttention): SDPA keeps
    # the full-head copies in training, and every decode step copies the whole cache (MHA, Qwen's 7:1, Llama 3's 4:1)
    ("llama-3-8b", {"mode": "train", "method": "full", "attention": "sdpa", "checkpointing": "none", "dtype": "bf16",
                    "gqa_expand": True}),
    ("llama-3-8b", {"mode": "train", "method": "full", "attention": "sdpa", "checkpointing": "full", "dtype": "bf16",
                    "gqa_expand": True}),
    ("llama-3-8b", {"mode": "train", "method": "lora", "attention": "sdpa", "checkpointing": "none", "dtype": "bf16",
                    "gqa_expand": True}),
    ("qwen2.5-0.5b", {"mode": "train", "method": "full", "attention": "sdpa", "checkpointing": "none",
                      "dtype": "bf16", "gqa_expand": True, "batch": 1, "seq": 512}),
    ("llama-3-8b", {"mode": "inference", "method": "full", "attention": "sdpa", "checkpointing": "none",
                    "dtype": "bf16", "seq": 16, "new_tokens": 64, "gqa_expand": True}),
    ("llama-2-7b", {"mode": "inference", "method": "full", "attention": "sdpa", "checkpointing": "none",
                    "dtype": "bf16", "seq": 16, "new_tokens": 64, "gqa_expand": True}),
    # generate() of transformers < 4.42 (Workload.legacy_cache): every decode step keeps the previous cache until
    # the forward that builds the next returns; MHA (Llama 2) and GQA (Llama 3's 4:1, Qwen's 7:1), eager and SDPA
    *((name, {"mode": "inference", "method": "full", "attention": attention, "checkpointing": "none", "dtype": "bf16",
              "seq": 16, "new_tokens": 128, "transformers_version": "4.35"})
      for name in ("llama-2-7b", "llama-3-8b", "qwen2.5-0.5b") for attention in ("eager", "sdpa")),
    # its logits: before 4.45 the prefill makes every prompt token's (LlamaForCausalLM and its copies upcast them
    # to fp32, GPT-2 does not); before 4.42 generate() keeps them through the first decode step's forward
    *((name, {"mode": "inference", "method": "full", "attention": attention, "checkpointing": "none", "dtype": "bf16",
              "seq": 512, "new_tokens": 2, "transformers_version": version})
      for name, attention, version in (("gpt2", "sdpa", "4.35"), ("gpt2", "sdpa", "4.44"), ("llama-3-8b", "sdpa", "4.35"),
                                       ("llama-3-8b", "sdpa", "4.44"), ("qwen2.5-0.5b", "eager", "4.40"))),
    # long decoding past a sliding window (Gemma 3's local blocks keep 64 of 272 tokens) and multi-head latent
    # attention rebuilding keys and values from the cached latent at every step (DeepSeek-V3)
    ("gemma-3-1b-it", {"mode": "inference", "method": "full", "attention": "sdpa", "checkpointing": "none",
                       "dtype": "bf16", "seq": 16, "new_tokens": 256}),
    ("deepseek-v3", {"mode": "inference", "method": "full", "attention": "eager", "checkpointing": "none",
                     "dtype": "bf16", "seq": 16, "new_tokens": 256}),
    # chunked cross-entropy (torchtune CEWithChunkedOutputLoss, 8 chunks as there)
    ("llama-2-7b", {"mode": "train", "method": "full", "attention": "sdpa", "checkpointing": "none", "dtype": "bf16",
                    "loss_chunks": 8}),
    ("llama-2-7b", {"mode": "train", "method": "full", "attention": "sdpa", "checkpointing": "none", "dtype": "bf16",
                    "loss_chunks": 8, "batch": 1, "seq": 512}),
    ("qwen2.5-0.5b", {"mode": "train", "method": "full", "attention": "sdpa", "checkpointing": "none",
                      "dtype": "bf16", "loss_chunks": 8}),
    ("gpt2", {"mode": "train", "method": "full", "attention": "eager", "checkpointing": "none", "dtype": "fp32",
              "amp": "bf16", "loss_chunks": 8}),
    ("llama-2-7b", {"mode": "train", "method": "lora", "attention": "sdpa", "checkpointing": "full", "dtype": "bf16",
                    "loss_chunks": 8}),
    # LoRA over fp32 weights under autocast: each chunk's call of the frozen output layer keeps a bf16 cast of its own
    ("llama-3-8b", {"mode": "train", "method": "lora", "attention": "sdpa", "checkpointing": "none", "dtype": "fp32",
                    "amp": "bf16", "loss_chunks": 8, "batch": 1, "seq": 16}),
    # fused linear cross-entropy (Liger)
    ("llama-2-7b", {"mode": "train", "method": "full", "attention": "sdpa", "checkpointing": "none", "dtype": "bf16",
                    "loss": "fused-linear"}),
    ("llama-2-7b", {"mode": "train", "method": "full", "attention": "sdpa", "checkpointing": "none", "dtype": "bf16",
                    "loss": "fused-linear", "batch": 1, "seq": 512}),
    ("qwen2.5-0.5b", {"mode": "train", "method": "full", "attention": "sdpa", "checkpointing": "none",
                      "dtype": "bf16", "loss": "fused-linear"}),
    ("gpt2", {"mode": "train", "method": "full", "attention": "eager", "checkpointing": "none", "dtype": "bf16",
              "loss": "fused-linear"}),
    ("llama-3-8b", {"mode": "train", "method": "lora", "attention": "sdpa", "checkpointing": "full", "dtype": "bf16",
                    "loss": "fused-linear"}),
)

def _tr(**changes: Any) -> dict[str, Any]:
    """A LoRA fine-tune of bf16 weights with SDPA and no checkpointing, ``changes`` on top."""
    return {"mode": "train", "method": "lora", "attention": "sdpa", "checkpointing": "none", "dtype": "bf16",
            **changes}


def _inf(**changes: Any) -> dict[str, Any]:
    """Inference of bf16 weights with SDPA, ``changes`` on top."""
    return {"mode": "inference", "method": "full", "attention": "sdpa", "checkpointing": "none", "dtype": "bf16",
            **changes}


#: QLoRA and LoRA as each stack runs them (issue 9, item 8), the tracer running peft's own modules
#: on NF4 base linears that allocate as bitsandbytes 0.49 does. Rows at 4-16 tokens put the peak
#: where the dequantized weight or DoRA's weight norm is, not at the loss.
#: peft's IA3 (fp32 vectors scaling k_proj's and v_proj's outputs, or q_proj's under Qwen2, and down_proj's input)
#: and LN tuning (trainable copies of every norm) with their default targets: the saved products and copies, the
#: vectors' multiplication backward (three full-size fp32 tensors: the MLP's backward peak under a chunked loss),
#: inside a recomputed block too; prompt tuning (an fp32 (n, hidden) embedding, the model run over s + n positions)
PEFT_VECTOR_ROWS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("llama-3-8b", _tr(method="ia3")),
    ("llama-3-8b", _tr(method="ln-tuning")),
    ("qwen2.5-0.5b", _tr(method="ia3")),
    ("llama-3-8b", _tr(method="ia3", lora_dtype="bf16", loss_chunks=8)),
    ("llama-3-8b", _tr(method="ia3", checkpointing="full", loss_chunks=8)),
    ("llama-3-8b", _tr(method="ia3", checkpointing="selective-op", loss_chunks=8)),
    ("llama-3-8b", _tr(method="ln-tuning", checkpointing="every:2", dtype="fp32")),
    # prompt tuning: PeftModelForCausalLM puts the prompts before every sequence, the model runs s + n positions
    ("llama-3-8b", _tr(method="prompt-tuning", num_virtual_tokens=16)),
    ("llama-3-8b", _tr(method="prompt-tuning", num_virtual_tokens=40, checkpointing="selective-op", padded=True)),
    ("qwen2.5-0.5b", _tr(method="prompt-tuning", num_virtual_tokens=32, checkpointing="full")),
    # under autocast over fp32 weights: IA3's frozen outputs in the autocast dtype, its vector products promoted to
    # fp32 (the first block's q/k/v keeping no cast weight), LN tuning's norms in fp32, prompt tuning's fp32 prompts
    ("llama-3-8b", _tr(method="ia3", dtype="fp32", amp="bf16", batch=1, seq=16)),
    ("llama-3-8b", _tr(method="ln-tuning", dtype="fp32", amp="bf16", batch=4, seq=256)),
    ("qwen2.5-0.5b", _tr(method="prompt-tuning", num_virtual_tokens=32, dtype="fp32", amp="bf16", batch=2, seq=64)),
)

#: peft's LoRA-FA (create_lorafa_optimizer: every lora_A frozen, LoraFAOptimizer stepping B alone), VeRA, AdaLoRA
#: and prefix tuning, each with peft's own modules and optimizer
PEFT_WIDE_ROWS: tuple[tuple[str, dict[str, Any]], ...] = (
    # (workload_for gives lora and qlora rows the architecture's targets and rank 8)
    ("llama-3-8b", _tr(lora_fa=True)),
    ("llama-3-8b", _tr(lora_fa=True, lora_dropout=0.1)),
    ("llama-3-8b", _tr(lora_fa=True, lora_dtype="bf16")),
    ("llama-3-8b", _tr(lora_fa=True, checkpointing="selective-op")),
    ("qwen2.5-0.5b", _tr(method="qlora", lora_fa=True, checkpointing="full")),
    ("gpt2", _tr(lora_fa=True, attention="eager", dtype="fp32")),
    # VeRA (VeraConfig(r)): shared fp32 vera_A and vera_B buffers, A's and B's outputs kept for the two vectors
    ("llama-3-8b", _tr(method="vera", vera_rank=16)),
    ("llama-3-8b", _tr(method="vera", checkpointing="selective-op", padded=True)),
    ("qwen2.5-0.5b", _tr(method="vera", checkpointing="full")),
    ("llama-3-8b", _tr(method="vera", vera_rank=64, dtype="fp32")),
    # AdaLoRA (AdaLoraConfig(init_r=r), fp32 A, E and B, the RankAllocator's three copies after each step): the
    # (r, k) product kept but in the first block; r = 16 and 64 on the default q and v, all-linear, checkpointed
    ("llama-3-8b", _tr(method="adalora", lora_rank=16)),
    ("llama-3-8b", _tr(method="adalora", lora_rank=64, lora_dropout=0.1)),
    ("llama-3-8b", _tr(method="adalora", lora_rank=16, lora_targets=("all-linear",), checkpointing="selective-op")),
    ("qwen2.5-0.5b", _tr(method="adalora", lora_rank=12, checkpointing="full")),
    # prefix tuning (PrefixTuningConfig(n)): an fp32 (n, layers x 2 x kv width) embedding; every block's keys and
    # values over n + s positions behind an explicit mask (GQA expanded), eager's first block keeping no keys
    ("llama-3-8b", _tr(method="prefix-tuning", num_virtual_tokens=16)),
    ("llama-3-8b", _tr(method="prefix-tuning", num_virtual_tokens=40, padded=True)),
    ("llama-3-8b", _tr(method="prefix-tuning", num_virtual_tokens=16, attention="eager")),
    ("qwen2.5-0.5b", _tr(method="prefix-tuning", num_virtual_tokens=32, dtype="fp32")),
    # under a chunked loss: the estimate's temporaries are 9% under the trace's, as plain LoRA's on this shape (the
    # loss chunks' casts, not VeRA's)
    ("llama-3-8b", _tr(method="vera", vera_rank=16, loss_chunks=8)),
    # VeRA over a 4-bit base (peft 0.21.2's VeRA Linear over bitsandbytes' Linear4bit, its Bnb4bitBackend cloning the
    # base output): the NF4 stand-in QLoRA's rows use
    ("qwen2.5-0.5b", _tr(method="vera", quant="nf4", checkpointing="full", batch=2, seq=64)),
)

#: peft's LoHa, LoKr, OFT and BOFT (fp32 factors, q_proj and v_proj, peft's rank and block sizes unless given): each adapted linear keeps its fp32 delta
#: weight and input copy (the first block no delta), the delta built in forward (three n x k) and in HadaWeight's
#: backward (five n x k); rows at 16-64 tokens put the peak there, in bf16 and fp32 (no input copy), on all-linear,
#: and under gradient checkpointing
PEFT_DELTA_ROWS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("llama-3-8b", _tr(method="loha")),
    ("llama-3-8b", _tr(method="loha", batch=1, seq=16)),
    ("llama-3-8b", _tr(method="loha", dtype="fp32", batch=1, seq=16)),
    ("llama-3-8b", _tr(method="loha", lora_targets=("all-linear",), batch=1, seq=32)),
    ("llama-3-8b", _tr(method="loha", lora_rank=4, batch=2, seq=64)),
    ("qwen2.5-0.5b", _tr(method="loha", batch=1, seq=16)),
    # LoKr: w1 whole, w2 whole (r >= max(b, d) / 2: hidden 256 splits 16 x 16) or built as w2_a @ w2_b and kept by
    # torch.kron (decompose_factor 4: 4 x 64, r 2); the kron built and scaled (two n x k), three in its backward
    ("llama-3-8b", _tr(method="lokr", batch=1, seq=16)),
    ("llama-3-8b", _tr(method="lokr", decompose_factor=4, lora_rank=2, batch=1, seq=16)),
    ("llama-3-8b", _tr(method="lokr", decompose_factor=4)),
    ("llama-3-8b", _tr(method="lokr", lora_targets=("all-linear",), batch=1, seq=32)),
    ("llama-3-8b", _tr(method="lokr", dtype="fp32", batch=1, seq=16)),
    ("qwen2.5-0.5b", _tr(method="lokr", decompose_factor=4, lora_rank=4, batch=1, seq=16)),
    # OFT: the input rotated block by block (fp32 copy, Q, Q^2, Q^3 and R kept; no R in the first block), its index
    # buffers; block sizes that divide the input and one that peft moves to a divisor (24 on Qwen2's 896)
    ("llama-3-8b", _tr(method="oft", batch=1, seq=16)),
    ("llama-3-8b", _tr(method="oft", oft_block_size=64, batch=1, seq=16)),
    ("llama-3-8b", _tr(method="oft", oft_block_size=16)),
    ("llama-3-8b", _tr(method="oft", lora_targets=("all-linear",), batch=1, seq=32)),
    ("llama-3-8b", _tr(method="oft", dtype="fp32", batch=1, seq=16)),
    ("qwen2.5-0.5b", _tr(method="oft", oft_block_size=24, batch=1, seq=16)),
    # BOFT: the (in, in) rotation built each forward from the host permutation matrix's GPU copy, eye and R kept
    # with the input and the frozen output; all-linear puts the peak at the last block's down_proj
    ("llama-3-8b", _tr(method="boft", batch=1, seq=16)),
    ("llama-3-8b", _tr(method="boft", boft_block_size=8, batch=1, seq=16)),
    ("llama-3-8b", _tr(method="boft", batch=4, seq=256)),
    ("llama-3-8b", _tr(method="boft", lora_targets=("all-linear",), batch=1, seq=32)),
    ("llama-3-8b", _tr(method="boft", lora_targets=("all-linear",), batch=2, seq=64, loss_chunks=8)),
    ("qwen2.5-0.5b", _tr(method="boft", batch=1, seq=16)),
    # under transformers' gradient checkpointing (non-reentrant, each decoder layer): the block's input kept, the
    # delta (or rotation) rebuilt in its recomputation, its backward over what is left of the recomputed block
    ("llama-3-8b", _tr(method="loha", checkpointing="full", batch=1, seq=16)),
    ("llama-3-8b", _tr(method="lokr", decompose_factor=4, lora_rank=2, checkpointing="every:2", batch=1, seq=16)),
    ("llama-3-8b", _tr(method="oft", checkpointing="every:2", lora_targets=("all-linear",), batch=1, seq=32)),
    ("llama-3-8b", _tr(method="boft", checkpointing="full", batch=1, seq=16)),
    ("llama-2-7b", _tr(method="loha", checkpointing="every:3", batch=1, seq=16)),  # block 4 after the last recomputed
    # autocast_adapter_dtype=False (--lora-dtype the weights' dtype): bf16 factors, deltas and rotations, and no
    # input copy (the linears of a group keep the input they share)
    ("llama-3-8b", _tr(method="loha", lora_dtype="bf16", batch=1, seq=16)),
    ("llama-3-8b", _tr(method="loha", lora_dtype="bf16", lora_targets=("all-linear",), checkpointing="full", batch=2,
                       seq=64)),
    # LoHa under autocast over fp32 weights: the delta built in bf16 (HadaWeight.forward's products autocast), each
    # adapted linear's bf16 input cast kept, the factors' cached casts; the output layer's cast gone by the blocks'
    # backward
    ("llama-3-8b", _tr(method="loha", dtype="fp32", amp="bf16", batch=1, seq=16)),
    ("llama-3-8b", _tr(method="loha", dtype="fp32", amp="fp16", lora_targets=("q_proj", "k_proj", "v_proj", "o_proj",
                                                                              "down_proj"), batch=1, seq=32)),
    # OFT under autocast: the half casts of the skew-symmetric Q each bmm makes, Q^2, Q^3 and R's cast kept, each
    # rotated input's half cast; the first block's adapted frozen linears keep their casts (a rotated input)
    ("llama-3-8b", _tr(method="oft", dtype="fp32", amp="bf16", batch=1, seq=16)),
    # OFT on the MLP's down projection at a few tokens: the Cayley series' backward (five R-sized tensors) is the
    # largest temporary
    ("llama-3-8b", _tr(method="oft", lora_targets=("q_proj", "down_proj"), batch=1, seq=16)),
    ("llama-3-8b", _tr(method="oft", dtype="fp32", amp="fp16", oft_block_size=16, batch=2, seq=64)),
    # LoKr under autocast: the fp32 kron (not an autocast op) cast by F.linear, the built w2 an autocast mm; the
    # output layer's cast not made yet when the last block's down_proj builds its delta
    ("llama-3-8b", _tr(method="lokr", dtype="fp32", amp="bf16", decompose_factor=4, lora_rank=2, batch=1, seq=16)),
    ("qwen2.5-0.5b", _tr(method="lokr", dtype="fp32", amp="fp16", decompose_factor=4, lora_rank=4,
                         lora_targets=("q_proj", "v_proj", "o_proj", "down_proj"), batch=1, seq=32)),
    # OFT and BOFT over a 4-bit base (peft 0.21.2 wraps bitsandbytes' Linear4bit, an nn.Linear, in its OFT / BOFT
    # Linear): the NF4 stand-in QLoRA's rows use, its dequantized weight at every matmul beside the rotation
    ("llama-3-8b", _tr(method="oft", quant="nf4", checkpointing="full", batch=1, seq=8)),
    ("qwen2.5-0.5b", _tr(method="oft", quant="fp4", oft_block_size=24, batch=4, seq=64)),
    ("llama-3-8b", _tr(method="boft", quant="nf4-dq", batch=1, seq=16)),
)

QLORA_ROWS: tuple[tuple[str, dict[str, Any]], ...] = (
    # transformers' BitsAndBytesConfig: every linear of the blocks in nf4-dq
    ("llama-2-7b", _tr(method="qlora")),
    ("llama-2-7b", _tr(method="qlora", batch=1, seq=4)),
    ("llama-3-8b", _tr(method="qlora", checkpointing="full", batch=1, seq=4)),
    ("qwen2.5-0.5b", _tr(method="qlora", batch=1, seq=8)),
    # torchtune 0.1-0.2: only the adapted linears in nf4, adapters in the model's dtype
    ("llama-2-7b", _tr(method="qlora", quant_targets="adapted", batch=1, seq=4)),
    ("llama-2-7b", _tr(method="qlora", quant_targets="adapted", lora_dtype="bf16", lora_dropout=0.1)),
    # torchtune's linear_nf4: torchao's NF4Tensor.get_original_weight (int64 codes, bf16 halves) at every matmul
    ("llama-2-7b", _tr(method="qlora", quant_targets="adapted", lora_dtype="bf16", nf4_impl="torchao", batch=1, seq=4)),
    ("llama-2-7b", _tr(method="qlora", lora_dtype="bf16", lora_dropout=0.05, nf4_impl="torchao",
                       checkpointing="full", batch=1, seq=8)),
    # the adapters' dtype and dropout (peft: fp32 adapters, a cast or dropped copy of the input per adapter)
    ("llama-2-7b", _tr(lora_dtype="bf16")),
    ("llama-2-7b", _tr(lora_dropout=0.1)),
    ("llama-2-7b", _tr(attention="eager", dtype="fp32", amp="bf16", lora_dtype="bf16")),
    ("llama-2-7b", _tr(attention="eager", dtype="fp32", amp="bf16", lora_dropout=0.1)),
    # DoRA: the magnitude vectors, the saved base and adapter outputs, the weight-norm temporaries
    ("llama-2-7b", _tr(method="qlora", dora=True)),
    ("llama-2-7b", _tr(method="qlora", dora=True, batch=1, seq=16)),
    ("llama-2-7b", _tr(method="qlora", dora=True, lora_dropout=0.1)),
    ("llama-2-7b", _tr(dora=True, lora_dtype="bf16", lora_dropout=0.1)),
    ("llama-2-7b", _tr(attention="eager", dtype="fp32", amp="bf16", dora=True, lora_dropout=0.1)),
    ("gpt2", _tr(attention="eager", dora=True, lora_dropout=0.1)),
    # inference: the dequantized weight in the prefill and, batched, in decode (one token: gemv_4bit);
    # generate's last-position logits through a peft model
    ("llama-2-7b", _inf(method="qlora")),
    ("llama-2-7b", _inf(method="qlora", batch=1, seq=16)),
    ("llama-2-7b", _inf(method="qlora", batch=4, seq=16)),
    ("llama-2-7b", _inf(method="lora", dora=True, batch=1, seq=16)),
    # --quant-head (LitGPT's QLoRA, Lightning's BitsandbytesPrecision: every nn.Linear in NF4): the output layer's
    # weight dequantized for each chunk's matmul; --dequant-dtype fp16 (bitsandbytes 0.42.0: the fp16 weight and its
    # bf16 copy at the cast); tied (Qwen2.5): the head a quantized copy of its own
    ("llama-2-7b", _tr(method="qlora", quant_head=True)),
    ("llama-2-7b", _tr(method="qlora", quant_head=True, dequant_dtype="fp16", loss_chunks=4)),
    ("llama-3-8b", _tr(method="qlora", quant_head=True, checkpointing="full", dequant_dtype="fp16", loss_chunks=4)),
    ("qwen2.5-0.5b", _tr(method="qlora", quant_head=True, batch=1, seq=8)),
    ("llama-2-7b", _inf(method="qlora", quant_head=True, batch=4, seq=16)),
    ("qwen2.5-0.5b", _inf(method="qlora", quant_head=True, dequant_dtype="fp16", batch=4, seq=16)),
    # --bnb-compute-dtype fp32 over fp16 weights (transformers' load_in_4bit=True alone): each 4-bit linear casts its
    # input to fp32, dequantizes to fp16 and copies the weight to fp32, and casts its fp32 output back
    ("llama-2-7b", _inf(method="qlora", dtype="fp16", bnb_compute_dtype="fp32", batch=4, seq=16)),
    ("starcoderbase-1b", _inf(method="qlora", dtype="fp16", bnb_compute_dtype="fp32", batch=4, seq=16)),
)

#: --quant-head at full size (Llama 2 7B's 32,000 x 4,096 output layer, whose dequantized weight is 250 MiB),
#: traced on FULL_SIZE_LAYERS layers and extrapolated (run_full_size_row).
_QH = {"mode": "train", "method": "qlora", "attention": "sdpa", "checkpointing": "none", "dtype": "bf16",
       "batch": 1, "seq": 512, "lora_targets": ("q_proj", "v_proj"), "quant_head": True}
QUANT_HEAD_FULL_SIZE_ROWS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("llama-2-7b", _QH),
    ("llama-2-7b", {**_QH, "dequant_dtype": "fp16"}),
    ("llama-2-7b", {**_QH, "dequant_dtype": "fp16", "loss_chunks": 4, "batch": 2}),
    ("llama-2-7b", {"mode": "inference", "method": "qlora", "attention": "sdpa", "checkpointing": "none",
                    "dtype": "bf16", "batch": 4, "seq": 16, "new_tokens": 4, "quant_head": True}),
    ("llama-2-7b", {"mode": "inference", "method": "qlora", "attention": "sdpa", "checkpointing": "none",
                    "dtype": "bf16", "batch": 1, "seq": 512, "quant_head": True, "dequant_dtype": "fp16"}),
)

#: transformers' caches by kind (issue 9, item 11): StaticCache and the offloaded DynamicCache, as
#: generate() builds them (QuantizedCache needs optimum-quanto or hqq: estimated, not traced).
#: --loss logits-sum: the SDPA benchmark loop of transformers' model docs (fp16 weights, train mode, no optimizer,
#: no labels, ``outputs.logits.sum()``, the outputs held into the next forward): the masked-LM and causal-LM heads
#: of the published tables' models, eager and SDPA
_SUM = {"mode": "train", "method": "full", "checkpointing": "none", "dtype": "fp16", "optimizer": "none",
        "loss": "logits-sum"}
LOGITS_SUM_ROWS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("bert-base-uncased", {**_SUM, "attention": "eager", "batch": 4, "seq": 256}),
    ("bert-base-uncased", {**_SUM, "attention": "sdpa", "batch": 4, "seq": 256}),
    ("distilbert-base-uncased", {**_SUM, "attention": "eager", "batch": 8, "seq": 128}),
    ("opt-350m", {**_SUM, "attention": "eager", "batch": 1, "seq": 1024}),
    ("gpt2", {**_SUM, "attention": "sdpa", "batch": 2, "seq": 512}),
)

#: torchao's int8 weight-only linears (Workload.quant_impl "torchao-wo"), the tracer running torchao's own
#: quantize_(model, Int8WeightOnlyConfig()): each linear casts its whole weight to bf16 at every call, the output
#: layer's (with quant_head) the peak at a few prompt tokens, as in gpt-fast's eager prefill.
WEIGHT_ONLY_ROWS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("llama-3-8b", _inf(quant="int8", quant_impl="torchao-wo", quant_head=True, batch=1, seq=6, new_tokens=3,
                        cache="static")),
    ("llama-3-8b", _inf(quant="int8", quant_impl="torchao-wo", quant_head=True, batch=1, seq=6)),
    ("llama-3-8b", _inf(quant="int8", quant_impl="torchao-wo", batch=2, seq=64, new_tokens=2, cache="static")),
)

#: torchao's other weight-only formats (fp6, uintx, Sparse-Marlin, Marlin QQQ), the tracer holding each layout's tensors
#: (build.AOWeightOnlyLinear): uintx dequantizes every weight at each call, the output layer's (quant_head) the
#: prompt's peak; the fused kernels write only their output. Llama 3 8B's shrunk dims (256, 896) divide by the groups
#: and Sparse-Marlin's 128 (Llama 2 7B's shrunk FFN, 688, does not: torchao would refuse it).
AO_FORMAT_ROWS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("llama-3-8b", _inf(quant="uint4", quant_head=True, batch=1, seq=6, new_tokens=3, cache="static")),
    ("llama-3-8b", _inf(quant="uint3", quant_group_size=32, batch=2, seq=64)),
    ("llama-2-7b", _inf(dtype="fp16", quant="fp6", quant_head=True, batch=1, seq=6, new_tokens=3, cache="static")),
    ("llama-3-8b", _inf(dtype="fp16", quant="int4-sparse-marlin", quant_head=True, batch=1, seq=6)),
    ("llama-3-8b", _inf(dtype="fp16", quant="w4a8-qqq", quant_group_size=128, quant_head=True, batch=2, seq=64)),
)

CACHE_ROWS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("llama-3-8b", _inf(cache="static", seq=16, new_tokens=64)),
    ("llama-3-8b", _inf(cache="static", seq=16, new_tokens=8, max_cache_len=512)),
    ("llama-2-7b", _inf(cache="static", max_cache_len=1024)),
    ("llama-2-7b", _inf(cache="static", new_tokens=0, max_cache_len=512)),
    ("qwen2.5-0.5b", _inf(cache="static", attention="eager", seq=16, new_tokens=64, max_cache_len=256)),
    ("gpt2", _inf(cache="static", seq=16, new_tokens=64)),
    ("llama-3-8b", _inf(cache="offloaded", seq=16, new_tokens=64)),
    ("llama-2-7b", _inf(cache="offloaded")),
    ("qwen2.5-0.5b", _inf(cache="offloaded", seq=16, new_tokens=64)),
    ("mixtral-8x7b", _inf(cache="offloaded", seq=16, new_tokens=16)),
)

#: torchao's optimizers (torchao.optim, run for real by the tracer; CPUOffloadOptimizer emulated: it needs
#: CUDA), over tensors on both sides of their thresholds: bf16 and fp32 (autocast) parameters, tied
#: embeddings with 256-element biases, Conv1D, 3-D MoE experts, LoRA adapters (r x 256 = 2,048
#: elements: unquantized, in fp32). The trace steps torchao's step function eagerly (vramlens.trace.runner.EagerSteps),
#: so its step temporaries are not the compiled kernel's: these rows check the states.
OPTIMIZER_ROWS: tuple[tuple[str, dict[str, Any]], ...] = tuple(
    (name, {"mode": "train", "method": method, "attention": attention, "checkpointing": "none", "dtype": dtype,
            **({"amp": "bf16"} if dtype == "fp32" else {}), "optimizer": opt})
    for opt in ("adamw-8bit-torchao", "adamw-4bit-torchao", "adamw-fp8-torchao", "adamw-cpu-offload-torchao")
    for name, method, attention, dtype in (("llama-2-7b", "full", "sdpa", "bf16"), ("qwen2.5-0.5b", "full", "sdpa", "bf16"),
                                           ("gpt2", "full", "eager", "fp32"), ("mixtral-8x7b", "full", "sdpa", "bf16"),
                                           ("llama-2-7b", "lora", "sdpa", "bf16"))
)

def _ckpt_row(name: str, checkpointing: str, **changes: Any) -> tuple[str, dict[str, Any]]:
    """A full bf16 fine-tune with SDPA under ``checkpointing``, ``changes`` on top."""
    base = {"mode": "train", "method": "full", "attention": "sdpa", "checkpointing": checkpointing, "dtype": "bf16"}
    return name, {**base, **changes}


#: Activation checkpointing as torchtitan configures it (torchtitan/distributed/activation_checkpoint.py):
#: per-op selective (selective_ac_option="op") and every N-th block (selective_ac_option="N"), and
#: Megatron-style selective recomputation over SDPA. Batch 4 x 512 tokens with a fused or chunked
#: loss puts the peak in a recomputed block's backward rather than at the loss.
_LONG = {"batch": 4, "seq": 512, "loss": "fused-linear"}
_LONG_CHUNKED = {"batch": 4, "seq": 512, "loss_chunks": 8}
CHECKPOINT_ROWS: tuple[tuple[str, dict[str, Any]], ...] = (
    _ckpt_row("llama-2-7b", "selective-op"),
    _ckpt_row("llama-2-7b", "selective-op", **_LONG),
    _ckpt_row("llama-3-8b", "selective-op", dtype="fp32", amp="bf16", **_LONG_CHUNKED),
    _ckpt_row("qwen2.5-0.5b", "selective-op", **_LONG),           # biased q/k/v: addmm, not counted as mm
    _ckpt_row("gpt2", "selective-op", attention="eager", dtype="fp32", amp="bf16", batch=4, seq=256),  # no mm at all
    _ckpt_row("mixtral-8x7b", "selective-op"),                    # the router's mm counts; experts do not
    _ckpt_row("t5-small", "selective-op"),
    _ckpt_row("llama-2-7b", "selective-op", method="lora", **_LONG),  # lora_A / lora_B are mms too
    _ckpt_row("llama-2-7b", "every:2"),
    _ckpt_row("llama-2-7b", "every:2", **_LONG),
    _ckpt_row("llama-3-8b", "every:2", dtype="fp32", amp="bf16", **_LONG_CHUNKED),
    _ckpt_row("gpt2", "every:2", attention="eager", dtype="fp32", amp="bf16", batch=4, seq=256),
    _ckpt_row("t5-small", "every:2"),
    _ckpt_row("llama-2-7b", "every:2", method="lora", **_LONG),
    _ckpt_row("llama-2-7b", "selective", **_LONG),               # SDPA: only the log-sum-exp is dropped
    # LoRA over fp32 weights under autocast (HF Trainer's bf16=True with gradient_checkpointing=True): the frozen output
    # layer's bf16 cast kept outside the checkpointed blocks, a recomputed block's frozen weights cast again
    _ckpt_row("llama-3-8b", "full", method="lora", dtype="fp32", amp="bf16", batch=1, seq=16),
)

#: FSDP2 per rank (4 ranks, the fake process group): torchtitan's default mixed precision
#: (fp32 sharded parameters, MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)) against
#: pure bf16, with and without torchtitan's checkpointing.
_FSDP = {"gpus": 4, "fsdp": True}
FSDP_ROWS: tuple[tuple[str, dict[str, Any]], ...] = (
    _ckpt_row("llama-2-7b", "none", dtype="fp32", amp="bf16", **_FSDP),
    _ckpt_row("llama-2-7b", "none", **_FSDP),
    _ckpt_row("llama-3-8b", "none", dtype="fp32", amp="bf16", **_FSDP),
    _ckpt_row("qwen2.5-0.5b", "none", dtype="fp32", amp="bf16", **_FSDP),
    _ckpt_row("llama-3-8b", "every:2", dtype="fp32", amp="bf16", **_FSDP),
    _ckpt_row("llama-3-8b", "selective-op", dtype="fp32", amp="bf16", **_FSDP),
    _ckpt_row("llama-3-8b", "selective-op", **_FSDP),
    # torchtune's recipe under FSDP2: OffloadActivations around the model, the loss outside it, so the
    # root is resharded when the loss runs (2 ranks, the case; MHA and GQA; mixed precision)
    _ckpt_row("llama-2-7b", "none", activation_offload=True, gpus=2, fsdp=True),
    _ckpt_row("llama-3-8b", "none", activation_offload=True, **_FSDP),
    _ckpt_row("llama-2-7b", "none", dtype="fp32", amp="bf16", activation_offload=True, **_FSDP),
    # torchtune's distributed LoRA recipe (issue 9): LoRA on q/k/v, full checkpointing, the chunked loss, the GQA
    # copies, over 8 ranks; the reduce-scatter input is the adapters' gradients alone
    _ckpt_row("llama-3-8b", "full", method="lora", gqa_expand=True, loss_chunks=8, gpus=8, fsdp=True),
    # torchtune's custom_sharded_layers ['tok_embeddings', 'output']: the embedding and the output layer units of
    # their own (--fsdp-units blocks+embed+output), resharded after each forward
    _ckpt_row("llama-3-8b", "full", method="lora", gqa_expand=True, loss_chunks=8, gpus=8, fsdp=True,
              fsdp_units="blocks+embed+output"),
    _ckpt_row("llama-3-8b", "full", loss_chunks=8, fsdp_units="blocks+embed+output", **_FSDP),
    _ckpt_row("llama-3-8b", "none", dtype="fp32", amp="bf16", fsdp_units="blocks+embed+output", **_FSDP),
)

#: FSDP2 over tensor parallelism (2-D mesh dp x tp, vramlens.trace.fsdp): torchtitan's parallelize_llama order,
#: its TP plan on the "tp" dimension then fully_shard on "dp"; torchtitan's mixed precision and pure bf16, the
#: logits gathered or sharded (loss_parallel), without and with full checkpointing (torchtitan's 2-D runs use
#: full AC), MHA (Llama 2) and GQA (Llama 3), dp 2 x tp 2, dp 4 x tp 2 and dp 2 x tp 4.
_FSDP_TP = {"gpus": 4, "tp": 2, "fsdp": True}
_MP = {"dtype": "fp32", "amp": "bf16"}
FSDP_TP_ROWS: tuple[tuple[str, dict[str, Any]], ...] = (
    _ckpt_row("llama-2-7b", "none", **_FSDP_TP),
    _ckpt_row("llama-2-7b", "none", **_MP, **_FSDP_TP),
    _ckpt_row("llama-2-7b", "full", **_MP, **_FSDP_TP),
    _ckpt_row("llama-2-7b", "none", loss_parallel=True, **_MP, **_FSDP_TP),
    _ckpt_row("llama-3-8b", "full", **_MP, **_FSDP_TP),
    _ckpt_row("llama-3-8b", "full", loss_parallel=True, **_MP, **_FSDP_TP),
    _ckpt_row("llama-3-8b", "full", loss_parallel=True, **_FSDP_TP),
    _ckpt_row("llama-3-8b", "selective-op", **_MP, **_FSDP_TP),
    _ckpt_row("llama-2-7b", "full", loss_parallel=True, **_MP, gpus=8, tp=2, fsdp=True),
    _ckpt_row("llama-2-7b", "none", **_MP, gpus=8, tp=4, fsdp=True),
)

#: Tensor parallelism per rank (the fake process group, vramlens.trace.tp): torchtitan's plan (embedding
#: RowwiseParallel, SequenceParallel norms, q/k/v/gate/up ColwiseParallel, o/down RowwiseParallel, the output
#: layer ColwiseParallel) over 2 and 4 ranks, the logits gathered or sharded over the vocabulary (loss_parallel);
#: MHA (Llama 2, 4 KV heads: tp 2 and 4) and GQA (Llama 3, 2 KV heads: tp 2); full, selective-op and every:2
#: checkpointing.
_TP2, _TP4 = {"gpus": 2, "tp": 2}, {"gpus": 4, "tp": 4}
TP_ROWS: tuple[tuple[str, dict[str, Any]], ...] = (
    _ckpt_row("llama-2-7b", "none", **_TP2),
    _ckpt_row("llama-2-7b", "none", loss_parallel=True, **_TP2),
    _ckpt_row("llama-2-7b", "none", **_TP4),
    _ckpt_row("llama-2-7b", "none", loss_parallel=True, **_TP4),
    _ckpt_row("llama-3-8b", "none", **_TP2),
    _ckpt_row("llama-3-8b", "none", loss_parallel=True, **_TP2),
    # torchtitan's checkpointing around the parallelized blocks (the block input is sharded over the sequence)
    _ckpt_row("llama-2-7b", "full", loss_parallel=True, **_TP2),
    _ckpt_row("llama-3-8b", "selective-op", **_TP2),
    _ckpt_row("llama-2-7b", "every:2", loss_parallel=True, **_TP4),
)

#: Float8 under tensor parallelism (torchao's float8 TP styles, as torchtitan's apply_tp applies them with float8 on;
#: vramlens.estimator.fp8): on the shrunk Llamas the loss keeps the peak and the float8 inputs the blocks save are
#: checked; on a Llama whose MLP is wide against its vocabulary the float8 casts make the peak (the down projection's
#: input cast in forward or in a recomputed block, the up projection's gradient cast in backward), alone and under
#: FSDP2 on a 2-D mesh; on one whose MLP is narrow against its hidden size (h = 4f/tp) the down projection's
#: gradient cast and float8 all-gather count in the recomputed block.
FP8_TP_ROWS: tuple[tuple[str, dict[str, Any]], ...] = (
    _ckpt_row("llama-3-8b", "none", fp8=True, **_TP2),
    _ckpt_row("llama-3-8b", "full", fp8=True, loss_parallel=True, **_TP2),
    _ckpt_row("llama-2-7b", "none", fp8=True, loss_parallel=True, **_TP4),
)
_F8_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 2,
             "vocab_size": 512, "max_position_embeddings": 1024, "tie_word_embeddings": False}
FP8_TP_CONFIGS: dict[str, dict[str, Any]] = {
    "llama-wide-mlp": {**_F8_LLAMA, "hidden_size": 256, "intermediate_size": 2048, "num_attention_heads": 4,
                       "num_key_value_heads": 4},
    "llama-narrow-mlp": {**_F8_LLAMA, "hidden_size": 1024, "intermediate_size": 512, "num_attention_heads": 8,
                         "num_key_value_heads": 8},
}
_F8 = {"mode": "train", "method": "full", "attention": "sdpa", "dtype": "bf16", "batch": 2, "seq": 256,
       "loss_parallel": True, "fp8": True}
FP8_TP_CONFIG_ROWS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("llama-wide-mlp", {**_F8, "checkpointing": "none", **_TP2}),
    ("llama-wide-mlp", {**_F8, "checkpointing": "full", **_TP2}),
    ("llama-wide-mlp", {**_F8, "checkpointing": "none", **_TP4}),
    ("llama-wide-mlp", {**_F8, "checkpointing": "full", "gpus": 4, "tp": 2, "fsdp": True}),
    ("llama-narrow-mlp", {**_F8, "checkpointing": "full", "batch": 8, "seq": 512, **_TP2}),
)

#: Inference under tensor parallelism (vramlens.trace.tp, issue 9): transformers' own plan, as
#: ``from_pretrained(..., tp_plan="auto")`` applies it (embedding_rowwise, q/k/v/gate/up colwise, o/down
#: rowwise, lm_head colwise_gather_output; the norms whole), prefill and 4 decode steps with the
#: DynamicCache: MHA (Llama 2 at tp 2 and 4, where the post-attention norm's fp32 upcast outgrows the MLP),
#: GQA (Llama 3), MoE (Mixtral: the experts' own plan) and GPT-NeoX (Pythia: fused query_key_value).
_INFER = {"mode": "inference", "method": "full", "attention": "sdpa", "checkpointing": "none", "dtype": "bf16"}
TP_INFERENCE_ROWS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("llama-2-7b", {**_INFER, **_TP2}),
    ("llama-2-7b", {**_INFER, **_TP4}),
    ("llama-3-8b", {**_INFER, **_TP2}),
    ("mixtral-8x7b", {**_INFER, **_TP2}),
    ("pythia-160m", {**_INFER, **_TP2}),
)

#: torchtune's full_finetune_distributed composes its TP plan with optimizer_in_bwd (post-accumulate-grad
#: hooks on the DTensor shards), OffloadActivations (saved-tensor hooks) and CEWithChunkedOutputLoss (each
#: chunk's logits gathered with full_tensor()); the tracer runs them on torchtitan's plan, whose sharding
#: they do not change.
TP_TECHNIQUE_ROWS: tuple[tuple[str, dict[str, Any]], ...] = (
    _ckpt_row("llama-2-7b", "none", optimizer_in_backward=True, **_TP2),
    _ckpt_row("llama-3-8b", "none", optimizer_in_backward=True, loss_parallel=True, **_TP2),
    _ckpt_row("llama-2-7b", "none", activation_offload=True, **_TP2),
    _ckpt_row("llama-2-7b", "full", activation_offload=True, **_TP2),
    _ckpt_row("llama-2-7b", "none", activation_offload=True, loss_parallel=True, **_TP2),
    _ckpt_row("llama-2-7b", "none", optimizer_in_backward=True, activation_offload=True, **_TP2),
    _ckpt_row("llama-2-7b", "none", loss_chunks=8, **_TP2),
    _ckpt_row("llama-2-7b", "none", loss_chunks=8, **_TP4),
)

#: torch.compile (issue 9, item 9): the partitioned graphs of the compiled step, captured with inductor's
#: decompositions and min-cut partitioner and replayed op by op (vramlens.trace.compiled), against the compiled
#: block's formula (vramlens.estimator.compiled). Batch 1 x 512 tokens puts more of the peak in the blocks.
COMPILE_ROWS: tuple[tuple[str, dict[str, Any]], ...] = (
    _ckpt_row("llama-2-7b", "none", compile=True),
    _ckpt_row("llama-3-8b", "none", compile=True),
    _ckpt_row("qwen2.5-0.5b", "none", compile=True),
    _ckpt_row("llama-3-8b", "none", compile=True, batch=1, seq=512),
    _ckpt_row("qwen2.5-0.5b", "none", compile=True, batch=1, seq=512),
    # GPT-2: LayerNorm, GELU, Conv1D (inputs kept transposed), dropout masks kept; batch 1 keeps the dropped
    # embedding sum, more than one the two embeddings' outputs
    _ckpt_row("gpt2", "none", compile=True),
    _ckpt_row("gpt2", "none", compile=True, batch=1, seq=512),
    # full checkpointing: each block keeps its input either way; the last block's output and the mask are rebuilt
    _ckpt_row("llama-3-8b", "full", compile=True),
    _ckpt_row("qwen2.5-0.5b", "full", compile=True, batch=1, seq=512),
    # the stack's GQA expansion (torchtune): the partitioner recomputes the copies in backward, saving the same
    _ckpt_row("llama-3-8b", "none", compile=True, gqa_expand=True),
    # LoRA on q_proj and v_proj (peft's fp32 adapters): frozen linears keep no input
    _ckpt_row("llama-3-8b", "none", compile=True, method="lora"),
    _ckpt_row("qwen2.5-0.5b", "none", compile=True, method="lora", batch=1, seq=512),
    # --compile-scope blocks (torchtune's compile_model, torchtitan's apply_compile): each block its own graph, the
    # rest eager; the mask is None outside the graphs, so SDPA reads k and v as GQA unless the code expands them
    _ckpt_row("llama-3-8b", "none", compile=True, compile_scope="blocks"),
    _ckpt_row("llama-2-7b", "none", compile=True, compile_scope="blocks", batch=1, seq=512),
    _ckpt_row("qwen2.5-0.5b", "none", compile=True, compile_scope="blocks", batch=1, seq=512),
    _ckpt_row("llama-3-8b", "none", compile=True, compile_scope="blocks", gqa_expand=True),
    _ckpt_row("llama-3-8b", "full", compile=True, compile_scope="blocks"),
    _ckpt_row("gpt2", "none", compile=True, compile_scope="blocks", batch=1, seq=512),
    _ckpt_row("llama-3-8b", "none", compile=True, compile_scope="blocks", method="lora"),
    _ckpt_row("qwen2.5-0.5b", "none", compile=True, compile_scope="blocks", method="lora", batch=1, seq=512),
)

#: Workload fields the technique rows set, shown in render().
TECHNIQUE_FIELDS = ("optimizer", "optimizer_in_backward", "loss_chunks", "loss", "activation_offload", "loss_parallel",
                    "new_tokens", "quant_targets", "lora_dtype", "lora_dropout", "dora", "cache", "max_cache_len",
                    "gpus", "tp", "fsdp", "fsdp_units", "fp8", "fp8_recipe", "compile", "compile_scope", "gqa_expand", "quant_head", "dequant_dtype", "nf4_impl",
                    "bnb_compute_dtype", "transformers_version")

#: The issue's case at full size: a sentence-transformers fine-tune of bert-base-uncased, 16
#: (anchor, positive) pairs of 512 tokens, fp32, AdamW; traced on 2 and 3 of its 12 layers and
#: extrapolated (vramlens trace --layers 3).
FULL_SIZE_ROWS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("bert-base-uncased", {"task": "embedding", "mode": "train", "method": "full", "attention": "sdpa",
                           "checkpointing": "none", "dtype": "fp32", "optimizer": "adamw", "batch": 16,
                           "seq": 512}),
)
FULL_SIZE_LAYERS = 3

ROWS: tuple[dict[str, Any], ...] = (
    {"mode": "inference", "method": "full", "attention": "sdpa", "checkpointing": "none", "dtype": "bf16"},
    {"mode": "train", "method": "full", "attention": "sdpa", "checkpointing": "none", "dtype": "bf16"},
    {"mode": "train", "method": "full", "attention": "eager", "checkpointing": "full", "dtype": "fp32", "amp": "bf16"},
    {"mode": "train", "method": "lora", "attention": "sdpa", "checkpointing": "full", "dtype": "bf16"},
    {"mode": "train", "method": "lora", "attention": "eager", "checkpointing": "none", "dtype": "fp32", "amp": "bf16"},
    {"mode": "train", "method": "lora", "attention": "sdpa", "checkpointing": "none", "dtype": "bf16"},
    {"mode": "train", "method": "full", "attention": "eager", "checkpointing": "selective", "dtype": "bf16"},
)

BATCH, SEQ, NEW_TOKENS = 2, 128, 4
HIDDEN, HEADS, HEAD_DIM, LAYERS, VOCAB, MAX_EXPERTS = 256, 4, 64, 2, 4096, 4


def shrink(cfg: dict, kv_heads: int) -> dict:
    """The same family at tiny sizes (see the module docstring)."""
    c = dict(cfg)
    mt = c.get("model_type")
    old_h = c.get("hidden_size") or c.get("n_embd") or c.get("d_model") or c.get("dim")
    if not old_h:
        raise InputError(f"model_type={mt!r}: the config has no hidden_size, n_embd or d_model; add the one its family uses")
    scale = HIDDEN / old_h
    if mt == "distilbert":
        c.update(dim=HIDDEN, n_heads=HEADS, n_layers=LAYERS, hidden_dim=int(c["hidden_dim"] * scale),
                 max_position_embeddings=max(SEQ + NEW_TOKENS + 2, 256))
    elif mt in ("gpt2", "gpt_bigcode"):
        c.update(n_embd=HIDDEN, n_head=HEADS, n_layer=LAYERS, n_positions=max(SEQ + NEW_TOKENS, 256))
        if c.get("n_inner"):
            c["n_inner"] = int(c["n_inner"] * scale)
    elif mt == "bloom":  # BloomConfig: n_head, n_layer, and an MLP of 4 x hidden_size
        c.update(hidden_size=HIDDEN, n_head=HEADS, n_layer=LAYERS)
    elif mt in ("t5", "mt5"):
        c.update(d_model=HIDDEN, d_kv=HEAD_DIM, num_heads=HEADS, num_layers=LAYERS, num_decoder_layers=LAYERS,
                 d_ff=int(c["d_ff"] * scale))
    else:
        c.update(hidden_size=HIDDEN, num_attention_heads=HEADS, num_hidden_layers=LAYERS,
                 intermediate_size=int(c["intermediate_size"] * scale),
                 max_position_embeddings=max(SEQ + NEW_TOKENS + 2, 256))
        if "num_key_value_heads" in c:
            c["num_key_value_heads"] = kv_heads
        if "head_dim" in c:
            c["head_dim"] = HEAD_DIM
        if "moe_intermediate_size" in c:
            # grouped_mm wants 16-byte rows: a multiple of 8 bf16 values
            c["moe_intermediate_size"] = -(-int(c["moe_intermediate_size"] * scale) // 8) * 8
        if "num_local_experts" in c:
            c["num_local_experts"] = min(MAX_EXPERTS, c["num_local_experts"])
            if mt == "gpt_oss":  # top-4 of 4 would route every token everywhere: top-2 as Mixtral
                c["num_experts_per_tok"] = c["experts_per_token"] = min(2, c["num_experts_per_tok"])
                c.pop("quantization_config", None)  # transformers would dequantize MXFP4 (not traced)
        if "n_routed_experts" in c:  # DeepSeek: fewer experts, top-2, groups of 2, one dense block first
            c["n_routed_experts"] = min(MAX_EXPERTS, c["n_routed_experts"])
            c["num_experts_per_tok"] = min(2, c["num_experts_per_tok"])
            if c.get("n_group"):
                c["n_group"] = min(c["n_group"], c["n_routed_experts"] // 2)
                c["topk_group"] = min(c.get("topk_group") or 1, c["n_group"])
            c["first_k_dense_replace"] = min(1, c.get("first_k_dense_replace", 0))
        if "kv_lora_rank" in c:
            # MLA: heads at d_head 64 in DeepSeek's proportions (nope = v = 2 rope); the low ranks
            # scale with the hidden size like the MLP, in multiples of 8
            c.update(qk_nope_head_dim=HEAD_DIM, qk_rope_head_dim=HEAD_DIM // 2, v_head_dim=HEAD_DIM,
                     kv_lora_rank=-(-int(c["kv_lora_rank"] * scale) // 8) * 8)
            if c.get("q_lora_rank"):
                c["q_lora_rank"] = -(-int(c["q_lora_rank"] * scale) // 8) * 8
        if mt == "llama4_text":
            # Llama 4: block 0 chunked (rotary, q/k norms) with a dense MLP, block 1 global NoPE with the MoE; the
            # chunk shorter than the sequence; the dense MLP scaled like the experts
            c.update(no_rope_layers=[1, 0], moe_layers=[1], attention_chunk_size=SEQ // 2,
                     intermediate_size=-(-int(cfg["intermediate_size"] * scale) // 8) * 8,
                     intermediate_size_mlp=-(-int(c["intermediate_size_mlp"] * scale) // 8) * 8)
        if c.get("sliding_window") and mt not in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe"):
            c["sliding_window"] = SEQ // 2
            if "layer_types" not in c:
                c["sliding_window_pattern"] = 2  # one local block, then one global
        for key in ("layer_types", "mlp_only_layers"):
            if isinstance(c.get(key), list):
                c[key] = c[key][:LAYERS]
        if "max_window_layers" in c:
            c["max_window_layers"] = LAYERS
        if "embedding_size" in c:  # ELECTRA's embeddings keep their ratio to the hidden size
            c["embedding_size"] = max(HEAD_DIM, int(c["embedding_size"] * scale))
    for key in [k for k, v in c.items() if k.endswith("_token_id") and isinstance(v, int) and v >= VOCAB]:
        c[key] = 0  # token ids must fall inside the shrunk vocabulary (nn.Embedding's padding_idx)
    c["vocab_size"] = VOCAB
    if isinstance(c.get("pad_token_id"), int) and c["pad_token_id"] >= VOCAB:
        c["pad_token_id"] = None  # OLMo 2's 100277 is no row of the shrunk embedding
    c["_name_or_path"] = f"{cfg.get('_name_or_path') or mt}-tiny"
    return c


@dataclass(frozen=True)
class Row:
    """One cross-check: the estimate and the trace of one (architecture, workload)."""

    model: str
    workload: dict[str, Any]
    estimate: dict[str, int]
    traced: dict[str, int]
    estimate_peak: int
    traced_peak: int
    estimate_host: int = 0
    traced_host: int = 0
    #: each phase's peak (prefill, decode, ...), the estimate's without the cuBLAS workspaces
    estimate_phases: dict[str, int] = field(default_factory=dict)
    traced_phases: dict[str, int] = field(default_factory=dict)

    def phase_error(self, phase: str) -> float | None:
        """Relative error of one phase's peak, None when the trace has no such phase."""
        t = self.traced_phases.get(phase, 0)
        return self.estimate_phases.get(phase, 0) / t - 1 if t else None

    @property
    def peak_error(self) -> float:
        return self.estimate_peak / self.traced_peak - 1 if self.traced_peak else 0.0

    def component_error(self, name: str) -> float | None:
        """Relative error of one component, None when both are 0."""
        e, t = self.estimate.get(name, 0), self.traced.get(name, 0)
        if t == 0:
            return None if e == 0 else float("inf")
        return e / t - 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model, "workload": self.workload,
            "peak_allocated": {"estimate": self.estimate_peak, "traced": self.traced_peak,
                               "error": round(self.peak_error, 5)},
            "components": {
                c: {"estimate": self.estimate.get(c, 0), "traced": self.traced.get(c, 0),
                    "error": None if (err := self.component_error(c)) is None or err == float("inf")
                    else round(err, 5)}
                for c in ALLOCATOR_COMPONENTS
            },
        }


def tiny_config(name: str) -> dict:
    from vramlens.models.catalog import find_config

    found = find_config(name)
    if found is None:
        raise KeyError(name)
    hub_id, cfg = found
    cfg.setdefault("_name_or_path", hub_id)
    if cfg.get("model_type") in UNWRAP:  # a multimodal wrapper (Llama 4): the part vramlens models
        cfg = UNWRAP[cfg["model_type"]][0](cfg, hub_id)
    return shrink(cfg, _architecture(name)[1])


def _architecture(name: str) -> tuple[str, int, tuple[str, ...]]:
    return ARCHITECTURES[name] if name in ARCHITECTURES else TASK_ARCHITECTURES[name]


def workload_for(name: str, row: dict[str, Any]) -> dict[str, Any]:
    wl = {"batch": BATCH, "seq": SEQ, **row}
    cfg = tiny_config(name)
    if (wl["mode"] == "inference" and "causal-lm" in tasks_of(cfg.get("model_type", ""))
            and wl.get("task") in (None, "causal-lm")):
        wl.setdefault("new_tokens", NEW_TOKENS)
    if wl["method"] in ("lora", "qlora"):
        wl["lora_targets"] = _architecture(name)[2]
        wl["lora_rank"] = 8
    return wl


def run_row(name: str, row: dict[str, Any]) -> Row:
    from vramlens.estimator import estimate
    from vramlens.models.inventory import spec_from_config
    from vramlens.trace import trace

    cfg = tiny_config(name)
    wl = workload_for(name, row)
    spec = spec_from_config(cfg, name=cfg["_name_or_path"])
    e = estimate(spec, **wl)
    est = e.breakdown
    tr = trace(cfg, steps=2, **wl).breakdown
    return Row(
        model=name, workload=wl,
        estimate={c: est[c] for c in ALLOCATOR_COMPONENTS},
        traced={c: tr[c] for c in ALLOCATOR_COMPONENTS},
        estimate_peak=est.peak_allocated - _workspace_bytes(e), traced_peak=tr.peak_allocated,
        estimate_host=est.host_bytes, traced_host=tr.host_bytes,
        estimate_phases={p: b - _workspace_bytes(e) for p, b in est.phases},
        traced_phases=dict(tr.phases),
    )


def run_full_size_row(name: str, row: dict[str, Any]) -> Row:
    """A row at the model's real size, traced on FULL_SIZE_LAYERS layers and extrapolated."""
    from vramlens.estimator import estimate
    from vramlens.trace import trace

    e = estimate(name, **row)
    est = e.breakdown
    tr = trace(name, steps=2, layers=FULL_SIZE_LAYERS, **row).breakdown
    return Row(
        model=name, workload=dict(row),
        estimate={c: est[c] for c in ALLOCATOR_COMPONENTS},
        traced={c: tr[c] for c in ALLOCATOR_COMPONENTS},
        estimate_peak=est.peak_allocated - _workspace_bytes(e), traced_peak=tr.peak_allocated,
    )


def run_full_size_rows(rows: tuple[tuple[str, dict[str, Any]], ...], progress=None) -> list[Row]:
    """Each (catalog name, workload) of ``rows`` (QUANT_HEAD_FULL_SIZE_ROWS) at full size (run_full_size_row)."""
    return run_rows(rows, progress, runner=run_full_size_row)


def run_task_rows(progress=None) -> list[Row]:
    return run_rows(TASK_ROWS, progress)


def technique_rows(only: str | None = None) -> tuple[tuple[str, dict[str, Any]], ...]:
    """TECHNIQUE_ROWS (those whose workload sets the field ``only`` to a value other than its default, when given;
    the fp8 rows, which need torchao, only for ``only="fp8"``)."""
    from vramlens.workload import Workload

    out = []
    for name, row in TECHNIQUE_ROWS:
        if only is not None and row.get(only, getattr(Workload(), only)) == getattr(Workload(), only):
            continue
        if only is not None and only != "fp8" and row.get("fp8"):
            continue  # the fp8 rows (torchao) belong to their own technique, whatever else they set
        if only is not None and only != "transformers_version" and row.get("transformers_version"):
            continue  # so do the rows of an older transformers' generate()
        out.append((name, row))
    return tuple(out)


def run_technique_rows(progress=None, *, only: str | None = None) -> list[Row]:
    """The rows of :func:`technique_rows`, run."""
    return run_rows(technique_rows(only), progress)


def run_rows(rows: tuple[tuple[str, dict[str, Any]], ...], progress=None, *,
             runner: Callable[[str, dict[str, Any]], Row] | None = None) -> list[Row]:
    """Each (catalog name, workload) of ``rows`` (QLORA_ROWS, CACHE_ROWS), estimated and traced by ``runner``
    (run_row, the shrunk model, by default)."""
    run = runner or run_row
    out = []
    for name, row in rows:
        if progress:
            progress(f"{name}: {row}")
        out.append(run(name, row))
    return out


def run_optimizer_rows(progress=None, *, optimizer: str | None = None) -> list[Row]:
    """OPTIMIZER_ROWS (those of ``optimizer``, when given)."""
    out = []
    for name, row in OPTIMIZER_ROWS:
        if optimizer is not None and row["optimizer"] != optimizer:
            continue
        if progress:
            progress(f"{name}: {row}")
        out.append(run_row(name, row))
    return out


def run_checkpoint_rows(progress=None) -> list[Row]:
    return run_rows(CHECKPOINT_ROWS, progress)


def run_fsdp_rows(progress=None) -> list[Row]:
    return run_rows(FSDP_ROWS, progress)


def run_fsdp_tp_rows(progress=None) -> list[Row]:
    return run_rows(FSDP_TP_ROWS, progress)


def run_tp_rows(progress=None) -> list[Row]:
    return run_rows(TP_ROWS, progress)


def run_fp8_tp_rows(progress=None) -> list[Row]:
    """FP8_TP_ROWS (the shrunk models), then FP8_TP_CONFIG_ROWS on FP8_TP_CONFIGS."""
    out = run_rows(FP8_TP_ROWS, progress)
    for name, row in FP8_TP_CONFIG_ROWS:
        if progress:
            progress(f"{name}: {row}")
        out.append(_config_row(name, FP8_TP_CONFIGS[name], row))
    return out


def run_tp_inference_rows(progress=None) -> list[Row]:
    return run_rows(TP_INFERENCE_ROWS, progress)


def run_tp_technique_rows(progress=None) -> list[Row]:
    return run_rows(TP_TECHNIQUE_ROWS, progress)


def _workspace_bytes(est) -> int:
    """cuBLAS workspaces the estimator adds to peak_allocated (allocator memory, but not tensors).

    A trace sees tensors only, so both sides are compared without them.
    """
    try:
        from vramlens.estimator.runtime import runtime
    except ImportError:
        return 0
    return int(getattr(runtime(est.gpu, est.workload), "workspace_bytes", 0) or 0)


def skipped(name: str, row: dict[str, Any]) -> str | None:
    """Why a cell of the matrix is not run, or None."""
    cfg = tiny_config(name)
    if ("num_local_experts" in cfg or "n_routed_experts" in cfg) and row.get("dtype") != "bf16":
        # transformers' grouped_mm experts take bf16 only; its eager expert loop calls nonzero
        # (a data-dependent shape), which fake tensors cannot run
        return "MoE experts need bf16 weights under fake tensors"
    return None


def run_matrix(models: tuple[str, ...] | None = None, rows: tuple[dict, ...] | None = None, progress=None) -> list[Row]:
    out = []
    for name in models or tuple(ARCHITECTURES):
        for row in rows or ROWS:
            if skipped(name, row):
                continue
            if progress:
                progress(f"{name}: {row}")
            out.append(run_row(name, row))
    return out


def render(rows: list[Row]) -> str:
    """Per row: peak and each component, estimate vs traced vs error (MiB = 2^20 bytes)."""
    mib = 1024**2
    short = {"weights": "weights", "master_weights": "master", "gradients": "grads", "optimizer_states": "optim",
             "activations": "activ", "kv_cache": "kv", "temporaries": "temp", "comm_buffers": "comm"}
    lines = []
    for r in rows:
        w = r.workload
        desc = ((f"{w['task']}/" if w.get("task") else "")
                + f"{w['mode']}/{w['method']}/{w['attention']}/ckpt-{w['checkpointing']}/{w['dtype']}"
                + (f"+amp-{w['amp']}" if w.get("amp") else "")
                + (f"/b{w['batch']}xs{w['seq']}" if (w.get("batch", BATCH), w.get("seq", SEQ)) != (BATCH, SEQ) else "")
                + "".join(f"/{k}={w[k]}" for k in TECHNIQUE_FIELDS if w.get(k)))
        lines.append(f"{r.model:<18} {desc:<40} peak est {r.estimate_peak / mib:8.2f} traced "
                     f"{r.traced_peak / mib:8.2f} MiB  {r.peak_error:+7.2%}")
        parts = []
        for c in ALLOCATOR_COMPONENTS:
            e, t = r.estimate.get(c, 0), r.traced.get(c, 0)
            if e == 0 and t == 0:
                continue
            err = r.component_error(c)
            es = "n/a" if err is None or err == float("inf") else f"{err:+.1%}"
            parts.append(f"{short[c]} {e / mib:.2f}/{t / mib:.2f} {es}")
        if r.estimate_host or r.traced_host > 64 * 1024:  # step counters alone stay far below
            parts.append(f"host {r.estimate_host / mib:.2f}/{r.traced_host / mib:.2f}")
        lines.append("    " + "  ".join(parts))
    errs = sorted(abs(r.peak_error) for r in rows)
    if errs:
        lines.append(f"{len(rows)} rows: peak |error| median {errs[len(errs) // 2]:.2%}, max {errs[-1]:.2%} "
                     "(component: estimate/traced MiB and error)")
    return "\n".join(lines)
