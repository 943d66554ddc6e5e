"""GPU: what the estimator and the advisor need to know about one accelerator."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GPU:
    """One accelerator model.

    Attributes:
        name: display name ("H100-SXM-80GB").
        memory_bytes: total device memory as the vendor sells it (exact bytes; 80 GiB cards
            are 85_899_345_920 bytes, nvidia-smi shows slightly less, see usable_bytes).
        usable_bytes: what nvidia-smi reports as total (ECC and reserved regions removed),
            the figure a run can fill; equals memory_bytes where unknown.
        bandwidth_bytes_s: peak memory bandwidth, bytes per second.
        bf16_flops / fp16_flops / fp32_flops: peak dense tensor throughput, FLOP/s (no sparsity).
        arch: generation ("hopper", "ampere", "ada", "turing", "volta", "blackwell", "cdna3",
            "cdna2", "apple").
        compute_capability: CUDA (major, minor), None for non-NVIDIA.
        vendor: "nvidia", "amd", "apple".
        interconnect_bytes_s: per-GPU bandwidth to its peers (NVLink, Infinity Fabric or PCIe).
        pcie_bytes_s: host link bandwidth per direction.
        unified: memory shared with the CPU (Apple silicon).
        aliases: other names it is found by.
        source: where the figures come from (datasheet).
        bf16: whether the GPU computes in bfloat16 natively; False before Ampere (P100, V100,
            T4, RTX 20xx: compute capability < 8.0), where PyTorch emulates it slowly or
            some kernels (FlashAttention) refuse it.
        sms: streaming multiprocessors (AMD: compute units), what vLLM's ``num_compute_units`` reads;
            None where unknown (a GPU given by size, cards whose datasheet gives no core count).
    """

    name: str
    memory_bytes: int
    bandwidth_bytes_s: float
    bf16_flops: float
    fp16_flops: float
    fp32_flops: float
    arch: str
    vendor: str = "nvidia"
    compute_capability: tuple[int, int] | None = None
    usable_bytes: int | None = None
    interconnect_bytes_s: float = 32e9
    pcie_bytes_s: float = 32e9
    unified: bool = False
    aliases: tuple[str, ...] = ()
    source: str = ""
    bf16: bool = True
    sms: int | None = None

    def dtype_notes(self, *dtypes: str | None) -> list[str]:
        """Notes for compute dtypes this GPU cannot run natively (``--dtype``, ``--amp``)."""
        if self.bf16 or "bf16" not in dtypes:
            return []
        cc = "" if self.compute_capability is None else " (compute capability {}.{})".format(*self.compute_capability)
        return [f"{self.name}{cc} has no native bf16: PyTorch emulates it slowly and some kernels "
                "(FlashAttention) refuse it; memory is as estimated; --dtype fp16 --amp fp16 or fp32 run natively"]

    @property
    def capacity_bytes(self) -> int:
        """Memory a run can use: nvidia-smi's total where known, else the sold size."""
        return self.usable_bytes if self.usable_bytes is not None else self.memory_bytes
