"""torchtune's README LoRA/QLoRA rows (1814feb1): the loss' backward peak as torchtune's own code makes it.

scripts/torchtune_recipe_trace.py traced the LoRA row with torchtune's recipe code under fake tensors: the step
peaks at the first loss node's backward, holding the forward's live set at the loss (weights, AdamW states, the 8
saved bf16 logit chunks and their fp32 row statistics) plus that chunk's bf16 gradient, written by inductor's backward
kernel while it reads the saved chunk: nine chunks. These tests pin that figure in the estimate.
"""

import pytest

from vramlens.estimator import estimate
from vramlens.hardware.catalog import get_gpu
from vramlens.models import load_model
from vramlens.published import CASES

# one chunk of the logits: 2 x 4,096 tokens / 8 chunks x 128,256 vocabulary x 2 B (bf16) = 262,668,288 B
CHUNK = 2 * (4096 // 8) * 128_256 * 2


def _estimate(case_id):
    case = CASES[case_id]
    return estimate(load_model(case.model), gpu=get_gpu(case.gpu), **case.settings)


@pytest.mark.parametrize("case_id", ["torchtune-readme-llama3.2-3b-lora", "torchtune-readme-llama3.2-3b-qlora"])
def test_loss_backward_adds_one_chunk_gradient_to_the_forward_peak(case_id):
    est = _estimate(case_id)
    phases = dict(est.breakdown.phases)
    assert est.breakdown.peak_phase == "backward"
    # the forward peaks at the loss with the 8 chunks saved; backward adds the first chunk's gradient
    assert phases["backward"] - phases["forward"] == CHUNK == 262_668_288
    # the 8 saved chunks are activations (with the final norm's fp32 input in the offloader's stash:
    # 2 x 4,096 x 3,072 x 4 B = 100,663,296 B)
    assert est.breakdown["activations"] >= 8 * CHUNK + 100_663_296


def test_qlora_row_uses_torchaos_nf4_matmul_and_same_loss_peak():
    # torchtune's LoRALinear and FrozenNF4Linear call torchao's linear_nf4 (1814feb1)
    assert CASES["torchtune-readme-llama3.2-3b-qlora"].settings["nf4_impl"] == "torchao"
    lora = _estimate("torchtune-readme-llama3.2-3b-lora").breakdown
    qlora = _estimate("torchtune-readme-llama3.2-3b-qlora").breakdown
    # the two rows differ at the peak only by the weights: the NF4 dequantization happens inside the
    # checkpointed blocks, below the loss' backward
    assert lora.peak_allocated - qlora.peak_allocated == lora["weights"] - qlora["weights"]
