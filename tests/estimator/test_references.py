"""The estimator against published formulas and figures (independent references, literals)."""

from _specs import flat_spec, llama_config

from vramlens.estimator import estimate
from vramlens.estimator.activations import korthikanti_layer_bytes, layer_activations
from vramlens.estimator.kv_cache import kv_bytes_per_token, kv_cache_bytes
from vramlens.models import load_model
from vramlens.models.spec import ModelSpec, TensorInfo
from vramlens.workload import make_workload

GB = 10**9


def model_states(est) -> int:
    c = est.breakdown.as_dict()
    return c["weights"] + c["gradients"] + c["master_weights"] + c["optimizer_states"]


def test_zero_paper_table1_7_5b_on_64_gpus():
    # Rajbhandari et al. 2020, Table 1 (Psi = 7.5B, N_d = 64, K = 12):
    # baseline (2+2+K)Psi = 120 GB; P_os 2Psi+2Psi+K*Psi/N = 31.4; P_os+g 2Psi+(2+K)Psi/N = 16.6; P_os+g+p 16Psi/N = 1.88
    spec = flat_spec(7_500_000_000)
    expected = {0: 120_000_000_000, 1: 31_406_250_000, 2: 16_640_625_000, 3: 1_875_000_000}
    for stage, want in expected.items():
        est = estimate(spec, mode="train", dtype="fp16", amp="fp16", optimizer="adam", gpus=64, zero=stage)
        got = model_states(est)
        # every tensor is rounded to 512 B by the allocator model: at most 75 * 512 B per state
        assert abs(got - want) <= 75 * 512 * 4, (stage, got, want)


def test_korthikanti_formula_gpt3_175b():
    # Korthikanti et al. 2022, Eq. (1): sbh(34 + 5as/h) with s=2048, b=1, h=12288, a=96
    assert korthikanti_layer_bytes(2048, 1, 12288, 96) == 2_868_903_936
    # Eq. (2)-(4): tensor parallel t=8 with sequence parallelism and selective recomputation: 34sbh/t
    assert korthikanti_layer_bytes(2048, 1, 12288, 96, t=8, sequence_parallel=True, selective=True) == 34 * 2048 * 12288 // 8


def test_gpt_style_layer_matches_korthikanti():
    # A GPT-2 block (LayerNorm, F.gelu, dropout 0.1, eager attention, fp16) with GPT-3 175B dims saves
    # what the paper counts, plus LayerNorm's fp32 mean/rstd (2 x 4 B per token) that the paper ignores.
    cfg = dict(architectures=["GPT2LMHeadModel"], model_type="gpt2", n_embd=12288, n_head=96, n_layer=2,
               n_positions=2048, vocab_size=50257, activation_function="gelu", attn_pdrop=0.1, resid_pdrop=0.1,
               embd_pdrop=0.1)
    spec = load_model(cfg)
    w = make_workload(mode="train", dtype="fp16", attention="eager", seq=2048)
    got = layer_activations(spec, w, 1, 2048).saved
    paper = korthikanti_layer_bytes(2048, 1, 12288, 96)
    assert abs(got - paper) / paper < 0.001, (got, paper)


def test_kv_cache_llama_13b_800_kib_per_token():
    spec = load_model(llama_config(hidden_size=5120, intermediate_size=13824, num_hidden_layers=40,
                                   num_attention_heads=40, num_key_value_heads=40))
    w = make_workload(dtype="fp16")
    assert kv_bytes_per_token(spec, w) == 800 * 1024
    # vLLM blog: 2 * 40 * 5120 * 2 B * 2048 tokens = 1,677,721,600 B per sequence
    assert kv_cache_bytes(spec, w, 2048, 1) == 1_677_721_600


def test_kv_cache_gqa_and_mqa_shrink_by_head_ratio():
    mha = load_model(llama_config())
    gqa = load_model(llama_config(num_key_value_heads=8))
    w = make_workload(dtype="bf16")
    assert kv_bytes_per_token(mha, w) == 4 * kv_bytes_per_token(gqa, w)
    assert kv_bytes_per_token(gqa, make_workload(dtype="bf16", kv_dtype="fp8")) * 2 == kv_bytes_per_token(gqa, w)


def test_kv_cache_paged_blocks_round_up_per_sequence():
    spec = load_model(llama_config(num_key_value_heads=8))
    plain = make_workload(dtype="bf16")
    paged = make_workload(dtype="bf16", kv_block=16)
    per_token = kv_bytes_per_token(spec, plain)
    assert kv_cache_bytes(spec, paged, 17, 3) == per_token * 32 * 3  # 17 tokens take two 16-token blocks


def test_torchtune_lora_linear_exact():
    # torchtune docs: LoRALinear(512, 512, rank=8) in fp32 -> torch.cuda.memory_allocated() == 1,081,344 B
    spec = ModelSpec(
        name="one-linear", model_type="llama", architecture="LlamaModel", kind="decoder", hidden_size=512,
        n_heads=8, n_kv_heads=8, head_dim=64, ffn_size=512, vocab_size=1, n_decoder_layers=1,
        tensors=(TensorInfo("layers.0.q_proj.weight", (512, 512), "linear", "q_proj", 0),),
    )
    est = estimate(spec, mode="inference", method="lora", dtype="fp32", lora_rank=8, lora_targets="q_proj")
    assert est.breakdown["weights"] == 1_081_344


def test_host_ram_loading_13b_default_way_exceeds_64_gb():
    # the brief's case: a 13B model loaded the default way gets a 64 GB machine OOM-killed:
    # fp32 random init (4 B/param) + the fp16 state dict (2 B/param) = 6 B/param = 78 GB
    from vramlens.estimator.loading import host_load

    spec = load_model("llama-2-13b")
    hl = host_load(spec, "fp16")
    assert hl.eager_bytes == spec.params * 6 > 64 * 10**9
    assert hl.low_cpu_mem_usage_bytes == spec.params * 2 + 5 * 10**9 < 64 * 10**9
    assert hl.device_map_bytes == 5 * 10**9


def test_fsdp_strategies_shard_like_zero_stages():
    spec = load_model("llama-2-7b")
    kw = dict(mode="train", gpus=16, dtype="bf16", amp="bf16", optimizer="adamw")

    def states(**more):
        b = estimate(spec, **{**kw, **more}).breakdown
        return b["weights"], b["gradients"], b["optimizer_states"] + b["master_weights"]

    full, sgo, hybrid = (states(fsdp=True, fsdp_strategy=s) for s in ("full", "shard-grad-op", "hybrid"))
    # FSDP2 keeps all three sharded at rest under every strategy (shard-grad-op differs in what
    # stays gathered between forward and backward, not in the sharded state)
    assert full == states(zero=3) and sgo == full
    # hybrid: full sharding over one node's 8 GPUs, replicated across the 2 nodes
    assert hybrid == states(zero=3, gpus=8)
