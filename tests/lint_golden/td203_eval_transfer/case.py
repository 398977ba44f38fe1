"""TD203: per-batch device-to-host transfers in evaluation loops."""
import numpy as np
import torch
from torch import nn

model = nn.Linear(16, 3).cuda()


def evaluate(loader):
    model.eval()
    preds, correct = [], torch.zeros((), device="cuda")
    for x, y in loader:
        logits = model(x.cuda(non_blocking=True))
        preds.append(logits.argmax(1).cpu().numpy())  # triggers
        correct += (logits.argmax(1) == y.cuda(non_blocking=True)).sum()  # no finding
    model.train()
    return np.concatenate(preds), correct.item()  # no finding: once, after the loop


@torch.no_grad()
def predict(val_loader):
    return [model(x.cuda()).tolist() for x, _ in val_loader]  # triggers


def score(val_loader):
    with torch.inference_mode():
        for i, (x, y) in enumerate(val_loader):
            acc = (model(x.cuda()).argmax(1) == y.cuda()).float().mean()
            if i % 100 == 0:
                print(acc.item())  # no finding: every 100 batches
            total = float(acc)  # triggers


def reinitialize(weights):
    with torch.no_grad():
        for w in weights:
            if w.abs().max() > 1:  # no finding: not an evaluation loop (no loader, no model)
                w.zero_()
