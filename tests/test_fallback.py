"""vramlens.estimate for a model_type no family models: traced as `vramlens trace --layers 3`, cached on disk.

StableLM is the architecture: transformers 5 builds it on CPU under fake tensors, and vramlens has no
family for it (LayerNorm with biases, partial rotary: a generic Llama-style guess would be wrong).
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import vramlens
import vramlens.trace
from tiny_configs import TINY_LLAMA
from vramlens.cli.main import main
from vramlens.errors import MissingExtraError, UnmodelledModelError
from vramlens.fallback import CACHE_KIND, cache_key
from vramlens.models import SUPPORTED_MODEL_TYPES
from vramlens.workload import make_workload

#: A StableLM at tiny sizes: 6 blocks, so the fallback traces 2 and 3 of them and extrapolates.
TINY_STABLELM = {
    "architectures": ["StableLmForCausalLM"], "model_type": "stablelm", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 256,
    "max_position_embeddings": 256, "partial_rotary_factor": 0.25, "bos_token_id": 0, "eos_token_id": 0,
}
#: GPT-J's config names its sizes n_embd/n_layer/n_head: not even a generic decoder can be built from it.
TINY_GPTJ = {
    "architectures": ["GPTJForCausalLM"], "model_type": "gptj", "n_embd": 64, "n_layer": 5, "n_head": 4,
    "rotary_dim": 8, "vocab_size": 256, "n_positions": 128, "bos_token_id": 0, "eos_token_id": 0,
}
TRAIN = {"mode": "train", "batch": 2, "seq": 32, "dtype": "fp32"}
INFER = {"mode": "inference", "batch": 1, "seq": 16, "dtype": "fp32"}
NOT_MODELLED = "figures traced (model_type stablelm is not modelled analytically): "


def needs_torch():
    pytest.importorskip("torch", reason="tracing needs the trace extra (torch)")
    pytest.importorskip("transformers", reason="tracing needs the trace extra (transformers)")


def trace_only_once(monkeypatch) -> list:
    """Patch the public vramlens.trace.trace so that a second call fails the test; returns the calls."""
    real = vramlens.trace.trace
    calls: list = []

    def once(*args, **kwargs):
        calls.append(args)
        if len(calls) > 1:
            raise AssertionError("vramlens.trace.trace called again: the cache was not used")
        return real(*args, **kwargs)

    monkeypatch.setattr(vramlens.trace, "trace", once)
    return calls


def never_trace(monkeypatch) -> None:
    def fail(*args, **kwargs):
        raise AssertionError("vramlens.trace.trace called")

    monkeypatch.setattr(vramlens.trace, "trace", fail)


def test_stablelm_and_gptj_are_not_modelled():
    assert "stablelm" not in SUPPORTED_MODEL_TYPES and "gptj" not in SUPPORTED_MODEL_TYPES


# ---- the traced figures are trace's ----------------------------------------------------------------

@pytest.fixture(scope="module")
def train_pair(tmp_path_factory):
    """The fallback's training estimate of TINY_STABLELM and `trace --layers 3` of the same workload."""
    needs_torch()
    mp = pytest.MonkeyPatch()
    mp.setenv("VRAMLENS_HOME", str(tmp_path_factory.mktemp("home")))
    try:
        est = vramlens.estimate(TINY_STABLELM, gpu="T4", **TRAIN)
        res = vramlens.trace.trace(TINY_STABLELM, layers=3, **TRAIN)
    finally:
        mp.undo()
    return est, res


def test_fallback_estimate_equals_trace_layers_3(train_pair):
    est, res = train_pair
    b, t = est.breakdown, res.breakdown
    assert b.source == t.source == "trace-extrapolated"
    assert b.peak_allocated == t.peak_allocated and b.peak_reserved == t.peak_reserved
    assert b.peak_phase == t.peak_phase and b.phases == t.phases
    assert {c: v for c, v in b.as_dict().items() if c != "runtime"} == {
        c: v for c, v in t.as_dict().items() if c != "runtime"}
    # the trace adds the runtime of its own reference GPU; the fallback replaces it with the asked GPU's, once
    assert b["runtime"] > 0 and b.device_total == b.peak_reserved + b["runtime"]
    assert (est.model.params, est.trainable_params) == (res.params, res.trainable_params)


def test_fallback_figures(train_pair):
    """The figures themselves, so that a change in the tracer shows here too."""
    est, _res = train_pair
    # params: embed 256*64 + 6 blocks x (q,k,v 3*64*64 (use_qkv_bias is off by default) + o 64*64
    # + MLP 3*64*128 + 2 LayerNorms with biases 2*2*64) + final LayerNorm 2*64 + lm_head 256*64
    assert est.model.params == 16_384 + 6 * (12_288 + 4_096 + 24_576 + 256) + 128 + 16_384 == 280_192
    assert est.breakdown.as_dict() == {
        "weights": 1_128_448, "master_weights": 0, "gradients": 1_127_424, "optimizer_states": 2_254_848,
        "activations": 1_700_352, "kv_cache": 0, "temporaries": 1_127_424, "comm_buffers": 0,
        "runtime": est.breakdown["runtime"],
    }
    assert est.peak_allocated == 5_638_144 and est.breakdown.peak_phase == "optimizer"
    assert est.layer_activation_bytes == 266_240  # the activations' slope between the 2- and 3-block traces


def test_fallback_says_it_traced(train_pair):
    est, _res = train_pair
    notes = est.breakdown.notes
    assert notes[0] == (NOT_MODELLED + "StableLmForCausalLM built by transformers under fake tensors, its first 2 "
                        "and 3 of 6 blocks traced at this workload and extrapolated linearly, as `vramlens trace "
                        "--layers 3`; the runtime (CUDA context, workspaces) is added from the GPU catalog")
    assert notes[-1] == f"cached in $VRAMLENS_HOME/{CACHE_KIND}/{cache_key(TINY_STABLELM, make_workload(**TRAIN))}.json"
    d = est.to_dict()
    assert d["model"]["source"] == "config+trace" and d["model"]["architecture"] == "StableLmForCausalLM"
    assert d["fits"] is True and d["verdict"].startswith("fits (T4): ")


def test_json_has_the_keys_of_an_analytic_estimate(train_pair):
    est, _res = train_pair
    d, ref = est.to_dict(), vramlens.estimate(TINY_LLAMA, gpu="T4", **TRAIN).to_dict()
    assert sorted(d) == sorted(ref)
    assert sorted(d["model"]) == sorted(ref["model"]) and sorted(d["components"]) == sorted(ref["components"])


# ---- the cache -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cached_home(tmp_path_factory):
    """A VRAMLENS_HOME holding the traced profile of TINY_STABLELM at INFER (traced once, here)."""
    needs_torch()
    home = tmp_path_factory.mktemp("cached")
    mp = pytest.MonkeyPatch()
    mp.setenv("VRAMLENS_HOME", str(home))
    try:
        first = vramlens.estimate(TINY_STABLELM, **INFER)
    finally:
        mp.undo()
    return home, first


def copy_home(cached_home, tmp_path, monkeypatch) -> Path:
    home, _first = cached_home
    shutil.copytree(home, tmp_path / "home")
    monkeypatch.setenv("VRAMLENS_HOME", str(tmp_path / "home"))
    return tmp_path / "home" / CACHE_KIND / f"{cache_key(TINY_STABLELM, make_workload(**INFER))}.json"


def test_second_call_answers_from_the_cache(tmp_path, monkeypatch):
    needs_torch()
    monkeypatch.setenv("VRAMLENS_HOME", str(tmp_path))
    calls = trace_only_once(monkeypatch)
    first = vramlens.estimate(TINY_STABLELM, **INFER)
    second = vramlens.estimate(TINY_STABLELM, **INFER)  # a second trace would raise
    assert len(calls) == 1
    assert second.breakdown.components == first.breakdown.components
    assert (second.peak_allocated, second.device_total, second.model.params) == (
        first.peak_allocated, first.device_total, first.model.params)
    assert second.model.tensors == first.model.tensors
    key = cache_key(TINY_STABLELM, make_workload(**INFER))
    assert first.breakdown.notes[-1] == f"cached in $VRAMLENS_HOME/traced/{key}.json"
    assert second.breakdown.notes[-1] == f"answered from the cache $VRAMLENS_HOME/traced/{key}.json"
    assert (tmp_path / "traced" / f"{key}.json").is_file()


def test_another_workload_or_config_or_version_is_another_key(monkeypatch):
    w = make_workload(**INFER)
    key = cache_key(TINY_STABLELM, w)
    assert key == cache_key(dict(reversed(TINY_STABLELM.items())), make_workload(**INFER))
    assert key != cache_key(TINY_STABLELM, w.replace(batch=2))
    assert key != cache_key({**TINY_STABLELM, "num_hidden_layers": 7}, w)
    monkeypatch.setattr(vramlens, "__version__", "99.0.0")
    assert key != cache_key(TINY_STABLELM, w)


def test_a_corrupt_cache_file_is_ignored_with_a_note(cached_home, tmp_path, monkeypatch):
    path = copy_home(cached_home, tmp_path, monkeypatch)
    path.write_text('{"key": "' + path.stem + '", "value": {"format": 1, "breakdown"')  # cut short
    calls = trace_only_once(monkeypatch)
    est = vramlens.estimate(TINY_STABLELM, **INFER)
    assert len(calls) == 1  # traced again
    shown = f"$VRAMLENS_HOME/traced/{path.name}"
    ignored, cached = [n for n in est.breakdown.notes if "cache" in n]
    assert ignored.startswith(f"cache file {shown} ignored (not valid JSON") and cached == f"cached in {shown}"
    assert est.peak_allocated == cached_home[1].peak_allocated
    again = vramlens.estimate(TINY_STABLELM, **INFER)  # the file was rewritten whole: no trace (it would raise)
    assert again.breakdown.notes[-1] == f"answered from the cache {shown}"


def test_a_cache_entry_missing_fields_is_ignored_with_a_note(cached_home, tmp_path, monkeypatch):
    path = copy_home(cached_home, tmp_path, monkeypatch)
    doc = json.loads(path.read_text())
    del doc["value"]["breakdown"]["components"]
    path.write_text(json.dumps(doc))
    calls = trace_only_once(monkeypatch)
    est = vramlens.estimate(TINY_STABLELM, **INFER)
    assert len(calls) == 1
    assert f"cache file $VRAMLENS_HOME/traced/{path.name} ignored (not a complete traced profile)" in \
        est.breakdown.notes


def test_cli_json_and_web_job_answer_from_the_cache(cached_home, tmp_path, monkeypatch, capsys):
    path = copy_home(cached_home, tmp_path, monkeypatch)
    never_trace(monkeypatch)
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY_STABLELM))
    code = main(["estimate", str(cfg), "--mode", "inference", "--batch", "1", "--seq", "16", "--dtype", "fp32",
                 "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    d = json.loads(out)
    first = cached_home[1].to_dict()
    assert (d["peak_allocated_bytes"], d["components"]) == (first["peak_allocated_bytes"], first["components"])
    assert d["notes"][0].startswith(NOT_MODELLED)
    assert d["notes"][-1] == f"answered from the cache $VRAMLENS_HOME/traced/{path.name}"
    from vramlens.web.jobs import estimate_job

    top = {"gpu": None, "params": None, "headroom": 0.1}
    web = estimate_job(TINY_STABLELM, top, dict(INFER))
    assert web["components"] == first["components"] and web["notes"][0].startswith(NOT_MODELLED)


# ---- what is not traced ----------------------------------------------------------------------------

def test_a_modelled_family_is_never_traced(monkeypatch):
    never_trace(monkeypatch)
    from vramlens.estimator import estimate as analytic

    assert vramlens.estimate(TINY_LLAMA, gpu="T4", **TRAIN).to_dict() == analytic(TINY_LLAMA, gpu="T4", **TRAIN).to_dict()


def test_no_trace_fallback_keeps_the_generic_decoder(monkeypatch, capsys, tmp_path):
    never_trace(monkeypatch)
    est = vramlens.estimate(TINY_STABLELM, trace_fallback=False, **TRAIN)
    assert est.breakdown.source == "estimate"
    assert est.model.assumed[0].startswith("model_type 'stablelm' is not known to vramlens: built as a generic")
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY_GPTJ))
    assert main(["estimate", str(cfg), "--no-trace-fallback"]) == 2
    assert capsys.readouterr().err.startswith(f"error: {cfg}: model_type 'gptj' is not supported and the config lacks")


def test_a_model_type_transformers_does_not_know_keeps_the_generic_decoder(monkeypatch):
    needs_torch()
    never_trace(monkeypatch)
    est = vramlens.estimate({**TINY_STABLELM, "model_type": "mything"}, **TRAIN)
    assert est.breakdown.source == "estimate"
    with pytest.raises(UnmodelledModelError, match="model_type 'mything2' is not supported"):
        vramlens.estimate({**TINY_GPTJ, "model_type": "mything2"}, **TRAIN)


def test_gptj_without_generic_fields_is_traced(tmp_path, monkeypatch):
    needs_torch()
    monkeypatch.setenv("VRAMLENS_HOME", str(tmp_path))
    est = vramlens.estimate(TINY_GPTJ, **INFER)
    res = vramlens.trace.trace(TINY_GPTJ, layers=3, **INFER)
    assert est.peak_allocated == res.peak_allocated and est.model.params == res.params
    assert est.breakdown.notes[0].startswith("figures traced (model_type gptj is not modelled analytically): ")


def test_an_older_release_traces_an_unmodelled_model_as_today():
    """The older-release emulations (trace.build) read family facts; a model_type vramlens does not model has none,
    so an older --transformers-version traces it as today's transformers runs it (it used to raise)."""
    needs_torch()
    kw = dict(mode="train", dtype="fp16", attention="eager", batch=1, seq=64, layers=3)
    today = vramlens.trace.trace(TINY_GPTJ, **kw)
    older = vramlens.trace.trace(TINY_GPTJ, **kw, transformers_version="4.40")
    assert older.peak_allocated == today.peak_allocated


# ---- without torch ---------------------------------------------------------------------------------

def test_without_torch_one_line_naming_the_extra(monkeypatch):
    def missing():
        raise MissingExtraError("torch", "trace")

    monkeypatch.setattr(vramlens.trace, "require_torch", missing)
    with pytest.raises(MissingExtraError) as e:
        vramlens.estimate(TINY_STABLELM, **TRAIN)
    assert str(e.value) == (
        "model_type 'stablelm' is not modelled analytically and vramlens traces the real model instead (or "
        "--no-trace-fallback for a generic Llama-style approximation), but torch is not installed: "
        "pip install 'vramlens[trace]'")
    with pytest.raises(MissingExtraError) as e:
        vramlens.estimate(TINY_GPTJ, **TRAIN)
    assert str(e.value) == ("model_type 'gptj' is not modelled analytically and vramlens traces the real model "
                            "instead, but torch is not installed: pip install 'vramlens[trace]'")


def test_without_torch_the_cli_exits_2_with_one_line(tmp_path):
    """A real interpreter where `import torch` fails, as in an install without the trace extra."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY_STABLELM))
    code = ("import sys; sys.modules['torch'] = None; from vramlens.cli.main import main; "
            f"sys.exit(main(['estimate', {str(cfg)!r}, '--mode', 'train']))")
    src = str(Path(__file__).resolve().parents[1] / "src")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={"PYTHONPATH": src,
                       "VRAMLENS_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"})
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == ("error: model_type 'stablelm' is not modelled analytically and vramlens traces the real "
                        "model instead (or --no-trace-fallback for a generic Llama-style approximation), but torch "
                        "is not installed: pip install 'vramlens[trace]'\n")
    assert not (tmp_path / "home").exists()


def test_a_cached_answer_needs_no_torch(cached_home, tmp_path, monkeypatch):
    """The cache is read before torch is looked for: an install without the trace extra answers from it."""
    copy_home(cached_home, tmp_path, monkeypatch)
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY_STABLELM))
    code = ("import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None; "
            "from vramlens.cli.main import main; "
            f"sys.exit(main(['estimate', {str(cfg)!r}, '--mode', 'inference', '--batch', '1', '--seq', '16', "
            "'--dtype', 'fp32', '--json']))")
    src = str(Path(__file__).resolve().parents[1] / "src")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={"PYTHONPATH": src,
                       "VRAMLENS_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["components"] == cached_home[1].to_dict()["components"]
    assert d["notes"][-1].startswith("answered from the cache $VRAMLENS_HOME/traced/")


# ---- fit: the search ranks with the approximation, the plans it returns are traced -------------------

FIT_TRAIN = {**TRAIN, "optimize": "speed", "max_plans": 3}


def plain(p) -> bool:
    """Whether the tracer runs plan ``p`` here (a bitsandbytes optimizer needs CUDA; those keep the approximation)."""
    return not p.estimate.breakdown.notes[0].startswith("figures approximated")


@pytest.fixture(scope="module")
def traced_fit(tmp_path_factory):
    """vramlens.fit of TINY_STABLELM on a T4 (optimize=speed: several plans), traced in a fresh home."""
    needs_torch()
    home = tmp_path_factory.mktemp("fit")
    mp = pytest.MonkeyPatch()
    mp.setenv("VRAMLENS_HOME", str(home))
    try:
        return vramlens.fit(TINY_STABLELM, gpu="T4", **FIT_TRAIN), home
    finally:
        mp.undo()


@pytest.mark.slow
def test_fit_traces_every_plan_it_returns(traced_fit, tmp_path, monkeypatch):
    res, home = traced_fit
    assert res.plans and not res.already_fits and len(res.plans) <= 3
    traced = [p for p in res.plans if plain(p)]
    assert traced  # at least the fp32/bf16 AdamW plans are traced
    monkeypatch.setenv("VRAMLENS_HOME", str(tmp_path))  # the best plan traced again from nothing
    fresh = vramlens.estimate(TINY_STABLELM, traced[0].workload, gpu="T4")
    assert fresh.breakdown.notes[-1].startswith("cached in ")
    assert (traced[0].device_total, traced[0].estimate.peak_allocated) == (fresh.device_total, fresh.peak_allocated)
    monkeypatch.setenv("VRAMLENS_HOME", str(home))  # the others from the cache fit wrote
    for p in traced:
        assert p.estimate.breakdown.notes[0].startswith(NOT_MODELLED)
        assert p.estimate.breakdown.source == "trace-extrapolated" and p.estimate.model.source.endswith("+trace")
        ref = vramlens.estimate(TINY_STABLELM, p.workload, gpu="T4")
        assert p.device_total == ref.device_total and p.estimate.peak_allocated == ref.peak_allocated
        assert p.fits is True and p.to_dict()["device_total_bytes"] == ref.device_total
    for p in res.plans:
        if not plain(p):
            assert "because the tracer cannot run this plan: " in p.estimate.breakdown.notes[0]
    assert "not modelled analytically: the search ranked the plans with a generic Llama-style approximation" in \
        res.message


@pytest.mark.slow
def test_fit_starting_workload_that_fits_is_traced(tmp_path, monkeypatch):
    needs_torch()
    monkeypatch.setenv("VRAMLENS_HOME", str(tmp_path))
    res = vramlens.fit(TINY_STABLELM, gpu="T4", **TRAIN)
    (p,) = res.plans
    assert res.already_fits and p.estimate.breakdown.notes[0].startswith(NOT_MODELLED)
    ref = vramlens.estimate(TINY_STABLELM, gpu="T4", **TRAIN)
    assert p.device_total == ref.device_total
    assert res.message.startswith(ref.verdict + "; figures traced (model_type stablelm is not modelled")


@pytest.mark.slow
def test_fit_where_nothing_fits_traces_the_closest(tmp_path, monkeypatch):
    needs_torch()
    monkeypatch.setenv("VRAMLENS_HOME", str(tmp_path))
    res = vramlens.fit(TINY_STABLELM, gpu="10MB", **TRAIN, forbid="8bit,4bit,activation-offload,checkpointing",
                       max_plans=2)  # a closest plan the tracer runs here (no CUDA, no torchao)
    assert res.plans == () and res.closest is not None and res.closest.fits is False
    ref = vramlens.estimate(TINY_STABLELM, res.closest.workload, gpu="10MB")
    assert res.closest.device_total == ref.device_total
    assert res.closest.estimate.breakdown.notes[0].startswith(NOT_MODELLED)
    assert res.message.startswith("no plan fits 10 MB GPU with 10% headroom")
    assert "figures traced (model_type stablelm" in res.message


@pytest.mark.slow
def test_fit_cli_json_is_traced_and_no_trace_fallback_is_the_approximation(traced_fit, tmp_path, monkeypatch,
                                                                          capsys):
    res, home = traced_fit
    monkeypatch.setenv("VRAMLENS_HOME", str(home))  # the plans' traces are cached there
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY_STABLELM))
    argv = ["fit", str(cfg), "--gpu", "T4", "--mode", "train", "--batch", "2", "--seq", "32", "--dtype", "fp32",
            "--optimize", "speed", "--top", "3", "--json"]
    assert main(argv) == 0
    d = json.loads(capsys.readouterr().out)
    assert [p["device_total_bytes"] for p in d["plans"]] == [p.device_total for p in res.plans]
    assert "figures traced" in d["message"] or "then traced" in d["message"]
    never_trace(monkeypatch)  # --no-trace-fallback never traces (the cache above would answer, but is not read)
    assert main([*argv, "--no-trace-fallback"]) == 0
    d = json.loads(capsys.readouterr().out)
    from vramlens.advise import fit as analytic_fit

    ref = analytic_fit(TINY_STABLELM, gpu="T4", **FIT_TRAIN)
    assert [p["device_total_bytes"] for p in d["plans"]] == [p.device_total for p in ref.plans]
    assert "traced" not in d["message"]


def test_fit_without_torch_one_line_naming_the_extra(monkeypatch, tmp_path):
    def missing():
        raise MissingExtraError("torch", "trace")

    monkeypatch.setenv("VRAMLENS_HOME", str(tmp_path))
    monkeypatch.setattr(vramlens.trace, "require_torch", missing)
    with pytest.raises(MissingExtraError) as e:
        vramlens.fit(TINY_STABLELM, gpu="T4", **TRAIN)
    assert str(e.value) == (
        "model_type 'stablelm' is not modelled analytically and vramlens traces the real model instead (or "
        "--no-trace-fallback for a generic Llama-style approximation), but torch is not installed: "
        "pip install 'vramlens[trace]'")


def test_fit_cli_without_torch_exits_2_with_one_line(tmp_path):
    """A real interpreter where `import torch` fails; --no-trace-fallback then answers with the approximation."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY_STABLELM))
    src = str(Path(__file__).resolve().parents[1] / "src")

    def run(*extra: str) -> subprocess.CompletedProcess:
        code = ("import sys; sys.modules['torch'] = None; from vramlens.cli.main import main; "
                f"sys.exit(main(['fit', {str(cfg)!r}, '--gpu', 'T4', '--mode', 'train', *{list(extra)!r}]))")
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={
            "PYTHONPATH": src, "VRAMLENS_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"})

    r = run()
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == ("error: model_type 'stablelm' is not modelled analytically and vramlens traces the real "
                        "model instead (or --no-trace-fallback for a generic Llama-style approximation), but torch "
                        "is not installed: pip install 'vramlens[trace]'\n")
    r = run("--no-trace-fallback", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["plans"] and not (tmp_path / "home").exists()


def test_fit_of_a_modelled_family_is_the_advisors(monkeypatch):
    never_trace(monkeypatch)
    from vramlens.advise import fit as analytic_fit

    got = vramlens.fit(TINY_LLAMA, gpu="T4", **FIT_TRAIN).to_dict()
    assert got == analytic_fit(TINY_LLAMA, gpu="T4", **FIT_TRAIN).to_dict()
