"""Real shape 1: backward and step happen inside helpers (a loss-scaler callable, accelerate,
Fabric, a GradScaler), and the epoch loop hands the loader to an imported `train_one_epoch`.
`# want: CODE` lines must be reported at low or above; `# trap` lines must not be."""
import argparse
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader

from .engine import train_one_epoch  # the project's own helper, in another module


class ScaledStep:
    """Backward through a GradScaler, optional clipping, then the optimizer step."""

    def __init__(self):
        self._scaler = torch.cuda.amp.GradScaler()

    def __call__(self, loss, optimizer, clip_grad=None, parameters=None, update_grad=True):
        self._scaler.scale(loss).backward()
        if update_grad:
            if clip_grad is not None:
                self._scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(parameters, clip_grad)
            self._scaler.step(optimizer)
            self._scaler.update()

    def state_dict(self):
        return self._scaler.state_dict()


def fit_epoch(net, criterion, batches, optimizer, loss_scaler, device, clip=None):
    net.train()
    for step_index, (images, labels) in enumerate(batches):
        images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = criterion(net(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss_scaler(loss, optimizer, clip_grad=clip, parameters=net.parameters())
        torch.cuda.synchronize()  # want: TD204
        scale_now = loss_scaler.state_dict()["scale"]  # want: TD201
        print(f"step {step_index} loss {loss.item():.4f} scale {scale_now}")  # want: TD201


def fit_with_accelerate(accelerator, model, optimizer, train_loader):
    model.train()
    for batch in train_loader:
        out = model(**batch)
        accelerator.backward(out.loss)
        optimizer.step()
        optimizer.zero_grad()
        if out.loss.item() > 1e3:  # want: TD201
            raise RuntimeError("loss diverged")


def fit_with_fabric(fabric, model, optimizer, dataloader, log):
    for inputs, target in dataloader:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(inputs), target)
        fabric.backward(loss)
        optimizer.step()
        log.append(float(loss))  # want: TD201


def fit_amp(model, opt, loader, epochs):
    scaler = torch.amp.GradScaler("cuda")
    for _ in range(epochs):
        for x, y in loader:
            x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
            with torch.autocast("cuda"):
                loss = torch.nn.functional.mse_loss(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
            if scaler.get_scale() < 1.0:  # want: TD201
                print("scale collapsed")
        print("epoch loss", loss.item())  # trap: once per epoch


def accumulate_ddp(model, loader, optimizer, scaled_step, accum_iter):
    model = DistributedDataParallel(model)
    for it, (x, y) in enumerate(loader):
        loss = torch.nn.functional.cross_entropy(model(x), y) / accum_iter
        scaled_step(loss, optimizer, update_grad=(it + 1) % accum_iter == 0)  # want: TD601
        if (it + 1) % accum_iter == 0:
            optimizer.zero_grad()


def adjust_learning_rate(optimizer, epoch, base_lr):
    for group in optimizer.param_groups:
        group["lr"] = base_lr * (0.1 ** (epoch // 30))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=90)
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()
    dist.init_process_group("nccl")
    model = torch.nn.Linear(32, 10).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    criterion = torch.nn.CrossEntropyLoss()
    scaled_step = ScaledStep()
    data_loader_train = DataLoader(torch.load("train.pt"), batch_size=256, num_workers=8)  # want: TD102
    start = time.time()
    for epoch in range(args.epochs):
        adjust_learning_rate(optimizer, epoch, args.lr)
        stats = train_one_epoch(model, criterion, data_loader_train, optimizer, "cuda", epoch, scaled_step)
        torch.cuda.synchronize()  # trap: once per epoch, after the whole epoch
        print(f"epoch {epoch}: {stats['loss']:.3f} in {time.time() - start:.0f}s")
        torch.save({"model": model.state_dict(), "scaler": scaled_step.state_dict()}, "ckpt.pt")  # trap


if __name__ == "__main__":
    main()
