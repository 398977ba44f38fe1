"""Imitates a PyTorch Lightning project: a `LightningModule` with `training_step`,
`validation_step` and `configure_optimizers`, a `LightningDataModule` over synthetic
tensors, and a `Trainer` with its default progress bar, fitted with `trainer.fit(...)`
and followed by a print of the final metrics. Automatic optimization runs the forward
and backward inside a closure passed to `optimizer.step(closure)`.

Planted: `training_step` turns its accuracy into a Python float with `.item()` at every
step, so the host waits for the device each step (TD201).

Traps: `trainer.fit(...)` is the user's call into Lightning; anything Lightning does
inside it (sanity-check validation, progress-bar refreshes, its own syncs and prints) is
the library's, not a habit on that line; `self.log(...)` of a tensor stores it without
reading it; the validation runs once per 40-step epoch on 2 batches (1-2 % of the
epoch, measured); the print after `fit()` runs once.
"""
# torchdoctor-example: planted
# torchdoctor-requires: lightning
import argparse
import tempfile

import lightning as L
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


class BlobsDataModule(L.LightningDataModule):
    """Gaussian blobs in 64 dimensions, one per class."""

    def __init__(self, batch_size: int = 64, n_train: int = 2560, n_val: int = 128, seed: int = 0):
        super().__init__()
        self.batch_size, self.n_train, self.n_val, self.seed = batch_size, n_train, n_val, seed

    def setup(self, stage=None):
        gen = torch.Generator().manual_seed(self.seed)
        centers = torch.randn(10, 64, generator=gen) * 2
        def blobs(n):
            labels = torch.randint(0, 10, (n,), generator=gen)
            return TensorDataset(centers[labels] + torch.randn(n, 64, generator=gen), labels)
        self.train_set, self.val_set = blobs(self.n_train), blobs(self.n_val)

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=self.batch_size)


class LitClassifier(L.LightningModule):
    def __init__(self, hidden: int = 2048, lr: float = 1e-3):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, 10))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        # A Python float per step: the host waits for the device at every step. Cause: log
        # the tensor (self.log reduces it without a per-step read) or use a torchmetrics metric.
        acc = (logits.argmax(dim=1) == y).float().mean().item()  # expect: TD201
        # self.log keeps a tensor on the device; it is not a read or a print per step.
        self.log("train_loss", loss)  # trap: TD201, TD703
        self.log("train_acc", acc)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(dim=1) == y).float().mean())

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)  # verdict: TD306 (the CPU's for-loop default)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=2048)
    args = parser.parse_args()
    L.seed_everything(0)
    with tempfile.TemporaryDirectory(prefix="lightning-") as root:
        trainer = L.Trainer(max_epochs=args.max_epochs, accelerator="auto", devices=1, logger=False,
                            enable_checkpointing=False, default_root_dir=root)
        model = LitClassifier(hidden=args.hidden)
        # The call into the framework: Lightning's own work inside it (sanity check,
        # progress bar, its syncs and prints) belongs to the library, not to this line.
        trainer.fit(model, datamodule=BlobsDataModule(batch_size=args.batch_size))  # trap: TD201, TD203, TD701, TD703
    # One print after training has ended: no per-step cost, and nothing to estimate.
    print(f"final metrics: {trainer.callback_metrics}")  # trap: TD201, TD203, TD703


if __name__ == "__main__":
    main()
