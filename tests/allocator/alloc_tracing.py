"""A minimal allocation recorder for tests: storages created and freed under a dispatch mode.

Runs on fake tensors (no memory, no compute), so full-size models trace in seconds. It only
feeds the allocator tests; the product's tracer lives in vramlens.trace.
"""

import weakref

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class StorageRecorder(TorchDispatchMode):
    """Logs ("alloc", id, nbytes) when a storage first appears and ("free", id, 0) when it dies."""

    def __init__(self):
        super().__init__()
        self.events, self._live, self._refs, self._n = [], {}, [], 0

    def track(self, t: torch.Tensor) -> None:
        st = t.untyped_storage()
        key = st._cdata
        if key in self._live:
            return
        self._n += 1
        ident, events, live = self._n, self.events, self._live
        live[key] = ident
        events.append(("alloc", ident, st.nbytes()))

        def gone(_ref, key=key, ident=ident):
            live.pop(key, None)
            events.append(("free", ident, 0))

        self._refs.append(weakref.ref(st, gone))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self.track(t)
        return out


def transformer_step_events(d=512, layers=2, batch=4, seq=256, vocab=8000, dtype=torch.float32, steps=2):
    """Events of `steps` AdamW (foreach) training steps of a small pre-norm transformer.

    Returns:
        (events, persistent_ids): the event list up to the end of the last step, and the ids of
        the storages still alive then (parameters and optimizer states).
    """
    with torch.device("meta"):
        layer = nn.TransformerEncoderLayer(d, 8, 4 * d, dropout=0.1, batch_first=True, norm_first=True)
        model = nn.ModuleDict({"emb": nn.Embedding(vocab, d),
                               "body": nn.TransformerEncoder(layer, layers, enable_nested_tensor=False),
                               "head": nn.Linear(d, vocab)})
    model.to(dtype)
    with FakeTensorMode(allow_non_fake_inputs=True):
        model.to_empty(device="cpu")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
        rec = StorageRecorder()
        with rec:
            for p in model.parameters():
                rec.track(p)
            for _ in range(steps):
                x = torch.randint(0, vocab, (batch, seq))
                logits = model["head"](model["body"](model["emb"](x)))
                loss = nn.functional.cross_entropy(logits.float().view(-1, vocab), x.view(-1))
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                del loss, logits, x
            events = list(rec.events)
    freed = {i for a, i, _ in events if a == "free"}
    persistent = {i for a, i, _ in events if a == "alloc" and i not in freed}
    return events, persistent
