"""bitsandbytes' and torchao's low-bit optimizer states, tensor by tensor, as exact integers.

The spec's tensors straddle every rule: the 4,096-element threshold (both libraries), a size that is
not a whole number of 256-element blocks (torchao keeps it unquantized, bitsandbytes rounds its
block count up), one that is a whole number of 128-element blocks only (torchao's 4-bit quantizes
it, 8-bit and FP8 do not). Each figure is rounded per tensor to the allocator's 512-byte blocks.
"""

import pytest

from vramlens.errors import ConfigError
from vramlens.estimator import estimate
from vramlens.models.spec import ModelSpec, TensorInfo
from vramlens.units import pow2_ceil
from vramlens.workload import Workload, make_workload

#: (shape, role): 1,048,576 | 4,100 (not a multiple of 128) | 1,000 (< 4,096) | 6,144 = 24 x 256 |
#: 4,096 (the threshold itself) | 4,480 = 35 x 128 (17.5 blocks of 256)
SHAPES = (((1024, 1024), "linear"), ((4100,), "norm"), ((1000,), "norm"), ((64, 96), "linear"), ((4096,), "norm"),
          ((35, 128), "linear"))


def spec() -> ModelSpec:
    tensors = tuple(TensorInfo(f"layers.0.t{i}.weight", shape, role, f"t{i}", 0) for i, (shape, role) in enumerate(SHAPES))
    return ModelSpec(
        name="lowbit", model_type="llama", architecture="LlamaModel", kind="decoder", hidden_size=1024,
        n_heads=8, n_kv_heads=8, head_dim=128, ffn_size=4096, vocab_size=32000, n_decoder_layers=1,
        norm="rmsnorm", position="rotary", gated_mlp=True, tensors=tensors,
    )


def states(optimizer: str, **kw) -> int:
    return estimate(spec(), mode="train", dtype=kw.pop("dtype", "bf16"), optimizer=optimizer, **kw
                    ).breakdown.as_dict()["optimizer_states"]


def step_temporary(optimizer: str) -> int:
    from vramlens.estimator.optimizer import optimizer_step_temporary

    w = Workload(mode="train", dtype="bf16", optimizer=optimizer)
    return optimizer_step_temporary(spec(), w, 1)[0]


def test_bitsandbytes_8bit_per_tensor():
    # >= 4,096 elements: uint8 state + fp32 absmax per 256 (ceil), x2 states; below: 2 fp32 states
    assert states("adamw-8bit") == (
        2 * (1_048_576 + 16_384)      # 4,096 blocks x 4 B
        + 2 * (4_608 + 512)           # 4,100 B -> 4,608; 17 blocks x 4 B -> 512
        + 2 * 4_096                   # 1,000 x 4 B fp32 -> 4,096
        + 2 * (6_144 + 512)           # 24 blocks
        + 2 * (4_096 + 512)           # exactly 4,096: 8-bit
        + 2 * (4_608 + 512)           # 4,480 B -> 4,608; 18 blocks
        + 2 * 1_024)                  # the signed and unsigned 256-entry fp32 maps, once per optimizer
    assert states("paged-adamw-8bit") == states("adamw-8bit")


def test_bitsandbytes_small_states_stay_fp32_whatever_the_dtype():
    assert states("adamw-8bit", dtype="fp32") == states("adamw-8bit", dtype="bf16")


def test_torchao_8bit_per_tensor():
    # quantized when >= 4,096 and a whole number of 256-blocks: codes + fp32 scale + 256-entry fp32 qmap (1 KiB),
    # else torch.zeros_like(p): the parameter's dtype (bf16 here)
    assert states("adamw-8bit-torchao") == (
        2 * (1_048_576 + 16_384 + 1_024)
        + 2 * 8_704                   # 4,100 x 2 B = 8,200 -> 8,704
        + 2 * 2_048                   # 1,000 x 2 B -> 2,048
        + 2 * (6_144 + 512 + 1_024)
        + 2 * (4_096 + 512 + 1_024)
        + 2 * 9_216)                  # 4,480 x 2 B = 8,960 -> 9,216 (17.5 blocks: unquantized)


def test_torchao_4bit_per_tensor():
    # two codes per byte, fp32 scale per 128, a 16-entry fp32 map (64 B -> 512) per state
    assert states("adamw-4bit-torchao") == (
        2 * (524_288 + 32_768 + 512)  # 8,192 scales x 4 B
        + 2 * 8_704
        + 2 * 2_048
        + 2 * (3_072 + 512 + 512)     # 48 scales
        + 2 * (2_048 + 512 + 512)
        + 2 * (2_560 + 512 + 512))    # 4,480 / 2 = 2,240 -> 2,560; 35 scales


def test_torchao_fp8_per_tensor():
    # float8_e4m3fn codes + fp32 scale per 256, no map
    assert states("adamw-fp8-torchao") == (
        2 * (1_048_576 + 16_384) + 2 * 8_704 + 2 * 2_048 + 2 * (6_144 + 512) + 2 * (4_096 + 512) + 2 * 9_216)


def test_torchao_unquantized_states_follow_the_parameter_dtype():
    # fp32 weights: the small and odd tensors' zeros_like states are fp32, twice the bf16 bytes
    fp32, bf16 = states("adamw-8bit-torchao", dtype="fp32"), states("adamw-8bit-torchao")
    assert fp32 - bf16 == 2 * ((16_896 - 8_704) + (4_096 - 2_048) + (17_920 - 9_216))


def test_step_temporaries():
    # bitsandbytes: one in-place kernel per tensor
    assert step_temporary("adamw-8bit") == 0
    # torchao: the largest quantized parameter's compiled step: 8-bit two fp32 moments (8 B/element)
    # + two fp32 block maxima; 4-bit also two int64 code tensors and two unpacked uint8 copies (26 B);
    # FP8 only the maxima
    assert step_temporary("adamw-8bit-torchao") == 8 * 1_048_576 + 2 * 16_384
    assert step_temporary("adamw-4bit-torchao") == 26 * 1_048_576 + 2 * 32_768
    assert step_temporary("adamw-fp8-torchao") == 2 * 16_384
    assert step_temporary("adamw-cpu-offload-torchao") == 0


def test_cpu_offload_keeps_small_parameters_on_the_gpu_and_the_rest_on_the_host():
    est = estimate(spec(), mode="train", dtype="bf16", optimizer="adamw-cpu-offload-torchao")
    # only the 1,000-element tensor is under minimal_size=4,096: its fused AdamW's 2 bf16 states
    assert est.breakdown.as_dict()["optimizer_states"] == 2 * 2_048
    big = [1_048_576, 4_100, 6_144, 4_096, 4_480]
    # pinned parameter copy + pinned gradient (powers of two) and the two AdamW states (exact bytes)
    assert est.breakdown.host_bytes == sum(2 * pow2_ceil(2 * n) + 2 * 2 * n for n in big)
    assert pow2_ceil(8_200) == 16_384 and pow2_ceil(2 * 1_048_576) == 2 * 1_048_576
    assert any("CPUOffloadOptimizer" in n for n in est.breakdown.notes)


def test_low_bit_states_order():
    assert states("adamw-4bit-torchao") < states("adamw-fp8-torchao") <= states("adamw-8bit-torchao") < states("adamw")


def test_lora_adapters_are_laid_out_per_matrix():
    from vramlens.models import load_model

    llama = load_model("llama-2-7b")

    def opt(o: str, r: int) -> int:
        return estimate(llama, mode="train", method="lora", optimizer=o, lora_rank=r).breakdown.as_dict()["optimizer_states"]

    # q_proj and v_proj of 32 layers: A (r, 4096) and B (4096, r), 64 of each, fp32 adapters
    # r=8: 32,768 elements each (a multiple of 256): 8-bit codes + 128 scales + qmap per state
    assert opt("adamw-8bit-torchao", 8) == 128 * 2 * (32_768 + 512 + 1_024)
    # bitsandbytes: the same codes and absmax, the two maps once
    assert opt("adamw-8bit", 8) == 128 * 2 * (32_768 + 512) + 2_048
    # r=1: 4,096-element matrices sit exactly on both thresholds and are quantized
    assert opt("adamw-4bit-torchao", 1) == 128 * 2 * (2_048 + 512 + 512)


def test_cpu_offload_refuses_sharding_and_the_optimizer_in_backward():
    with pytest.raises(ConfigError) as e:
        make_workload(mode="train", optimizer="adamw-cpu-offload-torchao", gpus=2, zero=2, optimizer_in_backward=True)
    msg = str(e.value)
    assert ("optimizer=adamw-cpu-offload-torchao offloads one GPU's whole optimizer (torchao's CPUOffloadOptimizer, "
            "single-GPU); with zero, fsdp or offload use their own CPU offload: --optimizer adamw --offload optimizer") in msg
    assert ("optimizer=adamw-cpu-offload-torchao already steps each parameter from its own gradient hook; drop "
            "--optimizer-in-backward") in msg


def test_optimizer_impl_is_named_as_ignored_for_torchao():
    w = make_workload(mode="train", optimizer="adamw-4bit-torchao", optimizer_impl="fused")
    assert ("ignored: optimizer_impl='fused' (torchao's optimizers step one parameter at a time with their own "
            "kernels)") in w.ignored()


GPU_RESULTS = __import__("pathlib").Path(__file__).resolve().parents[2] / "validation" / "lowbit-gpu.json"


@pytest.mark.skipif(not GPU_RESULTS.exists(), reason="no GPU measurement yet: run scripts/gpu_lowbit_validate.py "
                                                     "--out validation/lowbit-gpu.json on a CUDA machine")
@pytest.mark.parametrize("optimizer", ["adamw-8bit-torchao", "adamw-4bit-torchao", "adamw-fp8-torchao"])
def test_against_the_gpu_measurement(optimizer):
    """scripts/gpu_lowbit_validate.py: one bf16 parameter, torchao's compiled step on CUDA."""
    import json

    from vramlens.estimator.optimizer import per_tensor_states

    data = json.loads(GPU_RESULTS.read_text())
    run = data["runs"][optimizer]
    rows, cols = data["shape"]
    one = ModelSpec(name="one", model_type="llama", architecture="LlamaModel", kind="decoder", hidden_size=cols,
                    n_heads=8, n_kv_heads=8, head_dim=cols // 8, ffn_size=cols, vocab_size=32000, n_decoder_layers=1,
                    norm="rmsnorm", position="rotary", gated_mlp=True,
                    tensors=(TensorInfo("layers.0.w.weight", (rows, cols), "linear", "w", 0),))
    lay = per_tensor_states(one, optimizer, 2, "full", ("q_proj",), 16)
    assert run["state_bytes"] == lay.gpu_bytes
    assert run["step_transient_bytes"] == pytest.approx(lay.step_bytes, rel=0.01)


def test_fp8_states_need_compute_capability_8_9():
    def notes(gpu: str) -> tuple[str, ...]:
        return estimate(spec(), mode="train", optimizer="adamw-fp8-torchao", gpu=gpu).breakdown.notes

    assert ("torchao's AdamWFp8 needs compute capability 8.9 or later; A100-80GB has 8.0: use adamw-8bit-torchao "
            "(about the same bytes)") in notes("A100-80GB")
    assert not any("AdamWFp8" in n for n in notes("H100-SXM-80GB"))
