"""Step-time cost model: how long a plan takes, so that plans that fit can be ranked.

First-order and documented, not measured; every factor is a named constant with its source.

Compute (per token, N parameters, L layers, h = a*d_head, s sequence length):

* forward 2N and backward 4N FLOPs per token, 6N in all (Kaplan et al. 2020, "Scaling Laws for
  Neural Language Models", §2.1); attention scores add 12*L*h*s per token for forward plus
  backward (Chowdhery et al. 2022, PaLM, Appendix B), a third of it in the forward.
* frozen weights (LoRA, QLoRA) skip their weight gradients: forward 2N + input gradients 2N.
* full activation checkpointing runs the forward again: +2N (+33% of 6N) plus the attention
  forward; selective checkpointing recomputes the attention core only (Korthikanti et al. 2022);
  torchtitan's every:N recomputes the checkpointed blocks' share of both; its per-op selective
  checkpointing recomputes the matmuls whose outputs it does not save (every other ``mm``, the
  biased linears' ``addmm``: vramlens.estimator.checkpointing.saved_matmul_share) and, with eager
  attention, the attention (the SDPA kernel's output is saved).
* throughput: the GPU's peak dense FLOP/s for the compute dtype times MFU (model FLOPs
  utilisation). MFU = 0.40: PaLM reports 46.2% on TPU v4 and Megatron-LM 52% of A100 peak at
  scale (Narayanan et al. 2021, §5.1); a typical Hugging Face run on one node reaches less.
* eager attention materialises the s x s scores: FlashAttention-2 (Dao 2023) reports 2-4x the
  speed of the standard PyTorch attention; we charge eager attention 3x its FLOP time.
* 4-bit weights (QLoRA nf4/fp4) are dequantized before each matmul: QUANT_MATMUL_FACTOR.

Inference decode is memory-bandwidth bound: every new token reads all weights and the KV cache
once (Pope et al. 2022, §2), at BANDWIDTH_EFFICIENCY of the GPU's peak bandwidth.

Communication (ring collectives move 2(n-1)/n of the buffer per rank for an all-reduce, (n-1)/n
for an all-gather or reduce-scatter; Patarasuk & Yuan 2009):

* DDP and ZeRO-1/2: one all-reduce of the gradients per step (ZeRO paper, Rajbhandari et al.
  2020, §7: stage 1 and 2 move the same volume as DDP); overlapped with the backward pass.
* ZeRO-3 / FSDP: all-gather of the parameters in forward and again in backward plus a
  reduce-scatter of the gradients: 3x the parameter bytes (ZeRO §7.2.2, 1.5x DDP), per micro-batch.
* tensor parallelism: 4 all-reduces of b*s*h activations per layer per micro-batch (2 forward,
  2 backward; Shoeybi et al. 2019, §3), on the critical path.
* pipeline parallelism: the 1F1B bubble (p-1)/(m+p-1) of the step (Narayanan et al. 2021, §2.2).
* bandwidth: NVLink / Infinity Fabric (``GPU.interconnect_bytes_s``) inside a node, the network
  (``Links.network_bytes_s``, settable) across nodes, PCIe for host offload.

Offload (ZeRO-Offload, Ren et al. 2021): gradients go to the host and updated parameters come
back over PCIe each step and the CPU runs Adam; with parameters offloaded too they stream over
PCIe in each forward and backward.

Training techniques (vramlens.workload):

* activation offload (torchtune OffloadActivations): the offloaded activations (the estimate's
  host bytes beyond the offloaded state) go to the host in forward and come back in backward,
  2 x bytes per micro-batch over PCIe (``GPU.pcie_bytes_s`` at LINK_EFFICIENCY). Charged in full:
  torchtune's ``use_streams=True`` overlaps the copies with compute, so this is an upper bound.
* chunked loss (torchtune's chunked output): the same FLOPs in n launches; negligible, 0.
* optimizer in backward: the same optimizer step, run parameter by parameter inside backward;
  no time charged (it is not overlapped with compute: the step moves, it does not grow).
* loss parallelism (torchtitan): the same FLOPs on vocabulary shards; 0 (it saves the logits'
  all-gather, which this model does not charge either).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from vramlens.estimator import checkpointing as C
from vramlens.estimator.inventory import summarize
from vramlens.estimator.memo import identity_cache
from vramlens.estimator.optimizer import ADAM_LIKE, CPU_OFFLOAD
from vramlens.hardware.gpu import GPU
from vramlens.models.spec import ModelSpec
from vramlens.units import DTYPE_BYTES
from vramlens.workload import Attention, Workload, evolve

#: Model FLOPs utilisation assumed for training and prefill (see the module docstring).
MFU = 0.40
#: Share of peak memory bandwidth that decode kernels reach (vLLM / llama.cpp decode typically
#: reaches 60-80% of peak on large batches; we assume the middle).
BANDWIDTH_EFFICIENCY = 0.70
#: Share of peak link bandwidth that NCCL collectives reach (nccl-tests bus bandwidth on NVLink
#: and InfiniBand is typically 70-90% of the link rate).
LINK_EFFICIENCY = 0.80
#: Eager attention time relative to its FLOP time at MFU (FlashAttention-2 paper: 2-4x).
EAGER_ATTENTION_FACTOR = 3.0
#: Matmul slowdown from dequantizing 4-bit / 8-bit weights on the fly (bitsandbytes kernels).
#: An assumption within the range users report for QLoRA versus LoRA (tens of percent for nf4;
#: LLM.int8 is known to be slower than fp16 for small batches, Dettmers et al. 2022 §5).
QUANT_MATMUL_FACTOR = {"nf4": 1.4, "nf4-dq": 1.45, "fp4": 1.4, "int8": 1.6, "int4": 1.2,
                       "gptq-4bit": 1.2, "awq-4bit": 1.2, "fp8": 0.9}
#: Autocast (fp32 weights, half compute) casts every weight to half precision in each forward:
#: one read of 4 B and one write of 2 B per parameter, bandwidth bound.
AUTOCAST_CAST_BYTES_PER_PARAM = 6
#: CPU Adam update rate for offloaded optimizer states, parameters per second. An assumption of
#: the order DeepSpeed's vectorised CPU-Adam reaches on a server CPU (ZeRO-Offload, Ren et al. 2021).
CPU_ADAM_PARAMS_PER_S = 1.0e9
#: Network between nodes: 200 Gb/s InfiniBand HDR per GPU by default (settable).
DEFAULT_NETWORK_BYTES_S = 25e9


@dataclass(frozen=True, slots=True)
class Links:
    """Bandwidths the communication terms use, bytes per second (None: from the GPU entry)."""

    intra_node_bytes_s: float | None = None
    network_bytes_s: float = DEFAULT_NETWORK_BYTES_S
    pcie_bytes_s: float | None = None


@dataclass(frozen=True, slots=True)
class StepCost:
    """Estimated time of one optimizer step (training) or one request (inference).

    Attributes:
        seconds: wall time of the step (training: one step of the effective batch; inference:
            prefill plus decode of every new token).
        compute_s, comm_s, offload_s, bubble_s: the parts.
        tokens_per_s: tokens processed per second across all GPUs (training) or generated
            per second (inference; prompt tokens when nothing is generated).
        flops_per_token: model FLOPs per token the compute term counts.
    """

    seconds: float
    compute_s: float
    comm_s: float
    offload_s: float
    bubble_s: float
    tokens_per_s: float
    flops_per_token: float


def n_params(spec: ModelSpec) -> int:
    """N, memoized per spec (``ModelSpec.params`` sums the whole inventory on every call)."""
    return summarize(spec).params


def peak_flops(gpu: GPU, dtype: str) -> float:
    """Peak dense FLOP/s of ``gpu`` for matmuls in ``dtype`` (bf16 falls back to fp16 where absent)."""
    if dtype == "bf16":
        return gpu.bf16_flops or gpu.fp16_flops or gpu.fp32_flops
    if dtype == "fp16":
        return gpu.fp16_flops or gpu.fp32_flops
    return gpu.fp32_flops or gpu.fp16_flops


def _intra(gpu: GPU, links: Links) -> float:
    bw = links.intra_node_bytes_s or gpu.interconnect_bytes_s or gpu.pcie_bytes_s or 1e9
    return bw * LINK_EFFICIENCY


def _pcie(gpu: GPU, links: Links) -> float:
    return (links.pcie_bytes_s or gpu.pcie_bytes_s or 16e9) * LINK_EFFICIENCY


def attention_flops_per_token(spec: ModelSpec, s: int) -> float:
    """12*L*h*s: scores and weighted values, forward and backward (PaLM, Appendix B)."""
    return 12.0 * spec.n_layers * spec.n_heads * spec.head_dim * s


def train_flops_per_token(spec: ModelSpec, w: Workload, trainable: int) -> float:
    """Model FLOPs per token of one training step, recomputation included."""
    dense, attn = _train_flops(n_params(spec), trainable, w.method, attention_flops_per_token(spec, w.seq),
                               recomputed(spec, w))
    return dense + attn


def recomputed(spec: ModelSpec, w: Workload) -> tuple[float, float]:
    """(share of the dense forward, share of the attention forward) that backward runs again.

    Reads of ``w`` the mode, checkpointing, attention, and (through the per-op policy's matmul order,
    checkpointing.block_mms) the method and LoRA targets: :func:`recompute_key`, the memo's key.
    """
    if not w.training or w.checkpointing == "none":
        return 0.0, 0.0
    if w.checkpointing == "full":
        return 1.0, 1.0
    if w.checkpointing == "selective":
        return 0.0, 1.0
    if w.checkpointing == "selective-op":
        return 1.0 - C.saved_matmul_share(spec, w), (1.0 if w.attention == "eager" else 0.0)
    share = sum(C.checkpointed(spec, w)) / max(1, spec.n_layers)
    return share, share


def recompute_key(w: Workload, checkpointing: str, attention: str) -> tuple[object, ...]:
    """What :func:`recomputed` reads of ``w`` with this checkpointing and attention."""
    return w.mode, w.method, w.lora_targets, checkpointing, attention


@identity_cache
def _recompute_memo(spec: ModelSpec) -> dict[tuple[object, ...], tuple[float, float]]:
    """One memo of :func:`recomputed` per model, shared by the search's TrainingCosts."""
    return {}


def _train_flops(N: int, trainable: int, method: str, attn: float,
                 recompute: tuple[float, float]) -> tuple[float, float]:
    """(dense, attention) FLOPs per token: 6N (frozen base: 4N), + 2N and 1/3 of the attention for
    the shares of the forward that backward recomputes."""
    dense = 6.0 * N if method == "full" else 4.0 * N + 6.0 * trainable
    dense += 2.0 * N * recompute[0]
    attn += attn / 3.0 * recompute[1]
    return dense, attn


class TrainingCost:
    """Step time of the plans that share everything but micro-batch, accumulation, checkpointing
    and attention kernel: the per-structure terms are computed once (the search calls
    :meth:`step` tens of thousands of times)."""

    __slots__ = ("N", "trainable", "method", "tp", "pp", "dp", "seq", "h", "L", "c", "rate", "qf", "attn_tok",
                 "cast_s", "ring_bytes_per_micro", "ring_bytes_per_step", "dp_bw", "tp_bw", "intra", "offload_step",
                 "offload_micro", "opt_step", "spec", "pcie", "w", "_recompute")

    def __init__(self, spec: ModelSpec, w: Workload, gpu: GPU, *, trainable: int, nodes: int = 1,
                 links: Links = Links()):
        tp, pp, dp = w.tp, w.pp, w.dp
        self.spec = spec
        self.w = w
        self._recompute = _recompute_memo(spec)
        self.N = N = n_params(spec)
        self.trainable = trainable
        self.method = w.method
        self.tp, self.pp, self.dp = tp, pp, dp
        self.seq = w.seq
        self.h = spec.hidden_size
        self.L = spec.n_layers
        self.c = DTYPE_BYTES[w.compute_dtype]
        self.rate = peak_flops(gpu, w.compute_dtype) * MFU
        quant = w.quantized
        self.qf = QUANT_MATMUL_FACTOR.get(quant, 1.0) if quant else 1.0
        self.attn_tok = attention_flops_per_token(spec, w.seq)
        self.cast_s = 0.0
        if w.autocast:
            self.cast_s = N * AUTOCAST_CAST_BYTES_PER_PARAM / (tp * pp) / gpu.bandwidth_bytes_s
        gpus_per_node = max(1, w.gpus // max(1, nodes))
        self.intra = intra = _intra(gpu, links)
        self.dp_bw = intra if nodes <= 1 else links.network_bytes_s * LINK_EFFICIENCY
        self.tp_bw = intra if tp <= gpus_per_node else links.network_bytes_s * LINK_EFFICIENCY
        pbytes = DTYPE_BYTES[w.dtype] if w.method == "full" else 4
        trained_bytes = trainable * pbytes / (tp * pp)
        self.ring_bytes_per_micro = self.ring_bytes_per_step = 0.0
        if dp > 1:
            ring = (dp - 1) / dp
            if w.shard_stage >= 3:
                # FSDP2's mixed-precision policy all-gathers in param_dtype (w.run_dtype)
                wbytes = N * DTYPE_BYTES[w.run_dtype if w.method == "full" else w.compute_dtype] / (tp * pp)
                self.ring_bytes_per_micro = ring * (2 * wbytes + trained_bytes)
            else:
                self.ring_bytes_per_step = 2 * ring * trained_bytes
        shard = dp if w.shard_stage >= 1 else 1
        local_trainable = trainable / (tp * pp) / shard
        self.offload_step = self.offload_micro = 0.0
        self.pcie = pcie = _pcie(gpu, links)
        if w.offload in ("optimizer", "all") or w.optimizer == CPU_OFFLOAD:
            # ZeRO-Offload, or torchao's CPUOffloadOptimizer: gradients to the host, parameters back, a CPU step
            self.offload_step = local_trainable * 2 * pbytes / pcie + local_trainable / CPU_ADAM_PARAMS_PER_S
        if w.offload == "all":
            self.offload_micro = 2 * N * DTYPE_BYTES[w.dtype] / (tp * pp) / shard / pcie
        # optimizer step: bandwidth bound, reads and writes parameters, gradients and states
        state_b = (0.5 if w.optimizer == "adamw-4bit-torchao" else 1 if ("8bit" in w.optimizer or "fp8" in w.optimizer)
                   else 0 if w.optimizer in ("none", "sgd") else 4)
        n_states = 2 if w.optimizer in ADAM_LIKE else 1
        self.opt_step = 0.0 if w.offload != "none" or w.optimizer == CPU_OFFLOAD else (
            local_trainable * 2 * (2 * pbytes + n_states * state_b) / gpu.bandwidth_bytes_s)

    def _recomputed(self, checkpointing: str, attention: str) -> tuple[float, float]:
        key = recompute_key(self.w, checkpointing, attention)
        hit = self._recompute.get(key)
        if hit is None:
            w = evolve(self.w, checkpointing=checkpointing, attention=cast(Attention, attention))
            hit = self._recompute[key] = recomputed(self.spec, w)
        return hit

    def step(self, b: int, m: int, checkpointing: str, attention: str, offloaded_bytes: int = 0) -> StepCost:
        """One optimizer step of micro-batch ``b`` accumulated ``m`` times on every replica.

        ``offloaded_bytes``: what activation offloading copies to the host per micro-batch (and back).
        """
        seconds, compute, comm, offload, bubble, tokens_rank, flops = self._terms(b, m, checkpointing, attention,
                                                                                offloaded_bytes)
        tokens = tokens_rank * self.dp
        return StepCost(seconds=seconds, compute_s=compute, comm_s=comm, offload_s=offload, bubble_s=bubble,
                        tokens_per_s=tokens / seconds if seconds > 0 else 0.0, flops_per_token=flops)

    def seconds(self, b: int, m: int, checkpointing: str, attention: str, offloaded_bytes: int = 0) -> float:
        """:meth:`step`'s seconds alone (the search ranks tens of thousands of plans by it)."""
        return self._terms(b, m, checkpointing, attention, offloaded_bytes)[0]

    def _terms(self, b: int, m: int, checkpointing: str, attention: str,
               offloaded_bytes: int) -> tuple[float, float, float, float, float, int, float]:
        """(seconds, compute, communication, offload, bubble, tokens per replica, FLOPs per token) of one step."""
        tp, pp = self.tp, self.pp
        s = self.seq
        dense, attn = _train_flops(self.N, self.trainable, self.method, self.attn_tok,
                                   self._recomputed(checkpointing, attention))
        af = EAGER_ATTENTION_FACTOR if attention == "eager" else 1.0
        tokens_rank = b * s * m  # tokens one data-parallel replica processes per step
        compute = tokens_rank * (dense * self.qf + attn * af) / self.rate / (tp * pp) + m * self.cast_s
        comm_critical = 0.0
        if tp > 1:
            per_layer = 4 * 2 * (tp - 1) / tp * b * s * self.h * self.c  # 4 all-reduces of b*s*h (Megatron)
            comm_critical += m * self.L / pp * per_layer / self.tp_bw
        bubble = 0.0
        if pp > 1:
            comm_critical += m * 2 * b * s * self.h * self.c / self.intra
            frac = (pp - 1) / (m + pp - 1)  # 1F1B bubble (Narayanan et al. 2021)
            bubble = compute * frac / (1 - frac)
        overlapped = (m * self.ring_bytes_per_micro + self.ring_bytes_per_step) / self.dp_bw
        exposed = max(0.0, overlapped - compute * 2 / 3)  # bucketed collectives hide behind the backward
        offload = self.offload_step + m * (self.offload_micro + 2 * offloaded_bytes / self.pcie)
        seconds = compute + bubble + comm_critical + exposed + offload + self.opt_step
        return seconds, compute, comm_critical + overlapped, offload, bubble, tokens_rank, dense + attn


def offloaded_activation_bytes(spec: ModelSpec, w: Workload) -> int:
    """The bytes activation offloading copies to the host per micro-batch: the estimate's activation
    host copies and frozen casts (vramlens.estimator.core), 0 without ``activation_offload``."""
    if not (w.training and w.activation_offload):
        return 0
    from vramlens.estimator.core import activation_totals, offload_frozen_casts, output_layer_cast
    from vramlens.estimator.state import train_state

    st = train_state(spec, w, None)
    moved = offload_frozen_casts(st, output_layer_cast(spec, w, st.sp.has_head))[1] if st.frozen_casts else 0
    return activation_totals(spec, w, st.sp).host + moved


def training_step(spec: ModelSpec, w: Workload, gpu: GPU, *, trainable: int, nodes: int = 1,
                  links: Links = Links(), offloaded_bytes: int | None = None) -> StepCost:
    """Time of one optimizer step of the whole effective batch (every micro-batch of every rank).

    ``offloaded_bytes``: activation offloading's bytes per micro-batch when the caller has them
    (None: :func:`offloaded_activation_bytes`).
    """
    tc = TrainingCost(spec, w, gpu, trainable=trainable, nodes=nodes, links=links)
    if offloaded_bytes is None:
        offloaded_bytes = offloaded_activation_bytes(spec, w)
    return tc.step(w.batch, w.grad_accum, w.checkpointing, w.attention, offloaded_bytes)


def inference_request(spec: ModelSpec, w: Workload, gpu: GPU, *, weight_bytes: int, kv_bytes_per_token: int,
                      links: Links = Links()) -> StepCost:
    """Time of one batched request: prefill of ``seq`` tokens then ``new_tokens`` decode steps.

    Args:
        weight_bytes: bytes of the weights on one GPU (what each decode step reads).
        kv_bytes_per_token: KV-cache bytes one token of one sequence adds on one GPU.
    """
    tp, pp = w.tp, w.pp
    b, s, n = w.batch, w.seq, w.new_tokens
    c = DTYPE_BYTES[w.compute_dtype]
    fpt = 2.0 * n_params(spec) + attention_flops_per_token(spec, s) / 3
    af = EAGER_ATTENTION_FACTOR if w.attention == "eager" else 1.0
    quant = w.quantized
    qf = QUANT_MATMUL_FACTOR.get(quant, 1.0) if quant else 1.0
    rate = peak_flops(gpu, w.compute_dtype) * MFU
    prefill = b * s * (2.0 * n_params(spec) * qf + attention_flops_per_token(spec, s) / 3 * af) / rate / tp
    bw = gpu.bandwidth_bytes_s * BANDWIDTH_EFFICIENCY
    decode = 0.0
    comm = 0.0
    if n:
        avg_ctx = s + n / 2
        # pipeline stages run one after the other for one request: every stage's bytes are read
        per_step_bytes = pp * (weight_bytes + b * avg_ctx * kv_bytes_per_token)
        per_step = per_step_bytes / bw
        # a decode step cannot be faster than its FLOPs either
        per_step = max(per_step, b * fpt / rate / tp)
        if tp > 1:
            comm = n * 2 * spec.n_layers * 2 * (tp - 1) / tp * b * spec.hidden_size * c / _intra(gpu, links)
        decode = n * per_step
    seconds = prefill + decode + comm
    tokens = b * n if n else b * s
    return StepCost(seconds=seconds, compute_s=prefill + decode, comm_s=comm, offload_s=0.0, bubble_s=0.0,
                    tokens_per_s=tokens / seconds if seconds > 0 else 0.0, flops_per_token=fpt)


def tradeoffs(spec: ModelSpec, w: Workload, base: Workload, *, trainable: int) -> tuple[str, ...]:
    """What a plan gives up, in short phrases, relative to the user's starting workload."""
    out: list[str] = []
    if w.training:
        if w.checkpointing == "full":
            out.append("+33% compute for recomputation (full checkpointing)")
        elif w.checkpointing == "selective":
            out.append("attention recomputed in backward (selective checkpointing, a few % compute)")
        elif w.checkpointing == "selective-op" or w.checkpoint_every is not None:
            dense, attn = recomputed(spec, w)
            what = ("torchtitan per-op selective checkpointing: every other matmul recomputed"
                    if w.checkpointing == "selective-op" else
                    f"torchtitan every:{w.checkpoint_every} checkpointing: {sum(C.checkpointed(spec, w))} of "
                    f"{spec.n_layers} blocks recomputed")
            out.append(f"+{100 * dense / 3:.0f}% compute for recomputation ({what})")
        if w.method != "full" and n_params(spec):
            pct = 100.0 * trainable / n_params(spec)
            name = {"lora": "LoRA", "qlora": "QLoRA", "ia3": "IA3", "ln-tuning": "LN tuning",
                    "prompt-tuning": "prompt tuning", "vera": "VeRA",
                    "adalora": "AdaLoRA", "prefix-tuning": "prefix tuning", "loha": "LoHa",
                    "lokr": "LoKr", "oft": "OFT", "boft": "BOFT"}[w.method]
            name += " (LoRA-FA: lora_B alone)" if w.lora_fa else ""
            out.append(f"{name}: {pct:.2g}% of parameters trained")
        if w.method == "qlora":
            f = QUANT_MATMUL_FACTOR["nf4-dq"]
            out.append(f"4-bit NF4 base weights: ~{f:.2g}x slower matmuls; quality loss small (QLoRA paper)")
        elif w.quant != base.quant and w.quant in ("nf4", "nf4-dq"):
            f = QUANT_MATMUL_FACTOR[w.quant]
            out.append(f"4-bit NF4 base weights (bitsandbytes, as QLoRA): ~{f:.2g}x slower matmuls; the frozen base "
                       "is quantized, the adapters train in full precision")
        if w.optimizer in ("adamw-8bit", "paged-adamw-8bit"):
            out.append("8-bit optimizer states (bitsandbytes): near-parity quality reported (Dettmers et al. 2022)")
        if w.optimizer == "adamw-8bit-torchao":
            out.append("8-bit optimizer states (torchao AdamW8bit): near-parity quality reported (Dettmers et al. 2022)")
        if w.optimizer == "adamw-4bit-torchao":
            out.append("4-bit optimizer states (torchao AdamW4bit, Li et al. 2023, without their rank-1 normalization): "
                       "near-parity fine-tuning quality reported in torchao's benchmarks")
        if w.optimizer == "adamw-fp8-torchao":
            out.append("FP8 optimizer states (torchao AdamWFp8, experimental): needs compute capability 8.9+")
        if w.optimizer == CPU_OFFLOAD:
            out.append("CPU offload (torchao CPUOffloadOptimizer): the AdamW step on the CPU, gradients and "
                       "parameters over PCIe each step")
        if w.optimizer.startswith("paged"):
            out.append("paged optimizer: states may be evicted to host memory under pressure")
        if w.optimizer in ("sgd", "sgd-momentum", "adafactor", "lion") and w.optimizer != base.optimizer:
            out.append(f"optimizer changed to {w.optimizer}: may need retuning")
        if w.grad_accum > 1 and w.batch < base.batch:
            out.append(f"micro-batch {w.batch} x {w.grad_accum} accumulation steps (same effective batch)")
        if w.shard_stage and w.dp > 1:
            out.append(("FSDP full shard" if w.fsdp else f"ZeRO-{w.zero}") + f" over {w.dp} GPUs: more communication")
        if w.offload != "none":
            out.append(f"CPU offload ({w.offload}): PCIe traffic and CPU optimizer step each step")
        if w.activation_offload and not base.activation_offload:
            out.append("activation offload (torchtune): saved activations to pinned host memory and back over "
                       "PCIe each micro-batch")
        if w.optimizer_in_backward and not base.optimizer_in_backward:
            out.append("optimizer in backward (torchtune): no gradient accumulation, no clipping of the global "
                       "gradient norm")
        if w.loss_chunks > 1 and w.loss_chunks != base.loss_chunks:
            out.append(f"chunked loss ({w.loss_chunks} chunks, torchtune's CEWithChunkedOutputLoss): same result")
        if w.loss_parallel and not base.loss_parallel:
            out.append("loss parallel (torchtitan): logits sharded over the tensor-parallel ranks")
    else:
        if w.quant and w.quant != base.quant:
            out.append(f"{w.quant} weights: less memory and faster decode; small quality loss")
        if w.kv_dtype and w.kv_dtype != base.kv_dtype and w.kv_dtype in ("fp8", "int8"):
            out.append(f"{w.kv_dtype} KV cache: half the cache memory; small quality loss")
    if w.amp and w.amp != base.amp:
        out.append(f"{w.amp} mixed precision")
    if w.dtype != base.dtype:
        out.append(f"weights in {w.dtype} instead of {base.dtype}")
    if w.attention != base.attention and w.attention != "eager":
        out.append(f"{w.attention} attention (linear memory in sequence length)")
    if w.tp > 1:
        out.append(f"tensor parallel {w.tp}: all-reduces on the critical path")
    if w.pp > 1:
        out.append(f"pipeline parallel {w.pp}: bubble (p-1)/(m+p-1)")
    return tuple(out)
