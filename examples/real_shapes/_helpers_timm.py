"""Helper module of timm_style_train.py (not an example of its own): the training and
validation loops live here, as they do in image-model training scripts that keep
`train_one_epoch` / `validate` next to their meters and schedulers.

Annotations here belong to timm_style_train.py (see its `# torchdoctor-helpers:` line).
"""
import time
from contextlib import suppress

import torch


class AverageMeter:
    """Running average of a Python number."""

    def __init__(self):
        self.val = self.avg = self.sum = 0.0
        self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


def top1(output, target):
    return (output.argmax(dim=1) == target).float().mean() * 100.0


def train_one_epoch(epoch, model, loader, optimizer, loss_fn, args, device, lr_scheduler=None,
                    amp_autocast=suppress, num_updates_start=0):
    batch_time_m, data_time_m, losses_m = AverageMeter(), AverageMeter(), AverageMeter()
    model.train()
    end = time.time()
    last_idx = len(loader) - 1
    num_updates = num_updates_start
    for batch_idx, (images, target) in enumerate(loader):
        last_batch = batch_idx == last_idx
        data_time_m.update(time.time() - end)
        images, target = images.to(device), target.to(device)
        with amp_autocast():
            output = model(images)
            loss = loss_fn(output, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        # The meter wants a Python number every step: the host waits for the device to finish
        # the step before it can queue the next one. Cause: update the meter with a detached
        # tensor and read it at the log interval only.
        losses_m.update(loss.item(), images.size(0))  # expect: TD201
        num_updates += 1
        batch_time_m.update(time.time() - end)
        if last_batch or batch_idx % args.log_interval == 0:
            lr = optimizer.param_groups[0]["lr"]
            print(f"Train: {epoch} [{batch_idx:>4d}/{len(loader)}] Loss: {losses_m.val:#.3g} ({losses_m.avg:#.3g}) "
                  f"Time: {batch_time_m.val:.3f}s LR: {lr:.3e} Data: {data_time_m.val:.3f}")
        if lr_scheduler is not None:
            lr_scheduler.step()
        end = time.time()
    return {"loss": losses_m.avg}, num_updates


def validate(model, loader, loss_fn, device):
    losses_m, top1_m = AverageMeter(), AverageMeter()
    model.eval()
    with torch.no_grad():
        for images, target in loader:
            images, target = images.to(device), target.to(device)
            output = model(images)
            loss = loss_fn(output, target)
            # Validation: 2 batches once per 32-step epoch; two reads each, not per step.
            losses_m.update(loss.item(), images.size(0))  # trap: TD201, TD203
            top1_m.update(top1(output, target).item(), output.size(0))  # trap: TD201, TD203
    return {"loss": losses_m.avg, "top1": top1_m.avg}
