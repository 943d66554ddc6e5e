"""torchtune's activation offloading on the traced module (torchtune/training/_activation_offloading.py).

``OffloadActivations`` is a ``torch.autograd.graph.saved_tensors_hooks`` around the model's forward
(the loss is computed outside it). Pack: a saved tensor of at least ``min_offload_size`` = 1,024
bytes that is not a parameter or buffer is copied to a pinned host tensor (``empty_like(...,
pin_memory=True, device="cpu")`` + ``copy_``); with streams (the default) the GPU tensor stays
referenced in ``fwd_stash`` until ``max_fwd_stash_size`` = 5 later saves. Unpack (backward): the
host copy comes back (``.to("cuda")``) and is referenced until the next autograd node starts
(``bwd_tensor_stash``). The output layer runs under ``NoOpManager`` (its input is not offloaded).

Each pack makes its own host copy of what it is given (torchtune 0.4 and 0.5 alike): a storage saved
by two ops is copied twice, and a view is copied as the view, so a linear's ``weight.t()`` (a plain
tensor, not an ``nn.Parameter``) puts every block weight on the host each forward. Parameters and
buffers are skipped by identity here; torchtune's ``isinstance(t, nn.Buffer)`` is false for a buffer
registered as a plain tensor, which no traced block saves. Not modelled: torchtune's unpack reuses a
tensor still in the forward stash (the last saves of the forward) instead of bringing it back.

Here the device is CPU (fake): the host copy is an allocation tagged ``host`` (not counted on the
GPU; a CPU-only build cannot pin memory, and the pinned allocator's power-of-two rounding is not
applied) and the bring-back is a copy made in backward.
"""

from __future__ import annotations

import torch
from torch import nn

MIN_OFFLOAD_SIZE = 1024
MAX_FWD_STASH_SIZE = 5


class OffloadActivations:
    """The pack/unpack hooks, as a context manager around the model's forward."""

    def __init__(self, rec, model: nn.Module):
        self.rec = rec
        self.params = {id(p) for p in model.parameters()} | {id(b) for b in model.buffers()}
        self.tracker: dict[int, tuple[torch.Tensor, bool]] = {}
        self.pinned: set[int] = set()  # ids whose host copy is real pinned memory (a CUDA run)
        self.next_id = 0
        self.fwd_stash: dict[int, torch.Tensor] = {}
        self.bwd_stash: dict[int, torch.Tensor] = {}
        self.node: torch.autograd.graph.Node | None = None
        self._hooks = None

    def pack(self, t: torch.Tensor) -> int:
        self.next_id += 1
        tid = self.next_id
        nbytes = t.element_size() * t.nelement()
        if nbytes >= MIN_OFFLOAD_SIZE and id(t) not in self.params and not isinstance(t, nn.Parameter):
            for old in [k for k in self.fwd_stash if k <= tid - MAX_FWD_STASH_SIZE]:
                del self.fwd_stash[old]
            if t.is_cuda:  # the real run: pinned host memory, as torchtune
                host = torch.empty_like(t, device="cpu", pin_memory=True)
                self.pinned.add(tid)
            else:  # fake or CPU: a stand-in tagged host, not counted on the GPU
                host = torch.empty_like(t)
            host.copy_(t)
            self.rec.mark((host,), "host")
            self.tracker[tid] = (host, True)
            self.fwd_stash[tid] = t
        else:
            self.rec.note_saved(t)
            self.tracker[tid] = (t, False)
        return tid

    def unpack(self, tid: int) -> torch.Tensor:
        self.fwd_stash.clear()  # the forward's copies are done by the time backward runs
        t, offloaded = self.tracker.pop(tid)
        if not offloaded:
            return t
        node = torch._C._current_autograd_node()
        if node is not self.node:  # a new node: the previous node's tensors go
            self.node = node
            self.bwd_stash.clear()
        if tid in self.pinned:
            self.pinned.discard(tid)
            back = t.to("cuda", non_blocking=True)
        else:
            back = t.clone()
        self.bwd_stash[tid] = back
        return back

    def end_backward(self) -> None:
        self.bwd_stash.clear()
        self.node = None

    def __enter__(self):
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self._hooks.__exit__(*exc)


def no_offload_around(module: nn.Module, rec) -> list:
    """torchtune's NoOpManager around the output layer: its saved tensors stay on the GPU (the
    recorder's own hooks, innermost again, see them)."""
    state: dict = {}

    def pre(_m, _args):
        state["ctx"] = rec.saved_tensors_hooks()
        state["ctx"].__enter__()

    def post(_m, _args, _out):
        ctx = state.pop("ctx", None)
        if ctx is not None:
            ctx.__exit__(None, None, None)

    return [module.register_forward_pre_hook(pre), module.register_forward_hook(post, always_call=True)]
