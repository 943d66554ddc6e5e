"""FSDP2's units (Workload.fsdp_units) and the reduce-scatter input under LoRA (issue 9).

``blocks+embed+output`` is torchtune's ``custom_sharded_layers=['tok_embeddings', 'output']``: the embedding and the
output layer FSDP units of their own (vramlens.estimator.parallel.separate_units). The tracer's check is the FSDP rows
of vramlens.trace.crosscheck (tests/trace/test_techniques.py).
"""

import pytest

from vramlens.errors import ConfigError
from vramlens.estimator import estimate_spec
from vramlens.estimator.parallel import fsdp_buffers, gathered_sizes, separate_units
from vramlens.models.catalog import catalog_spec
from vramlens.workload import Workload

UNITS = dict(mode="train", dtype="bf16", batch=2, seq=512, fsdp=True, gpus=4, fsdp_units="blocks+embed+output")


@pytest.fixture(scope="module")
def llama7b():
    spec = catalog_spec("llama-2-7b")
    assert spec is not None
    return spec


def test_units_take_the_embedding_and_output_layer_out_of_the_root(llama7b):
    w = Workload(**UNITS)
    # 32,000 x 4,096 x 2 B each; the root keeps the final norm (4,096 x 2 B); a block 202,383,360 x 2 B
    assert separate_units(llama7b, w, 2) == (262_144_000, 262_144_000)
    assert gathered_sizes(llama7b, w, 2) == (404_766_720, 8_192)
    assert gathered_sizes(llama7b, w.replace(fsdp_units="blocks"), 2) == (404_766_720, 524_296_192)


def test_lora_reduce_scatter_input_is_the_adapters(llama7b):
    # q_proj and v_proj adapters at rank 8 over 4 ranks, dim 0 padded to a multiple of 4 (8 rows stay 8): A (8, 4096)
    # and B (4096, 8) each, 4 x 32,768 = 131,072 elements x 2 B (bf16 adapters) = 262,144 B, not a block's
    # 404,766,720 B: the frozen base weights have no gradient to reduce-scatter
    w = Workload(**{**UNITS, "fsdp_units": "blocks", "method": "lora", "lora_dtype": "bf16"})
    assert fsdp_buffers(llama7b, w, 2) == (404_766_720, 524_296_192, 262_144)


def test_units_comm_buffers_are_the_embedding_beside_block_0(llama7b):
    # LoRA (a tiny reduce-scatter input): block 0's all-gather output and parameters beside the embedding's flat
    # all-gather output, E + 2B + R = 262,144,000 + 2 x 404,766,720 + 8,192 (over 2(B+R) and 3H + R with 8 chunks)
    w = Workload(**UNITS, method="lora", lora_dtype="bf16", loss_chunks=8, checkpointing="full")
    bd = estimate_spec(llama7b, w).breakdown
    assert bd["comm_buffers"] == 262_144_000 + 2 * 404_766_720 + 8_192 == 1_071_685_632
    # in the root the embedding and output layer are gathered with the root's flat output: 2(B+R)
    assert estimate_spec(llama7b, w.replace(fsdp_units="blocks")).breakdown["comm_buffers"] == 2 * (
        404_766_720 + 524_296_192) == 1_858_125_824


def test_units_bad_input():
    with pytest.raises(ConfigError) as e:
        Workload(mode="train", gpus=4, tp=2, fsdp=True, fsdp_units="blocks+embed+output").validated()
    assert ("fsdp_units='blocks+embed+output' with tp=2: separate embedding and output units are modelled for FSDP2 "
            "full sharding without tensor, pipeline or context parallelism: use --fsdp-units blocks") in str(e.value)
    with pytest.raises(ConfigError) as e:
        Workload(mode="train", fsdp_units="all").validated()
    assert str(e.value) == "fsdp_units='all' is not one of: blocks, blocks+embed+output"
    assert ("ignored: fsdp_units='blocks+embed+output' applies only with fsdp"
            in Workload(mode="train", fsdp_units="blocks+embed+output").ignored())
