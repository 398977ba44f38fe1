"""Planted TD203 (eval-transfer): the evaluation loop copies every batch's predictions to
the host, `preds.append(logits.argmax(1).cpu().numpy())`, and computes the metrics in
numpy; it runs every 5 training steps. On a GPU every copy waits for the device, so the
evaluation is serialized batch by batch.

Fix: keep the predictions on the device (`preds.append(logits.argmax(1))`), concatenate
once and transfer once after the loop, or compute the metric on the device.
"""
# torchdoctor-example: planted
import argparse

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

device = "cuda" if torch.cuda.is_available() else "cpu"


def evaluate(model, val_loader, val_labels, num_classes):
    model.eval()
    preds = []
    with torch.no_grad():
        for x, _ in val_loader:
            logits = model(x.to(device))
            preds.append(logits.argmax(1).cpu().numpy())  # expect: TD203
    model.train()
    preds = np.concatenate(preds)
    per_class = [np.mean(preds[val_labels == c] == c) for c in range(num_classes)]
    return float(np.mean(preds == val_labels)), float(np.mean(per_class))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch_size", type=int, default=512)
    parser.add_argument("--eval_every", type=int, default=5)
    parser.add_argument("--num_classes", type=int, default=10)
    args = parser.parse_args()

    torch.manual_seed(0)
    train_x, train_y = torch.randn(8192, 96), torch.randint(0, args.num_classes, (8192,))
    val_x, val_y = torch.randn(128, 96), torch.randint(0, args.num_classes, (128,))
    val_labels = val_y.numpy()
    val_loader = DataLoader(TensorDataset(val_x, val_y), batch_size=32)
    model = nn.Sequential(nn.Linear(96, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                          nn.Linear(1024, args.num_classes)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    step = 0
    for epoch in range(args.epochs):
        perm = torch.randperm(len(train_x))
        for idx in perm.split(args.batch_size):
            x, y = train_x[idx].to(device), train_y[idx].to(device)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if step % args.eval_every == 0:
                acc, balanced = evaluate(model, val_loader, val_labels, args.num_classes)
        print(f"epoch {epoch} step {step} val acc {acc:.3f} balanced {balanced:.3f}")


if __name__ == "__main__":
    main()
