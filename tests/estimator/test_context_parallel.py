"""--cp N: torch's context_parallel as torchtitan runs it (vramlens.estimator.context). Checked against its arithmetic
on Llama 3.1 8B's shapes (h 4,096, 32 heads, 8 KV heads, d 128) at torchtitan's Table 2 settings."""

import dataclasses

import pytest

from vramlens.errors import ConfigError, InputError
from vramlens.estimator import context as CTX
from vramlens.estimator import estimate
from vramlens.workload import make_workload

TITAN = dict(mode="train", dtype="fp32", amp="bf16", fsdp=True, gpus=8, batch=1, checkpointing="full",
             optimizer="adamw", optimizer_impl="foreach")



def test_each_rank_runs_its_share_of_the_sequence(llama8b):
    one = estimate(llama8b, **TITAN, seq=32_768)
    two = estimate(llama8b, **TITAN, seq=65_536, cp=2)
    # every tensor made per token exists for 32,768 tokens on a rank either way; FSDP shards over the same 8 ranks
    for name in ("weights", "gradients", "optimizer_states", "activations", "comm_buffers"):
        assert two.breakdown[name] == one.breakdown[name], name
    # the workload is reported as given, and the samples per step are the data-parallel replicas only
    assert two.workload.seq == 65_536 and two.workload.cp == 2
    assert one.workload.effective_batch == 8 and two.workload.effective_batch == 4
    # one more NCCL communicator (the context-parallel group) outside the allocator
    assert two.breakdown["runtime"] > one.breakdown["runtime"]
    assert any("32,768 of the 65,536 tokens on each rank" in n for n in two.breakdown.notes)


def test_ring_attention_buffers(llama8b):
    w = make_workload(**TITAN, seq=65_536, cp=2)
    fwd, bwd = CTX.ring_attention_bytes(llama8b, w, 1, 32_768)
    t, c = 32_768, 2
    local_kv = 2 * c * 8 * 128 * t                                   # cat(k, v): 134,217,728 B
    gathered = 2 * local_kv                                           # the all-gather over 2 ranks
    sdpa = c * 32 * 128 * t + 4 * 32 * t                              # one step's output and log-sum-exp
    merged = 4 * 32 * 128 * t + 4 * 32 * t                            # the fp32 merger's
    assert fwd == local_kv + gathered + sdpa + merged == 1_216_348_160
    qkv32 = 4 * (32 + 2 * 8) * 128 * t                                # fp32 q, k, v gradients
    assert bwd == gathered + 2 * qkv32 + c * (32 + 2 * 8) * 128 * t + 2 * 4 * 2 * 8 * 128 * t == 2_818_572_288
    assert CTX.ring_attention_bytes(llama8b, make_workload(**TITAN, seq=32_768), 1, 32_768) == (0, 0)


@pytest.mark.parametrize("kw,words", [
    (dict(seq=1004, cp=4), "seq=1,004 is not a multiple of 2*cp=8"),
    (dict(seq=4096, cp=2, attention="eager"), "cp with attention=eager"),
    (dict(seq=4096, cp=2, zero=2, fsdp=False), "DeepSpeed's sequence parallelism (Ulysses) is not modelled"),
    (dict(seq=4096, cp=3), "gpus=8 is not a multiple of tp*pp*cp=3"),
])
def test_refusals(kw, words):
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)").replace("*", r"\*")):
        make_workload(**{**TITAN, **kw})


def test_inference_and_encoders_are_refused():
    with pytest.raises(ConfigError, match="context parallelism is modelled for training"):
        make_workload(mode="inference", gpus=2, cp=2, seq=4096)
    with pytest.raises(ConfigError, match="decoder-only causal LMs"):
        estimate("bert-base-uncased", mode="train", gpus=2, cp=2, seq=512)


def test_fit_and_trace_refuse_it(llama8b):
    from vramlens import fit

    with pytest.raises(InputError, match="fit does not search context parallelism"):
        fit(llama8b, gpu="H100-SXM-80GB", **{**TITAN, "seq": 65_536, "cp": 2})
    w = make_workload(**TITAN, seq=65_536, cp=2)
    assert dataclasses.replace(w, cp=1).problems() == []


def test_trace_refuses_it():
    pytest.importorskip("torch", reason="the tracer needs torch")
    from vramlens.errors import TraceError
    from vramlens.trace import trace

    with pytest.raises(TraceError, match="context parallelism is not traced"):
        trace("llama-3.1-8b", **{**TITAN, "seq": 65_536, "cp": 2})
