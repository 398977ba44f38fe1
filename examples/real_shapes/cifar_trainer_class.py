"""Imitates a CIFAR-10 training repository built around a `Trainer` class configured by
a dataclass: `TrainConfig` (with the values a user would put in a YAML file), a trainer
owning the model, optimizer, scheduler and loaders, `fit()` calling `_train_epoch()` and
`_evaluate()`, and a `save_checkpoint()` method that writes model, optimizer, scheduler
and config. Images are synthetic; checkpoints go to a temporary directory.

Planted: `save_every_steps = 2` saves a full checkpoint (model and momentum buffers,
~37 MB; the wide classifier head holds most of it) every 2 steps (TD702): ~30 % of the
wall time on this CPU, far more on a GPU, whose steps are faster and whose saves also copy
the state to the host. As the issue asks, the expected line is the training loop's
call `self.save_checkpoint(...)`, not the `torch.save` inside the method.

Traps: accuracy is accumulated on the device and read once per epoch; the evaluation
(one batch of 64 images once per 20-step epoch, ~2 %) reads its totals once;
`torch.save` inside `save_checkpoint` is where the time goes, but the cause is the
schedule in the loop.
"""
# torchdoctor-example: planted
import os
import tempfile
from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


@dataclass
class TrainConfig:
    epochs: int = 3
    batch_size: int = 32
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 5e-4
    train_samples: int = 640
    val_samples: int = 64
    save_every_steps: int = 2
    checkpoint_dir: str = ""  # empty: a temporary directory
    seed: int = 0


def conv_bn(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(inplace=True))


class SmallVGG(nn.Module):
    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            conv_bn(3, 8), nn.MaxPool2d(2), conv_bn(8, 16), nn.MaxPool2d(2),
            conv_bn(16, 32), nn.MaxPool2d(2), conv_bn(32, 128), nn.AdaptiveAvgPool2d(1))
        self.classifier = nn.Sequential(  # a wide head: most of the parameters, little of the compute
            nn.Flatten(), nn.Linear(128, 2048), nn.ReLU(inplace=True), nn.Dropout(0.2),
            nn.Linear(2048, 2048), nn.ReLU(inplace=True), nn.Linear(2048, num_classes))

    def forward(self, x):
        return self.classifier(self.features(x))


def synthetic_cifar(n: int, seed: int) -> TensorDataset:
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (n,), generator=gen)
    prototypes = torch.randn(10, 3, 32, 32, generator=torch.Generator().manual_seed(123))
    images = prototypes[labels] * 0.5 + torch.randn(n, 3, 32, 32, generator=gen)
    return TensorDataset(images, labels)


class Trainer:
    def __init__(self, cfg: TrainConfig, checkpoint_dir: str):
        torch.manual_seed(cfg.seed)
        self.cfg = cfg
        self.checkpoint_dir = checkpoint_dir
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.model = SmallVGG().to(self.device)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=cfg.lr, momentum=cfg.momentum,
                                         weight_decay=cfg.weight_decay)
        pin = self.device.type == "cuda"
        self.train_loader = DataLoader(synthetic_cifar(cfg.train_samples, cfg.seed + 1), batch_size=cfg.batch_size,
                                       shuffle=True, drop_last=True, pin_memory=pin)
        self.val_loader = DataLoader(synthetic_cifar(cfg.val_samples, cfg.seed + 2), batch_size=256, pin_memory=pin)
        self.scheduler = torch.optim.lr_scheduler.OneCycleLR(
            self.optimizer, max_lr=cfg.lr, total_steps=cfg.epochs * len(self.train_loader))
        self.global_step = 0

    def save_checkpoint(self, tag: str) -> None:
        state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                 "scheduler": self.scheduler.state_dict(), "step": self.global_step, "config": asdict(self.cfg)}
        # Where the time is spent, but not the cause: one save is fine, the loop's schedule is not.
        torch.save(state, os.path.join(self.checkpoint_dir, f"{tag}.pt"))  # trap: TD702

    def _train_epoch(self, epoch: int) -> float:
        self.model.train()
        loss_sum = torch.zeros((), device=self.device)
        correct = torch.zeros((), dtype=torch.long, device=self.device)
        for images, labels in self.train_loader:
            images = images.to(self.device, non_blocking=True)
            labels = labels.to(self.device, non_blocking=True)
            logits = self.model(images)
            loss = F.cross_entropy(logits, labels)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            self.scheduler.step()
            self.global_step += 1
            loss_sum += loss.detach()
            correct += (logits.argmax(1) == labels).sum()
            if self.global_step % self.cfg.save_every_steps == 0:
                # A full checkpoint every 2 steps: model + momentum (~37 MB) serialized and
                # written (on a GPU copied to the host first) each time: ~30 % of the wall
                # time here. Cause: save every few hundred steps or once per epoch.
                self.save_checkpoint("last")  # expect: TD702
        steps = len(self.train_loader)
        # Read once per epoch, after the loop: the device-side sums avoid per-step reads.
        mean_loss, n_correct = loss_sum.item() / steps, correct.item()  # trap: TD201
        print(f"epoch {epoch}: loss {mean_loss:.4f}, train acc {n_correct / (steps * self.cfg.batch_size):.3f}")
        return mean_loss

    @torch.no_grad()
    def _evaluate(self) -> float:
        self.model.eval()
        correct = torch.zeros((), dtype=torch.long, device=self.device)
        for images, labels in self.val_loader:
            logits = self.model(images.to(self.device))
            correct += (logits.argmax(1) == labels.to(self.device)).sum()
        # One read per evaluation.
        return correct.item() / len(self.val_loader.dataset)  # trap: TD201, TD203

    def fit(self) -> None:
        for epoch in range(self.cfg.epochs):
            self._train_epoch(epoch)
            # One batch of 64 images forward only, once per 20-step epoch: ~2 %.
            accuracy = self._evaluate()  # trap: TD701
            print(f"epoch {epoch}: val acc {accuracy:.3f}")


def main() -> None:
    cfg = TrainConfig()
    if cfg.checkpoint_dir:
        Trainer(cfg, cfg.checkpoint_dir).fit()
        return
    with tempfile.TemporaryDirectory(prefix="cifar-ckpt-") as tmp:
        Trainer(cfg, tmp).fit()


if __name__ == "__main__":
    main()
