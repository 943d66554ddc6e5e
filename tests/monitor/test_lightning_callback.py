"""VramlensCallback inside a real Lightning Trainer on CPU (a small MLP, a few steps)."""

import pytest

pytest.importorskip("torch", reason="vramlens.watch runs inside a torch process (the trace extra)")
L = pytest.importorskip("lightning", reason="the Lightning callback is tested where Lightning installs")

import json  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
from tests.monitor.loops import tiny_model  # noqa: E402

from vramlens.integrations.lightning import VramlensCallback  # noqa: E402
from vramlens.monitor import runs  # noqa: E402

# Lightning's own advice (few dataloader workers, ...) and a deprecation inside its pytree use
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")


class Module(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = tiny_model()
        self.logged: list[dict] = []

    def training_step(self, batch, batch_idx):
        (x,) = batch
        return self.net(x).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def _data(n=8):
    x = torch.randn(n * 32, 64)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x), batch_size=32)


def _trainer(tmp_path, cb, steps=3):
    return L.Trainer(max_steps=steps, accelerator="cpu", devices=1, callbacks=[cb], logger=False,
                     enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                     default_root_dir=str(tmp_path / "out"))


def test_the_callback_watches_each_optimizer_step_and_writes_the_report(tmp_path):
    torch.manual_seed(0)
    module = Module()
    params = sum(p.numel() for p in module.parameters()) * 4
    cb = VramlensCallback()
    trainer = _trainer(tmp_path, cb)
    trainer.fit(module, _data())
    report = cb.report
    assert [s.step for s in report.steps] == [1, 2, 3]
    assert all(s.categories["parameters"] == params for s in report.steps)
    assert report.steps[-1].categories["optimizer_states"] >= 2 * params  # AdamW's two moments
    assert trainer.callback_metrics["vram/peak_allocated_gib"] > 0  # logged through LightningModule.log
    html, js = cb.paths
    assert Path(html).read_text().startswith("<!DOCTYPE html>")
    assert json.loads(Path(js).read_text())["steps"][0]["step"] == 1
    assert runs.list_runs()[0].label == "lightning:Module"


def test_an_out_of_memory_error_in_fit_leaves_the_post_mortem(tmp_path):
    module = Module()
    cb = VramlensCallback(cpu_limit_bytes=50_000)  # the parameters fit; a batch's activations do not
    with pytest.raises(torch.OutOfMemoryError):
        _trainer(tmp_path, cb).fit(module, _data())
    oom = cb.report.oom
    assert oom is not None and oom.kind == "cpu_limit" and oom.limit_bytes == 50_000
    assert json.loads(Path(cb.paths[1]).read_text())["oom"]["kind"] == "cpu_limit"
