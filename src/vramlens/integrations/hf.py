"""``VramlensCallback``: vramlens.watch inside a transformers ``Trainer``, with no change to the loop.

    trainer = Trainer(..., callbacks=[VramlensCallback()])

Each log line gets ``vram/peak_allocated_gib``, ``vram/live_gib``, ``vram/activations_gib`` and,
once one is found, ``vram/leak_mib_per_step``; at the end of training the report is written to
``output_dir/vramlens-watch.html`` (and ``.json``) and stored in the runs database.

An exception inside ``Trainer.train`` skips ``on_train_end``: the report is then made by
:meth:`VramlensCallback.close`, which the ``with`` form of ``watch()`` does not need.
"""

from __future__ import annotations

import os
from typing import Any

from transformers import TrainerCallback

from vramlens.monitor import watch
from vramlens.units import GiB, MiB


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
        records = self.watch.records
        if not records:
            return
        last = records[-1]
        logs["vram/peak_allocated_gib"] = round(max(r.peak_allocated_bytes for r in records) / GiB, 4)
        logs["vram/live_gib"] = round(last.live_bytes / GiB, 4)
        logs["vram/activations_gib"] = round(last.categories["activations_and_temporaries"] / GiB, 4)
        if last.host_rss_bytes is not None:
            logs["vram/host_rss_gib"] = round(last.host_rss_bytes / GiB, 4)
        leak = self.watch.current_leak
        if leak is not None:
            logs["vram/leak_mib_per_step"] = round(leak.bytes_per_step / MiB, 4)
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
            os.makedirs(output_dir, exist_ok=True)
            html = os.path.join(output_dir, "vramlens-watch.html")
            js = os.path.join(output_dir, "vramlens-watch.json")
            import json

            from vramlens.report.html import write_text_atomic

            write_text_atomic(html, self.report.to_html())
            write_text_atomic(js, json.dumps(self.report.to_dict(), indent=2) + "\n")
            self.paths = (html, js)
