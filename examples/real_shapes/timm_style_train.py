"""Imitates an image-model training script in the style of timm's train.py: an argparse
configuration (model name, epochs, batch size, learning rate, warm-up, workers, log
interval), a model built from a name, label-smoothing cross entropy, SGD with Nesterov
momentum, a per-update cosine schedule, DataLoaders with worker processes, and the loops
`train_one_epoch(...)` / `validate(...)` imported from a second file
(_helpers_timm.py). The images are synthetic 32x32 tensors with light augmentation.

Planted (in _helpers_timm.py): `losses_m.update(loss.item(), ...)` reads the loss on the
host at every step (TD201).

Traps: the training DataLoader (2 workers, ~2 ms of work per batch against a ~100 ms
step: any wait seen is CPU contention, not a loading habit); in _helpers_timm.py,
validation's per-batch reads (two batches once per epoch).
"""
# torchdoctor-example: planted
# torchdoctor-helpers: _helpers_timm.py
import argparse
import math
from contextlib import suppress
from functools import partial

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

from _helpers_timm import train_one_epoch, validate


class AugmentedImages(Dataset):
    """Pre-generated uint8 images; random crop (pad 4) and horizontal flip per sample."""

    def __init__(self, n: int, seed: int, train: bool):
        gen = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, 10, (n,), generator=gen)
        base = torch.rand(10, 3, 32, 32, generator=torch.Generator().manual_seed(7))
        self.images = ((base[self.labels] * 0.6 + torch.rand(n, 3, 32, 32, generator=gen) * 0.4) * 255).to(torch.uint8)
        self.train = train
        self.mean = torch.tensor([0.49, 0.48, 0.45]).view(3, 1, 1)
        self.std = torch.tensor([0.25, 0.24, 0.26]).view(3, 1, 1)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        image = self.images[index].float().div_(255.0)
        if self.train:
            padded = F.pad(image, (4, 4, 4, 4), mode="reflect")
            top, left = torch.randint(0, 9, (2,)).tolist()
            image = padded[:, top:top + 32, left:left + 32]
            if torch.rand(()) < 0.5:
                image = image.flip(-1)
        return (image - self.mean) / self.std, self.labels[index]


class BasicBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut = nn.Sequential()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


def tiny_resnet(num_classes: int, width: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
        BasicBlock(width, width, 1), BasicBlock(width, 2 * width, 2), BasicBlock(2 * width, 4 * width, 2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4 * width, num_classes))


MODELS = {"resnet_tiny": partial(tiny_resnet, width=16), "resnet_small": partial(tiny_resnet, width=32)}


class LabelSmoothingCrossEntropy(nn.Module):
    def __init__(self, smoothing: float = 0.1):
        super().__init__()
        self.smoothing = smoothing

    def forward(self, logits, target):
        logprobs = F.log_softmax(logits, dim=-1)
        nll = -logprobs.gather(dim=-1, index=target.unsqueeze(1)).squeeze(1)
        return ((1.0 - self.smoothing) * nll - self.smoothing * logprobs.mean(dim=-1)).mean()


def cosine_with_warmup(optimizer, warmup_updates: int, total_updates: int):
    def factor(update: int) -> float:
        if update < warmup_updates:
            return (update + 1) / warmup_updates
        progress = (update - warmup_updates) / max(1, total_updates - warmup_updates)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def parse_args():
    parser = argparse.ArgumentParser(description="image classification training")
    parser.add_argument("--model", default="resnet_tiny", choices=sorted(MODELS))
    parser.add_argument("--num-classes", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("-b", "--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--weight-decay", type=float, default=5e-4)
    parser.add_argument("--smoothing", type=float, default=0.1)
    parser.add_argument("--warmup-updates", type=int, default=5)
    parser.add_argument("-j", "--workers", type=int, default=2)
    parser.add_argument("--log-interval", type=int, default=10)
    parser.add_argument("--amp", action="store_true", default=False)
    parser.add_argument("--seed", type=int, default=42)
    return parser.parse_args()


def main():
    args = parse_args()
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = MODELS[args.model](args.num_classes).to(device)
    amp_autocast = partial(torch.autocast, device_type=device.type, dtype=torch.bfloat16) if args.amp else suppress

    loader_kwargs = {"num_workers": args.workers, "pin_memory": device.type == "cuda"}
    # Two workers build a batch in ~2 ms against a ~100 ms step, 4 batches ahead: a wait
    # measured here is other processes taking the CPU (a busy 2-core machine), not the loader.
    train_set = AugmentedImages(1024, seed=1, train=True)
    loader_train = DataLoader(train_set, args.batch_size, shuffle=True, drop_last=True, **loader_kwargs)  # trap: TD101
    loader_eval = DataLoader(AugmentedImages(128, seed=2, train=False), batch_size=2 * args.batch_size, **loader_kwargs)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum, nesterov=True,
                                weight_decay=args.weight_decay)
    lr_scheduler = cosine_with_warmup(optimizer, args.warmup_updates, args.epochs * len(loader_train))
    train_loss_fn = LabelSmoothingCrossEntropy(args.smoothing)
    validate_loss_fn = nn.CrossEntropyLoss()

    num_updates = 0
    for epoch in range(args.epochs):
        train_metrics, num_updates = train_one_epoch(
            epoch, model, loader_train, optimizer, train_loss_fn, args, device,
            lr_scheduler=lr_scheduler, amp_autocast=amp_autocast, num_updates_start=num_updates)
        eval_metrics = validate(model, loader_eval, validate_loss_fn, device)
        print(f"epoch {epoch}: train loss {train_metrics['loss']:.4f}, "
              f"eval loss {eval_metrics['loss']:.4f}, top1 {eval_metrics['top1']:.1f}")


if __name__ == "__main__":
    main()
