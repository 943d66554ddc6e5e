import json

import pytest

from vramlens.cli.validate import bundled_cases_path
from vramlens.errors import InputError
from vramlens.hardware import get_gpu
from vramlens.hardware.runtime import (
    CUBLAS_WORKSPACE_DEFAULT_BYTES,
    NCCL_LL128_BUFFSIZE,
    NCCL_LL_BUFFSIZE,
    context_bytes_for,
    nccl_communicator_bytes,
    parse_cublas_workspace_config,
    runtime_overhead,
)
from vramlens.units import GiB, MiB

CASES = bundled_cases_path()  # the published cases bundled with vramlens (src/vramlens/data)


def test_cublas_constants_follow_the_source():
    assert CUBLAS_WORKSPACE_DEFAULT_BYTES == 8_519_680  # 2 x 4096 KiB + 8 x 16 KiB
    assert parse_cublas_workspace_config(":4096:2:16:8") == 8_519_680
    assert parse_cublas_workspace_config(":4096:8") == 32 * MiB
    assert NCCL_LL_BUFFSIZE == 524_288 and NCCL_LL128_BUFFSIZE == 4_915_200
    with pytest.raises(InputError) as e:
        parse_cublas_workspace_config("4096x8")
    assert str(e.value) == "CUBLAS_WORKSPACE_CONFIG='4096x8' has no :SIZE:COUNT pair: write e.g. :4096:8 or :16:8"


def test_workspaces_per_handle_and_arch():
    # inference: 1 handle x (8_519_680 + 1 MiB cuBLASLt); training: 2 handles
    a100 = get_gpu("A100-80GB")
    assert runtime_overhead(a100, training=False).workspace_bytes == 8_519_680 + 1_048_576
    assert runtime_overhead(a100, training=True).workspace_bytes == 2 * (8_519_680 + 1_048_576)
    # Hopper sm_90: 32 MiB per cuBLAS handle
    assert runtime_overhead(get_gpu("H100-SXM-80GB"), training=True).workspace_bytes == 2 * (32 * MiB + MiB)
    # user settings win
    r = runtime_overhead(get_gpu("H100-SXM-80GB"), training=False, cublas_workspace_config=":16:8", cublaslt_workspace_bytes=0)
    assert r.workspace_bytes == 128 * 1024


def test_context_by_cuda_version_and_loading():
    lazy, _ = context_bytes_for("12.4")
    assert 0.29 * GiB <= lazy <= 0.5 * GiB
    assert context_bytes_for("11.8")[0] == 287_047_680 - 20 * MiB
    assert context_bytes_for("11.8", lazy_loading=False)[0] == 666_632_192 - 20 * MiB
    assert context_bytes_for("11.2")[0] > 1 * GiB  # before lazy loading: every kernel loaded
    assert context_bytes_for("11.2", lazy_loading=True)[0] == context_bytes_for("11.2")[0]  # not available
    with pytest.raises(InputError):
        context_bytes_for("twelve")


def test_published_cuda_context_case_is_within_reach_of_the_eager_model():
    case = next(c for c in json.loads(CASES.read_text()) if c["id"] == "hf-anatomy-cuda-context")
    r = runtime_overhead(get_gpu("V100-16GB"), training=False, cuda_version="11.2", lazy_loading=False)
    predicted = r.outside_allocator_bytes + 2 * MiB  # + the 1x1 tensor's 2 MiB small segment
    assert abs(predicted / case["figure"]["value_bytes"] - 1) < 0.10


def test_nccl():
    a100 = get_gpu("A100-80GB")
    assert nccl_communicator_bytes(a100, 1) == 0
    # 16 channels x 2 connections x (4 MiB + 512 KiB + 4_915_200 B); no NVLS on Ampere
    assert nccl_communicator_bytes(a100, 8) == 16 * 2 * (4_194_304 + 524_288 + 4_915_200)
    # Hopper behind NVSwitch with > 2 ranks adds NVLink SHARP buffers: 301_989_888 x 8
    h100 = get_gpu("H100-SXM-80GB")
    assert nccl_communicator_bytes(h100, 8) == 16 * 2 * 9_633_792 + 2_415_919_104
    assert nccl_communicator_bytes(h100, 8, nvls=False) == 16 * 2 * 9_633_792
    r = runtime_overhead(h100, training=True, n_gpus=16, tp=8)
    assert r.nccl_bytes == nccl_communicator_bytes(h100, 8) + nccl_communicator_bytes(h100, 2)
    assert r.outside_allocator_bytes == r.context_bytes + r.nccl_bytes
    assert "inside the caching allocator" in r.explain


def test_bad_parallel_degrees():
    with pytest.raises(InputError) as e:
        runtime_overhead(get_gpu("A100-80GB"), training=True, n_gpus=8, tp=3)
    assert str(e.value) == "tp=3 must divide n_gpus=8"
