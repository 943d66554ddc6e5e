"""``VramlensCallback``: vramlens.watch inside a transformers ``Trainer``, with no change to the loop.

    trainer = Trainer(..., callbacks=[VramlensCallback()])

Each log line gets ``vram/peak_allocated_gib``, ``vram/live_gib``, ``vram/activations_gib`` and,
once one is found, ``vram/leak_mib_per_step``; at the end of training the report is written to
``output_dir/vramlens-watch.html`` (and ``.json``) and stored in the runs database.

An exception inside ``Trainer.train`` skips ``on_train_end``: the report is then made by
:meth:`VramlensCallback.close`, which the ``with`` form of ``watch()`` does not need.
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from vramlens.integrations._common import vram_metrics, write_report
from vramlens.monitor import watch


class VramlensCallback(TrainerCallback):
    """Watch a Trainer's run; see the module docstring.

    Args:
        every: keep a step record every ``every`` optimizer steps.
        report: write the HTML report (and a JSON beside it) at the end of training.
        **options: passed to :func:`vramlens.watch` (``model_name``, ``workload``, ``gpu``, ``store``, ...).
    """

    def __init__(self, every: int = 1, *, report: bool = True, **options: Any):
        self.every = every
        self.write_report = report
        self.options = options
        self.watch = None
        self.report = None
        self.paths: tuple[str, ...] = ()

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if self.watch is None and state.is_world_process_zero:
            self.watch = watch(model, None, self.every, label=f"hf:{type(model).__name__}", **self.options)
            self.watch.__enter__()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.watch is None or logs is None:
            return
        figures = vram_metrics(self.watch)
        if not figures:
            return
        logs.update(figures)
        # Trainer.log appends its copy to log_history before the callbacks see `logs`
        if state.log_history and state.log_history[-1].get("step") == state.global_step:
            state.log_history[-1].update({k: v for k, v in logs.items() if k.startswith("vram/")})

    def on_train_end(self, args, state, control, **kwargs):
        self.close(args.output_dir)

    def close(self, output_dir: str | None = None) -> None:
        """End the watch and write the report (idempotent)."""
        if self.watch is None:
            return
        w, self.watch = self.watch, None
        w.__exit__(None, None, None)
        self.report = w.report
        if self.write_report and output_dir:
            self.paths = write_report(self.report, output_dir)
