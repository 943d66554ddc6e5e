"""Host RAM while a checkpoint is loaded: the default way versus low_cpu_mem_usage / device_map.

* Eager load (``torch.load`` of a ``.bin`` into a model built on the CPU, transformers' path
  before ``low_cpu_mem_usage``): the randomly initialised model in its init dtype (fp32 unless
  ``torch_dtype`` is given) and the whole state dict in the checkpoint's dtype are both in RAM
  before the copy: ``P * init_bytes + P * ckpt_bytes``.
* ``low_cpu_mem_usage=True`` (the default since transformers 4.x loads on the meta device):
  only the model in its target dtype, filled shard by shard: ``P * target_bytes`` + one shard.
* ``device_map=...`` with mmap'd safetensors: weights go to the GPU as they are read; the
  process holds one shard at a time (``max_shard_size`` default "5GB" in
  ``PreTrainedModel.save_pretrained``).
"""

from __future__ import annotations

from dataclasses import dataclass

from vramlens.estimator.inventory import summarize
from vramlens.models.spec import ModelSpec
from vramlens.units import DTYPE_BYTES

MAX_SHARD_BYTES = 5 * 10**9  # transformers save_pretrained(max_shard_size="5GB")


@dataclass(frozen=True, slots=True)
class HostLoad:
    eager_bytes: int
    low_cpu_mem_usage_bytes: int
    device_map_bytes: int

    def to_dict(self) -> dict[str, int]:
        return {
            "eager_fp32_init_bytes": self.eager_bytes,
            "low_cpu_mem_usage_bytes": self.low_cpu_mem_usage_bytes,
            "device_map_bytes": self.device_map_bytes,
        }


def host_load(spec: ModelSpec, target_dtype: str) -> HostLoad:
    """Peak host RAM of loading ``spec`` to be run in ``target_dtype``."""
    p = summarize(spec).params
    ckpt_b = DTYPE_BYTES.get(spec.torch_dtype or "fp32", 4)
    target_b = DTYPE_BYTES[target_dtype]
    checkpoint = p * ckpt_b
    shard = min(checkpoint, MAX_SHARD_BYTES)
    return HostLoad(
        eager_bytes=p * 4 + checkpoint,
        low_cpu_mem_usage_bytes=p * target_b + shard,
        device_map_bytes=shard,
    )
