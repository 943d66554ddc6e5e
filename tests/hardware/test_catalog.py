import json

import pytest

from vramlens.cli.main import main
from vramlens.errors import UnknownGPUError
from vramlens.hardware import detect_gpus, get_gpu, list_gpus
from vramlens.units import GiB, MiB


def test_catalog_has_the_required_cards():
    names = {g.name for g in list_gpus()}
    assert len(names) >= 28
    for wanted in ["H200-141GB", "H100-SXM-80GB", "H100-PCIe-80GB", "H100-NVL-94GB", "A100-40GB", "A100-80GB",
                   "A100-PCIe-80GB", "L40S", "L40", "L4", "A10", "A10G", "T4", "V100-16GB", "V100-32GB",
                   "RTX-A6000", "RTX-6000-Ada", "RTX-5090", "RTX-4090", "RTX-4080", "RTX-3090", "RTX-3080",
                   "RTX-3060", "MI300X", "MI250", "MI210", "M2-Ultra", "M3-Max", "M4-Max", "B200"]:
        assert wanted in names


def test_every_entry_is_sane_and_sourced():
    for g in list_gpus():
        assert g.source, g.name
        assert g.memory_bytes % GiB == 0, g.name  # sold sizes are whole GiB
        assert g.bandwidth_bytes_s > 1e11 and g.bf16_flops >= g.fp32_flops > 1e12, g.name
        if g.usable_bytes is not None:
            assert 0.9 * g.memory_bytes < g.usable_bytes <= g.memory_bytes, g.name
        assert (g.compute_capability is None) == (g.vendor != "nvidia"), g.name


def test_exact_figures():
    # 80 GiB sold, 81,559 MiB seen by nvidia-smi
    h100 = get_gpu("h100")
    assert h100.memory_bytes == 85_899_345_920
    assert h100.usable_bytes == 81_559 * MiB == h100.capacity_bytes
    assert get_gpu("A100 80GB").usable_bytes == 81_920 * MiB
    assert get_gpu("h200").memory_bytes == 141 * GiB
    assert get_gpu("L4").usable_bytes == 23_034 * MiB  # ECC takes ~1/16 of GDDR6
    assert get_gpu("MI250").usable_bytes is None
    assert get_gpu("M2 Ultra").unified


@pytest.mark.parametrize(
    "query, name",
    [
        ("a100-80gb", "A100-80GB"), ("A100 80GB", "A100-80GB"), ("a100", "A100-80GB"),
        ("h100", "H100-SXM-80GB"), ("4090", "RTX-4090"), ("rtx4090", "RTX-4090"), ("RTX 4090", "RTX-4090"),
        ("NVIDIA H100 80GB HBM3", "H100-SXM-80GB"), ("NVIDIA A100-SXM4-40GB", "A100-40GB"), ("Tesla T4", "T4"),
        ("NVIDIA GeForce RTX 3090", "RTX-3090"), ("NVIDIA RTX 6000 Ada Generation", "RTX-6000-Ada"),
        ("nvidia h100 pcie", "H100-PCIe-80GB"), ("MI300X", "MI300X"), ("v100", "V100-16GB"),
    ],
)
def test_loose_names(query, name):
    assert get_gpu(query).name == name


def test_sizes_give_generic_gpus():
    g = get_gpu("24GB")
    assert (g.name, g.memory_bytes, g.capacity_bytes, g.arch) == ("24 GB GPU", 24_000_000_000, 24_000_000_000, "generic")
    g = get_gpu("80GiB")
    assert (g.name, g.memory_bytes) == ("80 GiB GPU", 80 * GiB)


def test_unknown_name_lists_closest():
    with pytest.raises(UnknownGPUError) as e:
        get_gpu("A100-90")
    assert str(e.value) == "unknown GPU 'A100-90': closest: A100-80GB, A100-40GB; or give a size such as 24GB"


def test_detect_never_fails_without_nvml():
    assert isinstance(detect_gpus(), tuple)


def test_detect_with_a_fake_nvml(monkeypatch):
    import sys
    import types

    class Mem:
        total, used = 81_559 * MiB, 4 * MiB

    fake = types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=lambda h: [b"NVIDIA H100 80GB HBM3", "Mystery GPU 9000"][h],
        nvmlDeviceGetMemoryInfo=lambda h: Mem,
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    found = detect_gpus()
    assert [(d.gpu.name, d.in_catalog, d.total_bytes) for d in found] == [
        ("H100-SXM-80GB", True, 81_559 * MiB), ("Mystery GPU 9000", False, 81_559 * MiB)]


def test_detect_survives_nvml_errors(monkeypatch):
    import sys
    import types

    def boom():
        raise RuntimeError("NVML Shared Library Not Found")

    monkeypatch.setitem(sys.modules, "pynvml", types.SimpleNamespace(nvmlInit=boom))
    assert detect_gpus() == ()


def test_cli_gpus_json(capsys):
    assert main(["gpus", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    h100 = next(g for g in data["gpus"] if g["name"] == "H100-SXM-80GB")
    assert h100["memory_bytes"] == 85_899_345_920 and h100["usable_bytes"] == 85_520_809_984


def test_cli_gpus_table(capsys):
    assert main(["gpus"]) == 0
    out = capsys.readouterr().out
    assert "H100-SXM-80GB" in out and "80.00 GiB" in out and "989.4 TFLOPS" in out
