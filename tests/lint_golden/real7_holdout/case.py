"""Real shape 7, a hold-out: items 1-6 again in shapes not used while building, written after
the changes and run once before any fix: 5 of 7 wanted found and the once-per-epoch synchronize
(a trap) reported. The epoch loop called `engine.train_epoch()` on an instance, the loader
factory's `num_workers` came from a parameter, and the evaluation in strides computed its loss
with `F.nll_loss` on a model nothing named as one. `# want: CODE` lines must be reported at low
or above; `# trap` lines must not be."""
import argparse
import time

import torch
import torch.nn.functional as F
from torch.cuda.amp import GradScaler
from torch.utils.data import DataLoader

from trainer_utils import run_epoch  # the project's own epoch helper

parser = argparse.ArgumentParser()
parser.add_argument("--profile-sync", default=False, action="store_true")
parser.add_argument("--replicas", type=int, default=1)
parser.add_argument("--bptt", type=int, default=64)
cli = parser.parse_args()


def build_loaders(train_set, val_set, workers):
    train = DataLoader(train_set, batch_size=64, shuffle=True, num_workers=workers, pin_memory=True)  # want: TD102
    val = DataLoader(val_set, batch_size=256, num_workers=workers, pin_memory=True, persistent_workers=True)
    return train, val


class Engine:
    def __init__(self, net, opt, train_set, val_set):
        self.net = net.cuda()
        self.opt = opt
        self.grad_scaler = GradScaler()
        self.train_loader, self.val_loader = build_loaders(train_set, val_set, 4)

    def step(self, images, labels):
        with torch.autocast("cuda"):
            loss = F.cross_entropy(self.net(images), labels)
        self.grad_scaler.scale(loss).backward()
        self.grad_scaler.step(self.opt)
        self.grad_scaler.update()
        self.opt.zero_grad(set_to_none=True)
        return loss

    def train_epoch(self):
        tic = time.perf_counter()
        for images, labels in self.train_loader:
            images = images.cuda()  # want: TD104
            labels = labels.cuda(non_blocking=True)
            loss = self.step(images, labels)
            if cli.profile_sync:
                torch.cuda.synchronize()  # trap: --profile-sync is off by default
            print(f"{loss.item():.3f} {time.perf_counter() - tic:.1f}s")  # want: TD201
            tic = time.perf_counter()

    @torch.no_grad()
    def validate(self):
        self.net.eval()
        wrong = 0
        for images, labels in self.val_loader:
            preds = self.net(images.cuda(non_blocking=True)).argmax(1).cpu()  # want: TD203
            for j in range(len(preds)):
                wrong += int(preds[j] != labels[j])  # want: TD301
        self.net.train()
        return wrong


def language_model_eval(lm, tokens):
    lm.eval()
    nll = 0.0
    with torch.inference_mode():
        for pos in range(0, tokens.size(1) - 1, cli.bptt):
            inp, tgt = tokens[:, pos:pos + cli.bptt], tokens[:, pos + 1:pos + 1 + cli.bptt]
            logp = lm(inp).log_softmax(-1)
            nll += F.nll_loss(logp.flatten(0, 1), tgt.flatten(), reduction="sum").item()  # want: TD203
    return nll


def main(net, opt, train_set, val_set):
    engine = Engine(net, opt, train_set, val_set)
    if cli.replicas > 1:
        net = torch.nn.DataParallel(net)  # trap: --replicas defaults to 1
    for epoch in range(10):
        engine.train_epoch()
        engine.validate()
        torch.cuda.synchronize()  # trap: once per epoch
    loader = DataLoader(train_set, batch_size=32, num_workers=2)  # want: TD102
    for epoch in range(3):
        run_epoch(net, loader, opt, epoch)
