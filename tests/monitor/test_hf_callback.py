"""VramlensCallback inside a real transformers Trainer on CPU (a tiny Llama, a few steps)."""

import pytest

pytest.importorskip("torch", reason="vramlens.watch runs inside a torch process (the trace extra)")

import json  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

transformers = pytest.importorskip("transformers")

from tests.tiny_configs import TINY_LLAMA  # noqa: E402

from vramlens.integrations.hf import VramlensCallback  # noqa: E402
from vramlens.monitor import runs  # noqa: E402


class Tokens(torch.utils.data.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        ids = torch.arange(16) % 1000
        return {"input_ids": ids, "labels": ids}


def test_the_callback_logs_vram_metrics_and_writes_the_report(tmp_path):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(**{k: v for k, v in TINY_LLAMA.items()
                                      if k not in ("architectures", "model_type", "torch_dtype")})
    model = transformers.LlamaForCausalLM(cfg).float()
    params = sum(p.numel() for p in model.parameters()) * 4
    cb = VramlensCallback()
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=3, per_device_train_batch_size=2, logging_steps=1,
        report_to=[], save_strategy="no", use_cpu=True, disable_tqdm=True, dataloader_num_workers=0)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=[cb])
    trainer.train()
    logged = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logged) == 3
    assert all(h["vram/peak_allocated_gib"] > 0 and "vram/live_gib" in h for h in logged)
    report = cb.report
    assert [s.step for s in report.steps] == [1, 2, 3]
    buffers = sum(b.numel() for b in model.buffers()) * 4  # the rotary inv_freq tables
    assert all(s.categories["parameters"] == params + buffers for s in report.steps)
    # step 1 peaks in AdamW's first step (the new moments still count as temporaries): every gradient exists
    assert report.steps[0].categories["gradients"] == params
    assert report.steps[-1].categories["optimizer_states"] >= 2 * params  # AdamW's two moments
    html, js = cb.paths
    assert Path(html).read_text().startswith("<!DOCTYPE html>")
    assert json.loads(Path(js).read_text())["steps"][0]["step"] == 1
    assert runs.list_runs()[0].label == "hf:LlamaForCausalLM"
