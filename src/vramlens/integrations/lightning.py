"""``VramlensCallback``: vramlens.watch inside a Lightning ``Trainer``, with no change to the module.

    trainer = lightning.Trainer(..., callbacks=[VramlensCallback()])

Each optimizer step is one step of the watch (the optimizer's step hooks, as for any loop). After
each training batch the callback logs ``vram/peak_allocated_gib``, ``vram/live_gib``,
``vram/activations_gib`` and, once one is found, ``vram/leak_mib_per_step`` through
``LightningModule.log`` (so every logger Lightning drives gets them); at the end of fitting the
report is written to ``trainer.default_root_dir/vramlens-watch.html`` (and ``.json``) and stored
in the runs database. Only global rank zero watches.

An exception inside ``fit`` reaches ``on_exception``, which ends the watch and writes the report
with the post-mortem, then lets Lightning raise the error as usual.
"""

from __future__ import annotations

from typing import Any

try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # the older package name
    from pytorch_lightning.callbacks import Callback  # type: ignore[no-redef,assignment,import-not-found,unused-ignore]

from vramlens.integrations._common import vram_metrics, write_report
from vramlens.monitor import watch


class VramlensCallback(Callback):
    """Watch a Lightning run; see the module docstring.

    Args:
        every: keep a step record every ``every`` optimizer steps.
        report: write the HTML report (and a JSON beside it) at the end of fitting.
        **options: passed to :func:`vramlens.watch` (``model_name``, ``workload``, ``gpu``, ``store``, ...).
    """

    def __init__(self, every: int = 1, *, report: bool = True, **options: Any):
        self.every = every
        self.write_report = report
        self.options = options
        self.watch: Any = None
        self.report: Any = None
        self.paths: tuple[str, ...] = ()

    def on_fit_start(self, trainer, pl_module) -> None:
        if self.watch is None and trainer.is_global_zero:
            self.options.setdefault("label", f"lightning:{type(pl_module).__name__}")
            self.watch = watch(pl_module, None, self.every, **self.options)
            self.watch.__enter__()

    def metrics(self) -> dict[str, float]:
        """The ``vram/*`` figures of the steps seen so far (empty before the first step)."""
        return vram_metrics(self.watch)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        for name, value in self.metrics().items():
            pl_module.log(name, value, on_step=True, on_epoch=False, prog_bar=False, logger=True,
                          rank_zero_only=True)

    def on_fit_end(self, trainer, pl_module) -> None:
        self.close(trainer.default_root_dir)

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        self.close(trainer.default_root_dir, exception)

    def close(self, output_dir: str | None = None, exception: BaseException | None = None) -> None:
        """End the watch and write the report (idempotent)."""
        if self.watch is None:
            return
        w, self.watch = self.watch, None
        exc_info = (type(exception), exception, exception.__traceback__) if exception is not None else (None, None, None)
        w.__exit__(*exc_info)
        self.report = w.report
        if self.write_report and output_dir:
            self.paths = write_report(self.report, output_dir)
