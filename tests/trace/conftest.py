import pytest

pytest.importorskip("torch", reason="tracing needs the trace extra (torch)")
pytest.importorskip("transformers", reason="tracing needs the trace extra (transformers)")


def tiny_llama(layers: int = 2, **over) -> dict:
    """A Llama config at tiny sizes (GQA: 4 query heads, 2 KV heads)."""
    cfg = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 128,
        "intermediate_size": 344, "num_hidden_layers": layers, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 256,
        "tie_word_embeddings": False,
    }
    cfg.update(over)
    return cfg


def check_rows(rows, peak: float = 0.05, component: float = 0.10) -> None:
    """The cross-check's bar: every row's peak within ``peak`` of the trace, each traced component within
    ``component`` (vramlens.trace.crosscheck rows)."""
    from vramlens.trace.crosscheck import render

    assert rows
    for r in rows:
        assert abs(r.peak_error) <= peak, render(rows)
        for c in r.traced:
            err = r.component_error(c)
            assert err is None or abs(err) <= component, (c, render(rows))
