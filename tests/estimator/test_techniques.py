"""Memory techniques of training stacks, checked against their arithmetic (the tracer checks them
against the real modules in tests/trace/test_techniques.py)."""

import pytest

from vramlens.errors import ConfigError
from vramlens.estimator import estimate
from vramlens.workload import make_workload

TRAIN = dict(mode="train", batch=1, seq=512, dtype="bf16")


def test_optimizer_in_backward_holds_one_gradient(llama7b):
    plain = estimate(llama7b, **TRAIN).breakdown
    e = estimate(llama7b, **TRAIN, optimizer_in_backward=True).breakdown
    # the largest parameter: the (untied) embedding or lm_head, 32,000 x 4,096 bf16 (a multiple of 512 B)
    assert e["gradients"] == 32_000 * 4_096 * 2
    assert e["optimizer_states"] == plain["optimizer_states"] and e["weights"] == plain["weights"]
    # foreach Adam on one parameter: sqrt(exp_avg_sq) of the largest, bf16 states
    assert e["temporaries"] >= 32_000 * 4_096 * 2
    phases = dict(e.phases)
    # nothing is allocated in the optimizer phase: weights and the two Adam states only
    assert phases["optimizer"] < dict(plain.phases)["optimizer"]
    assert e.peak_allocated <= plain.peak_allocated


def test_optimizer_in_backward_never_costs_more(llama7b):
    for kw in (dict(checkpointing="full"), dict(method="lora"), dict(dtype="fp32", amp="bf16"), dict(optimizer="sgd")):
        plain = estimate(llama7b, **{**TRAIN, **kw}).breakdown
        e = estimate(llama7b, **{**TRAIN, **kw}, optimizer_in_backward=True).breakdown
        assert e.peak_allocated <= plain.peak_allocated, kw


@pytest.mark.parametrize("kw, message", [
    (dict(grad_accum=4), "optimizer_in_backward steps each parameter as its gradient arrives, so gradients cannot "
                         "accumulate over grad_accum=4 micro-batches (torchtune refuses it too): drop --grad-accum "
                         "or --optimizer-in-backward"),
    (dict(optimizer="none"), "optimizer_in_backward needs an optimizer to step, and optimizer='none' runs none: "
                             "choose an --optimizer or drop --optimizer-in-backward"),
    (dict(zero=2, gpus=2), "optimizer_in_backward with zero, fsdp, offload or pp is not modelled: drop "
                           "--optimizer-in-backward, or estimate one GPU (data or tensor parallel)"),
])
def test_optimizer_in_backward_refusals(kw, message):
    with pytest.raises(ConfigError) as e:
        make_workload(mode="train", optimizer_in_backward=True, **kw)
    assert str(e.value) == message


def test_optimizer_in_backward_is_ignored_in_inference():
    w = make_workload(optimizer_in_backward=True)
    assert w.ignored() == ["ignored in inference (they apply to training): optimizer_in_backward=True"]


def test_chunked_loss_keeps_one_chunk_of_upcast(llama7b):
    plain = estimate(llama7b, **TRAIN).breakdown
    e = estimate(llama7b, **TRAIN, loss_chunks=8).breakdown
    # t = 512 tokens, V = 32,000: the fp32 upcast is 4*V*t = 65,536,000 B; 8 chunks of 64 tokens
    # keep 7/8 of it less at the loss' forward peak (each chunk a multiple of 512 B)
    fwd_plain, fwd = dict(plain.phases)["forward"], dict(e.phases)["forward"]
    assert fwd_plain - fwd == 4 * 32_000 * 512 - 4 * 32_000 * 64
    # log_softmax is kept for backward whole, as without chunks
    assert e["activations"] == plain["activations"]
    assert e.peak_allocated <= plain.peak_allocated


def test_liger_chunk_size():
    from vramlens.estimator.losses import liger_chunk_tokens

    # Liger's own example: BT = 4096*4, V = 32000, H = 4096 -> inc_factor 8, chunk 2048
    assert liger_chunk_tokens(4096 * 4, 4096, 32_000) == 2048
    assert liger_chunk_tokens(1000, 4096, 128_256) == 32  # cdiv(1000, 32) = 32, a power of two


def test_fused_linear_loss_never_materializes_logits(llama7b):
    plain = estimate(llama7b, **TRAIN, optimizer="sgd").breakdown  # SGD: no step temporary
    e = estimate(llama7b, **TRAIN, optimizer="sgd", loss="fused-linear").breakdown
    # the largest transient is now the final RMSNorm's backward: five fp32 h*t tensors and the bf16
    # gradient it receives, 5 * 4*4096*512 + 2*4096*512 (the loss' two fp32 b*s*V gradients are gone)
    assert e["temporaries"] == 5 * 4 * 4096 * 512 + 2 * 4096 * 512 < plain["temporaries"] == 2 * 4 * 32_000 * 512
    # grad_weight (V*h) exists from forward on, so at 512 tokens the forward is higher; at 8,192 the
    # logits (10 B x V per token at the loss) outweigh it
    assert dict(e.phases)["forward"] - dict(plain.phases)["forward"] > 0
    big = dict(TRAIN, batch=4, seq=2048, optimizer="sgd")
    assert estimate(llama7b, **big, loss="fused-linear").peak_allocated < estimate(llama7b, **big).peak_allocated
    # forward keeps grad_input (c*h*t) instead of the fp32 log_softmax (4*V*t) and the final norm's output
    assert plain["activations"] - e["activations"] == 4 * 32_000 * 512 + 2 * 4096 * 512 - 2 * 4096 * 512


@pytest.mark.parametrize("kw, message", [
    (dict(loss="fused-linear", loss_chunks=8), "loss=fused-linear chunks the tokens itself (Liger's chunk size); "
                                               "loss_chunks=8 applies to the cross-entropy loss: drop --loss-chunks"),
    (dict(loss_chunks=16, seq=8), "loss_chunks=16 is more than the seq=8 tokens it splits: use --loss-chunks 8"),
    (dict(loss="focal"), "loss='focal' is not one of: cross-entropy, fused-linear, logits-sum"),
])
def test_loss_refusals(kw, message):
    with pytest.raises(ConfigError) as e:
        make_workload(mode="train", **kw)
    assert str(e.value) == message


def test_loss_needs_a_causal_lm():
    with pytest.raises(ConfigError) as e:
        estimate("bert-base-uncased", mode="train", loss_chunks=8)
    assert str(e.value).startswith("loss=cross-entropy loss_chunks=8 apply to a causal LM's loss; ")


def test_activation_offload_moves_the_blocks_activations_to_the_host(llama7b):
    plain = estimate(llama7b, **TRAIN).breakdown
    e = estimate(llama7b, **TRAIN, activation_offload=True).breakdown
    moved = plain["activations"] - e["activations"]
    # what leaves the GPU: every block's saved tensors and the rotary cos/sin (2 x bf16 128 x 512)
    assert moved == 32 * _layer_saved(llama7b) + 2 * 2 * 128 * 512
    # the host holds a pinned copy of each save: those, the final norm's (fp32 input 4*h*t and its bf16
    # normalized copy 2*h*t), and what ops save again (test_activation_offload_copies_each_save)
    assert e.host_bytes == moved + 4 * 4096 * 512 + 2 * 4096 * 512 + 14_042_497_024 + 8_392_704
    assert e.peak_allocated <= plain.peak_allocated


def test_activation_offload_copies_each_save(llama7b):
    """torchtune's pack hook copies every save of >= 1 KiB that is not an nn.Parameter: Llama 2 7B, bf16,
    1 x 512 tokens (h 4,096, f 11,008, 32 heads of 128, 32 blocks), what it copies beyond each storage once."""
    from vramlens.estimator.activations import offload_recopies

    h, f, t = 4096, 11008, 512
    weights = 4 * 2 * h * h + 3 * 2 * h * f      # q, k, v, o and gate, up, down save weight.t(): 404,750,336
    shared = (2 + 1) * 2 * t * h                 # k, v (after q) and up (after gate) view the same input
    attn_out = 2 * 32 * 128 * t - 1024           # o_proj views the kernel's output again; the philox seeds stay
    norms = 2 * (4 * t * h + 2 * 4 * t)          # each RMSNorm: its fp32 input and its rsqrt (t x 1) saved twice
    rotary = 4 * 2 * 128 * t                     # q*cos, k*cos, and the two *sin: 524,288
    block = weights + shared + attn_out + norms + rotary  # 438,836,224
    # the model's cos and sin (2 x 2*128*t) are counted once already; the final norm is an RMSNorm too
    assert offload_recopies(llama7b, make_workload(**TRAIN, activation_offload=True), 1, 512) == (
        32 * block - 2 * 2 * 128 * t, 4 * t * h + 2 * 4 * t)
    assert 32 * block - 2 * 2 * 128 * t == 14_042_497_024
    # a tensor under 1,024 bytes stays on the GPU: 1 x 64 tokens' rsqrt is 256 bytes
    _, final = offload_recopies(llama7b, make_workload(**{**TRAIN, "seq": 64}, activation_offload=True), 1, 64)
    assert final == 4 * 64 * h


def _layer_saved(spec):
    from vramlens.estimator.activations import layer_activations

    return layer_activations(spec, make_workload(**TRAIN), 1, 512).saved


def test_unknown_lora_target_is_an_error_listing_the_real_names(llama7b):
    with pytest.raises(ConfigError) as e:
        estimate(llama7b, mode="train", method="lora", lora_targets="foo_bar,q_proj")
    assert str(e.value) == (f"lora_targets: foo_bar matches no linear layer of {llama7b.name}: choose from "
                            "down_proj, gate_proj, k_proj, o_proj, q_proj, up_proj, v_proj or all-linear")


def test_nvls_buffers_scale_with_one_nvlink_domain():
    from vramlens.hardware.catalog import get_gpu
    from vramlens.hardware.runtime import nccl_communicator_bytes

    h100 = get_gpu("H100-SXM-80GB")
    rings = 16 * 2 * (4_194_304 + 524_288 + 4_915_200)  # channels x connections x (Simple + LL + LL128)
    # 128 ranks over 16 servers: each rank binds the NVLS buffers of its server's 8 ranks, not 128
    assert nccl_communicator_bytes(h100, 128) == rings + 301_989_888 * 8
    assert nccl_communicator_bytes(h100, 4) == rings + 301_989_888 * 4
    assert nccl_communicator_bytes(h100, 72, nvlink_domain=72) == rings + 301_989_888 * 72


def test_loss_parallel_shards_the_logits_and_the_loss(llama7b):
    kw = dict(TRAIN, gpus=8, tp=8, optimizer="sgd")  # SGD: no step temporary
    plain = estimate(llama7b, **kw).breakdown
    e = estimate(llama7b, **kw, loss_parallel=True).breakdown
    # log_softmax of 512 tokens over 32,000 / 8 = 4,000 vocabulary entries per rank, fp32
    V, t = 32_000, 512
    assert plain["activations"] - e["activations"] == 4 * V * t - 4 * (V // 8) * t
    # the loss' backward: one fp32 shard (loss_parallel) instead of two full fp32 gradients
    assert e["temporaries"] < plain["temporaries"]


def test_loss_parallel_needs_tp():
    with pytest.raises(ConfigError) as e:
        make_workload(mode="train", loss_parallel=True)
    assert str(e.value) == ("loss_parallel shards the logits over the tensor-parallel ranks, and tp=1 has none: "
                            "set --tp (e.g. --tp 8) or drop --loss-parallel")


def test_gqa_expansion_when_decoding_at_long_context():
    kw = dict(seq=16, new_tokens=131_056, dtype="bf16")  # S = 131,072 keys at the last step
    eager = estimate("llama-3-8b", attention="eager", **kw).breakdown
    sdpa = estimate("llama-3-8b", attention="sdpa", **kw).breakdown
    # repeat_kv copies the 8 KV heads' keys and values to all 32 heads: 2 x 32 x 131,072 x 128 x 2 B = 2 GiB
    assert eager["activations"] >= 2 * 32 * 131_072 * 128 * 2 > 10 * sdpa["activations"]


def test_gqa_expand_saves_full_head_keys_and_values():
    """torchtune's MultiHeadAttention copies GQA keys and values to every head before SDPA, which keeps
    the copies: per block 2 x c*(a - kv)*d*t more than the kv-head tensors transformers' SDPA keeps."""
    from vramlens.models import load_model

    spec = load_model("llama-3.2-3b")  # 24 query heads, 8 kv heads, head_dim 128
    plain = estimate(spec, **TRAIN)
    expanded = estimate(spec, **TRAIN, gqa_expand=True)
    # b*s = 512 tokens, bf16: 2 x 2 B x (24 - 8) heads x 128 x 512 = 4,194,304 B per block
    assert expanded.layer_activation_bytes - plain.layer_activation_bytes == 2 * 2 * (24 - 8) * 128 * 512
    # multi-head attention has nothing to expand; under torch.compile the partitioner recomputes the copies
    mha = load_model("llama-2-7b")
    assert (estimate(mha, **TRAIN, gqa_expand=True).layer_activation_bytes
            == estimate(mha, **TRAIN).layer_activation_bytes)
    compiled = dict(TRAIN, compile=True)
    assert (estimate(spec, **compiled, gqa_expand=True).breakdown.peak_allocated
            == estimate(spec, **compiled).breakdown.peak_allocated)


def test_gqa_expand_copies_the_cache_at_each_decode_step():
    """In inference the copies are a transient of each attention call over all S keys: 2 x c*a*d*b*S, so each
    further key adds 2 x 2 B x 24 heads x 128 to a decode step's block peak (and nothing without the expansion)."""
    from vramlens.estimator.activations import inference_layer_peak
    from vramlens.models import load_model

    spec = load_model("llama-3.2-3b")
    plain, expanded = (make_workload(mode="inference", dtype="bf16", seq=16, new_tokens=4096, gqa_expand=g)
                       for g in (False, True))

    def extra(S: int) -> int:
        return inference_layer_peak(spec, expanded, 1, 1, S) - inference_layer_peak(spec, plain, 1, 1, S)

    assert extra(4112) - extra(2064) == 2 * 2 * 24 * 128 * (4112 - 2064)  # 25,165,824 B


# LitGPT's LoRA fine-tuning of a Llama-2-7B block (config_hub/finetune/llama-2-7b/lora.yaml at 5895df10): r=32 on
# q and v, dropout 0.05, adapters in bf16, 2 x 512 tokens
_LITGPT_QV = dict(mode="train", dtype="bf16", batch=2, seq=512, method="lora", lora_rank=32, lora_dropout=0.05,
                  lora_dtype="bf16", lora_targets=("q_proj", "v_proj"))


def test_fused_qkv_keeps_litgpts_attention_and_adapter_tensors():
    """LitGPT's CausalSelfAttention and LoRAQKVLinear (Workload.fused_qkv) against peft on separate q/k/v
    projections, per Llama-2-7B block (t = 1,024 tokens, h = 4,096, bf16). A fake-tensor trace of LitGPT's own
    GPT at 5895df10 keeps 172.8 MiB per block with CUDA's 1-byte masks: the fused estimate is 172.75 MiB."""
    from vramlens.models import load_model

    spec = load_model("llama-2-7b")
    plain = estimate(spec, **_LITGPT_QV).layer_activation_bytes
    fused = estimate(spec, **_LITGPT_QV, fused_qkv=True).layer_activation_bytes
    t, h = 1024, 4096
    # SDPA's value is a view of the fused output (multi-head): 2 B x 3h x t kept instead of 2 B x h x t
    value = 2 * (3 * h - h) * t  # 16,777,216
    # one dropout for q and v (its bf16 copy and bool mask: 3 B x h x t) instead of two, A's output 2 B x 2r x t
    # instead of two of 2 B x r x t, and zero_pad's index_copy source (q and v outputs, 2 B x 2h x t) and its int64
    # index (8 B x 2h)
    adapter = -3 * h * t + 2 * 2 * h * t + 8 * 2 * h  # -12,582,912 + 16,777,216 + 65,536
    assert fused - plain == value + adapter == 21_037_056
    assert fused == 181_208_064  # 172.8 MiB and SDPA's two 512-byte rng blocks


def test_fused_qkv_single_kv_head_and_gqa():
    """One kv head (Falcon-7B: 71 heads of 64): the keys are rotated after the expand, so SDPA keeps them at
    every head, and the value's view keeps the fused output (73 heads' worth). GQA (Llama-3-8B) already expands
    k and v with gqa_expand; there only the shared adapter differs."""
    from vramlens.models import load_model

    falcon = load_model("falcon-7b")
    kw = dict(_LITGPT_QV, batch=1, lora_targets=("query_key_value",))
    diff = (estimate(falcon, **kw, fused_qkv=True).layer_activation_bytes
            - estimate(falcon, **kw).layer_activation_bytes)
    t, d, r = 512, 64, 32
    # the fused linear's own name is LitGPT's q, k and v all adapted: A has 3r rows (A's output 2 B x 3r x t
    # instead of peft's 2 B x r x t) and zero_pad returns B's output as it is
    assert diff == 2 * (71 - 1) * d * t + 2 * (73 - 1) * d * t + 2 * 2 * r * t == 9_371_648
    llama3 = load_model("llama-3-8b")
    kw = dict(_LITGPT_QV, batch=1, gqa_expand=True)
    diff = (estimate(llama3, **kw, fused_qkv=True).layer_activation_bytes
            - estimate(llama3, **kw).layer_activation_bytes)
    # q (4,096 out) and v (1,024 out) share one dropout (-3 B x 4,096 x 512) and keep zero_pad's source
    # (2 B x 5,120 x 512) and its int64 index (8 B x 5,120); A's outputs are the same bytes (512-byte rounding
    # aside: 2 x 32,768 vs 65,536)
    assert diff == -3 * 4096 * 512 + 2 * 5120 * 512 + 8 * 5120 == -1_007_616


def test_fused_qkv_slices_of_a_fused_linear():
    """q_proj/k_proj/v_proj name the parts of GPT-NeoX's fused query_key_value under --fused-qkv (LitGPT's
    lora_query/lora_key/lora_value): StableLM-3B (32 heads of 128, h = 4,096), r = 8, 1 x 1,034 tokens. Fake-tensor
    traces of Lit-GPT 8641822's own GPT (lit_gpt/lora.py; one block's kept bytes, n_layer 3 minus n_layer 2, CPU)
    keep 110,309,376 (q, k, v), 127,299,584 (q, v) and 118,779,904 (q) bytes: the differences are the estimate's."""
    from vramlens.estimator.inventory import lora_shape
    from vramlens.models import load_model

    spec = load_model("stablelm-base-alpha-3b")
    kw = dict(mode="train", dtype="bf16", batch=1, seq=1034, method="lora", lora_rank=8, lora_dropout=0.05,
              lora_dtype="bf16", fused_qkv=True)
    qkv, qv, q = (estimate(spec, **kw, lora_targets=tg).layer_activation_bytes
                  for tg in (("query_key_value",), ("q_proj", "v_proj"), ("q_proj",)))
    t, h, r = 1034, 4096, 8
    # q and v: A's output 2 B x 2r x t (33,280 rounded) for 3r (49,664), zero_pad's index_copy source 2 B x 2h x t
    # and its int64 index 8 B x 2h
    assert qv - qkv == 33_280 - 49_664 + 2 * 2 * h * t + 8 * 2 * h == 16_990_208 == 127_299_584 - 110_309_376
    # q alone: A's output 2 B x r x t (16,896 rounded), the source 2 B x h x t and the index 8 B x h
    assert q - qkv == 16_896 - 49_664 + 2 * h * t + 8 * h == 8_470_528 == 118_779_904 - 110_309_376
    # LoRAQKVLinear's lora_A is (r x parts, h) and lora_B (the parts' widths, r), one pair a block
    assert lora_shape(spec, ("q_proj", "v_proj"), True).params(r) == 16 * (2 * r * h + 2 * h * r) == 2_097_152
    assert lora_shape(spec, ("query_key_value",), True).params(r) == 16 * (3 * r * h + 3 * h * r)
    assert lora_shape(spec, ("query_key_value",)).params(r) == 16 * (r * h + 3 * h * r)  # peft: one (r, h) A
    # Falcon-7B's one kv head (32 blocks, h = 4,544, kv 64), r = 32: A (2r, h), B (h + 64, r)
    falcon = load_model("falcon-7b")
    assert lora_shape(falcon, ("q_proj", "v_proj"), True).params(32) == 32 * (2 * 32 * 4544 + (4544 + 64) * 32)
    assert lora_shape(falcon, ("q_proj", "v_proj"), True).count == 32
    # the slices need LitGPT's fused attention: on transformers' GPT-NeoX they match nothing
    with pytest.raises(ConfigError, match="match no linear layer of .*or all-linear \\(q_proj, k_proj and v_proj name "
                                          "the parts of its fused q/k/v linear under --fused-qkv"):
        estimate(spec, **{**kw, "fused_qkv": False}, lora_targets=("q_proj", "v_proj"))
    with pytest.raises(ConfigError, match="k_proj matches no linear layer"):
        estimate(spec, **{**kw, "fused_qkv": False}, lora_targets=("query_key_value", "k_proj"))


def test_fused_qkv_refuses_dora_and_is_ignored_under_compile():
    with pytest.raises(ConfigError) as e:
        make_workload(**_LITGPT_QV, fused_qkv=True, dora=True)
    assert str(e.value) == "fused_qkv is LitGPT's attention, whose LoRAQKVLinear has no DoRA: drop --dora or --fused-qkv"
    assert make_workload(**_LITGPT_QV, fused_qkv=True, compile=True).ignored() == [
        "ignored: fused_qkv=True (LitGPT's attention runs SDPA, eager; under compile or eager attention "
        "transformers' attention is estimated)"]
