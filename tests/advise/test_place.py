"""`place`: the device map respects every budget, keeps blocks whole and in order, and its block
sizes equal Accelerate's ``compute_module_sizes`` for the same model."""

from __future__ import annotations

import json

import pytest
from advise_specs import TINY, llama7b, tiny

from vramlens.advise.place import blocks, place
from vramlens.cli.main import main
from vramlens.errors import InputError
from vramlens.hardware.catalog import get_gpu
from vramlens.workload import Workload

W = Workload(mode="inference", seq=2048, new_tokens=512, batch=4)


@pytest.mark.parametrize("gpu,gpus,ram", [("RTX-4090", 1, None), ("RTX-3060", 1, 64 * 2**30),
                                          ("RTX-3060", 1, 2 * 2**30), ("T4", 2, None)])
def test_budgets_order_and_whole_blocks(gpu, gpus, ram):
    spec = llama7b()
    p = place(spec, get_gpu(gpu), gpus=gpus, host_ram=ram, workload=W)
    bl = blocks(spec, p.workload)
    by_name = {b.name: b for b in bl}
    for o in p.options:
        if not o.fits:
            assert o.reason
            continue
        assert list(o.device_map) == [b.name for b in bl]  # every block, in execution order, once
        order = [0, 1, 2, 3, 4, 5, 6, 7][:gpus] + ["cpu", "disk"]
        ranks = [order.index(d) for d in o.device_map.values()]
        assert ranks == sorted(ranks)  # sequential: never back to an earlier device
        for i in range(gpus):
            on = [by_name[n] for n, d in o.device_map.items() if d == i]
            kv_off = sum(by_name[n].kv_bytes for n, d in o.device_map.items() if not isinstance(d, int)) if i == 0 else 0
            largest = max(b.weight_bytes for b in bl) if i == 0 and kv_off else 0
            assert sum(b.weight_bytes + b.kv_bytes for b in on) + kv_off + largest <= p.budgets[i]
        if ram is not None:
            assert o.device_bytes.get("cpu", 0) <= ram
        assert o.tokens_per_s > 0
    gpu_opt, hybrid = p.option("gpu"), p.option("hybrid")
    if gpu_opt.fits:
        assert hybrid.device_map == gpu_opt.device_map
    else:
        assert not hybrid.fits or any(not isinstance(d, int) for d in hybrid.device_map.values())


def test_offloading_is_slower_than_gpu_only():
    spec = llama7b()
    fast = place(spec, get_gpu("RTX-4090"), workload=W).option("gpu")
    slow = place(spec, get_gpu("RTX-3060"), host_ram=64 * 2**30, workload=W).option("hybrid")
    assert fast.fits and slow.fits and slow.tokens_per_s < fast.tokens_per_s


def test_tied_embeddings_have_no_separate_head():
    names = [b.name for b in blocks(tiny(), Workload())]
    assert names[0] == "model.embed_tokens" and "lm_head" not in names
    assert names[1:5] == [f"model.layers.{i}" for i in range(4)]


def test_quantized_blocks_are_smaller():
    spec = llama7b()
    full = sum(b.weight_bytes for b in blocks(spec, Workload()))
    nf4 = sum(b.weight_bytes for b in blocks(spec, Workload(quant="nf4")))
    assert nf4 < full / 3


def test_block_sizes_equal_accelerate():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    accelerate = pytest.importorskip("accelerate")
    from accelerate.utils import compute_module_sizes

    cfg = transformers.LlamaConfig(**{k: v for k, v in TINY.items() if k not in ("model_type", "torch_dtype")})
    with accelerate.init_empty_weights():
        model = transformers.LlamaForCausalLM(cfg)
    sizes = compute_module_sizes(model, dtype=torch.bfloat16)
    for b in blocks(tiny(), Workload(dtype="bf16")):
        if b.name.startswith("model.rotary_emb"):
            continue  # non-persistent buffers: accelerate counts them, from_pretrained does not load them
        assert b.weight_bytes == sizes[b.name], b.name


def test_bad_input():
    with pytest.raises(InputError, match="place is for inference"):
        place(tiny(), get_gpu("T4"), workload=Workload(mode="train"))
    with pytest.raises(InputError, match="gpus=0 must be a whole number >= 1"):
        place(tiny(), get_gpu("T4"), gpus=0)


def test_cli_place(capsys):
    assert main(["place", "llama-2-7b", "--gpu", "RTX-3060", "--host-ram", "32GB", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert [o["kind"] for o in d["options"]] == ["gpu", "hybrid", "cpu"]
    assert d["options"][1]["fits"] is True
    assert main(["place", "llama-2-7b", "--gpu", "RTX-3060", "--host-ram", "32GB"]) == 0
    out = capsys.readouterr().out
    assert "device_map (hybrid): model.embed_tokens .. " in out
