"""The serving advisor: plans serve the load, rank by GPU count then memory, and obey the budget."""

import pytest

from vramlens.errors import InputError
from vramlens.serving import capacity, plan_capacity


def test_every_plan_serves_the_load_and_its_flags_reproduce_it():
    plan = plan_capacity("llama-3-8b", users=64, context=4096, tokens_per_s=30, engine="vllm")
    assert plan.plans
    for p in plan.plans:
        assert p.concurrency >= 64 and p.decode_tokens_s >= 30
        assert f"--tensor-parallel-size {p.tp}" in p.flags and "--max-model-len 4096" in p.flags
        assert "--max-num-batched-tokens 4096" in p.flags  # max(context, 2048, users); V1's default differs
        again = capacity("llama-3-8b", "vllm", gpu=p.gpu, tp=p.tp, context=4096, max_model_len=4096, max_num_seqs=64,
                         max_num_batched_tokens=4096, kv_cache_dtype=p.kv_cache_dtype, quantization=p.quantization)
        assert again.concurrency == p.concurrency


def test_plans_rank_by_gpu_count_then_memory():
    plan = plan_capacity("llama-3.1-70b", users=32, context=8192, engine="vllm")
    keys = [(p.gpus, p.capacity.gpu_bytes) for p in plan.plans]
    assert keys == sorted(keys)
    # 70B in 16 bits (141 GB) fits no single GPU of the list with a cache: the first plan quantizes or splits
    first = plan.plans[0]
    assert first.quantization is not None or first.tp > 1


def test_a_load_nothing_serves_gives_no_plans():
    plan = plan_capacity("llama-3.1-70b", users=10_000, context=131_072, gpu="L4", max_gpus=2)
    assert plan.plans == () and plan.examined == plan.candidates


def test_tp_degrees_divide_the_heads():
    plan = plan_capacity("qwen2.5-7b", users=512, context=8192, gpu="L4", top=50)  # 28 heads: tp 8 never
    assert {p.tp for p in plan.plans} <= {1, 2, 4}


def test_budget_zero_examines_one_candidate_and_says_so():
    plan = plan_capacity("llama-3-8b", users=1, context=1024, budget_s=0)
    assert plan.examined == 1
    assert plan.stopped.startswith("search stopped after 0 s: 1 of ")


def test_engines_without_plans_and_bad_speeds_are_refused():
    with pytest.raises(InputError, match=r"engine='llama.cpp' has no serving plans: use vllm or sglang"):
        plan_capacity("llama-3-8b", users=1, context=1024, engine="llama.cpp")
    with pytest.raises(InputError, match=r"tokens_per_s=-1 must be a number of tokens per second > 0"):
        plan_capacity("llama-3-8b", users=1, context=1024, tokens_per_s=-1)
