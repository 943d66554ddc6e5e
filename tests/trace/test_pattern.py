"""The layer pattern of hybrid models: periods, prefixes, tails, and the truncated configs (no tracing)."""

import pytest

from vramlens.trace.build import truncate_config
from vramlens.trace.pattern import LayerPattern, find_pattern

M, A = ("linear_attention",), ("full_attention",)


def test_a_uniform_model_is_one_block_a_period():
    pat = find_pattern([A] * 32)
    assert (pat.prefix, pat.period, pat.periods, pat.tail) == (0, 1, 32, 0) and pat.uniform
    assert pat.truncations(3) == (2, 3) and pat.truncations(5) == (4, 5)  # k-1 and k blocks, as before
    assert pat.blocks(3) == 3


def test_qwen3_next_three_deltanet_blocks_then_attention():
    pat = find_pattern(([M] * 3 + [A]) * 12)  # Qwen3-Next-80B-A3B: 48 layers, full_attention_interval 4
    assert (pat.prefix, pat.period, pat.periods, pat.tail) == (0, 4, 12, 0) and not pat.uniform
    # layers=3: the fewest whole periods (at least 3) with at least 3 blocks, and one period less
    assert pat.truncations(3) == (2, 3) and (pat.blocks(2), pat.blocks(3)) == (8, 12)
    assert pat.truncations(13) == (3, 4)  # 13 blocks need 4 periods (16 blocks)
    assert pat.shown() == "(linear_attention x3, full_attention) x12"


def test_a_prefix_and_a_tail():
    # attention at 9, 18, ..., 45 of 50: one Mamba block, 5 periods of (8 Mamba, attention), 4 Mamba blocks
    kinds = [A if i in (9, 18, 27, 36, 45) else M for i in range(50)]
    pat = find_pattern(kinds)
    assert (pat.prefix, pat.period, pat.periods, pat.tail) == (1, 9, 5, 4)
    assert pat.truncations(3) == (2, 3) and (pat.blocks(2), pat.blocks(3)) == (23, 32)
    assert kinds[:pat.blocks(2)] == [M] * 9 + [A] + [M] * 8 + [A] + [M] * 4  # a prefix of the full model, tail included
    assert pat.shown() == "linear_attention, (linear_attention x8, full_attention) x5, linear_attention x4"


def test_bamba_9b_cheapest_is_its_uniform_end():
    # attn_layer_indices [9, 18, 27] of 32: 3 periods of 9 would trace all 32 blocks (1 + 3 x 9 + 4); the 4 Mamba
    # blocks after the last attention block are a uniform end, which the trace extrapolates from 30 and 31 blocks
    pat = find_pattern([A if i in (9, 18, 27) else M for i in range(32)])
    assert (pat.prefix, pat.period, pat.periods, pat.tail) == (28, 1, 4, 0)
    assert (pat.blocks(2), pat.blocks(3)) == (30, 31)


def test_a_pattern_that_repeats_nothing_is_none():
    assert find_pattern([M, A, A, M, M, M, A]) is None
    assert find_pattern([M, A]) is None


def test_the_cheapest_period_wins():
    # period 2 (M, A) also repeats every 4 blocks: the shorter period traces fewer blocks
    pat = find_pattern([M, A] * 8)
    assert (pat.period, pat.periods) == (2, 8)


def test_truncate_config_cuts_index_lists_and_pattern_strings():
    cfg = {"model_type": "bamba", "num_hidden_layers": 9, "attn_layer_indices": [1, 5],
           "full_attn_idxs": [2, 5, 7], "hybrid_override_pattern": "M-M*-M-M*", "layer_types": ["a"] * 9}
    out = truncate_config(cfg, 5)
    assert out["num_hidden_layers"] == 5 and out["layer_types"] == ["a"] * 5
    assert out["attn_layer_indices"] == [1] and out["full_attn_idxs"] == [2]
    assert out["hybrid_override_pattern"] == "M-M*-"


def test_layer_pattern_is_frozen():
    pat = LayerPattern(n_layers=4, prefix=0, period=2, periods=2, tail=0, kinds=("a", "b", "a", "b"))
    with pytest.raises(AttributeError):
        pat.period = 3  # type: ignore[misc]
