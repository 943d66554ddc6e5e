"""--compile-scope blocks (torchtune's compile_model, torchtitan's apply_compile): each decoder block compiled on
its own, the embedding, final norm, output layer and loss eager; checked against its arithmetic on Llama 3.2 3B's
shapes (h 3,072, 24 heads, 8 KV heads, d 128, f 8,192, V 128,256, 28 blocks) at torchtune's batch 2 x 4,096 tokens.
The tracer checks the same compositions on the real modules (crosscheck.COMPILE_ROWS, tests/trace)."""

import pytest

from vramlens.errors import ConfigError
from vramlens.estimator import activations as A
from vramlens.estimator import compiled as CP
from vramlens.estimator import estimate
from vramlens.models import load_model
from vramlens.units import BLOCK, round_up
from vramlens.workload import make_workload

TUNE = dict(mode="train", dtype="bf16", batch=2, seq=4096, optimizer="adamw", optimizer_impl="fused", compile=True)
T = 2 * 4096  # tokens


@pytest.fixture(scope="module")
def llama3b():
    return load_model("llama-3.2-3b")


def test_per_block_graphs_keep_k_and_v_at_the_kv_heads(llama3b):
    model = CP.block(llama3b, make_workload(**TUNE), 2, 4096)
    blocks = CP.block(llama3b, make_workload(**TUNE, compile_scope="blocks"), 2, 4096)
    expanded = CP.block(llama3b, make_workload(**TUNE, compile_scope="blocks", gqa_expand=True), 2, 4096)
    # q rotated (2 B x 24 heads x 128 x 8,192 tokens) = 50,331,648 B; k and v at 8 heads: 16,777,216 B each
    assert blocks.qkv == 50_331_648 + 2 * 16_777_216 == 83_886_080
    # one graph for the model builds the 4-D mask, so repeat_kv expands k and v to 24 heads; torchtune's own
    # expansion (--gqa-expand) does the same per block
    assert model.qkv == expanded.qkv == 3 * 50_331_648 == 150_994_944
    assert model.total - blocks.total == 150_994_944 - 83_886_080 == 67_108_864


def test_outside_the_blocks_is_eager(llama3b):
    w = make_workload(**TUNE, compile_scope="blocks")
    e = estimate(llama3b, **TUNE, compile_scope="blocks")
    eager_head, _, _ = A.head_saved(llama3b, w, 2, 4096)
    # 28 compiled blocks, then what eager PyTorch keeps outside them (inputs, rotary tables, the final norm)
    # and at the head (the logits, their fp32 upcast and log_softmax)
    kept = 28 * CP.block(llama3b, w, 2, 4096).total + A.model_level_saved(llama3b, w, 2, 4096) + eager_head
    assert e.breakdown["activations"] == kept
    # the compiled head keeps only the bf16 logits and two fp32 row statistics
    compiled_head, _, _ = CP.head(llama3b, make_workload(**TUNE), 2, 4096)
    assert eager_head > compiled_head == 2 * 128_256 * T + 2 * 4 * T + 512


def test_lora_blocks_do_not_count_the_final_norm_twice(llama3b):
    lora = {**TUNE, "method": "lora", "optimizer_impl": "foreach", "compile_scope": "blocks"}
    w = make_workload(**lora)
    # the last LoRA block counts its output (2 B x 3,072 per token) and the next norm's fp32 rsqrt (4 B per token);
    # that norm is the eager final norm, which keeps its own
    assert CP.eager_final_norm_overlap(llama3b, w, 2, 4096) == 2 * 3_072 * T + 4 * T == 50_364_416
    assert CP.eager_final_norm_overlap(llama3b, make_workload(**{**lora, "compile_scope": "model"}), 2, 4096) == 0
    full = make_workload(**TUNE, compile_scope="blocks")
    assert CP.eager_final_norm_overlap(llama3b, full, 2, 4096) == 0  # a full-training block counts its input side


def test_notes_name_the_scope(llama3b):
    blocks = estimate(llama3b, **TUNE, compile_scope="blocks").breakdown.notes
    assert any("the embedding, final norm, output layer and loss outside the blocks save what eager PyTorch saves "
               "(--compile-scope blocks)" in n for n in blocks)
    chunked = estimate(llama3b, **TUNE, compile_scope="blocks", loss_chunks=8).breakdown.notes
    assert any("chunked loss (compiled by torchtune's compile_loss)" in n for n in chunked)


def test_a_bad_scope_is_refused_and_an_unused_one_noted():
    with pytest.raises(ConfigError) as e:
        make_workload(mode="train", compile=True, compile_scope="layers")
    assert str(e.value) == "compile_scope='layers' is not one of: model, blocks, blocks+loss"
    assert make_workload(mode="train", compile_scope="blocks").ignored() == [
        "ignored: compile_scope='blocks' says what --compile covers, and nothing is compiled"]
    assert make_workload(mode="inference", compile_scope="blocks").ignored() == [
        "ignored in inference (they apply to training): compile_scope='blocks'"]


def test_blocks_and_loss_compile_the_loss_on_its_own(llama3b):
    """--compile-scope blocks+loss (torchtitan's training.compile since March 2025): the blocks as under blocks, the
    loss' fp32 upcast and log_softmax gone, the logits and two fp32 statistics per token kept instead."""
    blocks = estimate(llama3b, **TUNE, compile_scope="blocks")
    both = estimate(llama3b, **TUNE, compile_scope="blocks+loss")
    w = make_workload(**TUNE, compile_scope="blocks")
    eager_head, _, _ = A.head_saved(llama3b, w, 2, 4096)
    V, t = 128_256, T
    compiled_head = round_up(2 * V * t, BLOCK) + 2 * round_up(4 * t, BLOCK)
    assert blocks.breakdown["activations"] - both.breakdown["activations"] == eager_head - compiled_head
    assert any("compiled on its own" in n for n in both.breakdown.notes)


def test_blocks_and_loss_refuse_a_loss_they_do_not_compile():
    with pytest.raises(ConfigError, match="compile_scope=blocks\\+loss compiles torchtitan's plain cross-entropy"):
        make_workload(mode="train", compile=True, compile_scope="blocks+loss", loss="fused-linear")
    with pytest.raises(ConfigError, match="loss_parallel the compiled loss is not modelled"):
        make_workload(mode="train", compile=True, compile_scope="blocks+loss", tp=2, gpus=2, loss_parallel=True)
