"""CUDA autocast's op policy, applied to the fake CPU tensors of a trace.

Autocast is a dispatch key per device with its own op lists (aten/src/ATen/autocast_mode.h,
``AT_FORALL_*``, registered for ``Autocast`` (CUDA) in aten/src/ATen/autocast_mode.cpp; the
``AutocastCPU`` block of the same file has other lists). A trace runs on the CPU fake device,
so without help it gets CPU's policy, and the dtypes of what is saved for backward differ from
a CUDA run: CUDA runs ``pow``, ``exp``, ``rsqrt``, ``layer_norm`` and friends in fp32 and
``softmax``/``log_softmax``/``sum``/``cumsum`` in fp32 when no dtype is given; CPU leaves them
in the lower precision. CPU in turn casts ``cross_entropy_loss``, ``cat``, ``stack`` and others
that CUDA leaves alone (CUDA reaches ``log_softmax`` and ``nll_loss`` inside
``cross_entropy_loss`` instead).

:func:`cuda_autocast_policy` registers ``AutocastCPU`` kernels (``torch.library``) for every op
whose CUDA policy is not CPU's, for as long as a trace runs, then removes them (the dispatcher
restores CPU's own kernels):

* an op CUDA lists: CUDA's policy, written after the ``WrapFunction_`` specialisations of
  autocast_mode.h (``lower_precision_fp``, ``fp32``, ``fp32_set_opt_dtype``,
  ``fp32_append_dtype``, ``promote``; ``binary_cross_entropy`` is banned), with the fake CPU
  device in the place of CUDA for eligibility;
* an op only CPU lists (read from the dispatcher at run time): a fallthrough, as CUDA's
  ``Autocast`` key has for every op it does not list, so the ops inside it are autocast;
* an op both list under the same policy (:data:`SAME_ON_CPU`): CPU's C++ kernel stays, with
  its cache of weight casts (``cached_cast``).
"""

from __future__ import annotations

import contextlib
import warnings
import weakref
from collections.abc import Iterator
from typing import Any

import torch

#: AT_FORALL_LOWER_PRECISION_FP, plus the two cuDNN convolutions registered beside it
#: (autocast_mode.h / autocast_mode.cpp, PyTorch 2.x main as of torch 2.11-2.13).
LOWER_PRECISION_FP: tuple[str, ...] = (
    "_convolution.deprecated", "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d",
    "conv_transpose2d.input", "conv_transpose3d.input", "convolution", "prelu", "addmm", "addmv", "addr",
    "matmul", "einsum", "mm", "mv", "linalg_vecdot", "linear", "addbmm", "baddbmm", "bmm", "chain_matmul",
    "linalg_multi_dot", "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell", "lstm_cell", "gru_cell",
    "rnn_tanh_cell", "rnn_relu_cell", "_scaled_dot_product_flash_attention", "scaled_dot_product_attention",
    "cudnn_convolution", "cudnn_convolution_transpose",
)

#: AT_FORALL_FP32: floating inputs are cast to fp32.
FP32: tuple[str, ...] = (
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt",
    "sinh", "tan", "pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar", "softplus", "layer_norm",
    "native_layer_norm", "rms_norm", "group_norm", "frobenius_norm.dim", "nuclear_norm", "nuclear_norm.dim",
    "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss", "nll_loss", "nll_loss2d",
    "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss",
    "margin_ranking_loss", "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss",
    "multi_margin_loss", "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm", "logsumexp",
    "upsample_nearest1d", "_upsample_nearest_exact1d", "upsample_nearest2d", "_upsample_nearest_exact2d",
    "upsample_nearest3d", "_upsample_nearest_exact3d", "upsample_linear1d", "upsample_bilinear2d",
    "_upsample_bilinear2d_aa", "upsample_trilinear3d", "upsample_bicubic2d", "_upsample_bicubic2d_aa",
)

#: AT_FORALL_FP32_SET_OPT_DTYPE: run in fp32 (``dtype=torch.float32``) unless a dtype is given.
FP32_SET_OPT_DTYPE: tuple[str, ...] = (
    "prod", "prod.dim_int", "prod.dim_Dimname", "softmax.int", "softmax.Dimname", "log_softmax.int",
    "log_softmax.Dimname", "cumprod", "cumprod.dimname", "cumsum", "cumsum.dimname", "linalg_vector_norm",
    "linalg_matrix_norm", "linalg_matrix_norm.str_ord", "sum", "sum.dim_IntList", "sum.dim_DimnameList",
)

#: AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE (policy fp32_append_dtype): the overload without a
#: dtype redispatches to the one with it, dtype fp32.
FP32_APPEND_DTYPE: dict[str, str] = {
    "norm.Scalar": "norm.ScalarOpt_dtype",
    "norm.ScalarOpt_dim": "norm.ScalarOpt_dim_dtype",
    "norm.names_ScalarOpt_dim": "norm.names_ScalarOpt_dim_dtype",
}

#: AT_FORALL_PROMOTE: every floating input goes to the widest of them.
PROMOTE: tuple[str, ...] = (
    "addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler", "index_put",
    "tensordot", "scatter_add",
)

#: ``binary_cross_entropy_banned`` in autocast_mode.cpp.
BANNED: tuple[str, ...] = ("binary_cross_entropy",)

#: Ops the AutocastCPU block of autocast_mode.cpp registers under the same policy as CUDA's
#: lists: their C++ kernels stay (for the lower-precision ones, with autocast's weight cache).
SAME_ON_CPU: frozenset[str] = frozenset({
    # lower_precision_fp on both
    "_convolution.deprecated", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d",
    "conv_transpose2d.input", "conv_transpose3d.input", "prelu", "addmm", "matmul", "mm", "linalg_vecdot",
    "linear", "addbmm", "baddbmm", "bmm", "scaled_dot_product_attention",
    # fp32 on both
    "poisson_nll_loss", "cosine_embedding_loss", "nll_loss", "nll_loss2d", "hinge_embedding_loss", "kl_div",
    "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss", "margin_ranking_loss", "multilabel_margin_loss",
    "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss", "binary_cross_entropy_with_logits", "cdist",
})


def cuda_listed() -> frozenset[str]:
    """Every op CUDA's autocast registers a kernel for (``name`` or ``name.overload``)."""
    return frozenset((*LOWER_PRECISION_FP, *FP32, *FP32_SET_OPT_DTYPE, *FP32_APPEND_DTYPE, *PROMOTE, *BANNED))


def _overload(name: str):
    """The OpOverload for ``name`` (``"pow.Tensor_Scalar"``, ``"layer_norm"``), or None if this torch lacks it."""
    base, _, ov = name.partition(".")
    try:
        return getattr(getattr(torch.ops.aten, base), ov or "default")
    except (AttributeError, RuntimeError):
        return None


def cpu_listed() -> frozenset[str]:
    """Every aten op the installed torch registers an AutocastCPU kernel for, read from the dispatcher."""
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    return frozenset(
        n.removeprefix("aten::") for n in torch._C._dispatch_get_all_op_names()
        if n.startswith("aten::") and has(n, "AutocastCPU")
    )


# ---- the cast rules (autocast_mode.h) ---------------------------------------------------------


def _eligible(t: Any) -> bool:
    # is_eligible: a defined floating tensor on autocast's device, not double (the fake CPU
    # device stands where is_autocast_eligible checks for CUDA)
    return isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.is_floating_point() and t.dtype != torch.float64


class _CastCache:
    """``cached_cast``'s cache for the lower-precision ops CPU does not list (CPU's own C++ kernels
    keep theirs): casts of fp32 leaf tensors that require grad, until the autocast region exits."""

    def __init__(self) -> None:
        self.casts: dict[int, tuple[weakref.ref, torch.Tensor]] = {}

    def cast(self, t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        if not (dtype == torch.get_autocast_dtype("cpu") and t.dtype == torch.float32 and t.requires_grad
                and t.is_leaf and not t._is_view() and torch.is_autocast_cache_enabled()):
            return t.to(dtype)
        hit = self.casts.get(id(t))
        if hit is not None and hit[0]() is t:
            return hit[1]
        out = t.to(dtype)
        self.casts[id(t)] = (weakref.ref(t), out)
        return out

    def clear(self) -> None:
        self.casts.clear()


_CACHE = _CastCache()


def _cast_all(args: tuple, kwargs: dict, dtype: torch.dtype, cache: bool = False) -> tuple[tuple, dict]:
    return tuple(_cast(a, dtype, cache) for a in args), {k: _cast(v, dtype, cache) for k, v in kwargs.items()}


def _cast(x: Any, dtype: torch.dtype, cache: bool = False) -> Any:
    if isinstance(x, torch.Tensor):
        if _eligible(x) and x.dtype != dtype:
            return _CACHE.cast(x, dtype) if cache else x.to(dtype)
        return x
    if isinstance(x, (list, tuple)) and any(isinstance(u, torch.Tensor) for u in x):
        return type(x)(_cast(u, dtype, cache) for u in x)
    return x


def _tensors(args: Any) -> Iterator[torch.Tensor]:
    for a in args:
        if isinstance(a, torch.Tensor):
            yield a
        elif isinstance(a, (list, tuple)):
            yield from (u for u in a if isinstance(u, torch.Tensor))


def _no_autocast():
    # the wrappers run the op with autocast excluded (ExcludeDispatchKeyGuard on AutocastFunctionality)
    return torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU))


def _lower_precision_fp(op):
    def kernel(*args, **kwargs):
        dt = torch.get_autocast_dtype("cpu")
        args, kwargs = _cast_all(args, kwargs, dt, True)
        with _no_autocast():
            return op(*args, **kwargs)
    return kernel


def _fp32(op):
    def kernel(*args, **kwargs):
        args, kwargs = _cast_all(args, kwargs, torch.float32)
        with _no_autocast():
            return op(*args, **kwargs)
    return kernel


def _dtype_slot(op) -> tuple[int | None, bool]:
    """(position of the ``dtype`` argument, whether it is keyword-only) in the op's schema."""
    for i, a in enumerate(op._schema.arguments):
        if a.name == "dtype":
            return i, a.kwarg_only
    return None, True


def _fp32_set_opt_dtype(op, name: str):
    pos, kw_only = _dtype_slot(op)
    softmax = name.split(".")[0] in ("softmax", "log_softmax")
    private = torch.ops.aten._softmax if name.startswith("softmax") else torch.ops.aten._log_softmax

    def kernel(*args, **kwargs):
        with _no_autocast():
            if not (args and _eligible(args[0])):
                return op(*args, **kwargs)
            args = list(args)
            if not kw_only and pos is not None and len(args) > pos:
                given = args[pos]
            else:
                given = kwargs.get("dtype")
            if given is not None:
                return op(*args, **kwargs)
            if softmax and args[0].dtype == torch.float16 and isinstance(args[1], int):
                # SoftMax.cpp softmax/log_softmax: a CUDA half input asked for float runs the
                # kernel with half_to_float (no fp32 copy of the input); other dtypes are cast
                return private(args[0], args[1], True)
            if not kw_only and pos is not None and len(args) > pos:
                args[pos] = torch.float32
            else:
                kwargs["dtype"] = torch.float32
            return op(*args, **kwargs)
    return kernel


def _fp32_append_dtype(op, target):
    # the dtype overload has no defaults before its dtype: fill them in from the registered schema
    schema = [a for a in op._schema.arguments if not a.kwarg_only]

    def kernel(*args, **kwargs):
        first = args[0]
        out = torch.float32 if _eligible(first) else first.dtype
        full = list(args)
        for a in schema[len(args):]:
            full.append(kwargs.pop(a.name) if a.name in kwargs else a.default_value)
        with _no_autocast():
            return target(*full, **kwargs, dtype=out)
    return kernel


def _promote(op):
    def kernel(*args, **kwargs):
        low = torch.get_autocast_dtype("cpu")
        to = low
        for t in _tensors((*args, *kwargs.values())):
            if not _eligible(t):
                continue
            if to == torch.float32 or t.dtype == torch.float32:
                to = torch.float32
            elif t.dtype != low:
                raise RuntimeError(f"autocast promote: unexpected floating dtype {t.dtype} (autocast dtype {low})")
        args, kwargs = _cast_all(args, kwargs, to)
        with _no_autocast():
            return op(*args, **kwargs)
    return kernel


def _banned(name: str):
    def kernel(*args, **kwargs):
        raise RuntimeError(
            f"torch.nn.functional.{name} is unsafe to autocast and CUDA autocast refuses it: "
            "use binary_cross_entropy_with_logits (BCEWithLogitsLoss) on the logits instead"
        )
    return kernel


def _kernels() -> dict[str, Any]:
    """name -> the AutocastCPU kernel that gives the op CUDA's policy (None: a fallthrough)."""
    out: dict[str, Any] = {}
    for name in LOWER_PRECISION_FP:
        if name not in SAME_ON_CPU and (op := _overload(name)) is not None:
            out[name] = _lower_precision_fp(op)
    for name in FP32:
        if name not in SAME_ON_CPU and (op := _overload(name)) is not None:
            out[name] = _fp32(op)
    for name in FP32_SET_OPT_DTYPE:
        if (op := _overload(name)) is not None:
            out[name] = _fp32_set_opt_dtype(op, name)
    for name, target in FP32_APPEND_DTYPE.items():
        if (op := _overload(name)) is not None and (t := _overload(target)) is not None:
            out[name] = _fp32_append_dtype(op, t)
    for name in PROMOTE:
        if (op := _overload(name)) is not None:
            out[name] = _promote(op)
    for name in BANNED:
        if _overload(name) is not None:
            out[name] = _banned(name)
    listed = cuda_listed()
    for name in _cpu_only():
        if name not in listed:
            out[name] = None
    return out


_CPU_LISTED: list[frozenset[str]] = []


def _cpu_only() -> frozenset[str]:
    # read once, before any of our own registrations are in the dispatcher
    if not _CPU_LISTED:
        _CPU_LISTED.append(cpu_listed())
    return _CPU_LISTED[0]


_ACTIVE: list[Any] = []  # the installed torch.library.Library (one at a time; nested traces share it)


@contextlib.contextmanager
def cuda_autocast_policy() -> Iterator[None]:
    """Give ops under CPU autocast the dtypes CUDA autocast gives them, inside this context."""
    if _ACTIVE:  # a trace inside a trace: the kernels are in place already
        _ACTIVE.append(_ACTIVE[-1])
        try:
            yield
        finally:
            _ACTIVE.pop()
        return
    kernels = _kernels()
    lib = torch.library.Library("aten", "IMPL")
    try:
        with warnings.catch_warnings():
            # "Overriding a previously registered kernel": replacing CPU's kernel is the point
            warnings.simplefilter("ignore")
            for name, fn in kernels.items():
                lib.impl(name, fn if fn is not None else torch.library.fallthrough_kernel, "AutocastCPU")
        _ACTIVE.append(lib)
        yield
    finally:
        if _ACTIVE and _ACTIVE[-1] is lib:
            _ACTIVE.pop()
        lib._destroy()
        _CACHE.clear()


@contextlib.contextmanager
def autocast_region(dtype: torch.dtype) -> Iterator[None]:
    """``torch.autocast("cpu", dtype)`` whose exit also drops the weight casts kept by
    :func:`cuda_autocast_policy`'s kernels (autocast clears its cache when the outermost region exits)."""
    try:
        with torch.autocast(device_type="cpu", dtype=dtype):
            yield
    finally:
        if not torch.is_autocast_enabled("cpu"):
            _CACHE.clear()
