"""FSDP1 (``--fsdp-version 1``: torch.distributed.fsdp.FullyShardedDataParallel) in the estimator.

One padded FlatParameter per unit (each block, and the root), gathered on the unshard stream
(_flat_param.py ``_alloc_padded_unsharded_flat_param``), one block at a time in forward, the current and
the prefetched one in backward (BACKWARD_PRE); the sharded gradients on the post-backward stream
(_runtime_utils.py ``_get_reduce_scatter_tensors``). The tracer's check is tests/advise/test_fsdp_crosscheck.py.
"""

import pytest

from vramlens.errors import ConfigError
from vramlens.estimator import estimate_spec
from vramlens.estimator.parallel import fsdp1_unit_shard_numels, fsdp_stream_pools
from vramlens.models.catalog import catalog_spec
from vramlens.workload import Workload

MIB = 1 << 20
TT = dict(mode="train", dtype="bf16", batch=2, seq=512, fsdp=True, fsdp_version=1, gpus=4, checkpointing="full")


@pytest.fixture(scope="module")
def llama7b():
    spec = catalog_spec("llama-2-7b")
    assert spec is not None
    return spec


def test_fsdp_version_is_validated():
    with pytest.raises(ConfigError) as e:
        Workload(mode="train", gpus=2, fsdp=True, fsdp_version=3).validated()
    assert "fsdp_version=3 must be 1 (FullyShardedDataParallel) or 2 (fully_shard)" in str(e.value)
    with pytest.raises(ConfigError) as e:
        Workload(mode="train", gpus=4, tp=2, fsdp=True, fsdp_version=1).validated()
    assert ("fsdp_version=1 with tp=2: FSDP1 over tensor, context or pipeline parallelism is not modelled: use "
            "--fsdp-version 2 (torchtitan's FSDP2)") in str(e.value)
    with pytest.raises(ConfigError) as e:
        Workload(mode="train", gpus=4, pp=2, grad_accum=2, fsdp=True, fsdp_version=1).validated()
    assert "fsdp_version=1 with pp=2: FSDP1 over tensor, context or pipeline parallelism" in str(e.value)
    assert "ignored: fsdp_version=1 applies only with fsdp" in Workload(mode="train", fsdp_version=1).ignored()


def test_flat_parameter_shards(llama7b):
    # one unit per block: 4096 x 4096 x 4 (q, k, v, o) + 3 x 4096 x 11,008 (MLP) + 2 x 4096 (norms)
    # = 202,383,360, a quarter each over 4 ranks; the root: 2 x 32,000 x 4096 (embedding, head) + 4096
    # (final norm) = 262,148,096; over 3 ranks ceil(262,148,096 / 3) = 87,382,699 (rank 0's chunk, padded)
    root, blocks = fsdp1_unit_shard_numels(llama7b, 4)
    assert (root, blocks[0], len(blocks)) == (65_537_024, 50_595_840, 32)
    assert fsdp1_unit_shard_numels(llama7b, 3)[0] == 87_382_699


def test_unshard_pool_holds_the_root_and_three_blocks(llama7b):
    # bf16 padded unsharded flat parameters, each over 10 MiB so rounded to 2 MiB: the root's
    # 262,148,096 x 2 B = 524,296,192 -> 251 x 2 MiB; a block's 202,383,360 x 2 B = 404,766,720 -> 194 x 2 MiB.
    # Backward holds the current and the prefetched block, and record_stream keeps the last freed one
    # waiting until the rate limiter synchronises on it (two all-gathers in flight): R + 3B
    ag, rs = fsdp_stream_pools(llama7b, Workload(**TT), 2)
    assert ag == 251 * 2 * MIB + 3 * 194 * 2 * MIB == 1_746_927_616
    # post-backward stream: every unit's sharded gradient, kept until zero_grad: the root's 65,537,024 x 2 B
    # -> 63 x 2 MiB, each block's 50,595,840 x 2 B -> 49 x 2 MiB
    assert rs == 63 * 2 * MIB + 32 * 49 * 2 * MIB


def test_fsdp1_gathers_less_than_fsdp2_in_forward(llama7b):
    # FSDP2's forward peaks at its start: the root's flat all-gather output held beside its unsharded parameters
    # until block 0's all-gather is copied out (2R = 2 x 524,296,192 B), and block 0's flat output and parameters
    # (2B = 2 x 404,766,720 B), over the weight shards (3,369,208,064 B), the AdamW states (6,738,415,616 B) and the
    # cuBLAS workspaces (2 x (33,554,432 + 1,048,576) = 69,206,016 B); FSDP1 has no forward prefetch and no flat
    # output held beside the unsharded parameters
    v1, v2 = (estimate_spec(llama7b, Workload(**{**TT, "fsdp_version": v})).breakdown for v in (1, 2))
    assert dict(v2.phases)["forward"] == (3_369_208_064 + 6_738_415_616 + 2 * 524_296_192 + 2 * 404_766_720
                                          + 69_206_016) == 12_034_955_520
    assert dict(v1.phases)["forward"] == 11_408_161_024
