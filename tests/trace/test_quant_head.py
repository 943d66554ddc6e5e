"""--quant-head and --dequant-dtype fp16 at full size: Llama 2 7B (its 32,000 x 4,096 output layer dequantized
is 250 MiB) traced on 3 layers with NF4 modules that allocate as bitsandbytes' MatMul4Bit, against the estimate:
peak within 5%, every component within 10% (measured: peak +0.06% to +0.08% in training, +0.01% and -0.00% in
inference; weights exact, temporaries within 512 B)."""

import pytest

pytest.importorskip("torch", reason="the tracer runs the real model under fake tensors")
pytest.importorskip("transformers", reason="the tracer builds transformers' LlamaForCausalLM")
pytest.importorskip("peft", reason="QLoRA's adapters come from peft")

from vramlens.errors import TraceError  # noqa: E402
from vramlens.trace.crosscheck import (  # noqa: E402
    QUANT_HEAD_FULL_SIZE_ROWS,
    render,
    run_full_size_rows,
    tiny_config,
)

pytestmark = pytest.mark.slow


def test_quant_head_at_full_size_matches_trace():
    rows = run_full_size_rows(QUANT_HEAD_FULL_SIZE_ROWS)
    assert len(rows) == 5
    for r in rows:
        assert abs(r.peak_error) <= 0.05, render(rows)
        for c in r.traced:
            err = r.component_error(c)
            assert err is None or abs(err) <= 0.10, (c, render(rows))
        assert r.estimate["weights"] == r.traced["weights"] == 3_687_982_080, render(rows)
    # the head's backward: the logits' gradient (512 x 32,000 bf16 = 32,768,000 B), the dequantized weight
    # (262,144,000 B) and the input's gradient (4,194,304 B); with fp16 dequantization the fp16 weight instead
    plain, fp16 = rows[0], rows[1]
    assert plain.estimate["temporaries"] == 32_768_000 + 262_144_000 + 4_194_304
    assert fp16.estimate["temporaries"] == 32_768_000 + 2 * 262_144_000
    assert abs(fp16.traced["temporaries"] - fp16.estimate["temporaries"]) <= 512


def test_a_classifier_head_is_not_quantized_by_the_tracer():
    from vramlens.trace import trace

    with pytest.raises(TraceError) as e:
        trace(tiny_config("bert-base-uncased"), mode="inference", method="qlora", quant_head=True, seq=16,
              lora_targets=("query", "value"), task="sequence-classification")
    assert str(e.value) == ("quant_head quantizes a causal LM's output layer (lm_head); BertForSequenceClassification "
                            "runs sequence-classification: drop --quant-head")
