"""DeepSpeed ZeRO-3's contiguous-gradients bucket (estimator.parallel.deepspeed_ipg_bucket).

deepspeed/runtime/zero/stage3.py ``DeepSpeedZeroOptimizer_Stage3.__init__`` (v0.8-v0.16): with
``contiguous_gradients`` (default True) it allocates ``__ipg_bucket_flat_buffer =
torch.empty(self.reduce_bucket_size, dtype=self.dtype, device=<current GPU>)`` once, whatever the
model's size and with or without offload; zero/config.py's default reduce_bucket_size is 5e8.
"""

from dataclasses import replace

import pytest
from _specs import llama_config

from vramlens.estimator import estimate_spec
from vramlens.estimator.parallel import DS_REDUCE_BUCKET_SIZE, deepspeed_ipg_bucket, fsdp_buffers
from vramlens.estimator.state import train_phases, train_state
from vramlens.models import load_model
from vramlens.workload import make_workload

# h = 256, 4 blocks: a model far smaller than the bucket
TINY = load_model(llama_config(hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                               num_attention_heads=4, num_key_value_heads=4, vocab_size=1000))


def test_bucket_is_reduce_bucket_size_elements_of_the_parameters_dtype():
    assert DS_REDUCE_BUCKET_SIZE == 500_000_000  # zero/config.py DeepSpeedZeroConfig.reduce_bucket_size
    # fp32 (peft's bloomz script, no mixed precision): 5e8 x 4 B = 2,000,000,000 B = 1,907.3 MiB
    assert deepspeed_ipg_bucket(4) == 2_000_000_000
    assert deepspeed_ipg_bucket(2) == 1_000_000_000  # fp16/bf16 engine: 5e8 x 2 B
    # the Trainer's "auto" (transformers integrations/deepspeed.py): h*h, e.g. h = 4096: 16,777,216 x 2 B
    assert deepspeed_ipg_bucket(2, 4096 * 4096) == 33_554_432


def test_lora_with_offload_still_gets_the_whole_bucket():
    # ZeRO-1/2's bucket is min(5e8, trainable) elements; ZeRO-3's torch.empty(reduce_bucket_size) is not capped
    w = make_workload(mode="train", dtype="fp32", batch=2, seq=64, method="lora", lora_rank=8,
                      zero=3, offload="all")
    e = estimate_spec(TINY, w).breakdown
    assert e["comm_buffers"] == 2_000_000_000  # 5e8 x 4 B (fp32 LoRA parameters)
    z2 = estimate_spec(TINY, replace(w, zero=2)).breakdown
    assert z2["comm_buffers"] < 1_000_000  # ZeRO-2's bucket: the few LoRA parameters x 4 B


def test_sharded_zero3_holds_the_bucket_in_every_phase():
    w = make_workload(mode="train", dtype="bf16", batch=2, seq=128, gpus=4, zero=3)
    st = train_state(TINY, w, None)
    assert st.ds_bucket == 1_000_000_000  # 5e8 x 2 B (bf16)
    B, R, _ = fsdp_buffers(TINY, w, 2)
    # comm_buffers: the bucket and the gathered parameters (FSDP2's model: max(2(B+R), 3B+R))
    assert st.comm == 1_000_000_000 + max(2 * (B + R), 3 * B + R)
    args = (1 << 20, 0, 0, 1)  # activations, loss temporary, head saved, grad_accum
    with_bucket = dict(train_phases(st, *args))
    without = dict(train_phases(replace(st, ds_bucket=0), *args))
    assert with_bucket.keys() == without.keys()
    assert all(with_bucket[k] - without[k] == 1_000_000_000 for k in with_bucket)


def test_fsdp_keeps_fsdp2s_buffers():
    w = make_workload(mode="train", dtype="bf16", batch=2, seq=128, gpus=4, fsdp=True)
    st = train_state(TINY, w, None)
    assert st.ds_bucket == 0 and st.comm < 1_000_000_000  # FSDP2's gathered blocks, no DeepSpeed bucket


def test_trainer_auto_buckets_are_hidden_size_squared():
    # transformers integrations/deepspeed.py fills reduce_bucket_size "auto" with hidden_size * hidden_size
    w = make_workload(mode="train", dtype="bf16", batch=2, seq=128, gpus=4, zero=3, zero_buckets="auto")
    assert train_state(TINY, w, None).ds_bucket == 131_072  # 256 * 256 = 65,536 elements x 2 B
    z2 = make_workload(mode="train", dtype="bf16", batch=2, seq=128, gpus=4, zero=2, zero_buckets="auto")
    assert train_state(TINY, z2, None).comm == 131_072  # ZeRO-2: min(65,536, trainable) x 2 B


def test_zero_buckets_without_zero_is_noted_as_ignored():
    w = make_workload(mode="train", dtype="bf16", zero_buckets="auto")
    assert any(n.startswith("ignored: zero_buckets='auto'") for n in w.ignored())


def test_emit_deepspeed_writes_the_buckets_the_estimate_used():
    from vramlens.advise.emit import DS_BUCKET, DS_PERSISTENCE_THRESHOLD, DS_PREFETCH
    from vramlens.estimator.parallel import DS_PARAM_PERSISTENCE_THRESHOLD, DS_PREFETCH_BUCKET_SIZE

    assert (DS_BUCKET, DS_PREFETCH, DS_PERSISTENCE_THRESHOLD) == (
        DS_REDUCE_BUCKET_SIZE, DS_PREFETCH_BUCKET_SIZE, DS_PARAM_PERSISTENCE_THRESHOLD)


def test_emit_deepspeed_auto_buckets_are_left_to_the_trainer():
    from vramlens.advise import fit
    from vramlens.advise.emit import deepspeed
    from vramlens.advise.readback import workload_from_emitted
    from vramlens.hardware.catalog import get_gpu
    from vramlens.workload import Workload

    w = Workload(mode="train", dtype="bf16", amp="bf16", batch=1, seq=64, gpus=4, zero=3,
                 zero_buckets="auto").validated()
    plan = fit(TINY, w, get_gpu("H100-80GB"), max_plans=1).plans[0]
    z = deepspeed(plan)["zero_optimization"]
    assert (z["reduce_bucket_size"], z["stage3_prefetch_bucket_size"], z["stage3_param_persistence_threshold"]) == (
        "auto", "auto", "auto")
    assert workload_from_emitted("deepspeed", deepspeed(plan), Workload()).zero_buckets == "auto"
    default = fit(TINY, replace(w, zero_buckets="default").validated(), get_gpu("H100-80GB"),
                  max_plans=1).plans[0]
    assert deepspeed(default)["zero_optimization"]["reduce_bucket_size"] == 500_000_000
    assert workload_from_emitted("deepspeed", deepspeed(default), w).zero_buckets == "default"


def test_deepspeed_reads_auto_as_its_own_defaults():
    # without the Trainer, DeepSpeed drops "auto" keys (runtime/config_utils.py DeepSpeedConfigModel) and keeps
    # zero/config.py's defaults: the figures vramlens' zero_buckets="default" uses
    zc = pytest.importorskip("deepspeed.runtime.zero.config")
    z = zc.DeepSpeedZeroConfig(stage=3, reduce_bucket_size="auto", stage3_prefetch_bucket_size="auto")
    assert (z.reduce_bucket_size, z.prefetch_bucket_size) == (500_000_000, 50_000_000)
    d = zc.DeepSpeedZeroConfig()
    assert (d.max_live_parameters, d.max_reuse_distance, d.param_persistence_threshold) == (
        1_000_000_000, 1_000_000_000, 100_000)
