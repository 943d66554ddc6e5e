"""Run torchao's own quantization code of the gpt-fast tables' commits on one CPU weight under vramlens' recorder, and
compare what it allocates with the events ``--quantize-on-device`` replays (vramlens.estimator.ondevice
``fp6_quantize_events``, ``uintx_quantize_events``, ``qqq_quantize_events``, ``sparse_marlin_quantize_events``): the peak
of live bytes during the quantization and the bytes it keeps.

The layouts left torchao long ago (0.18 is installed): extract the files from a mirror of pytorch/ao::

    A="git --git-dir=<ao mirror> show"
    mkdir /tmp/ao && cd /tmp/ao
    $A b4d076813b:torchao/prototype/custom_fp_utils.py > custom_fp_utils.py
    $A b4d076813b:torchao/dtypes/fpx/fpx.py > fpx.py
    $A b4d076813b:torchao/quantization/quant_primitives.py > quant_primitives_b4d.py
    $A b4d076813b:torchao/dtypes/uintx/bitpacking.py > bitpacking.py
    $A 06e69f6a93:torchao/quantization/quant_primitives.py > quant_primitives_06e.py
    $A 06e69f6a93:torchao/quantization/marlin_qqq/__init__.py > marlin_qqq.py
    $A 06e69f6a93:torchao/quantization/marlin_qqq/utils.py > marlin_qqq_utils.py
    $A 65d86c6c26:torchao/quantization/quant_primitives.py > quant_primitives_65d.py
    $A 65d86c6c26:torchao/sparsity/utils.py > sparsity_utils.py
    $A 65d86c6c26:torchao/sparsity/marlin/__init__.py > marlin_24.py
    $A 65d86c6c26:torchao/sparsity/marlin/utils.py > marlin_24_utils.py
    PYTHONPATH=src python scripts/torchao_quantize_trace.py /tmp/ao

Only the functions the quantization runs are taken from each file (by name, their source unchanged); the calls
between them follow affine_quantized_tensor.py's ``from_hp_to_fpx`` / ``from_hp_to_intx`` at those commits. The
weight is made before the recorder starts; a view of it the recorder sees first (``input.view`` in
``_choose_qparams_affine``, ``w.reshape`` in the QQQ per-group path, ``input.t()`` in Sparse-Marlin's pre_process) is
counted as new, so those runs subtract it.

Sparse-Marlin runs partly on the host on a GPU: ``_to_marlin_weights`` packs ``q_w.cpu()`` into int64 there and brings the
int32 result back (``.to(orig_device, dtype=torch.int32)``; a blocking copy converts on the host), and the permutation
tables of ``get_perms_24`` are made on the host. Here everything is on the CPU, so the recorder's phase is set to "host"
from ``get_pack_factor`` (the call before ``q_w.cpu()``) to the return of ``_to_marlin_weights`` and inside
``get_perms_24``, and the storages born then are left out, but the one ``_to_marlin_weights`` returns. ``inject_24``'s
``.cuda()`` is the identity on a GPU tensor, and is made so here.
Expected (4,096 x 4,096, half weights): every row equal.
"""

from __future__ import annotations

import argparse
import ast
import sys
from enum import Enum, auto
from functools import reduce
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from vramlens.allocator import simulate
from vramlens.estimator.ondevice import quantize_events
from vramlens.trace.recorder import Recorder

MiB = 2**20


class _PerAxis:
    def __init__(self, axis: int):
        self.axis = axis


class _PerGroup:
    def __init__(self, group_size: int):
        self.group_size = group_size


def _functions(path: Path, names: tuple[str, ...], env: dict[str, Any]) -> dict[str, Any]:
    """The top-level functions, classes and constants ``names`` of ``path``, defined in ``env`` (their decorators,
    torchao's custom-op registration, dropped)."""
    tree = ast.parse(path.read_text())

    def named(node: ast.stmt) -> str | None:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            return node.name
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            return node.targets[0].id
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Tuple):  # EBITS_F32, MBITS_F32 = 8, 23
            return next((e.id for e in node.targets[0].elts if isinstance(e, ast.Name) and e.id in names), None)
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            return node.target.id
        return None

    keep = [node for node in tree.body if named(node) in names]
    for node in keep:
        if isinstance(node, ast.FunctionDef):
            node.decorator_list = []
    code = compile(ast.Module(body=keep, type_ignores=[]), str(path), "exec")
    exec(code, env)  # noqa: S102 - torchao's own source, extracted by the user from a mirror
    return env


def _env() -> dict[str, Any]:
    class MappingType(Enum):
        SYMMETRIC = auto()
        SYMMETRIC_NO_CLIPPING_ERR = auto()
        ASYMMETRIC = auto()

    class ZeroPointDomain(Enum):
        INT = auto()
        FLOAT = auto()
        NONE = auto()

    from dataclasses import dataclass, field
    from typing import Callable, Dict, List, Optional, Tuple, Union

    import numpy

    return {"torch": torch, "Tensor": torch.Tensor, "reduce": reduce, "numpy": numpy, "Optional": Optional,
            "dataclass": dataclass, "field": field,
            "List": List, "Tuple": Tuple, "Union": Union, "Dict": Dict, "Callable": Callable, "Any": Any,
            "MappingType": MappingType, "ZeroPointDomain": ZeroPointDomain, "FP8_TYPES": (),
            "PerAxis": _PerAxis, "PerGroup": _PerGroup, "Granularity": object,
            "_SUB_BYTE_DTYPE_BOUNDS": {getattr(torch, f"uint{i}"): (0, 2**i - 1) for i in range(1, 8)},
            "_DTYPE_TO_QVALUE_BOUNDS": {torch.uint8: (0, 255), torch.int8: (-128, 127), torch.int32: (-(2**31), 2**31 - 1),
                                        **{getattr(torch, f"uint{i}"): (0, 2**i - 1) for i in range(1, 8)}}}


def _peak(events, base: int, host: frozenset[int] = frozenset()) -> tuple[int, int]:
    """The peak and final live bytes, the storages in ``host`` (on the host in a GPU run) left out."""
    live = peak = base
    size: dict[int, int] = {}
    for e in events:
        if e.storage in host:
            continue
        if e.action == "alloc":
            size[e.storage] = e.nbytes
            live += e.nbytes
            peak = max(peak, live)
        else:
            live -= size.pop(e.storage, 0)
    return peak, live


def _replayed(quant: str, n: int, k: int, b: int, group: int) -> tuple[int, int]:
    r = simulate([("alloc", "w", n * k * b), *quantize_events("w", n, k, quant, b, group)], max_points=2)
    return r.peak_allocated_bytes, r.final_allocated_bytes


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("src", type=Path, help="the folder of the extracted torchao files")
    src = p.parse_args().src
    n = k = 4096
    env = _env()
    _functions(src / "custom_fp_utils.py", ("_n_ones", "_f32_to_fpx_unpacked", "EBITS_F32", "MBITS_F32",
                                            "F32_EXP_BIAS"), env)
    env["_ONES_TABLE"] = [env["_n_ones"](i) for i in range(8)]
    _functions(src / "fpx.py", ("_pack", "_pack_tc_fp6"), env)
    _functions(src / "quant_primitives_b4d.py", ("choose_qparams_affine_fpx", "quantize_affine_fpx",
                                                 "_get_and_check_qmin_qmax", "_get_reduction_params",
                                                 "_quantize_affine_no_dtype_cast", "_choose_qparams_affine"), env)
    _functions(src / "bitpacking.py", ("maskbits", "shifts", "numbits", "_pack", "pack"), bits := dict(env))
    qqq = dict(env)
    _functions(src / "quant_primitives_06e.py", ("choose_qparams_and_quantize_affine_qqq",), qqq)
    _functions(src / "marlin_qqq_utils.py", ("MarlinQQQConstants", "const", "get_pack_factor", "marlin_permute_weights",
                                             "get_qqq_scale_perms", "get_qqq_weight_perm"), qqq)
    _functions(src / "marlin_qqq.py", ("pack_to_marlin_qqq", "_to_marlin_weights", "_to_marlin_scales"), qqq)

    def fp6(w):  # from_hp_to_fpx at b4d076813b
        scale = env["choose_qparams_affine_fpx"](w, 3, 2)
        return env["_pack_tc_fp6"](env["quantize_affine_fpx"](w, scale, 3, 2)), scale

    def uintx(bits_: int, group: int):
        def run(w):  # from_hp_to_intx at b4d076813b with uintx_weight_only's arguments (not HQQ)
            dtype, block = getattr(torch, f"uint{bits_}"), [1, group]
            scale, zero = env["_choose_qparams_affine"](w, "ASYMMETRIC", block, dtype, None, None,
                                                        torch.finfo(torch.float32).eps, None, torch.int32, True, "INT")
            qmin, qmax = env["_get_and_check_qmin_qmax"](dtype, None, None)
            data = env["_quantize_affine_no_dtype_cast"](w, block, scale, zero, qmin, qmax, "INT").to(torch.uint8)
            return bits["pack"](data, bits_, dim=-1), scale, zero
        return run

    marlin = dict(env)
    _functions(src / "quant_primitives_65d.py", ("_get_and_check_qmin_qmax", "_get_reduction_params",
                                                 "_quantize_affine_no_dtype_cast", "_choose_qparams_affine"), marlin)
    mutils = dict(env)
    _functions(src / "marlin_24_utils.py", ("Marlin24Constants", "const", "get_pack_factor", "marlin_permute_weights",
                                            "get_perms_24", "_calculate_meta_reordering_scatter_offsets",
                                            "sparse_semi_structured_from_dense_cutlass"), mutils)
    _functions(src / "sparsity_utils.py", ("mask_creator",), sparsity := dict(env))
    rec: Recorder | None = None
    returned: list[int] = []  # the storage _to_marlin_weights returns (made on the host, copied to the GPU)

    def host(fn):
        def run(*a, **kw):
            assert rec is not None
            was, rec.phase = rec.phase, "host"
            try:
                return fn(*a, **kw)
            finally:
                rec.phase = was
        return run

    def pack_factor(num_bits):
        assert rec is not None
        rec.phase = "host"
        return mutils["get_pack_factor"](num_bits)

    utils = SimpleNamespace(**{name: v for name, v in mutils.items() if not name.startswith("__")})
    utils.get_pack_factor, utils.get_perms_24 = pack_factor, host(mutils["get_perms_24"])
    m24 = dict(env, utils=utils, const=mutils["const"], mask_creator=sparsity["mask_creator"])
    _functions(src / "marlin_24.py", ("inject_24", "pack_to_marlin_24", "_compress_quantized_24_weight",
                                      "_to_marlin_weights", "_to_marlin_scales"), m24)
    to_marlin_weights = m24["_to_marlin_weights"]

    def to_marlin_weights_back(*a, **kw):
        assert rec is not None
        out = to_marlin_weights(*a, **kw)
        rec.phase = "setup"
        returned.append(rec.n_storages - 1)  # the last storage made: ``.to(orig_device, dtype=torch.int32)``
        return out

    m24["_to_marlin_weights"] = to_marlin_weights_back

    def sparse_marlin(group: int):
        def pre_process(input):  # MarlinSparseLayoutType.pre_process at 65d86c6c26
            input_t = input.t()
            w_24, _ = m24["inject_24"](input_t, *input_t.shape)
            return w_24.t()

        def run(w):  # from_hp_to_intx (its locals alive to the end) and MarlinSparseAQTLayout.from_plain at 65d86c6c26
            input_float = pre_process(w)
            block = [1, group]
            scale, zero = marlin["_choose_qparams_affine"](input_float, "SYMMETRIC", block, torch.int32, 0, 15, 1e-6,
                                                           None, torch.bfloat16, True, "INT")
            data = marlin["_quantize_affine_no_dtype_cast"](input_float, block, scale, zero, 0, 15, "INT").to(torch.int32)
            q_w_24, scale_t = data.t(), scale.t()
            num_bits = 4 if torch.max(q_w_24) < 16 else -1
            out = m24["pack_to_marlin_24"](q_w_24, scale_t, num_bits, q_w_24.shape[0] // scale_t.shape[0])
            del input_float, data, scale
            return out, zero
        return run

    def w4a8(group: int):
        def run(w):  # MarlinQQQTensor.from_hp_to_intx and MarlinQQQAQTTensorImpl.from_plain at 06e69f6a93
            data, s_group, s_channel, _ = qqq["choose_qparams_and_quantize_affine_qqq"](w, 4, group)
            return qqq["pack_to_marlin_qqq"](data.t(), s_group.t(), s_channel.t(), 4, group if group > 0 else k)
        return run

    rows = [("fp6", torch.float16, 0, fp6, False), ("uint4", torch.bfloat16, 64, uintx(4, 64), True),
            ("uint2", torch.bfloat16, 8, uintx(2, 8), True), ("uint3", torch.bfloat16, 32, uintx(3, 32), True),
            ("w4a8-qqq", torch.float16, 0, w4a8(-1), False), ("w4a8-qqq", torch.float16, 128, w4a8(128), True),
            ("int4-sparse-marlin", torch.float16, 128, sparse_marlin(128), True)]
    cuda = torch.Tensor.cuda
    torch.Tensor.cuda = lambda self, *a, **kw: self  # inject_24's .cuda() of a tensor already on the GPU
    for quant, dtype, group, fn, viewed in rows:
        w = torch.randn(n, k, dtype=dtype)
        rec = Recorder(round_to=512)
        returned.clear()
        with rec:
            out = fn(w)
        b = w.element_size()
        events = rec.events()
        on_host = frozenset(e.storage for e in events if e.action == "alloc" and e.phase == "host") - set(returned)
        peak, left = _peak(events, n * k * b, on_host)
        seen = n * k * b if viewed else 0  # the weight's view counted as new
        del out
        r_peak, r_left = _replayed(quant, n, k, b, group)
        print(f"{quant:9s} g{group:<4d} torchao: peak {(peak - seen) / MiB:9.3f} MiB, kept {(left - seen - n * k * b) / MiB:7.3f}"
              f" | replayed: peak {r_peak / MiB:9.3f} MiB, kept {(r_left - n * k * b) / MiB:7.3f}")
    torch.Tensor.cuda = cuda
    sys.stdout.flush()


if __name__ == "__main__":
    main()
