"""Demo: the first reference report, reproduced small enough for a CPU.

A BERT-style encoder whose `_apply_prompt` writes prompt embeddings with a nested Python
loop (batch 128 x 2*prompt_length 6 = 768 tiny ops per step, as in the report), plus two
of that report's other habits: `loss.item()` every step and per-batch `.cpu().numpy()`
in a frequent evaluation. The fixed version is demo_prompt_encoder_fixed.py.
"""
# torchdoctor-example: planted
import argparse

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class PromptEncoder(nn.Module):
    def __init__(self, vocab=200, hidden=32, layers=2, prompt_length=3, seq_len=32):
        super().__init__()
        self.prompt_length = prompt_length
        self.embed = nn.Embedding(vocab, hidden)
        self.prompt = nn.Parameter(torch.randn(2 * prompt_length, hidden) * 0.02)
        layer = nn.TransformerEncoderLayer(hidden, nhead=4, dim_feedforward=64, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(hidden, vocab)

    def _apply_prompt(self, inputs_embeds, blocked_indices, replace_embeds):
        batch_size = inputs_embeds.shape[0]
        for i in range(batch_size):
            for j in range(2 * self.prompt_length):
                inputs_embeds[i, blocked_indices[i, j], :] = replace_embeds[j, :]  # expect: TD301
        return inputs_embeds

    def forward(self, input_ids, blocked_indices):
        embeds = self._apply_prompt(self.embed(input_ids), blocked_indices, self.prompt)
        return self.head(self.encoder(embeds))


def make_data(n, seq_len, prompt_length, vocab):
    ids = torch.randint(0, vocab, (n, seq_len))
    # the prompt sits at the same positions in every row, as in the report's data
    blocked = torch.arange(1, 2 * prompt_length + 1).expand(n, -1).clone()
    return TensorDataset(ids, blocked, torch.randint(0, vocab, (n, seq_len)))


def evaluate(model, loader):
    model.eval()
    correct, total = 0, 0
    with torch.no_grad():
        for ids, blocked, labels in loader:
            preds = model(ids, blocked).argmax(-1).cpu().numpy()  # expect: TD203
            correct += int(np.sum(preds == labels.numpy()))  # expect: TD203
            total += labels.numel()
    model.train()
    return correct / total


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--train_batch_size", type=int, default=128)
    parser.add_argument("--prompt_length", type=int, default=3)
    parser.add_argument("--num_workers", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--eval_steps", type=int, default=10)
    args = parser.parse_args()
    torch.manual_seed(0)
    vocab, seq_len = 200, 32
    train = DataLoader(make_data(4096, seq_len, args.prompt_length, vocab), batch_size=args.train_batch_size,
                       shuffle=True, num_workers=args.num_workers, drop_last=True)
    val = DataLoader(make_data(512, seq_len, args.prompt_length, vocab), batch_size=128)
    model = PromptEncoder(vocab=vocab, prompt_length=args.prompt_length, seq_len=seq_len)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    step, running = 0, 0.0
    for epoch in range(args.epochs):
        for ids, blocked, labels in train:
            logits = model(ids, blocked)
            loss = nn.functional.cross_entropy(logits.reshape(-1, vocab), labels.reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            running += loss.item()  # expect: TD201
            step += 1
            if step % args.eval_steps == 0:
                acc = evaluate(model, val)
                print(f"step {step} loss {running / args.eval_steps:.4f} acc {acc:.3f}")
                running = 0.0


if __name__ == "__main__":
    main()
