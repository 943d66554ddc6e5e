"""What CUDA autocast (fp32 weights, --amp bf16) keeps, against its arithmetic: the tracer checks the
same tensors against the H200's events in tests/trace/test_h200_events.py."""

from vramlens.estimator import activations as A
from vramlens.estimator import estimate
from vramlens.estimator import heads as H
from vramlens.models import load_model
from vramlens.workload import make_workload

AMP = dict(mode="train", dtype="fp32", amp="bf16")
BF16 = dict(mode="train", dtype="bf16")


def test_new_gelu_keeps_pow_and_what_follows_in_fp32():
    n = 8 * 1024 * 4096  # b*s tokens x f
    # NewGELU: 0.5*x in bf16; pow's fp32 copy of x, tanh and 1 + tanh in fp32 (pow is on CUDA's
    # fp32 list); c_proj keeps its bf16 cast of the fp32 output
    assert A._act_saved("gelu_new", n, 2, True, autocast=True) == 2 * n + 3 * 4 * n + 2 * n
    # without autocast: x, tanh, 0.5*x, 1 + tanh and the output, all bf16
    assert A._act_saved("gelu_new", n, 2, True, autocast=False) == 5 * 2 * n
    # FastGELU calls no pow: nothing changes under autocast
    assert A._act_saved("gelu_fast", n, 2, True, autocast=True) == A._act_saved("gelu_fast", n, 2, True)
    # one aten op (F.gelu, tanh approximation): its input, in bf16 either way
    assert A._act_saved("gelu_pytorch_tanh", n, 2, True, autocast=True) == 2 * n + 2 * n


def test_cross_entropy_of_half_logits_under_autocast():
    amp, bf16 = make_workload(**AMP), make_workload(**BF16)
    assert H.cross_entropy_kept(amp) == (2, 4)  # log_softmax in bf16, nll_loss's fp32 copy
    assert H.cross_entropy_kept(bf16) == (2, 0)
    assert H.cross_entropy_kept(amp, upcast=True) == (4, 0)  # causal LMs call logits.float() first
    # backward: nll_loss's fp32 gradient and its bf16 cast at once
    assert H.cross_entropy_backward(amp, 2 * 1000, 4 * 1000) == 6 * 1000


def test_bert_masked_lm_head_and_loss_under_autocast():
    spec = load_model("bert-base-uncased")
    b, s, h, V = 32, 512, 768, 30_522
    t = b * s
    amp = make_workload(**AMP, batch=b, seq=s, task="masked-lm")
    saved, peak, _ = A.head_saved(spec, amp, b, s)
    # log_softmax of the bf16 logits (2*V per token) and nll_loss's fp32 copy (4*V): multiples of 512 B
    assert saved == 2 * V * t + 4 * V * t
    assert peak == 2 * V * t + saved  # and the logits
    lb = A.loss_backward(spec, amp, b, s)
    assert lb is not None and (lb.transient, lb.over_saved) == (6 * V * t, 4 * V * t)
    # the prediction transform: dense output (bf16), LayerNorm's fp32 copy of the GELU output,
    # fp32 mean and rstd, the decoder's bf16 cast of the fp32 LayerNorm output
    assert H.head_level_saved(spec, amp, b, s) == 2 * h * t + 4 * h * t + 2 * 4 * t + 2 * h * t
    bf16 = make_workload(**BF16, batch=b, seq=s, task="masked-lm")
    assert H.head_level_saved(spec, bf16, b, s) == 3 * 2 * h * t + 2 * 4 * t
    assert A.loss_backward(spec, bf16, b, s) is None


def test_gpt2_medium_amp_matches_the_h200():
    """validation/stack-gpu.json, gpt2-medium/amp: torch.cuda.max_memory_allocated 27,363,220,480 B
    on the H200; the recorder on CUDA saw 19,035,653,120 B of activations."""
    e = estimate("gpt2-medium", **AMP, optimizer="adamw", batch=8, seq=1024).breakdown
    # what the estimate leaves out: the position ids (8*s B), the loss' padded copy of the labels
    # (8*b*s B) and nll_loss's two scalars (512 B each): 8,192 + 65,536 + 1,024 = 74,752 B
    assert 19_035_653_120 - e["activations"] == 74_752
    assert abs(e.peak_allocated / 27_363_220_480 - 1) < 0.02
