"""A padded batch (Workload.padded) traced: the runner feeds an attention_mask whose last row ends in zeros, and what
that adds to each phase's peak equals what the estimate adds (tiny configs of vramlens.trace.crosscheck)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="tracing needs the trace extra (torch)")
pytest.importorskip("transformers", reason="tracing needs the trace extra (transformers)")

_SDPA = dict(mode="train", method="full", attention="sdpa", checkpointing="none", dtype="bf16")
# GQA under SDPA (Llama 3's 4:1, Qwen2.5's 7:1 under autocast, Gemma 3's sliding and global blocks), full, LoRA,
# checkpointed, selective, held outputs, eager, a prefill; Pythia's head-major output (MHA)
ROWS = [
    ("llama-3-8b", _SDPA),
    ("llama-3-8b", dict(_SDPA, checkpointing="full")),
    ("llama-3-8b", dict(_SDPA, method="lora")),
    ("llama-3-8b", dict(_SDPA, attention="eager")),
    ("llama-3-8b", dict(_SDPA, checkpointing="selective")),
    ("llama-3-8b", dict(_SDPA, method="lora", holds_outputs="next-forward")),
    ("llama-3-8b", dict(_SDPA, mode="inference", new_tokens=0)),
    ("gemma-3-1b-it", _SDPA),
    ("qwen2.5-0.5b", dict(_SDPA, dtype="fp32", amp="bf16")),
    ("qwen2.5-0.5b", dict(_SDPA, holds_outputs="next-forward")),
    ("pythia-160m", dict(_SDPA, method="lora")),
    ("pythia-160m", dict(_SDPA, holds_outputs="next-forward")),
]


def _deltas(name: str, row: dict) -> tuple[dict[str, int], dict[str, int]]:
    from vramlens.trace.crosscheck import run_row

    plain, padded = run_row(name, row), run_row(name, {**row, "padded": True})
    traced = {p: padded.traced_phases[p] - plain.traced_phases[p] for p in plain.traced_phases if p != "setup"}
    estimated = {p: padded.estimate_phases[p] - plain.estimate_phases[p] for p in plain.estimate_phases}
    return traced, estimated


def test_padding_adds_what_the_estimate_adds():
    """Pythia-160m under SDPA: the memory-efficient kernel keeps each block's additive mask, and its (b, s, a, d)
    output spares the copy back of GPT-NeoX's head-major output (a saving where flash ran)."""
    traced, estimated = _deltas("pythia-160m", dict(_SDPA))
    assert traced == estimated, (traced, estimated)


@pytest.mark.slow  # twelve rows, each traced with and without padding (about a minute on 2 cores)
@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r[0]}-" + "-".join(f"{k}={v}" for k, v in r[1].items()
                                                                         if v != _SDPA.get(k)))
def test_padding_adds_what_the_estimate_adds_per_phase(row):
    traced, estimated = _deltas(*row)
    assert traced == estimated, (traced, estimated)


def test_the_mask_check_answers_no_for_a_padded_mask():
    """masking_utils._ignore_causal_mask_sdpa under fake tensors: an unpadded mask is skipped (is_causal), a padded
    one is not, as fast_all answers on CUDA."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from transformers import masking_utils

    from vramlens.trace.masks import masks_as_cuda

    with FakeTensorMode():
        mask = torch.ones(2, 16, dtype=torch.bool)
        for padded, skipped in ((False, True), (True, False)):
            with masks_as_cuda(padded):
                pm = masking_utils.prepare_padding_mask(mask, 16, 0)
                assert masking_utils._ignore_causal_mask_sdpa(pm, 16, 16, 0, 0) is skipped


def test_padded_is_refused_where_it_is_not_traced():
    from vramlens.errors import TraceError
    from vramlens.trace import trace
    from vramlens.trace.crosscheck import tiny_config

    with pytest.raises(TraceError) as e:
        trace(tiny_config("bert-base-uncased"), mode="train", padded=True, steps=1)
    assert str(e.value) == "padded is traced for a text causal LM's batch; this model runs masked-lm: drop --padded"


@pytest.mark.slow  # full-size models, each traced twice (about 30 s on 2 cores)
@pytest.mark.parametrize("name", ["qwen2.5-0.5b", "pythia-70m"])
def test_full_size_padding_matches_per_phase(name):
    """At full size: Qwen2.5 0.5B (GQA 7:1) and Pythia-70m (multi-head, head-major output), 2 x 256 tokens in bf16."""
    from vramlens.estimator import estimate
    from vramlens.trace import trace

    kw = dict(mode="train", dtype="bf16", batch=2, seq=256, attention="sdpa", optimizer="adamw")
    deltas = []
    for run in (trace, estimate):
        plain, padded = (dict(run(name, **kw, padded=p, **({"steps": 2} if run is trace else {})).breakdown.phases)
                         for p in (False, True))
        deltas.append({p: padded[p] - plain[p] for p in ("forward", "backward", "optimizer")})
    assert deltas[0] == deltas[1], deltas
