"""Speculative decoding in `vramlens capacity` (issue 15): vLLM 0.19's --speculative-config and SGLang 0.5.3's
--speculative-* flags, read in the two wheels (serving/speculative.py, vllm.py and sglang.py name the code)."""

from __future__ import annotations

import json

import pytest

from vramlens.cli.main import main
from vramlens.errors import ConfigError, InputError
from vramlens.serving import capacity
from vramlens.serving.sglang import default_mem_fraction

#: An EAGLE head for Llama 3.1 8B as its config.json reads: one Llama block of the target's width
#: (yuhuili/EAGLE-LLaMA3.1-Instruct-8B style); EAGLE3 adds draft_vocab_size.
EAGLE = {"architectures": ["LlamaForCausalLMEagle"], "model_type": "llama", "hidden_size": 4096,
         "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 1,
         "vocab_size": 128256, "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16",
         "tie_word_embeddings": False}
EAGLE3 = {**EAGLE, "architectures": ["LlamaForCausalLMEagle3"], "draft_vocab_size": 32000}
#: vramlens' inventory of that one block: 218,112,000 parameters x 2 B (attention 4096 x (4096 + 2 x 1,024 + 4096),
#: MLP 3 x 4096 x 14,336, two norms of 4096) plus 1,024 B of the rotary buffer and allocator rounding.
BLOCK = 436_225_024
H100 = 85_045_477_376  # H100-SXM-80GB: CUDA's total, bytes (nvidia-smi's 81,559 MiB less the driver's 454 reserved)


def test_vllm_eagle3_draft_weights_and_kv_layers():
    base = capacity("llama-3.1-8b", "vllm", gpu="H100-SXM-80GB")
    cap = capacity("llama-3.1-8b", "vllm", gpu="H100-SXM-80GB",
                   speculative_config={"method": "eagle3", "model": EAGLE3, "num_speculative_tokens": 3})
    # draft (llama_eagle3.py): block 436,225,024 + the first block's qkv reading 2h: (32 + 2 x 8) x 128 x 4096 x 2
    # = 50,331,648 + lm_head 32,000 x 4096 x 2 = 262,144,000 + fc 3 x 4096 x 4096 x 2 = 100,663,296 (replicated)
    # + norm 4096 x 2 = 8,192 + d2t 32,000 x 8 = 256,000 -> 849,628,160; embedding shared
    assert cap.draft_weights_bytes == BLOCK + 50_331_648 + 262_144_000 + 100_663_296 + 8_192 + 256_000 == 849_628_160
    assert cap.weights_bytes == base.weights_bytes + 849_628_160
    # profile peak: the rejection sampler's warm-up, 1024 rows x 128,256 x (3 x 2 + 20) B = 3,414,687,744 + the forward's
    # output held 8192 x 4096 x 2 = 67,108,864 + the Triton top-k buffer 132 SMs x 128,256 x 4 = 67,719,168 + cuBLAS
    # workspace 33,554,432; above the plain sampler's (b + 12) B and the drafter's dummy run (hidden states held
    # 4 x 8192 x 4096 x 2 = 268,435,456 + fc input 3 x 8192 x 4096 x 2 = 201,326,592 + its forward
    # 8192 x 2 x (2 x 4096 + 3 x 14,336) = 838,860,800 -> 1,308,622,848)
    assert cap.activation_bytes == 3_414_687_744 + 67_108_864 + 67_719_168 + 33_554_432 == 3_583_070_208
    assert base.activation_bytes == 2_007_060_480
    # one group of 32 target + 1 draft layers, page 2 x 16 x 8 x 128 x 2 = 65,536 B
    available = int(0.9 * H100) - cap.weights_bytes - cap.activation_bytes - cap.non_torch_bytes
    # int(0.9 x 85,045,477,376) - weights - activation - non-torch = 55,702,726,246 // (65,536 x 33) = 25,756
    assert cap.figure("num_gpu_blocks") == available // (65_536 * 33) == 25_756
    assert cap.kv_tokens == 25_756 * 16
    assert cap.draft_kv_cache_bytes == 25_756 * 65_536
    assert cap.kv_cache_bytes == 25_756 * 65_536 * 33
    assert cap.to_dict()["speculative"] == {"setup": "eagle3, 3 tokens, draft llama",
                                            "draft_weights_bytes": 849_628_160, "draft_kv_cache_bytes": 1_687_945_216}


def test_vllm_draft_model_pages_of_two_sizes_and_ngram():
    cap = capacity("llama-3.1-8b", "vllm", gpu="H100-SXM-80GB",
                   speculative_config='{"model": "llama-3.2-1b", "num_speculative_tokens": 3}')
    assert cap.speculative == "draft_model, 3 tokens, draft meta-llama/Llama-3.2-1B"
    # Llama 3.2 1B's 16 layers of 8 kv heads x 64: page 32,768 B beside the target's 65,536 (UniformTypeKVCacheSpecs)
    available = int(0.9 * H100) - cap.weights_bytes - cap.activation_bytes - cap.non_torch_bytes
    assert cap.figure("num_gpu_blocks") == available // (32 * 65_536 + 16 * 32_768)
    # ngram: no weights, no layers; the rejection sampler's warm-up alone (3,583,070,208 B, as above) costs blocks
    ngram = capacity("llama-3.1-8b", "vllm", gpu="H100-SXM-80GB",
                     speculative_config={"method": "ngram", "num_speculative_tokens": 3})
    plain = capacity("llama-3.1-8b", "vllm", gpu="H100-SXM-80GB")
    assert ngram.weights_bytes == plain.weights_bytes and ngram.activation_bytes == 3_583_070_208
    available = int(0.9 * H100) - ngram.weights_bytes - 3_583_070_208 - ngram.non_torch_bytes
    assert ngram.figure("num_gpu_blocks") == available // (65_536 * 32) == 26_966  # 27,717 without a draft


def test_vllm_mtp_uses_the_targets_own_layer():
    from vramlens.serving.api import resolve_model

    m = resolve_model("deepseek-v3", engine="vllm", quant="fp8")
    assert m.mtp_layers == 1
    cap = capacity(m, "vllm", gpu="H200-141GB", tp=8, speculative_config={"method": "mtp", "num_speculative_tokens": 1})
    # one MTP layer: the target's average block / 8 + eh_proj 2 x 7168 x 7168 x 2 = 205,520,896 (nn.Linear, not split)
    # + enorm, hnorm, shared_head.norm 3 x 7168 x 2 = 43,008; embedding and lm_head shared
    block = -(-sum(m.layer_bytes) // m.n_layers)
    assert cap.draft_weights_bytes == -(-block // 8) + 205_520_896 + 43_008
    # its attention layer (MLA: one latent of 512 + 64 values, 2 B) joins the 61 target layers in one group
    available = int(0.9 * cap.gpu_bytes) - cap.weights_bytes - cap.activation_bytes - cap.non_torch_bytes
    assert cap.figure("num_gpu_blocks") == available // (16 * 576 * 2 * 62)


@pytest.mark.parametrize(("config", "message"), [
    ({"method": "eagle", "num_speculative_tokens": 3}, "num_speculative_tokens was provided but without speculative model."),
    ({"method": "ngram", "num_speculative_tokens": 0}, "Expected num_speculative_tokens to be greater than zero (0)."),
    ({"method": "ngram"}, "num_speculative_tokens must be provided with speculative model unless the draft model "
                          "config contains an n_predict parameter."),
    ({"method": "ngram", "model": "llama-3.2-1b", "num_speculative_tokens": 2},
     "ngram proposes tokens from the prompt and loads no draft model: drop the speculative config's model"),
    ({"method": "mtp", "num_speculative_tokens": 1}, "meta-llama/Llama-3.1-8B has no multi-token-prediction layers "
                                                     "(config.json num_nextn_predict_layers): use eagle, eagle3, "
                                                     "draft_model or ngram"),
    ({"method": "eagle", "model": EAGLE, "num_speculative_tokens": 3, "draft_tensor_parallel_size": 1},
     "speculative_config key(s) 'draft_tensor_parallel_size' not read by vramlens: give only method, model, "
     "num_speculative_tokens"),
])
def test_vllm_refusals(config, message):
    with pytest.raises(InputError) as e:
        capacity("llama-3.1-8b", "vllm", gpu="H100-SXM-80GB", speculative_config=config)
    assert str(e.value) == message


def test_sglang_eagle_pool_headroom_and_draft_worker():
    cap = capacity("llama-3.1-8b", "sglang", gpu="H100-SXM-80GB", speculative_algorithm="EAGLE",
                   speculative_draft_model_path=EAGLE)
    # 0.5.3 reserve: 512 + 1.5 x 8,192 + 2 x 256 + 1,024 / 8 = 13,440 MiB, + 2,048 for EAGLE = 15,488;
    # round((81,559 - 15,488) / 81,559, 3) = 0.81 (0.835 without a draft)
    assert cap.figure("mem_fraction_static") == 0.81 == default_mem_fraction((0, 5, 3), 81_559, 1, speculative="EAGLE")
    # auto_choose_speculative_params for LlamaForCausalLM: 5 steps, topk 4, 8 draft tokens; max_running_requests 48
    assert [cap.figure(k) for k in ("speculative_num_steps", "speculative_eagle_topk",
                                    "speculative_num_draft_tokens", "max_running_requests")] == [5, 4, 8, 48]
    # total_gpu_memory = CUDA's 85,045,477,376 - the 419,430,400 B context = 84,626,046,976;
    # profiled (int(0.81 x 84,626,046,976) - load 16,129,197,056) // 131,072 = 399,916, + draft_runner_cache_size's
    # 48 x (5 x 4 + 8) + 100 = 1,444 -> 401,360
    profiled = (int(0.81 * 84_626_046_976) - 16_129_197_056) // 131_072
    assert profiled == 399_916
    assert cap.figure("max_total_num_tokens") == cap.kv_tokens == profiled + 48 * (5 * 4 + 8) + 100 == 401_360
    # draft worker: weights = block 436,225,024 + fc 2 x 4096 x 4096 x 2 = 67,108,864 + norm 8,192 (embedding and
    # lm_head shared); its pool 401,360 tokens x 1 layer x 8 x 128 x 2 x 2 B
    assert cap.draft_weights_bytes == BLOCK + 67_108_864 + 8_192 == 503_342_080
    assert cap.draft_kv_cache_bytes == 401_360 * 4_096 == 1_643_970_560
    assert cap.kv_cache_bytes == 401_360 * 131_072 + 1_643_970_560
    assert cap.figure("draft_kv_size") == round(1_643_970_560 / 2**30, 2)


def test_sglang_defaults_by_algorithm():
    # NGRAM: no reserve in 0.5.3, no headroom; topk = 10 (ngram_max_bfs_breadth), 12 draft tokens (max match window)
    ngram = capacity("llama-3.1-8b", "sglang", gpu="H100-SXM-80GB", speculative_algorithm="NGRAM")
    plain = capacity("llama-3.1-8b", "sglang", gpu="H100-SXM-80GB")
    assert ngram.figure("max_total_num_tokens") == plain.figure("max_total_num_tokens")
    assert [ngram.figure(k) for k in ("mem_fraction_static", "speculative_eagle_topk", "speculative_num_draft_tokens",
                                      "max_running_requests")] == [0.835, 10, 12, 48]
    # STANDALONE: 6 GiB more reserve (0.5.2, 0.5.3); (3, 1, 4); the 0.4.10-0.5.2 reserve adds 2 GiB for EAGLE
    assert default_mem_fraction((0, 5, 3), 81_559, 1, speculative="STANDALONE") == round((81_559 - 19_584) / 81_559, 3)
    assert default_mem_fraction((0, 4, 10), 81_559, 1, speculative="EAGLE") == round(
        (81_559 - (9.5 + 0.5) * 1024 - 2048) / 81_559, 3)
    # topk 1: num_draft_tokens becomes steps + 1
    cap = capacity("llama-3.1-8b", "sglang", gpu="H100-SXM-80GB", speculative_algorithm="EAGLE",
                   speculative_draft_model_path=EAGLE, speculative_num_steps=3, speculative_eagle_topk=1,
                   speculative_num_draft_tokens=8)
    assert cap.figure("speculative_num_draft_tokens") == 4


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"speculative_algorithm": "EAGLE"}, "eagle needs the draft's config: pass --speculative-draft-model-path "
                                          "(a catalog name or a config.json path)"),
    ({"speculative_algorithm": "NGRAM", "speculative_draft_model_path": "llama-3.2-1b"},
     "ngram proposes tokens from the prompt and loads no draft model: drop --speculative-draft-model-path"),
    ({"speculative_algorithm": "MEDUSA"}, "speculative_algorithm='MEDUSA' is not one of EAGLE, EAGLE3, NEXTN, NGRAM, "
                                          "STANDALONE (SGLang --speculative-algorithm)"),
    ({"speculative_algorithm": "NEXTN"}, "meta-llama/Llama-3.1-8B has no multi-token-prediction layers (config.json "
                                         "num_nextn_predict_layers): use eagle, eagle3, draft_model or ngram"),
    ({"speculative_algorithm": "EAGLE", "speculative_draft_model_path": EAGLE, "page_size": 16},
     "speculative_eagle_topk(4) > 1 with page_size(16) > 1 is unstable and produces incorrect results for paged "
     "attention backends. This combination is only supported for the 'flashinfer' backend."),
    ({"speculative_algorithm": "STANDALONE", "speculative_draft_model_path": "llama-3.2-1b", "version": "0.4.10"},
     "--speculative-algorithm STANDALONE is not in SGLang 0.4.10: vramlens follows it from 0.5.2 (the releases "
     "read: 0.4.10, 0.5.2, 0.5.3)"),
])
def test_sglang_refusals(kwargs, message):
    with pytest.raises(ConfigError) as e:
        capacity("llama-3.1-8b", "sglang", gpu="H100-SXM-80GB", **kwargs)
    assert str(e.value) == message


def test_cli_flags(capsys, tmp_path):
    draft = tmp_path / "config.json"
    draft.write_text(json.dumps(EAGLE))
    assert main(["capacity", "llama-3.1-8b", "--engine", "sglang", "--gpu", "H100-SXM-80GB", "--speculative-algorithm",
                 "EAGLE", "--speculative-draft-model-path", str(draft), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["figures"]["max_total_num_tokens"]["value"] == 401_360
    assert out["speculative"]["draft_weights_bytes"] == 503_342_080
    assert main(["capacity", "llama-3.1-8b", "--gpu", "H100-SXM-80GB", "--speculative-config",
                 '{"method": "ngram", "num_speculative_tokens": 0}']) == 2
    assert capsys.readouterr().err == "error: Expected num_speculative_tokens to be greater than zero (0).\n"
    assert main(["capacity", "llama-3.1-8b", "--engine", "sglang", "--gpu", "H100-SXM-80GB", "--speculative-config",
                 '{"method": "ngram"}']) == 2
    assert capsys.readouterr().err == ("error: --speculative-config is a vllm flag, not one of sglang's\n")


def test_sglang_eagle_on_deepseek_drafts_with_its_mtp_layer():
    from vramlens.serving.api import resolve_model

    m = resolve_model("deepseek-v3", engine="sglang", quant="fp8")
    # EAGLE with no draft path on DeepseekV3ForCausalLM: the draft path defaults to the model (its MTP layer), and
    # auto_choose_speculative_params gives (3 steps, topk 1, 4 draft tokens)
    cap = capacity(m, "sglang", gpu="H200-141GB", tp=8, speculative_algorithm="EAGLE")
    assert [cap.figure(k) for k in ("speculative_num_steps", "speculative_eagle_topk",
                                    "speculative_num_draft_tokens")] == [3, 1, 4]
    assert cap.speculative == ("EAGLE, 3 steps, topk 1, 4 draft tokens, draft deepseek-ai/DeepSeek-V3 MTP layers")
    # the draft worker's pool: max_total_num_tokens x 1 MTP layer x (512 + 64) x 2 B
    assert cap.draft_kv_cache_bytes == cap.kv_tokens * 1_152
    assert cap.kv_tokens == capacity(m, "sglang", gpu="H200-141GB", tp=8, speculative_algorithm="NEXTN").kv_tokens
