"""Clean: a well-configured training script. Nothing should be reported."""
import argparse
import logging

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

log = logging.getLogger("train")
parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=10)
parser.add_argument("--log-every", type=int, default=100)
args = parser.parse_args()
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
torch.backends.cuda.matmul.allow_tf32 = True
torch.set_float32_matmul_precision("high")


class Shards(Dataset):
    def __len__(self):
        return 10_000

    def __getitem__(self, i):
        return torch.randn(128), torch.randint(0, 10, ()).item()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(128, 512), nn.GELU(), nn.Linear(512, 10))

    def forward(self, x, return_features=False):
        features = self.body[0](x)
        if return_features:
            return features
        return self.body(x)


def evaluate(model, loader):
    model.eval()
    correct = torch.zeros((), device=device)
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            correct += (model(x).argmax(1) == y).sum()
    model.train()
    return correct.item() / len(loader.dataset)


def main():
    train = DataLoader(Shards(), batch_size=256, shuffle=True, num_workers=8, pin_memory=True,
                       persistent_workers=True, prefetch_factor=4)
    val = DataLoader(Shards(), batch_size=1024, num_workers=4, pin_memory=True, persistent_workers=True)
    model = torch.compile(Net().to(device))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=device.type == "cuda")
    scaler = torch.amp.GradScaler()
    running = torch.zeros((), device=device)
    step = 0
    for epoch in range(args.epochs):
        for x, y in train:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            with torch.autocast(device.type, dtype=torch.bfloat16):
                loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            running += loss.detach()
            step += 1
            if step % args.log_every == 0:
                log.info("step %d loss %.4f", step, running.item() / args.log_every)
                running.zero_()
        log.info("epoch %d val acc %.3f", epoch, evaluate(model, val))
        torch.save(model.state_dict(), f"ckpt-{epoch}.pt")


if __name__ == "__main__":
    main()
