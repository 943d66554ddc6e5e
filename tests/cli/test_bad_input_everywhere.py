"""Every command, fed bad input, answers with exit code 2 and one line naming the value (STYLE 6/7).

No traceback, nothing on stdout, and no report file left behind: a run that fails writes nothing.
Argparse's own rejections are one line too (the usage block is for --help).
"""

from __future__ import annotations

import importlib.util
import json
import pickle

import pytest

from cli_run import run_cli

LLAMA_CONFIG = {
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 11_008,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32, "vocab_size": 32_000,
    "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "torch_dtype": "float16",
}


@pytest.fixture
def files(tmp_path):
    """The bad files the cases point at, by name."""
    bad_kv = tmp_path / "bad-kv"
    bad_kv.mkdir()
    (bad_kv / "config.json").write_text(json.dumps(dict(LLAMA_CONFIG, num_key_value_heads=5)))
    (tmp_path / "odd-ffn").mkdir()  # a down_proj torchao's uintx cannot group by 64
    (tmp_path / "odd-ffn" / "config.json").write_text(json.dumps(dict(LLAMA_CONFIG, intermediate_size=11_000)))
    (tmp_path / "malformed.json").write_text('{"model_type": "llama", "hidden_size": ')
    (tmp_path / "empty-dir").mkdir()
    (tmp_path / "notes.txt").write_text("not a snapshot\n")
    (tmp_path / "list.json").write_text("[1, 2, 3]\n")
    whole = pickle.dumps({"segments": [], "device_traces": []}, protocol=4)
    (tmp_path / "truncated.pickle").write_bytes(whole[: len(whole) // 2])
    # A pickle that would call os.system if it were unpickled with pickle.loads.
    (tmp_path / "hostile.pickle").write_bytes(b"cos\nsystem\n(S'echo pwned'\ntR.")
    (tmp_path / "bad.gguf").write_bytes(b"GGUF not really")
    # hostile model files (tests/models/test_hostile_inputs.py has the rules; these are the CLI's view)
    (tmp_path / "layers-1e9.json").write_text(json.dumps(dict(LLAMA_CONFIG, num_hidden_layers=10**9)))
    (tmp_path / "digits.json").write_text(json.dumps(LLAMA_CONFIG)[:-1] + ', "vocab_size": ' + "7" * 5000 + "}")
    (tmp_path / "nan.json").write_text(json.dumps(LLAMA_CONFIG)[:-1] + ', "rms_norm_eps": NaN}')
    (tmp_path / "deep.json").write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    nested = tmp_path / "nested-header"
    nested.mkdir()
    (nested / "config.json").write_text(json.dumps(LLAMA_CONFIG))
    raw = json.dumps({"lm_head.weight": {"dtype": {"x": [1]}, "shape": [1]}}).encode()
    (nested / "model.safetensors").write_bytes(len(raw).to_bytes(8, "little") + raw)
    escaping = tmp_path / "escaping-index"
    escaping.mkdir()
    (escaping / "config.json").write_text(json.dumps(LLAMA_CONFIG))
    (escaping / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"x": "../bad.gguf"}}))
    return tmp_path


# (command line with {tmp} for the fixture's folder, text the error line must contain; "a|b": both)
CASES = {
    # capacity
    "capacity-unknown-model": ("capacity lama-2-7b --gpu A100-80GB", "unknown model 'lama-2-7b'"),
    "capacity-tp-heads": ("capacity llama-2-7b --gpu A100-80GB --tp 3 --gpus 3",
                          "Total number of attention heads (32) must be divisible by tensor parallel size (3)."),
    "capacity-utilization": ("capacity llama-2-7b --gpu A100-80GB --gpu-memory-utilization 1.5",
                             "GPU memory utilization must be within (0, 1]. Got 1.5."),
    "capacity-no-cache": ("capacity llama-2-13b --gpu T4", "No available memory for the cache blocks"),
    "capacity-huge-context": ("capacity llama-2-7b --gpu A100-80GB --context " + "9" * 400, "context=a 400-digit number"),
    "capacity-bad-gguf": ("capacity {tmp}/bad.gguf --engine llama.cpp --gpu RTX-4090", "bad.gguf"),
    "capacity-max-gpus-without-users": ("capacity llama-2-7b --gpu A100-80GB --max-gpus 4",
                                        "--max-gpus plans with --users N: add --users"),
    "capacity-max-gpus-negative": ("capacity llama-2-7b --users 10 --context 4096 --max-gpus -1",
                                   "argument --max-gpus: '-1' must be >= 1"),
    "capacity-5000-digit-tp": ("capacity llama-2-7b --gpu A100-80GB --tp " + "9" * 5000,
                               "argument --tp: '99999|chars) is not a whole number"),
    "capacity-swa-ratio-0": ("capacity openai/gpt-oss-120b --gpu H100-SXM-80GB --engine sglang --swa-full-tokens-ratio 0",
                             "swa_full_tokens_ratio=0.0 must be in (0, 1]"),
    "capacity-swa-ratio-tiny": ("capacity openai/gpt-oss-120b --gpu H100-SXM-80GB --engine sglang "
                                "--sglang-version 0.4.10.post2 --swa-full-tokens-ratio 1e-300",
                                "swa_full_tokens_ratio=1e-300 leaves the sliding layers 0 tokens, less than one "
                                "request's window of 128 tokens"),
    "capacity-speculative-not-json": ("capacity llama-3.1-8b --gpu H100-SXM-80GB --speculative-config ngram",
                                      "speculative_config='ngram' is not JSON"),
    "capacity-speculative-topk-alone": ("capacity llama-3.1-8b --gpu H100-SXM-80GB --engine sglang "
                                        "--speculative-algorithm EAGLE --speculative-draft-model-path llama-3.2-1b "
                                        "--speculative-eagle-topk 2",
                                        "speculative_eagle_topk and speculative_num_draft_tokens need "
                                        "speculative_num_steps"),
    "capacity-speculative-steps-0": ("capacity llama-3.1-8b --gpu H100-SXM-80GB --engine sglang "
                                     "--speculative-algorithm NGRAM --speculative-num-steps 0",
                                     "speculative_num_steps=0"),
    "capacity-mamba-ssm-dtype": ("capacity llama-2-7b --gpu A100-80GB --engine sglang --mamba-ssm-dtype float16",
                                 "mamba_ssm_dtype='float16' is not one of float32, bfloat16 (SGLang --mamba-ssm-dtype)"),
    "capacity-mamba-cache-in-vllm": ("capacity llama-2-7b --gpu A100-80GB --max-mamba-cache-size 64",
                                     "--max-mamba-cache-size is a sglang flag"),
    "capacity-swa-ratio-in-vllm": ("capacity openai/gpt-oss-120b --gpu H100-SXM-80GB --swa-full-tokens-ratio 0.5",
                                   "--swa-full-tokens-ratio is a sglang flag"),
    "capacity-kv-dtype-names-flag": ("capacity llama-2-7b --gpu A100-80GB --kv-cache-dtype fp4",
                                     "Unknown kv cache dtype: fp4|--kv-cache-dtype"),
    "estimate-every-over-limit": ("estimate llama-2-7b --mode train --checkpointing every:99999999999",
                                  "checkpointing='every:99999999999': N is over the limit of 4,096 blocks"),
    "estimate-every-full-width-digit": ("estimate llama-2-7b --mode train --checkpointing every:\uff11",
                                        "'every:\uff11' is not one of"),
    "capacity-gguf-in-vllm": ("capacity {tmp}/bad.gguf --gpu RTX-4090", "only --engine llama.cpp serves it"),
    # estimate
    "estimate-unknown-model": ("estimate lama-2-7b", "unknown model 'lama-2-7b'"),
    "estimate-unknown-gpu": ("estimate llama-2-7b --gpu A100-90", "unknown GPU 'A100-90'"),
    "estimate-zero-gpu-size": ("estimate llama-2-7b --gpu 0GB", "gpu='0GB' must be positive"),
    "estimate-batch-0": ("estimate llama-2-7b --batch 0", "batch=0 must be a whole number >= 1"),
    "estimate-negative-seq": ("estimate llama-2-7b --seq -5", "seq=-5 must be a whole number >= 1"),
    "estimate-negative-new-tokens": ("estimate llama-2-7b --new-tokens -1", "new_tokens=-1 must be a whole number >= 0"),
    "estimate-grad-accum-0": ("estimate llama-2-7b --grad-accum 0", "grad_accum=0 must be a whole number >= 1"),
    "estimate-tp-3-of-32-heads": ("estimate llama-2-7b --tp 3 --gpus 3", "tp=3 must divide the 32 attention heads"),
    "estimate-tp-0": ("estimate llama-2-7b --tp 0", "tp=0 must be a whole number >= 1"),
    "estimate-pp-0": ("estimate llama-2-7b --pp 0", "pp=0 must be a whole number >= 1"),
    "estimate-gpus-0": ("estimate llama-2-7b --gpus 0", "gpus=0 must be a whole number >= 1"),
    "estimate-lora-rank-0": ("estimate llama-2-7b --mode train --method lora --lora-rank 0",
                             "lora_rank=0 must be a whole number >= 1"),
    "estimate-loha-fp16-factors": ("estimate llama-2-7b --mode train --method loha --lora-dtype fp16",
                                   "method=loha with lora_dtype=fp16 is not modelled: peft makes the factors fp32"),
    "estimate-loha-selective-op": ("estimate llama-2-7b --mode train --method loha --checkpointing selective-op",
                                   "method=loha under checkpointing=selective-op is not modelled"),
    "estimate-loha-gpt2": ("estimate gpt2 --mode train --method loha",
                           "lora_targets: q_proj, v_proj match no nn.Linear of openai-community/gpt2's blocks"),
    "estimate-lokr-factor-0": ("estimate llama-2-7b --mode train --method lokr --decompose-factor 0",
                               "decompose_factor=0 must be -1"),
    "estimate-oft-block-0": ("estimate llama-2-7b --mode train --method oft --oft-block-size 0",
                             "oft_block_size=0 must be a whole number >= 1"),
    "estimate-boft-block-5": ("estimate llama-2-7b --mode train --method boft --boft-block-size 5",
                              "boft_block_size=5 does not divide in_features=4096"),
    "estimate-ia3-amp": ("estimate llama-2-7b --mode train --method ia3 --dtype fp32 --amp bf16 --checkpointing full",
                         "method=ia3 under autocast is modelled without checkpointing"),
    "estimate-lora-fa-ia3": ("estimate llama-2-7b --mode train --method ia3 --lora-fa",
                             "lora_fa is peft's LoRA-FA optimizer over LoRA adapters; method=ia3 has none"),
    "estimate-vera-bf16-vectors": ("estimate llama-2-7b --mode train --method vera --lora-dtype bf16",
                                   "method=vera runs its input through the fp32 vera_A and vera_B buffers"),
    "estimate-adalora-8bit": ("estimate llama-2-7b --mode train --method adalora --optimizer adamw-8bit",
                              "method=adalora with optimizer=adamw-8bit is not modelled"),
    "estimate-prefix-tuning-checkpointed": ("estimate llama-2-7b --mode train --method prefix-tuning "
                                            "--num-virtual-tokens 20 --checkpointing full",
                                            "method=prefix-tuning does not run under gradient checkpointing"),
    "estimate-ln-tuning-gpt2": ("estimate gpt2 --mode train --method ln-tuning",
                                "method=ln-tuning takes peft's default targets for the model type"),
    "estimate-kv-block-negative": ("estimate llama-2-7b --kv-block -3", "kv_block=-3 must be 0"),
    "estimate-quant-group-without-groups": ("estimate llama-2-7b --quant int8 --quant-group-size 64",
                                            "quant_group_size=64 applies to the group-wise formats"),
    "estimate-fp6-bf16": ("estimate llama-2-7b --quant fp6", "quant='fp6' runs a kernel that takes fp16 activations only"),
    "estimate-uintx-train": ("estimate llama-2-7b --mode train --method lora --quant uint4",
                             "quant='uint4' is an inference format"),
    "estimate-sparse-marlin-group": ("estimate llama-2-7b --dtype fp16 --quant int4-sparse-marlin --quant-group-size 256",
                                     "quant='int4-sparse-marlin' takes a group of 32, 64, 128 weights"),
    "estimate-uintx-shape": ("estimate {tmp}/odd-ffn --quant uint4",
                             "down_proj of odd-ffn is 4,096 out x 11,000 in, and torchao needs in_features % 64 == 0"),
    "estimate-on-device-nf4": ("estimate llama-2-7b --quant nf4 --cache static --quantize-on-device",
                               "quantize_on_device replays torchao's quantize_ for int8, int4, fp8"),
    "estimate-on-device-lora-train": ("estimate llama-2-7b --mode train --method lora --quantize-on-device",
                                      "quantize_on_device in training models torchtune's 2024 QLoRA set-up"),
    "estimate-quant-impl-nf4": ("estimate llama-2-7b --quant nf4 --quant-impl torchao-wo",
                                "quant_impl='torchao-wo' is torchao's int8_weight_only / float8_weight_only linear"),
    "estimate-quant-impl-bad": ("estimate llama-2-7b --quant int8 --quant-impl eager", "invalid choice"),
    "estimate-quant-impl-exllama-int8": ("estimate llama-2-7b --quant int8 --quant-impl exllama",
                                         "quant_impl='exllama' is an AutoGPTQ kernel for GPTQ weights"),
    "estimate-bnb-compute-dtype-train": ("estimate llama-2-7b --mode train --method qlora --dtype fp16 "
                                         "--bnb-compute-dtype fp32",
                                         "bnb_compute_dtype='fp32' is modelled in inference only"),
    "estimate-bnb-compute-dtype-bad": ("estimate llama-2-7b --quant nf4 --bnb-compute-dtype fp64", "invalid choice"),
    "estimate-pp-schedule-bad": ("estimate llama-2-7b --mode train --gpus 4 --pp 4 --pp-schedule zb1p", "invalid choice"),
    "estimate-pp-schedule-rounds": ("estimate llama-2-7b --mode train --gpus 4 --pp 4 --grad-accum 9 "
                                    "--pp-schedule interleaved-1f1b", "which must divide them: use --grad-accum 8"),
    "estimate-pp-schedule-stages": ("estimate llama-2-7b --mode train --gpus 32 --pp 32 --grad-accum 32 "
                                    "--pp-schedule interleaved-1f1b", "needs 64 stages of at least one block"),
    "estimate-cp-0": ("estimate llama-2-7b --mode train --cp 0", "cp=0 must be a whole number >= 1"),
    "estimate-cp-odd-seq": ("estimate llama-2-7b --mode train --gpus 2 --cp 2 --seq 1001",
                            "seq=1,001 is not a multiple of 2*cp=4"),
    "estimate-cp-inference": ("estimate llama-2-7b --gpus 2 --cp 2", "context parallelism is modelled for training"),
    "estimate-cp-encoder": ("estimate bert-base-uncased --mode train --gpus 2 --cp 2",
                            "context parallelism is modelled for decoder-only causal LMs"),
    "estimate-compiled-loss-fused": ("estimate llama-2-7b --mode train --compile --compile-scope blocks+loss "
                                     "--loss fused-linear", "compile_scope=blocks+loss compiles torchtitan's plain"),
    "estimate-no-upcast-unchunked": ("estimate llama-2-7b --mode train --no-loss-upcast",
                                     "loss_upcast=false describes a chunked cross-entropy"),
    "estimate-output-upcast-with-upcast": ("estimate llama-2-7b --mode train --loss-chunks 4 --output-upcast",
                                           "output_upcast=true describes LitGPT's chunked logits cast to fp32"),
    "estimate-headroom-1.5": ("estimate llama-2-7b --headroom 1.5", "headroom=1.5 must be in [0, 1)"),
    "estimate-headroom-nan": ("estimate llama-2-7b --headroom nan", "headroom=nan must be in [0, 1)"),
    "estimate-headroom-word": ("estimate llama-2-7b --headroom abc", "argument --headroom: invalid float value: 'abc'"),
    "estimate-zero-4": ("estimate llama-2-7b --zero 4", "argument --zero: invalid choice: 4"),
    "estimate-params-nonsense": ("estimate --params 7Q", "params='7Q' is not a count"),
    "estimate-no-model": ("estimate", "give a MODEL"),
    "estimate-kv-heads-folder": ("estimate {tmp}/bad-kv",
                                 "bad-kv/config.json: num_attention_heads=32 is not divisible by num_key_value_heads=5"),
    "estimate-kv-heads-file": ("estimate {tmp}/bad-kv/config.json",
                               "num_attention_heads=32 is not divisible by num_key_value_heads=5"),
    "estimate-malformed-config": ("estimate {tmp}/malformed.json", "malformed.json: not valid JSON"),
    "estimate-config-not-object": ("estimate {tmp}/list.json", "list.json: must hold a JSON object, not list"),
    "estimate-missing-file": ("estimate {tmp}/nope.json", "nope.json'"),
    "estimate-folder-without-config": ("estimate {tmp}/empty-dir", "empty-dir: no config.json in this folder"),
    "estimate-model-arg-5000-chars": ("estimate " + "m" * 5000, "is 5,000 characters, over the limit of 4,096"),
    "estimate-model-arg-300-chars": ("estimate " + "m" * 300, "cannot be looked up as a path (File name too long)"),
    "estimate-layers-1e9": ("estimate {tmp}/layers-1e9.json",
                            "num_hidden_layers=1000000000 is over the limit of 4,096|layers-1e9.json"),
    "estimate-5000-digit-int": ("estimate {tmp}/digits.json",
                                "digits.json: an integer of 5,000 digits is over the limit of 30 digits"),
    "estimate-nan-in-config": ("estimate {tmp}/nan.json", "nan.json: NaN is not JSON"),
    "estimate-config-100000-deep": ("estimate {tmp}/deep.json", "deep.json: deep.json nests 100,001 levels deep, over the limit of 64"),
    "estimate-params-100000T": ("estimate --params 100000T", "params='100000T' is over the limit of 100.00T"),
    "estimate-params-nan": ("estimate --params nan", "params='nan' is not a count"),
    "estimate-nested-safetensors-header": ("estimate {tmp}/nested-header",
                                           "tensor 'lm_head.weight' has dtype {{'x': [1]}}, which vramlens does not know"),
    "estimate-shard-outside-folder": ("estimate {tmp}/escaping-index",
                                      "shard '../bad.gguf' is outside the model folder|an index may only name files"),
    # models, gpus: nothing to get wrong but the flags
    "models-unknown-flag": ("models --bogus", "unrecognized arguments: --bogus"),
    "gpus-unknown-flag": ("gpus --bogus", "unrecognized arguments: --bogus"),
    # trace (progress lines are on: an error must still be the only line)
    "trace-unknown-model": ("trace lama-2-7b", "unknown model 'lama-2-7b'"),
    "trace-batch-0": ("trace gpt2 --batch 0", "batch=0 must be a whole number >= 1"),
    "trace-negative-seq": ("trace gpt2 --seq -1", "seq=-1 must be a whole number >= 1"),
    "trace-lora-rank-0": ("trace gpt2 --mode train --method lora --lora-rank 0", "lora_rank=0 must be a whole number"),
    "trace-tp-3": ("trace llama-2-7b --tp 3 --gpus 3", "tp=3"),
    "trace-gpus-0": ("trace gpt2 --gpus 0", "gpus=0 must be a whole number >= 1"),
    "trace-kv-heads": ("trace {tmp}/bad-kv", "num_attention_heads=32 is not divisible by num_key_value_heads=5"),
    "trace-malformed-config": ("trace {tmp}/malformed.json", "malformed.json: not valid JSON"),
    "trace-missing-file": ("trace {tmp}/nope.json", "nope.json'"),
    "trace-folder-without-config": ("trace {tmp}/empty-dir", "empty-dir: no config.json in this folder"),
    # refused before the first "tracing the first k of L layers" progress line, so it is the only line
    "trace-layers-untraceable": ("trace gpt2 --layers 3 --fused-qkv", "--fused-qkv is LitGPT's attention"),
    "trace-layers-1e9": ("trace {tmp}/layers-1e9.json", "num_hidden_layers=1000000000 is over the limit"),
    "trace-no-model": ("trace", "give a MODEL to trace"),
    "trace-alloc-conf-unknown-key": ("trace gpt2 --alloc-conf bogus:1", "Unrecognized CachingAllocator option: bogus"),
    "trace-alloc-conf-not-a-number": ("trace gpt2 --alloc-conf max_split_size_mb:abc", "max_split_size_mb=abc"),
    "trace-alloc-conf-not-a-bool": ("trace gpt2 --alloc-conf expandable_segments:Maybe", "expandable_segments=Maybe"),
    "trace-alloc-conf-gc-threshold": ("trace gpt2 --alloc-conf garbage_collection_threshold:1.5",
                                      "garbage_collection_threshold=1.5"),
    "trace-alloc-conf-divisions": ("trace gpt2 --alloc-conf roundup_power2_divisions:3", "roundup_power2_divisions=3"),
    "estimate-alloc-conf-not-a-bool": ("estimate gpt2 --alloc-conf expandable_segments:Maybe",
                                       "argument --alloc-conf: alloc_conf='expandable_segments:Maybe': "
                                       "PYTORCH_CUDA_ALLOC_CONF expandable_segments=Maybe"),
    "fit-alloc-conf-unknown-key": ("fit gpt2 --gpu A100-80GB --alloc-conf bogus:1",
                                   "Unrecognized CachingAllocator option: bogus"),
    "trace-layers-2": ("trace gpt2 --layers 2", "layers=2 must be >= 3"),
    "trace-steps-0": ("trace gpt2 --steps 0", "argument --steps: '0' must be >= 1"),
    "trace-top-negative": ("trace gpt2 --top -1", "argument --top: '-1' must be >= 0"),
    "trace-timeline-points-negative": ("trace gpt2 --timeline-points -1", "argument --timeline-points: '-1' must be >= 0"),
    "trace-real-cpu-and-cuda": ("trace gpt2 --real-cpu --cuda", "--real-cpu and --cuda both given"),
    "trace-input-shape-0": ("trace gpt2 --input-shape 0x3", "'0x3' is not a shape"),
    "trace-unimportable-factory": ("trace nosuchmod_xyz:build", "cannot import 'nosuchmod_xyz'"),
    "trace-timeline-no-folder": ("trace gpt2 --seq 8 --timeline {tmp}/no-such-dir/t.jsonl", "no-such-dir/t.jsonl"),
    # fit
    "fit-unknown-model": ("fit lama-2-7b --gpu 24GB", "unknown model 'lama-2-7b'"),
    "fit-unknown-gpu": ("fit llama-2-7b --gpu A100-90", "unknown GPU 'A100-90'"),
    "fit-no-gpu": ("fit llama-2-7b", "the following arguments are required: --gpu"),
    "fit-batch-0": ("fit llama-2-7b --gpu 24GB --batch 0", "batch=0 must be a whole number >= 1"),
    "fit-negative-seq": ("fit llama-2-7b --gpu 24GB --seq -5", "seq=-5 must be a whole number >= 1"),
    "fit-tp-3-of-32-heads": ("fit llama-2-7b --gpu 24GB --tp 3 --gpus 3", "tp=3 must divide the 32 attention heads"),
    "fit-lora-rank-0": ("fit llama-2-7b --gpu 24GB --mode train --method lora --lora-rank 0",
                        "lora_rank=0 must be a whole number >= 1"),
    "fit-loha-inference": ("fit llama-2-7b --gpu 24GB --method loha", "method=loha is modelled for training"),
    "fit-ia3-inference": ("fit llama-2-7b --gpu 24GB --method ia3", "method=ia3 is modelled for training"),
    "fit-kv-heads": ("fit {tmp}/bad-kv --gpu 24GB", "num_attention_heads=32 is not divisible by num_key_value_heads=5"),
    "fit-malformed-config": ("fit {tmp}/malformed.json --gpu 24GB", "malformed.json: not valid JSON"),
    "fit-folder-without-config": ("fit {tmp}/empty-dir --gpu 24GB", "empty-dir: no config.json in this folder"),
    "fit-layers-1e9": ("fit {tmp}/layers-1e9.json --gpu 24GB", "num_hidden_layers=1000000000 is over the limit"),
    "fit-params-100000T": ("fit --params 100000T --gpu 24GB", "params='100000T' is over the limit of 100.00T"),
    "fit-headroom-1.5": ("fit llama-2-7b --gpu 24GB --headroom 1.5", "headroom=1.5 must be in [0, 1)"),
    "fit-host-ram-word": ("fit llama-2-7b --gpu 24GB --host-ram lots", "host RAM='lots' is not a size"),
    "fit-host-ram-negative": ("fit llama-2-7b --gpu 24GB --host-ram=-5GB", "host RAM='-5GB' is not a size"),
    "fit-gpus-0": ("fit llama-2-7b --gpu 24GB --gpus 0", "gpus=0 must be a whole number >= 1"),
    "fit-nodes-0": ("fit llama-2-7b --gpu 24GB --nodes 0", "argument --nodes: '0' must be >= 1"),
    "fit-keep-and-forbid": ("fit llama-2-7b --gpu 24GB --mode train --keep lora --forbid lora",
                            "--keep lora and --forbid lora contradict each other"),
    "fit-keep-qlora-method-lora": ("fit llama-2-7b --gpu 24GB --mode train --keep qlora --method lora",
                                   "--keep qlora contradicts --method lora"),
    "fit-keep-lora-and-qlora": ("fit llama-2-7b --gpu 24GB --mode train --keep lora,qlora",
                                "--keep lora and --keep qlora"),
    "fit-keep-zero-and-fsdp": ("fit llama-2-7b --gpu 24GB --mode train --gpus 2 --keep zero,fsdp",
                               "--keep zero and --keep fsdp"),
    "estimate-fsdp-units-fsdp1": ("estimate llama-2-7b --mode train --gpus 4 --fsdp --fsdp-version 1 "
                                  "--fsdp-units blocks+embed+output",
                                  "fsdp_units='blocks+embed+output' with fsdp_version=1: separate embedding and output "
                                  "units are modelled for FSDP2 full sharding without tensor, pipeline or context "
                                  "parallelism: use --fsdp-units blocks"),
    "estimate-fsdp-units-tied": ("estimate gpt2 --mode train --gpus 2 --fsdp --fsdp-units blocks+embed+output",
                                 "fsdp_units='blocks+embed+output' makes a causal LM's embedding and output layer units "
                                 "of their own; openai-community/gpt2 ties its output layer to the input embedding: use "
                                 "--fsdp-units blocks"),
    "fit-keep-lora-inference": ("fit llama-2-7b --gpu 24GB --keep lora", "--keep lora applies to training"),
    "fit-unknown-remedy": ("fit llama-2-7b --gpu 24GB --mode train --forbid bogus", "--forbid 'bogus' is not a remedy"),
    "fit-effective-batch-0": ("fit llama-2-7b --gpu 24GB --mode train --effective-batch 0",
                              "argument --effective-batch: '0' must be >= 1"),
    "fit-top-0": ("fit llama-2-7b --gpu 24GB --top 0", "argument --top: '0' must be >= 1"),
    "fit-plan-0": ("fit llama-2-7b --gpu 24GB --plan 0", "argument --plan: '0' must be >= 1"),
    "fit-plan-beyond": ("fit llama-2-7b --gpu 24GB --mode train --emit peft --plan 9999", "--plan 9999"),
    "fit-network-word": ("fit llama-2-7b --gpu 24GB --network fast", "bandwidth='fast' is not a size"),
    "fit-interconnect-0": ("fit llama-2-7b --gpu 24GB --interconnect 0GB", "bandwidth='0GB' must be positive"),
    # --emit refusing the plan comes before the --html/--svg reports are written (they were, then exit 2)
    "fit-emit-torchtitan-inference": ("fit llama-2-7b --gpu 24GB --emit torchtitan",
                                      "--emit torchtitan: the plan is for inference"),
    "fit-emit-llamacpp-train": ("fit llama-2-7b --gpu 24GB --mode train --emit llama.cpp",
                                "--emit llama.cpp: the plan trains"),
    "fit-emit-torchtitan-bf16-plan": ("fit llama-2-7b --gpu 24GB --mode train --emit torchtitan",
                                      "--emit torchtitan: the plan stores the weights in bf16"),
    "fit-emit-unknown": ("fit llama-2-7b --gpu 24GB --emit bogus", "argument --emit: invalid choice: 'bogus'"),
    # place
    "place-unknown-model": ("place lama-2-7b --gpu 24GB", "unknown model 'lama-2-7b'"),
    "place-unknown-gpu": ("place llama-2-7b --gpu A100-90", "unknown GPU 'A100-90'"),
    "place-host-ram-word": ("place llama-2-7b --gpu 24GB --host-ram lots", "host RAM='lots' is not a size"),
    "place-host-ram-0": ("place llama-2-7b --gpu 24GB --host-ram 0GB", "host RAM='0GB' must be positive"),
    "place-gpus-0": ("place llama-2-7b --gpu 24GB --gpus 0", "gpus=0 must be a whole number >= 1"),
    "place-headroom-1.5": ("place llama-2-7b --gpu 24GB --headroom 1.5", "headroom=1.5 must be in [0, 1)"),
    "place-batch-0": ("place llama-2-7b --gpu 24GB --batch 0", "batch=0 must be a whole number >= 1"),
    "place-lora-rank-0": ("place llama-2-7b --gpu 24GB --lora-rank 0", "lora_rank=0 must be a whole number >= 1"),
    "place-tp-3": ("place llama-2-7b --gpu 24GB --tp 3", "tp=3 pp=1: place puts whole blocks on devices"),
    "place-train": ("place llama-2-7b --gpu 24GB --mode train", "mode=train: place is for inference"),
    "place-kv-heads": ("place {tmp}/bad-kv --gpu 24GB", "num_attention_heads=32 is not divisible by num_key_value_heads=5"),
    "place-malformed-config": ("place {tmp}/malformed.json --gpu 24GB", "malformed.json: not valid JSON"),
    "place-folder-without-config": ("place {tmp}/empty-dir --gpu 24GB", "empty-dir: no config.json in this folder"),
    "place-layers-1e9": ("place {tmp}/layers-1e9.json --gpu 24GB", "num_hidden_layers=1000000000 is over the limit"),
    "place-bad-gguf": ("place {tmp}/bad.gguf --gpu 24GB", "bad.gguf: not a readable GGUF file"),
    "place-missing-gguf": ("place {tmp}/nope.gguf --gpu 24GB", "nope.gguf: not a readable GGUF file"),
    # snapshot
    "snapshot-missing-file": ("snapshot {tmp}/nope.pickle", "cannot read {tmp}/nope.pickle: No such file or directory"),
    "snapshot-folder": ("snapshot {tmp}/empty-dir", "cannot read {tmp}/empty-dir: Is a directory"),
    "snapshot-text-file": ("snapshot {tmp}/notes.txt", "not a readable pickle (truncated or corrupt: invalid load key, 'n'.) (file {tmp}/notes.txt)"),
    "snapshot-truncated-pickle": ("snapshot {tmp}/truncated.pickle", "pickle data was truncated) (file {tmp}/truncated.pickle)"),
    "snapshot-hostile-pickle": ("snapshot {tmp}/hostile.pickle",
                                "refusing to load os.system: a memory snapshot holds only plain data|(file {tmp}/hostile.pickle)"),
    "snapshot-malformed-json": ("snapshot {tmp}/malformed.json",
                                "looks like JSON but does not parse|(file {tmp}/malformed.json)"),
    "snapshot-top-negative": ("snapshot {tmp}/truncated.pickle --top -1", "argument --top: '-1' must be >= 0"),
    # validate
    "validate-missing-cases": ("validate published --cases {tmp}/nope.json", "cases file '{tmp}/nope.json' does not exist"),
    "validate-malformed-cases": ("validate published --cases {tmp}/malformed.json",
                                 "cases file '{tmp}/malformed.json' is not valid JSON (line 1, column 40: Expecting value)"),
    "validate-cases-not-cases": ("validate published --cases {tmp}/list.json",
                                 "cases file '{tmp}/list.json' must hold a JSON list of cases"),
    "validate-cases-folder": ("validate published --cases {tmp}/empty-dir",
                              "cases file '{tmp}/empty-dir' cannot be read (Is a directory)"),
    "validate-trace-unknown-model": ("validate trace --models bogus", "models bogus are not in the cross-check matrix"),
    "validate-unknown-what": ("validate bogus", "invalid choice: 'bogus'"),
    # serve: checked before anything is imported or bound
    "serve-port-out-of-range": ("serve --port 70000", "argument --port: '70000' is over the limit of 65,535"),
    "serve-port-word": ("serve --port abc", "argument --port: 'abc' is not a whole number"),
    # runs: the arguments are checked before the database is opened
    "runs-unknown-action": ("runs bogus", "invalid choice: 'bogus'"),
    "runs-id-word": ("runs show abc", "argument ID: 'abc' is not a whole number"),
    "runs-limit-0": ("runs list --limit 0", "argument --limit: '0' must be >= 1"),
    "run-no-command": ("run --label x", "give the command after --: vramlens run -- python train.py"),
    "run-missing-program": ("run -- no-such-program-vramlens", "cannot run 'no-such-program-vramlens'"),
    "run-report-into-missing-folder": ("run --report {tmp}/no-such-dir/r.html -- python x.py",
                                       "--report '{tmp}/no-such-dir/r.html': the folder"),
    "run-cpu-limit-word": ("run --cpu-limit lots -- python x.py", "argument --cpu-limit:"),
    "calibrate-sizes-reversed": ("calibrate --batch-sizes 4 2 -- python x.py",
                                 "--batch-sizes=(4, 2) must be two whole numbers >= 1, smallest first"),
    "calibrate-seq-without-flag": ("calibrate --seq-lens 128 256 -- python x.py",
                                   "--seq-lens needs --seq-arg FLAG"),
    "calibrate-margin-1": ("calibrate --margin 1 -- python x.py", "--margin 1.0 must be in [0, 1)"),
    "calibrate-unknown-gpu": ("calibrate --gpu nonesuch -- python x.py", "nonesuch"),
}

#: Commands whose successful run writes --html/--svg files: a failing run must write none.
REPORT_FILES = {"estimate": ("--html", "--svg"), "fit": ("--html", "--svg"), "trace": ("--html", "--svg"),
                "place": ("--html", "--svg"), "snapshot": ("--html",)}
#: Commands with --json: a failing run prints no half object.
JSON_COMMANDS = {"estimate", "fit", "trace", "place", "snapshot", "models", "gpus"}


#: Cases whose check runs after the command imports an extra: (case prefix, module, extra).
NEEDS_EXTRA = (("trace-", "torch", "trace"), ("validate-trace-", "torch", "trace"),
               ("place-bad-gguf", "gguf", "gguf"), ("place-missing-gguf", "gguf", "gguf"))


def skip_without_its_extra(case: str) -> None:
    for prefix, module, extra in NEEDS_EXTRA:
        if case.startswith(prefix) and importlib.util.find_spec(module) is None:
            pytest.skip(f"{case} is checked after importing {module}: needs the [{extra}] extra")


def assert_one_error_line(err: str, expected: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err  # argparse's rejections too: no usage block (vramlens.cli.main.Parser)
    assert lines[0].startswith("error: "), err
    line = lines[0]
    for part in expected.split("|"):  # "a|b": both parts, e.g. the rule and the file it was found in
        assert part in line, err


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_one_line_exit_2(case, files, capsys):
    skip_without_its_extra(case)
    line, expected = CASES[case]
    argv = line.format(tmp=files).split()
    command = argv[0]
    written = []
    for flag in REPORT_FILES.get(command, ()):
        written.append(files / f"report.{flag.removeprefix('--')}")
        argv += [flag, str(written[-1])]
    if command in JSON_COMMANDS and "{tmp}/bad.gguf" not in line:
        argv.append("--json")
    if command == "place" and ".gguf" in line:  # GGUF splits have no report files: that would be the error
        argv = [a for a in argv if not a.startswith(("--html", "--svg")) and a not in map(str, written)]
    code, out, err = run_cli(capsys, argv)
    assert code == 2, (code, out, err)
    assert "Traceback" not in out + err
    assert out == ""
    assert_one_error_line(err, expected.format(tmp=files))
    assert [p for p in written if p.exists()] == []
    assert sorted(p.name for p in files.iterdir() if p.name.startswith(".report")) == []  # no temporary left


@pytest.mark.parametrize("flag", ["--html", "--svg"])
def test_report_into_a_folder_is_one_line(flag, files, capsys):
    """A report path that is a folder: the rename fails, which is the user's path, not a crash."""
    code, out, err = run_cli(capsys, ["estimate", "llama-2-7b", flag, str(files / "empty-dir")])
    assert code == 2, err
    assert "Traceback" not in out + err
    assert_one_error_line(err, f"{flag} '{files / 'empty-dir'}' is a folder: give a file path")
    assert list((files / "empty-dir").iterdir()) == []


def test_snapshot_html_into_missing_folder_writes_nothing(files, capsys):
    stats = files / "memory_stats.json"
    stats.write_text(json.dumps({"allocated_bytes.all.current": 1024, "reserved_bytes.all.current": 2_097_152}))
    target = files / "no-such-dir" / "snapshot.html"
    code, out, err = run_cli(capsys, ["snapshot", str(stats), "--html", str(target)])
    assert code == 2, err
    assert "Traceback" not in out + err
    assert_one_error_line(err, f"--html '{target}': the folder '{target.parent}' does not exist")
    assert not target.parent.exists()


def test_every_command_is_covered():
    """A new command gets bad-input cases here too."""
    from vramlens.cli.main import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert set(sub.choices) <= {line.split()[0] for line, _ in CASES.values()}
