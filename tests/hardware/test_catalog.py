import json

import pytest

from vramlens.cli.main import main
from vramlens.errors import UnknownGPUError
from vramlens.hardware import detect_gpus, get_gpu, list_gpus
from vramlens.units import GiB, MiB


def test_catalog_has_the_required_cards():
    names = {g.name for g in list_gpus()}
    assert len(names) >= 47
    for wanted in ["P100-16GB", "A40", "RTX-A5000", "RTX-A4000", "RTX-2080-Ti", "RTX-3090-Ti", "RTX-4060-Ti-16GB",
                   "RTX-4070", "RTX-5070", "RTX-5080", "GH200-96GB", "GH200-144GB", "GB200", "H20", "L20", "MI325X",
                   "MI355X", "H200-141GB", "H100-SXM-80GB", "H100-PCIe-80GB", "H100-NVL-94GB", "A100-40GB", "A100-80GB",
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
        assert "datasheet" in g.source or "specifications" in g.source or "whitepaper" in g.source \
            or "product brief" in g.source or "tech specs" in g.source or "AWS" in g.source, g.name


def test_bf16_flag_follows_compute_capability():
    # native bfloat16 arrived with Ampere (sm_80); the flag is data, checked against the CC
    for g in list_gpus():
        if g.vendor == "nvidia":
            assert g.bf16 == (g.compute_capability >= (8, 0)), g.name
    assert [g.name for g in list_gpus() if not g.bf16] == ["T4", "V100-16GB", "V100-32GB", "P100-16GB", "RTX-2080-Ti"]


def test_dtype_notes():
    assert get_gpu("T4").dtype_notes("bf16", None) == [
        "T4 (compute capability 7.5) has no native bf16: PyTorch emulates it slowly and some kernels "
        "(FlashAttention) refuse it; memory is as estimated; --dtype fp16 --amp fp16 or fp32 run natively"]
    assert get_gpu("p100").dtype_notes("fp32", "bf16")[0].startswith("P100-16GB (compute capability 6.0) has no")
    assert get_gpu("T4").dtype_notes("fp16", "fp16") == []
    assert get_gpu("A100-80GB").dtype_notes("bf16", "bf16") == []


def test_estimate_notes_bf16_on_a_pre_ampere_gpu():
    from vramlens import Workload, estimate

    def notes(gpu, **kw):
        return [n for n in estimate("tiny-llama", Workload(**kw), gpu=gpu).breakdown.notes if "native bf16" in n]

    assert notes("T4", dtype="bf16") == get_gpu("T4").dtype_notes("bf16")
    assert notes("V100-32GB", mode="train", dtype="fp32", amp="bf16") == get_gpu("V100-32GB").dtype_notes("bf16")
    assert notes("T4", dtype="fp16") == []
    assert notes("L4", dtype="bf16") == []


def test_new_cards_exact_memory():
    # sold sizes as GiB, like the existing entries' convention
    assert {n: get_gpu(n).memory_bytes // GiB for n in (
        "P100", "A40", "RTX A5000", "RTX A4000", "2080 Ti", "3090 Ti", "4060 Ti 16GB", "4070", "5070", "5080",
        "GH200-96GB", "GH200-144GB", "GB200", "H20", "L20", "MI325X", "MI355X")} == {
        "P100": 16, "A40": 48, "RTX A5000": 24, "RTX A4000": 16, "2080 Ti": 11, "3090 Ti": 24, "4060 Ti 16GB": 16,
        "4070": 12, "5070": 12, "5080": 16, "GH200-96GB": 96, "GH200-144GB": 144, "GB200": 186, "H20": 96,
        "L20": 48, "MI325X": 256, "MI355X": 288}


@pytest.mark.parametrize("query, variants", [
    ("a100", "A100-40GB, A100-80GB or A100-PCIe-80GB"),
    ("H100", "H100-SXM-80GB, H100-PCIe-80GB or H100-NVL-94GB"),
    ("Tesla V100", "V100-16GB or V100-32GB"),
    ("gh200", "GH200-96GB or GH200-144GB"),
])
def test_ambiguous_names_list_their_variants(query, variants):
    with pytest.raises(UnknownGPUError) as e:
        get_gpu(query)
    assert str(e.value) == (f"gpu={query!r} is ambiguous: it names {variants}, which differ in memory or "
                            "bandwidth; name one of them (vramlens gpus lists them)")


def test_exact_figures():
    # 80 GiB sold, 81,559 MiB seen by nvidia-smi
    h100 = get_gpu("h100 sxm")
    assert h100.memory_bytes == 85_899_345_920
    assert h100.usable_bytes == 81_559 * MiB == h100.nvidia_smi_bytes
    # capacity: CUDA's total, deviceQuery's "81106 MBytes (85045477376 bytes)"
    assert h100.cuda_total_bytes == 85_045_477_376 == h100.capacity_bytes
    assert get_gpu("A100 80GB").usable_bytes == 81_920 * MiB
    assert get_gpu("h200").memory_bytes == 141 * GiB
    assert get_gpu("L4").usable_bytes == 23_034 * MiB  # ECC takes ~1/16 of GDDR6
    assert get_gpu("MI250").usable_bytes is None
    assert get_gpu("M2 Ultra").unified


@pytest.mark.parametrize(
    "query, name",
    [
        ("a100-80gb", "A100-80GB"), ("A100 80GB", "A100-80GB"), ("h100-sxm", "H100-SXM-80GB"),
        ("4090", "RTX-4090"), ("rtx4090", "RTX-4090"), ("RTX 4090", "RTX-4090"),
        ("NVIDIA H100 80GB HBM3", "H100-SXM-80GB"), ("NVIDIA A100-SXM4-40GB", "A100-40GB"), ("Tesla T4", "T4"),
        ("NVIDIA GeForce RTX 3090", "RTX-3090"), ("NVIDIA RTX 6000 Ada Generation", "RTX-6000-Ada"),
        ("nvidia h100 pcie", "H100-PCIe-80GB"), ("MI300X", "MI300X"), ("v100-16gb", "V100-16GB"),
        ("Tesla P100-PCIE-16GB", "P100-16GB"), ("NVIDIA GeForce RTX 2080 Ti", "RTX-2080-Ti"), ("rtx3090ti", "RTX-3090-Ti"),
        ("NVIDIA GeForce RTX 4060 Ti 16GB", "RTX-4060-Ti-16GB"), ("AMD Instinct MI325X", "MI325X"), ("gb200", "GB200"),
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
    assert str(e.value) == "unknown GPU 'A100-90': closest: A100-40GB, A100-80GB; or give a size such as 24GB"


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
    assert out.splitlines()[0].split() == ["GPU", "memory", "nvidia-smi", "CUDA", "bandwidth", "bf16", "arch"]
    # H100 SXM: sold 80 GiB, nvidia-smi 81,559 MiB = 79.65 GiB, CUDA 85,045,477,376 B = 79.20 GiB
    assert next(line for line in out.splitlines() if line.startswith("H100-SXM-80GB")).split()[1:7] == [
        "80.00", "GiB", "79.65", "GiB", "79.20", "GiB"]


# CUDA's device total (cudaMemGetInfo / totalGlobalMem) per card, exact bytes from the capture each
# entry's cuda_total_source quotes; nvidia-smi's total less it is the driver's reserve
CUDA_TOTALS = {
    "H100-SXM-80GB": (85_045_477_376, "github:thamada/nvidia-smi gls/H100SXMx8_deviceQuery.py"),
    "H100-NVL-94GB": (99_861_594_112, "github:thamada/nvidia-smi gls/H100NVLx2_deviceQuery.py"),
    "A100-80GB": (85_100_068_864, "github:thamada/nvidia-smi gls/A100SXMx4_deviceQuery.py"),
    "A100-40GB": (42_298_834_944, "github:bottlerocket-os/bottlerocket pull 3873"),
    "L40S": (47_803_596_800, "github:thamada/nvidia-smi gls/L40S_deviceQuery.py"),
    "L4": (23_570_219_008, "github:thamada/nvidia-smi gls/L4_deviceQuery.py"),
    "A10": (23_609_475_072, "github:aalanwyr/face2cuda step2cuda/README.md"),
    "A40": (47_608_692_736, "github:thamada/nvidia-smi gls/A40x10_deviceQuery.py"),
    "T4": (15_095 * MiB, "github:sylvia-ymlin/cuda-kernels-from-scratch README.md"),
    "RTX-6000-Ada": (51_002_867_712, "github:thamada/nvidia-smi gls/RTX6000Ada_x8_deviceQuery.py"),
    "RTX-5090": (33_677_180_928, "github:aikitoria/open-gpu-kernel-modules issue 1"),
    "RTX-4090": (25_386_352_640, "github:thamada/nvidia-smi gls/RTX4090_deviceQuery.py"),
    "RTX-4060-Ti-16GB": (16_857_038_848, "github:thamada/nvidia-smi gls/RTX4060Ti_deviceQuery.py"),
    "RTX-3090": (25_327_697_920, "github:thamada/nvidia-smi gls/RTX3090_deviceQuery.py"),
}


def test_cuda_totals_and_their_sources():
    known = {g.name: g for g in list_gpus() if g.cuda_total_known}
    assert sorted(known) == sorted(CUDA_TOTALS)
    for name, (total, where) in CUDA_TOTALS.items():
        g = known[name]
        assert (g.cuda_total_bytes, g.capacity_bytes) == (total, total), name
        assert g.cuda_total_source.startswith(where), name
        # the quote states the figure: bytes where the capture prints them, else deviceQuery's MiB
        assert f"{total}" in g.cuda_total_source or f"{total // MiB} MBytes" in g.cuda_total_source, name
        # the driver's reserve, nvidia-smi's total less CUDA's: 265 MiB (T4) to 763 MiB (A100 80GB)
        assert g.usable_bytes is not None and 256 * MiB < g.usable_bytes - total < 800 * MiB, name
    # the A100 80GB capture: nvidia-smi -q Total 81,920 MiB - Reserved 763 MiB = 81,157 MiB, and CUDA's
    # 85,100,068,864 B = 81,157.75 MiB
    assert known["A100-80GB"].usable_bytes - known["A100-80GB"].cuda_total_bytes == 81_920 * MiB - 85_100_068_864


def test_capacity_falls_back_to_nvidia_smi_then_the_sold_size():
    h200, mi250 = get_gpu("h200"), get_gpu("MI250")
    assert not h200.cuda_total_known and h200.capacity_bytes == h200.nvidia_smi_bytes == 143_771 * MiB
    assert mi250.capacity_bytes == mi250.memory_bytes == 64 * GiB  # neither total known: the sold size
    assert h200.capacity_note() == (
        "H200-141GB: CUDA's device total (cudaMemGetInfo) is not in the catalog; nvidia-smi's total "
        "150,754,820,096 B is used, which the driver's reserve (a few hundred MiB on recent NVIDIA drivers) makes "
        "too high: an engine or run may get a little less")  # 143,771 x 2^20 = 150,754,820,096
    assert get_gpu("L4").capacity_note() is None
    assert get_gpu("24GB").capacity_note() is None and get_gpu("M2 Ultra").capacity_note() is None


def test_gpus_command_shows_the_cuda_total(capsys):
    assert main(["gpus", "--json"]) == 0
    rows = {g["name"]: g for g in json.loads(capsys.readouterr().out)["gpus"]}
    assert (rows["L4"]["cuda_total_bytes"], rows["L4"]["usable_bytes"]) == (23_570_219_008, 23_034 * MiB)
    assert rows["L4"]["cuda_total_source"].startswith("github:thamada/nvidia-smi gls/L4_deviceQuery.py")
    assert rows["H200-141GB"]["cuda_total_bytes"] is None and rows["H200-141GB"]["cuda_total_source"] == ""
    assert main(["gpus"]) == 0
    out = capsys.readouterr().out
    # 23,570,219,008 / 2^30 = 21.95 GiB; 23,034 MiB = 22.49 GiB
    assert next(line for line in out.splitlines() if line.startswith("L4 ")).split()[1:7] == [
        "24.00", "GiB", "22.49", "GiB", "21.95", "GiB"]
