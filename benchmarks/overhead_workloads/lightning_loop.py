"""Overhead workload (benchmarks/overhead.py): a Lightning loop, a LightningModule (MLP,
Adam, automatic optimization: the forward and backward run in a closure inside
`optimizer.step`) fitted by a `Trainer` without logger, checkpointing or progress bar;
a callback closes a step (_steptimes.py) at each `on_train_batch_end` and the script
writes the step times to the JSON file named by argv[1]; argv[2] is the number of steps."""
import sys

import lightning as L
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from _steptimes import StepTimes

torch.manual_seed(0)
torch.set_num_threads(1)  # steadier timings on a shared 2-core machine


class Classifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(128, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


class StepClock(L.Callback):
    def __init__(self, clock: StepTimes):
        self.clock = clock

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.clock.tick()


n_steps = int(sys.argv[2]) if len(sys.argv) > 2 else 250
data = TensorDataset(torch.randn(64 * n_steps, 128), torch.randint(0, 10, (64 * n_steps,)))
clock = StepTimes(sys.argv[1])
trainer = L.Trainer(max_steps=n_steps, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                    callbacks=[StepClock(clock)])
try:
    trainer.fit(Classifier(), DataLoader(data, batch_size=64))
finally:
    clock.write()
