"""A Lightning project in miniature: a LightningModule, a LightningDataModule over synthetic
Gaussian blobs, a Trainer from argparse options, `trainer.fit(...)`. Its planted cause is a
per-step `.item()` in a helper module (`_metrics.batch_accuracy`), called from training_step,
and a dataset that reads each sample from slow storage (1 ms a sample) with no loader workers.

Runs plainly (`python lightning_blobs.py`), under `torchdoctor run`, or with the doctor's
callback when --doctor-out is given (the only difference between the two ways)."""

import argparse
import time

import lightning as L
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

from _metrics import batch_accuracy


class SlowBlobs(Dataset):
    """Samples as if read one by one from network storage."""

    def __init__(self, features: torch.Tensor, labels: torch.Tensor):
        self.features, self.labels = features, labels

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        time.sleep(0.001)
        return self.features[i], self.labels[i]


class Blobs(L.LightningDataModule):
    def __init__(self, batch_size: int):
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage=None):
        gen = torch.Generator().manual_seed(0)
        centers = torch.randn(4, 32, generator=gen) * 3
        labels = torch.randint(0, 4, (1024,), generator=gen)
        self.train_set = SlowBlobs(centers[labels] + torch.randn(1024, 32, generator=gen), labels)

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)  # planted: TD101

    def val_dataloader(self):
        return DataLoader(self.train_set, batch_size=256)


class Classifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 4))
        self.accuracies = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self.net(x)
        self.accuracies.append(batch_accuracy(logits, y))
        loss = F.cross_entropy(logits, y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--accumulate", type=int, default=1)
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--logs", help="a CSVLogger folder (default: no logger)")
    parser.add_argument("--doctor-out", help="measure with torchdoctor's callback, writing here")
    parser.add_argument("--doctor-steps", type=int, default=10)
    parser.add_argument("--doctor-warmup", type=int, default=2)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    callbacks = []
    if args.doctor_out:
        from torchdoctor.integrations.lightning import DoctorCallback

        callbacks.append(DoctorCallback(steps=args.doctor_steps, warmup=args.doctor_warmup, out=args.doctor_out))
    logger = False
    if args.logs:
        from lightning.pytorch.loggers import CSVLogger

        logger = CSVLogger(args.logs, name="blobs")
    trainer = L.Trainer(max_epochs=args.epochs, accelerator="cpu", devices=args.devices,
                        strategy="ddp" if args.devices > 1 else "auto", accumulate_grad_batches=args.accumulate,
                        logger=logger, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, num_sanity_val_steps=0, callbacks=callbacks)
    trainer.fit(Classifier(), datamodule=Blobs(args.batch_size))
    print(f"rank {trainer.global_rank} stopped at global step {trainer.global_step}")
    return trainer


if __name__ == "__main__":
    main()
