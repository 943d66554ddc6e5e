"""Autocast's casts of frozen weights that the code keeps (issue 9): LoRA over fp32 Llama 3 8B weights under
--amp bf16, q_proj and v_proj adapted at rank 8, batch 1 x 2,048 tokens. The tracer's rows: CHECKPOINT_ROWS' LoRA
row, TECHNIQUE_ROWS' LoRA chunked-loss row under autocast, PEFT_DELTA_ROWS' OFT down_proj row."""

from vramlens.estimator import estimate
from vramlens.estimator.activations import OFT_CAYLEY_BACKWARD_BLOCKS, delta_transients
from vramlens.estimator.state import frozen_head_cast, head_recasts, recompute_casts, train_state
from vramlens.models import load_model
from vramlens.workload import make_workload

RUN = dict(mode="train", method="lora", dtype="fp32", amp="bf16", lora_targets=("q_proj", "v_proj"), lora_rank=8,
           batch=1, seq=2048)
HEAD_CAST = 1_050_673_152  # 128,256 x 4,096 x 2 B (bf16), a multiple of 512


def test_the_output_layers_cast_outlives_checkpointing():
    spec = load_model("llama-3-8b")
    w = make_workload(**RUN, checkpointing="full")
    assert frozen_head_cast(spec, w, True) == HEAD_CAST
    assert train_state(spec, w, None).head_casts == HEAD_CAST
    # the blocks' inputs and the head's saved tensors (2,159,050,752 B, as before) + the output layer's cast
    assert estimate(spec, w).breakdown["activations"] == 2_159_050_752 + HEAD_CAST == 3_209_723_904


def test_a_recomputed_block_casts_its_weights_again():
    spec = load_model("llama-3-8b")
    frozen, cached = recompute_casts(spec, make_workload(**RUN, checkpointing="full"))
    # q, o: 4,096 x 4,096; k, v: 1,024 x 4,096; gate, up, down: 14,336 x 4,096; in bf16:
    # (2 x 16,777,216 + 2 x 4,194,304 + 3 x 58,720,256) x 2 = 218,103,808 x 2
    assert frozen == 436_207_616
    # the adapters' cached casts of one block: q's A and B (8 x 4,096 x 2 each: 65,536 + 65,536), v's A (65,536)
    # and B (1,024 x 8 x 2 = 16,384)
    assert cached == 65_536 * 3 + 16_384 == 212_992
    assert recompute_casts(spec, make_workload(**{**RUN, "amp": None, "dtype": "bf16"}, checkpointing="full")) == (0, 0)


def test_each_loss_chunk_casts_the_frozen_output_layer():
    spec = load_model("llama-3-8b")
    w = make_workload(**RUN, loss_chunks=8)
    assert head_recasts(spec, w, True) == 7 * HEAD_CAST == 7_354_712_064  # the 2nd to 8th chunks' calls
    assert head_recasts(spec, make_workload(**RUN), True) == 0
    # the saved activations: 26,221,805,568 B without the further casts (the first one is in the frozen casts)
    assert estimate(spec, w).breakdown["activations"] == 26_221_805_568 + 7 * HEAD_CAST


def test_oft_cayley_backward_is_a_temporary():
    """OFT on down_proj (14,336 inputs, blocks of 32: 448 blocks of 32 x 32 fp32 = 1,835,008 B) at 16 tokens: the
    Cayley series' backward, five R-sized tensors beside the input's fp32 gradient (16 x 14,336 x 4 = 917,504 B),
    is larger than the einsum's (2 x 917,504 + 1,835,008)."""
    spec = load_model("llama-3-8b")
    w = make_workload(mode="train", method="oft", dtype="bf16", lora_targets=("q_proj", "down_proj"), batch=1, seq=16)
    assert OFT_CAYLEY_BACKWARD_BLOCKS == 5
    d = delta_transients(spec, w, 1, 16, 0)
    assert d.temporary == 917_504 + 5 * 1_835_008 == 10_092_544
