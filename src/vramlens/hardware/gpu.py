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
        usable_bytes: what nvidia-smi reports as total (NVML ``memory.total``: ECC and the
            firmware's regions removed); None where unknown (see nvidia_smi_bytes).
        cuda_total_bytes: the device total CUDA reports (``cudaMemGetInfo``'s total, equal to
            ``cudaDeviceProp.totalGlobalMem``: ``torch.cuda.mem_get_info()[1]``,
            ``torch.cuda.get_device_properties().total_memory``), lower than nvidia-smi's by the
            memory the driver reserves ("FB Memory Usage / Reserved" in ``nvidia-smi -q``); None
            where no published figure was found. cuda_total_source: where it was read.
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
    cuda_total_bytes: int | None = None
    cuda_total_source: str = ""

    def dtype_notes(self, *dtypes: str | None) -> list[str]:
        """Notes for compute dtypes this GPU cannot run natively (``--dtype``, ``--amp``)."""
        if self.bf16 or "bf16" not in dtypes:
            return []
        cc = "" if self.compute_capability is None else " (compute capability {}.{})".format(*self.compute_capability)
        return [f"{self.name}{cc} has no native bf16: PyTorch emulates it slowly and some kernels "
                "(FlashAttention) refuse it; memory is as estimated; --dtype fp16 --amp fp16 or fp32 run natively"]

    @property
    def nvidia_smi_bytes(self) -> int:
        """nvidia-smi's total (NVML ``memory.total``) where known, else the sold size.

        What engines read when they key a default on the card's size through NVML or nvidia-smi
        (SGLang's ``get_device_memory_capacity``, vLLM's ``get_device_total_memory``)."""
        return self.usable_bytes if self.usable_bytes is not None else self.memory_bytes

    @property
    def capacity_bytes(self) -> int:
        """Memory one process can use: CUDA's device total where known, else nvidia-smi's total.

        A CUDA process allocates out of what ``cudaMemGetInfo`` reports, whose total is nvidia-smi's
        less the driver's reserve: the pairs of ``nvidia-smi -q`` and ``deviceQuery`` captured on
        the same machines in github:thamada/nvidia-smi gls/ (commit c4c8a46) give Total - Reserved
        = totalGlobalMem to 1 MiB on ten cards (H100 SXM 81,559 - 454 = 81,105 MiB against 81,106;
        L4 23,034 - 556 = 22,478 against 22,478), and nvidia-smi's used column leaves the reserve
        out (an idle card shows 1 MiB used). So vLLM's budget (gpu_memory_utilization x
        ``mem_get_info`` total), SGLang's free memory, llama.cpp's and PyTorch's out-of-memory
        point all sit under this figure; where CUDA's total is unknown (``cuda_total_bytes`` None)
        nvidia-smi's is used, a few hundred MiB too high (:attr:`cuda_total_known`).
        """
        return self.cuda_total_bytes if self.cuda_total_bytes is not None else self.nvidia_smi_bytes

    @property
    def cuda_total_known(self) -> bool:
        """Whether ``capacity_bytes`` is CUDA's total rather than nvidia-smi's (or the sold size)."""
        return self.cuda_total_bytes is not None

    def capacity_note(self) -> str | None:
        """One line for results that fell back to nvidia-smi's total; None where CUDA's total is known."""
        if self.cuda_total_known or self.vendor in ("generic", "apple"):
            return None
        what = "nvidia-smi's total" if self.usable_bytes is not None else "the sold size"
        return (f"{self.name}: CUDA's device total (cudaMemGetInfo) is not in the catalog; {what} "
                f"{self.capacity_bytes:,} B is used, which the driver's reserve (a few hundred MiB on recent "
                "NVIDIA drivers) makes too high: an engine or run may get a little less")
