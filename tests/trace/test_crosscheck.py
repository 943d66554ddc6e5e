"""The estimate against the trace on the matrix of shrunk architectures (vramlens validate trace)."""

import json

import pytest

from vramlens.trace.crosscheck import ARCHITECTURES, ROWS, render, run_matrix, skipped, tiny_config

pytestmark = pytest.mark.slow  # the cross-check fixture traces every row: minutes on 2 cores

# Weights, gradients and optimizer states agree exactly on every row.
AGREEING = ("weights", "gradients", "optimizer_states")


def _key(r):
    w = r.workload
    return (r.model, w["mode"], w["method"], w["attention"], w["checkpointing"], w.get("amp"))


#: Disagreements still open, each with what causes it. The test below fails on any other
#: disagreement, and on a listed one that no longer disagrees (so the list only shrinks).
KNOWN_GAPS: dict[tuple, tuple[str, ...]] = {
    # ELECTRA with LoRA under autocast: the forward's own transients (the attention probabilities'
    # fp32 dropout output, the frozen MLP's activation output, the LayerNorms' fp32 outputs, none
    # kept for backward) peak above the block backward the estimate counts as temporaries; the
    # one-logit discriminator head has no loss transient to hide them (peak within 2%)
    ("electra-small-discriminator", "train", "lora", "eager", "none", "bf16"): ("temporaries",),
    # Gemma's blocks under autocast with every block checkpointed: the backward phase is 4.4 MiB (7.8%) under
    # the trace (Gemma 3 1B: 4.1 MiB, 6.0%, within the bounds), so its largest temporaries are 11.5% under; the
    # peak, in the optimizer step, is exact. The recomputed block's backward under CUDA autocast's policy with
    # the sandwich norms' fp32 weights is the candidate; not explained yet
    ("gemma-2-2b", "train", "full", "eager", "full", "bf16"): ("temporaries",),
}


def disagreements(rows) -> dict[tuple, set[str]]:
    out: dict[tuple, set[str]] = {}
    for r in rows:
        bad = set()
        if abs(r.peak_error) > 0.05:
            bad.add("peak")
        for c in r.traced:
            e = r.component_error(c)
            if e is not None and abs(e) > 0.10:
                bad.add(c)
        if bad:
            out[_key(r)] = bad
    return out


@pytest.fixture(scope="module")
def rows():
    return run_matrix()


def test_matrix_covers_the_families():
    assert len(ARCHITECTURES) >= 8
    kinds = {tiny_config(n).get("model_type") for n in ARCHITECTURES}
    assert {"llama", "qwen2", "mixtral", "gpt2", "gpt_bigcode", "bert", "t5", "gpt_neox", "gemma3_text", "deepseek_v3",
            "olmo2", "gpt_oss", "llama4_text", "gemma2"} <= kinds
    assert {"distilbert", "xlm-roberta", "electra", "deberta-v2", "modernbert"} <= kinds
    # the shrunk Gemma 3 keeps a local and a global block, its window shorter than the sequence; the shrunk
    # DeepSeek-V3 a dense and an MoE block
    from vramlens.models import spec_from_config
    from vramlens.trace.crosscheck import SEQ

    g = spec_from_config(tiny_config("gemma-3-1b-it"))
    assert g.sliding_layer_ids == (0,) and g.sliding_window is not None and g.sliding_window < SEQ
    d = spec_from_config(tiny_config("deepseek-v3"))
    assert d.dense_layer_ids == (0,) and d.mla is not None and d.mla.q_lora_rank is not None
    # the shrunk gpt-oss keeps a sliding and a full block, its sinks, top-2 of 4 experts, and no SDPA
    o = spec_from_config(tiny_config("gpt-oss-20b"))
    assert o.sliding_layer_ids == (0,) and o.sliding_window is not None and o.sliding_window < SEQ
    assert o.attention_sinks and not o.sdpa and (o.n_experts, o.experts_per_token) == (4, 2)
    # the shrunk Llama 4 keeps a chunked rotary block with a dense MLP and a global NoPE block with the MoE
    m = spec_from_config(tiny_config("llama-4-scout"))
    assert m.sliding_layer_ids == (0,) and m.sliding_window is not None and m.sliding_window < SEQ
    assert m.local_attention == "chunked" and m.nope_layer_ids == (1,) and m.dense_layer_ids == (0,)
    assert m.experts_see_all_tokens and (m.n_experts, m.experts_per_token) == (4, 1) and m.qk_norm == "l2"
    axes = {(r["mode"], r["method"], r["attention"], r["checkpointing"], r.get("amp")) for r in ROWS}
    assert {a[0] for a in axes} == {"inference", "train"} and {a[1] for a in axes} == {"full", "lora"}
    assert {a[2] for a in axes} == {"eager", "sdpa"} and {a[3] for a in axes} == {"none", "full", "selective"}
    assert {a[4] for a in axes} == {None, "bf16"}


@pytest.mark.parametrize("row", [r for r in ROWS if not skipped("gpt-oss-20b", r)],
                         ids=lambda r: f"{r['mode']}-{r['method']}-{r['attention']}-{r['checkpointing']}")
def test_gpt_oss_rows(row):
    """gpt-oss alone (its bf16 rows: inference, full and LoRA training): peak within 5%, components 10%."""
    from vramlens.trace.crosscheck import run_row

    r = run_row("gpt-oss-20b", row)
    assert not disagreements([r]), render([r])
    for c in AGREEING:
        assert r.estimate[c] == r.traced[c], (r.workload, c)


@pytest.mark.parametrize("row", [r for r in ROWS if not skipped("llama-4-scout", r)],
                         ids=lambda r: f"{r['mode']}-{r['method']}-{r['attention']}-{r['checkpointing']}")
def test_llama4_rows(row):
    """Llama 4 alone (its bf16 rows: inference, full and LoRA training, selective recomputation): peak within 5%,
    components 10%."""
    from vramlens.trace.crosscheck import run_row

    r = run_row("llama-4-scout", row)
    assert not disagreements([r]), render([r])
    for c in AGREEING:
        assert r.estimate[c] == r.traced[c], (r.workload, c)


def test_state_components_agree_on_every_row(rows):
    assert len(rows) == sum(1 for n in ARCHITECTURES for r in ROWS if not skipped(n, r))
    for r in rows:
        for c in AGREEING:
            err = r.component_error(c)
            assert err is None or abs(err) <= 0.10, (r.model, r.workload, c, err)


def test_estimate_within_5_percent_of_trace_on_every_row(rows):
    """Peak within 5% and each component within 10%, except the gaps listed (and explained) above."""
    found = disagreements(rows)
    unexpected = {k: v - set(KNOWN_GAPS.get(k, ())) for k, v in found.items()}
    unexpected = {k: v for k, v in unexpected.items() if v}
    assert not unexpected, render(rows)
    fixed = {k: set(v) - found.get(k, set()) for k, v in KNOWN_GAPS.items()}
    fixed = {k: v for k, v in fixed.items() if v}
    assert not fixed, f"these no longer disagree; drop them from KNOWN_GAPS: {fixed}"


def test_most_rows_agree_fully(rows):
    assert len(disagreements(rows)) <= len(KNOWN_GAPS) and len(rows) >= 54
    assert sorted(abs(r.peak_error) for r in rows)[len(rows) // 2] < 0.02  # median peak error


def test_cli_json(capsys):
    from vramlens.cli.main import main

    assert main(["validate", "trace", "--models", "gpt2", "--json", "--quiet"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out) == len(ROWS)
    assert set(out[0]["components"]["weights"]) == {"estimate", "traced", "error"}


def test_cli_unknown_model(capsys):
    from vramlens.cli.main import main

    assert main(["validate", "trace", "--models", "nope"]) == 2
    assert "not in the cross-check matrix" in capsys.readouterr().err


# --- task heads (--task) ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def task_rows():
    from vramlens.trace.crosscheck import run_task_rows

    return run_task_rows()


def test_task_rows_cover_the_heads():
    from vramlens.trace.crosscheck import TASK_ROWS

    tasks = {(name, row["task"]) for name, row in TASK_ROWS}
    assert {("bert-base-uncased", "embedding"), ("roberta-base", "sequence-classification"),
            ("bert-base-uncased", "token-classification"), ("gpt2", "causal-lm")} <= tasks
    amp = {(name, row["task"]) for name, row in TASK_ROWS if row.get("amp") and row.get("checkpointing") == "none"}
    assert {("gpt2", "causal-lm"), ("bert-base-uncased", "masked-lm")} <= amp
    assert {name for name, _ in TASK_ROWS} >= {"distilbert-base-uncased", "electra-small-discriminator",
                                               "deberta-v3-base", "modernbert-base"}


def test_task_rows_within_5_percent_of_trace(task_rows):
    """Every task row: peak within 5%, every component within 10%, state components exact."""
    assert not disagreements(task_rows), render(task_rows)
    for r in task_rows:
        for c in AGREEING:
            assert r.estimate[c] == r.traced[c], (r.model, r.workload, c)


def test_explicit_causal_lm_equals_the_config_default(task_rows):
    from vramlens.trace.crosscheck import run_row

    explicit = next(r for r in task_rows if r.workload.get("task") == "causal-lm")
    row = {k: v for k, v in explicit.workload.items() if k not in ("task", "batch", "seq")}
    default = run_row("gpt2", row)
    assert (default.estimate, default.traced) == (explicit.estimate, explicit.traced)


def test_full_size_bert_embedding_fine_tune():
    """The issue's case: bert-base-uncased as a sentence-transformers model, 16 pairs x 512, fp32, AdamW."""
    from vramlens.trace.crosscheck import FULL_SIZE_ROWS, run_full_size_row

    (name, row), = FULL_SIZE_ROWS
    r = run_full_size_row(name, row)
    # open gap: at 16 x 512 the first column's backward holds more than the MLP's three tensors
    # (traced temporaries 652.6 MB, estimated 570.8 MB); the listed gap must still be there
    found = disagreements([r]).get(_key(r), set())
    assert found == {"temporaries"}, render([r])
    # the activations of two forwards of 16 x 512 tokens dwarf the 110M-parameter model's state
    assert r.traced["activations"] > 5 * (r.traced["weights"] + r.traced["gradients"]
                                          + r.traced["optimizer_states"])

