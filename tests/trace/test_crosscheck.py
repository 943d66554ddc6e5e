"""The estimate against the trace on the matrix of shrunk architectures (vramlens validate trace)."""

import json

import pytest

from vramlens.trace.crosscheck import ARCHITECTURES, ROWS, render, run_matrix, skipped, tiny_config

# State when written (see validation/trace-crosscheck.json): weights, gradients and optimizer
# states agree exactly on every row; activations, temporaries, the autocast cache and the KV
# cache's DynamicCache transient do not yet (the estimator's side; see the issue-3 report).
AGREEING = ("weights", "gradients", "optimizer_states")


@pytest.fixture(scope="module")
def rows():
    return run_matrix()


def test_matrix_covers_the_families():
    assert len(ARCHITECTURES) >= 8
    kinds = {tiny_config(n).get("model_type") for n in ARCHITECTURES}
    assert {"llama", "qwen2", "mixtral", "gpt2", "gpt_bigcode", "bert", "t5"} <= kinds
    axes = {(r["mode"], r["method"], r["attention"], r["checkpointing"], r.get("amp")) for r in ROWS}
    assert {a[0] for a in axes} == {"inference", "train"} and {a[1] for a in axes} == {"full", "lora"}
    assert {a[2] for a in axes} == {"eager", "sdpa"} and {a[3] for a in axes} == {"none", "full"}
    assert {a[4] for a in axes} == {None, "bf16"}


def test_state_components_agree_on_every_row(rows):
    assert len(rows) == sum(1 for n in ARCHITECTURES for r in ROWS if not skipped(n, r))
    for r in rows:
        for c in AGREEING:
            err = r.component_error(c)
            assert err is None or abs(err) <= 0.10, (r.model, r.workload, c, err)


@pytest.mark.xfail(reason="estimator activations/temporaries/autocast cache/KV transient disagree with the trace; "
                          "see validation/trace-crosscheck.json", strict=False)
def test_estimate_within_5_percent_of_trace_on_every_row(rows):
    bad = [(r.model, r.workload, round(r.peak_error, 4)) for r in rows if abs(r.peak_error) > 0.05]
    bad += [(r.model, r.workload, c, r.component_error(c)) for r in rows for c in r.traced
            if (e := r.component_error(c)) is not None and abs(e) > 0.10]
    assert not bad, render(rows)


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
