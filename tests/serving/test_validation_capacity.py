"""vramlens validate capacity: the published cases load, and each figure's error is predicted / logged - 1."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vramlens.errors import ConfigError, InputError
from vramlens.serving.validation import run_cases, summarize

CASES = Path(__file__).resolve().parents[2] / "validation" / "capacity-cases.json"


def test_every_case_names_its_source_quote_version_and_settings():
    cases = json.loads(CASES.read_text())
    assert len(cases) >= 30
    assert {c["engine"] for c in cases} == {"vllm", "sglang", "llama.cpp"}
    for c in cases:
        assert c["source"].startswith("https://") and c["quote"] and c["engine_version"] and c["settings"] is not None


def test_weights_within_one_percent_where_the_log_counts_parameters():
    # vLLM's "Model loading took" is PyTorch's allocated memory and llama.cpp's model buffer the tensors' bytes;
    # SGLang's "mem usage" is a drop in free memory: the caching allocator's segments (serving.sglang.load_bytes)
    for r in run_cases(json.loads(CASES.read_text())):
        for c in r.checks:
            if c.key in ("weights_gib", "model_buffer_mib") and c.error is not None:
                assert abs(c.error) < 0.01, (r.id, c)


def test_every_refusal_is_predicted():
    results = run_cases(json.loads(CASES.read_text()))
    assert all(r.agrees for r in results), [r.id for r in results if not r.agrees]
    assert sum(r.engine_refused for r in results) >= 4


def test_the_kv_cache_of_most_cases_within_three_percent():
    # the target for KV tokens; what misses it is explained in each case's note (NCCL and custom
    # all-reduce buffers at tp > 1, MoE workspaces, catalog GPU totals)
    by_engine = {s.engine: s for s in summarize(run_cases(json.loads(CASES.read_text())))}
    assert by_engine["vllm"].kv_within_3 >= 0.6
    assert by_engine["llama.cpp"].kv_within_3 == 1.0
    # SGLang: 6 of 9 since the engines start from CUDA's total (5 of 9 from nvidia-smi's; 3 of 8 before the load
    # counted the allocator's segments and the fp32 rotary cache)
    assert by_engine["sglang"].kv_within_3 >= 0.5


def test_summary_counts_each_engine():
    case = {"id": "t", "engine": "vllm", "engine_version": "x", "source": "https://x", "quote": "q",
            "model": "llama-2-7b", "gpu": "A100-80GB", "settings": {"version": "0.6.4"},
            "logged": {"weights_gib": 12.55, "num_gpu_blocks": 7_000}}
    (s,) = summarize(run_cases([case]))
    # weights 12.55 GiB exact to 0.1%; blocks 7,432 / 7,000 - 1 = +6.2% (test_vllm_0_6_4_llama2_7b_a100)
    assert (s.engine, s.cases, s.figures, s.kv_cases) == ("vllm", 1, 2, 1)
    assert s.kv_median_abs_error == pytest.approx(7_432 / 7_000 - 1)
    assert s.within_10 == 1.0 and s.kv_within_3 == 0.0


def test_a_setting_error_is_a_refusal_only_where_the_engine_refused():
    case = {"id": "t", "engine": "vllm", "engine_version": "x", "source": "https://x", "quote": "q",
            "model": "phi-2", "gpu": "A100-80GB", "settings": {"max_model_len": 8192}, "logged": {}}
    with pytest.raises(ConfigError):
        run_cases([case])
    (r,) = run_cases([dict(case, refused=True)])
    assert r.agrees and r.refusal.startswith("User-specified max_model_len (8192) is greater than")


def test_error_is_predicted_over_logged():
    case = {"id": "t", "engine": "vllm", "engine_version": "x", "source": "https://x", "quote": "q",
            "model": "llama-2-7b", "gpu": "A100-80GB", "settings": {}, "logged": {"weights_gib": 10.0}}
    (r,) = run_cases([case])
    # llama-2-7b in fp16: 6,738,415,616 params x 2 B = 12.55 GiB
    assert r.checks[0].predicted == pytest.approx(12.55, abs=0.01)
    assert r.checks[0].error == pytest.approx(r.checks[0].predicted / 10.0 - 1)


def test_a_refusal_is_reported_not_compared():
    cases = [c for c in json.loads(CASES.read_text()) if c["id"] == "vllm-llama3.1-8b-rtx3090-29k"]
    (r,) = run_cases(cases)
    assert r.refusal.startswith("The model's max seq len (29000) is larger than")
    assert all(c.predicted is None and c.error is None for c in r.checks)


def test_bad_cases_are_all_named():
    with pytest.raises(InputError) as e:
        run_cases([{"id": "a", "logged": {"nope": 1}}])
    assert "case 'a': missing 'engine'" in str(e.value) and "logged figure 'nope' is not one of" in str(e.value)


def test_cli_prints_every_case(tmp_path):
    out = subprocess.run([sys.executable, "-m", "vramlens", "validate", "capacity", "--json"], capture_output=True,
                         text=True, check=True).stdout
    rows = json.loads(out)
    assert [r["id"] for r in rows] == [c["id"] for c in json.loads(CASES.read_text())]
