"""Inference placement: a device map by block across GPUs, CPU RAM and disk, with decode speed.

Placement follows Accelerate's ``infer_auto_device_map(max_memory=...)``: modules are taken in
execution order (embeddings, block 0, 1, ..., final norm, output layer); a transformer block is
never split (``_no_split_modules``); a module goes on the current device if it fits, else the
next device (GPU 0, GPU 1, ..., ``cpu``, ``disk``); tied weights stay together (a tied output
layer has no tensor of its own and runs where the embedding is). When anything is offloaded,
the main GPU also keeps room for the largest block, which Accelerate's hooks copy in to run it.

Unlike Accelerate, each GPU's budget first reserves what inference needs besides weights: the
CUDA context and workspaces, the prefill activation peak, the logits on the GPU holding the
output layer, and the KV cache of the blocks it runs (offloaded blocks run on GPU 0, so their
cache lives there).

Decode speed (one token for the whole batch) is bandwidth-bound (Pope et al. 2022): each GPU's
bytes at its bandwidth x BANDWIDTH_EFFICIENCY, offloaded CPU weights copied over PCIe every
token, disk weights read at DISK_BYTES_S; blocks run one after another (naive model
parallelism), so the times add. CPU-only decode reads everything at CPU_BYTES_S.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from vramlens.advise.budget import Budget, stopped_line
from vramlens.advise.cost import BANDWIDTH_EFFICIENCY, LINK_EFFICIENCY
from vramlens.errors import InputError
from vramlens.estimator import activations as A
from vramlens.estimator import estimate_spec
from vramlens.estimator import kv_cache as K
from vramlens.estimator.core import vision_figures
from vramlens.estimator.runtime import runtime
from vramlens.estimator.weights import GROUP_SIZE, format_takes, quant_group, quantized_linear_bytes  # noqa: F401  (GROUP_SIZE: doc link)
from vramlens.hardware.gpu import GPU
from vramlens.limits import SEARCH_BUDGET_S
from vramlens.models.spec import ModelSpec, TensorInfo
from vramlens.units import DTYPE_BYTES, dtype_bytes, human_bytes
from vramlens.workload import Workload

#: NVMe sequential read, bytes/s: a PCIe 4.0 x4 SSD (datasheets: ~7 GB/s peak; ~2-3 GB/s
#: sustained through safetensors' mmap and page cache misses). An assumption, settable.
DISK_BYTES_S = 2.0e9
#: CPU memory bandwidth a decode loop reaches, bytes/s: two-channel DDR5-5600 is 89.6 GB/s peak;
#: llama.cpp-style CPU decode reaches roughly half. An assumption, settable.
CPU_BYTES_S = 45e9
#: Where a block goes, as device_map names it: a GPU index, "cpu" or "disk".
Device = int | str


@dataclass(frozen=True, slots=True)
class Block:
    """One no-split unit: a transformer block or a module outside the blocks."""

    name: str              # module path, as device_map keys it ("model.layers.3", "lm_head")
    weight_bytes: int
    kv_bytes: int = 0      # this block's KV cache at the full context
    layer: int | None = None


@dataclass(frozen=True, slots=True)
class Option:
    """One way to place the model: where each block goes, bytes per device, speed.

    Attributes:
        kind: "gpu" (every block on GPUs), "hybrid" (GPUs, then CPU RAM, then disk), "cpu".
        fits: every block found a device within its budget.
        device_map: block name -> 0, 1, ..., "cpu" or "disk" (``from_pretrained(device_map=...)``).
        device_bytes: bytes placed on each device (weights, plus KV cache and reserves on GPUs).
        tokens_per_s: decode speed for the batch, tokens per second (0 when it does not fit).
        reason: why it does not fit, when it does not.
    """

    kind: str
    fits: bool
    device_map: dict[str, Device]
    device_bytes: dict[Device, int]
    tokens_per_s: float
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "fits": self.fits, "tokens_per_s": self.tokens_per_s,
                "device_bytes": {str(k): v for k, v in self.device_bytes.items()},
                "device_map": self.device_map, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class Placement:
    """``vramlens place``: the options side by side, and the budgets they used."""

    model: str
    gpu: str
    gpus: int
    workload: Workload
    budgets: dict[int, int]
    reserved: dict[int, int]
    options: tuple[Option, ...] = field(default_factory=tuple)
    #: rounds of placement run and the most the options could need; partial: the time budget ran
    #: out before a placement settled (the options shown are the last placements made)
    rounds: int = 0
    max_rounds: int = 0
    partial: bool = False
    budget_s: float = SEARCH_BUDGET_S

    def option(self, kind: str) -> Option:
        return next(o for o in self.options if o.kind == kind)

    @property
    def stopped(self) -> str:
        """The line a partial answer shows ("" when every placement settled)."""
        return stopped_line(self.budget_s, self.rounds, self.max_rounds, "placement rounds") if self.partial else ""

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "gpu": self.gpu, "gpus": self.gpus,
                "budgets": {str(k): v for k, v in self.budgets.items()},
                "reserved": {str(k): v for k, v in self.reserved.items()},
                "options": [o.to_dict() for o in self.options], "partial": self.partial}


def _tensor_bytes(t: TensorInfo, w: Workload) -> int:
    if t.dtype is not None and t.dtype not in ("fp32", "fp16", "bf16"):
        return t.numel * dtype_bytes(t.dtype)
    q = w.quantized
    if (q and t.layer is not None and t.role in ("linear", "expert") and len(t.shape) >= 2
            and format_takes(q, t.out_features, t.in_features, quant_group(w))):
        count = t.numel // (t.shape[-1] * t.shape[-2])
        return count * quantized_linear_bytes(t.out_features, t.in_features, q, quant_group(w), DTYPE_BYTES[w.dtype])
    b = DTYPE_BYTES[t.dtype] if t.dtype in DTYPE_BYTES and t.role == "buffer" else DTYPE_BYTES[w.dtype]
    return t.numel * b


def blocks(spec: ModelSpec, w: Workload) -> list[Block]:
    """The model's no-split units in execution order, with weight bytes and KV cache each."""
    order: list[str] = []
    size: dict[str, int] = {}
    layer_of: dict[str, int | None] = {}
    for t in spec.tensors:
        parts = t.name.split(".")
        if t.layer is not None:
            i = parts.index(str(t.layer)) if str(t.layer) in parts else len(parts) - 1
            name = ".".join(parts[: i + 1])
        else:
            name = ".".join(parts[:-1]) or t.name
        if name not in size:
            order.append(name)
            size[name] = 0
            layer_of[name] = t.layer
        size[name] += _tensor_bytes(t, w)
    total_tokens = w.seq + w.new_tokens
    kv_all = K.kv_cache_bytes(spec, w, total_tokens, w.batch) if spec.kind != "encoder" else 0
    n_dec = max(1, spec.n_decoder_layers)
    out: list[Block] = []
    for name in order:
        layer = layer_of[name]
        # decoder blocks share the cache evenly (sliding-window layers make this approximate)
        kv = kv_all // n_dec if layer is not None and spec.kind != "encoder" else 0
        out.append(Block(name, size[name], kv, layer))
    # output layer last, as it runs (a tied one has no tensor and follows the embedding)
    head = [b for b in out if b.name.endswith("lm_head")]
    return [b for b in out if b not in head] + head


def _decode_seconds(device_bytes_read: dict[Device, int], gpu: GPU, pcie_bytes_s: float, disk_bytes_s: float) -> float:
    t = 0.0
    bw = gpu.bandwidth_bytes_s * BANDWIDTH_EFFICIENCY
    for dev, n in device_bytes_read.items():
        if dev == "cpu":
            t += n / (pcie_bytes_s * LINK_EFFICIENCY)  # copied to GPU 0 every token (Accelerate hooks)
            t += n / bw
        elif dev == "disk":
            t += n / disk_bytes_s + n / (pcie_bytes_s * LINK_EFFICIENCY) + n / bw
        else:
            t += n / bw
    return t


def place(
    spec: ModelSpec,
    gpu: GPU,
    *,
    gpus: int = 1,
    workload: Workload | None = None,
    host_ram: int | None = None,
    disk: bool = True,
    headroom: float = 0.10,
    pcie_bytes_s: float | None = None,
    disk_bytes_s: float = DISK_BYTES_S,
    cpu_bytes_s: float = CPU_BYTES_S,
    budget_s: float = SEARCH_BUDGET_S,
) -> Placement:
    """Place ``spec`` for inference on ``gpus`` x ``gpu``, host RAM and disk; compare three options.

    Args:
        workload: batch, prompt (seq), new_tokens, dtype/quant/kv_dtype (default: inference, batch 1,
            seq 512, 128 new tokens).
        host_ram: CPU RAM for offloaded weights, bytes (None: not limited).
        disk: allow offloading to disk once GPUs and RAM are full.
        budget_s: seconds the placement may run; past them the last placement of each option is
            returned with ``partial=True``.

    Raises:
        InputError: gpus < 1, a training workload, or a headroom outside [0, 1).
    """
    w = workload or Workload(mode="inference", seq=512, new_tokens=128)
    if w.training:
        raise InputError("place is for inference: use --mode inference (training placement is `vramlens fit`)")
    if gpus < 1:
        raise InputError(f"gpus={gpus} must be a whole number >= 1")
    if not 0 <= headroom < 1:
        raise InputError(f"headroom={headroom} must be in [0, 1): e.g. 0.1 keeps 10% free")
    budget = Budget.begin(budget_s)
    w = replace(w, gpus=1, tp=1, pp=1).validated()
    # a VLM's decoder sees seq + the image tokens (estimate_spec adds them itself below)
    # (vision_figures' tokens: Qwen2.5-VL's follow the image size)
    wd = replace(w, seq=w.seq + vision_figures(spec, w).tokens) if spec.vlm is not None else w
    bl = blocks(spec, wd)
    pcie = pcie_bytes_s or gpu.pcie_bytes_s or 16e9

    # what each GPU needs besides weights (estimate_spec's figures for one GPU, minus its weights/KV)
    e = estimate_spec(spec, w, gpu)
    b = e.breakdown
    overhead = b.device_total - b["weights"] - b["kv_cache"]  # context, workspaces, activations, logits, reserve
    rt = runtime(gpu, w).outside_allocator_bytes + runtime(gpu, w).workspace_bytes
    work = A.inference_layer_peak(spec, wd, wd.batch, wd.seq, wd.seq)
    usable = int(gpu.capacity_bytes * (1 - headroom))
    reserved = {0: overhead}
    for i in range(1, gpus):
        reserved[i] = rt + work
    budgets = {i: usable - reserved[i] for i in range(gpus)}
    on_gpu = _greedy(bl, budgets, gpus, None, False, gpu, pcie, disk_bytes_s, "gpu", w, budget)
    hybrid = _greedy(bl, budgets, gpus, host_ram, disk, gpu, pcie, disk_bytes_s, "hybrid", w, budget)
    options = [on_gpu.option, hybrid.option, _cpu_only(bl, host_ram, cpu_bytes_s, w, b["temporaries"] + work)]
    return Placement(model=spec.name, gpu=gpu.name, gpus=gpus, workload=w, budgets=budgets, reserved=reserved,
                     options=tuple(options), rounds=on_gpu.rounds + hybrid.rounds, max_rounds=2 * (len(bl) + 1),
                     partial=on_gpu.partial or hybrid.partial, budget_s=budget.seconds)


@dataclass(frozen=True, slots=True)
class _Placed:
    """What :func:`_greedy` settled on, and how many rounds it took."""

    option: Option
    rounds: int
    partial: bool = False


def _greedy(bl: list[Block], budgets: dict[int, int], gpus: int, host_ram: int | None, disk: bool, gpu: GPU, pcie: float,
            disk_bytes_s: float, kind: str, w: Workload, budget: Budget) -> _Placed:
    """Sequential placement; when blocks are offloaded, GPU 0 keeps room for the largest block and
    for the offloaded blocks' KV cache, re-placing until the offloaded set stops growing."""
    reserve = 0
    offloaded_before: set[str] = set()
    for rounds in range(1, len(bl) + 2):
        opt, offloaded = _sequential(bl, budgets, gpus, host_ram, disk, gpu, pcie, disk_bytes_s, kind, w, reserve)
        if not offloaded or offloaded == offloaded_before or not opt.fits:
            return _Placed(opt, rounds)
        if budget.spent():
            return _Placed(opt, rounds, partial=True)
        offloaded_before = offloaded
        reserve = max(x.weight_bytes for x in bl) + sum(x.kv_bytes for x in bl if x.name in offloaded)
    return _Placed(opt, len(bl) + 1)


def _sequential(bl: list[Block], budgets: dict[int, int], gpus: int, host_ram: int | None, disk: bool, gpu: GPU,
                pcie: float, disk_bytes_s: float, kind: str, w: Workload, reserve_gpu0: int
                ) -> tuple[Option, set[str]]:
    devices: list[Device] = [*range(gpus), *([] if kind == "gpu" else ["cpu"] + (["disk"] if disk else []))]
    left: dict[Device, float] = {d: b for d, b in budgets.items()}
    left[0] -= reserve_gpu0
    left["cpu"] = host_ram if host_ram is not None else float("inf")
    left["disk"] = float("inf")
    placed: dict[str, Device] = {}
    used: dict[Device, int] = {d: 0 for d in devices}
    read: dict[Device, int] = {d: 0 for d in devices}
    if reserve_gpu0:
        used[0] += reserve_gpu0
    offloaded: set[str] = set()
    d_i = 0
    for x in bl:
        while d_i < len(devices):
            d = devices[d_i]
            on_gpu = isinstance(d, int)
            need = x.weight_bytes + (x.kv_bytes if on_gpu else 0)
            if need <= left[d]:
                left[d] -= need
                used[d] += need
                read[d] += need
                if not on_gpu:
                    offloaded.add(x.name)
                    read[0] += x.kv_bytes  # runs on GPU 0, its cache there (inside the reserve)
                placed[x.name] = d
                break
            d_i += 1
        else:
            where = "the GPUs" if kind == "gpu" else "GPUs, CPU RAM" + (" and disk" if disk else "")
            return Option(kind, False, placed, {k: v for k, v in used.items() if v}, 0.0,
                          f"{x.name} ({human_bytes(x.weight_bytes + x.kv_bytes)}) does not fit on {where}"), set()
    if left[0] < 0:
        return Option(kind, False, placed, used, 0.0, "GPU 0 cannot hold the largest block and the offloaded "
                      "blocks' KV cache"), set()
    secs = _decode_seconds(read, gpu, pcie, disk_bytes_s)
    return Option(kind, True, placed, {k: v for k, v in used.items() if v}, w.batch / secs if secs else 0.0), offloaded


def _cpu_only(bl: list[Block], host_ram: int | None, cpu_bytes_s: float, w: Workload, work: int) -> Option:
    total = sum(x.weight_bytes + x.kv_bytes for x in bl) + work
    placed: dict[str, Device] = {x.name: "cpu" for x in bl}
    if host_ram is not None and total > host_ram:
        return Option("cpu", False, placed, {"cpu": total}, 0.0,
                      f"needs {human_bytes(total)} of RAM, {human_bytes(host_ram)} given")
    secs = total / cpu_bytes_s
    return Option("cpu", True, placed, {"cpu": total}, w.batch / secs)
