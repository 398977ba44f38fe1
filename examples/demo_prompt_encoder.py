"""Demo: reference report 001 (DGCA-ReLM, "GPU utilization low"), reproduced small enough
for a CPU.

A BERT-style encoder with P-tuning prompts: `_apply_prompt` writes the prompt embeddings
into the input embeddings with a nested Python loop, batch 128 x 2*prompt_length 6 = 768
tiny indexed copies per forward (and 768 more autograd nodes in backward), the report's
main bottleneck. Two more of the report's habits are planted: `loss.item()` every step
and a frequent evaluation that moves every batch's predictions to the host with
`.cpu().numpy()` for numpy metric math.

Fix (see demo_prompt_encoder_fixed.py): write all prompt positions at once with
`inputs_embeds.index_copy_(1, prompt_positions, ...)` (the positions are the same in
every row), keep the running loss on the device, and count correct predictions on the
device, reading one number per evaluation.

    python examples/demo_prompt_encoder.py --train_batch_size 128 --prompt_length 3 --num_workers 0
"""
# torchdoctor-example: planted
import argparse

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

device = "cuda" if torch.cuda.is_available() else "cpu"


class PromptEncoder(nn.Module):
    def __init__(self, vocab_size=1000, hidden=64, layers=2, prompt_length=3, num_labels=2, dropout=0.0):
        super().__init__()
        self.prompt_length = prompt_length
        self.embeddings = nn.Embedding(vocab_size, hidden)
        self.prompt_embeddings = nn.Parameter(torch.randn(2 * prompt_length, hidden) * 0.02)
        layer = nn.TransformerEncoderLayer(hidden, nhead=4, dim_feedforward=2 * hidden,
                                           dropout=dropout, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.classifier = nn.Linear(hidden, num_labels)

    def _apply_prompt(self, inputs_embeds, blocked_indices, replace_embeds):
        batch_size = inputs_embeds.shape[0]
        for i in range(batch_size):
            for j in range(2 * self.prompt_length):
                inputs_embeds[i, blocked_indices[i, j], :] = replace_embeds[j, :]  # expect: TD301
        return inputs_embeds

    def forward(self, input_ids, blocked_indices):
        inputs_embeds = self.embeddings(input_ids)
        inputs_embeds = self._apply_prompt(inputs_embeds, blocked_indices, self.prompt_embeddings)
        hidden = self.encoder(inputs_embeds)
        return self.classifier(hidden.mean(dim=1))


def make_dataset(n, seq_len, prompt_length, vocab_size, generator):
    input_ids = torch.randint(0, vocab_size, (n, seq_len), generator=generator)
    # [CLS] p1 p2 p3 p4 p5 p6 text...: the prompt tokens sit at the same positions in every row
    blocked_indices = torch.arange(1, 2 * prompt_length + 1).expand(n, -1).clone()
    labels = torch.randint(0, 2, (n,), generator=generator)
    return TensorDataset(input_ids, blocked_indices, labels)


def evaluate(model, loader):
    model.eval()
    correct, total = 0, 0
    with torch.no_grad():
        for input_ids, blocked_indices, labels in loader:
            logits = model(input_ids.to(device), blocked_indices.to(device))
            correct += int((logits.argmax(-1).cpu().numpy() == labels.numpy()).sum())  # expect: TD203
            total += len(labels)
    model.train()
    return correct / total


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--train_batch_size", type=int, default=128)
    parser.add_argument("--eval_batch_size", type=int, default=128)
    parser.add_argument("--prompt_length", type=int, default=3)
    parser.add_argument("--num_workers", type=int, default=0)
    parser.add_argument("--num_train_epochs", type=int, default=2)
    parser.add_argument("--eval_steps", type=int, default=10)
    parser.add_argument("--learning_rate", type=float, default=3e-4)
    parser.add_argument("--seq_len", type=int, default=32)
    parser.add_argument("--vocab_size", type=int, default=1000)
    parser.add_argument("--dropout", type=float, default=0.0)
    args = parser.parse_args()

    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    train_set = make_dataset(24 * args.train_batch_size, args.seq_len, args.prompt_length, args.vocab_size, g)
    eval_set = make_dataset(2 * args.eval_batch_size, args.seq_len, args.prompt_length, args.vocab_size, g)
    train_loader = DataLoader(train_set, batch_size=args.train_batch_size, shuffle=True,  # lint-expect: TD103
                              num_workers=args.num_workers, drop_last=True)
    eval_loader = DataLoader(eval_set, batch_size=args.eval_batch_size, num_workers=args.num_workers)

    model = PromptEncoder(args.vocab_size, prompt_length=args.prompt_length, dropout=args.dropout).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
    global_step, running_loss = 0, 0.0
    for epoch in range(args.num_train_epochs):
        for input_ids, blocked_indices, labels in train_loader:
            input_ids, blocked_indices = input_ids.to(device), blocked_indices.to(device)
            logits = model(input_ids, blocked_indices)
            loss = nn.functional.cross_entropy(logits, labels.to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            running_loss += loss.item()  # expect: TD201
            global_step += 1
            if global_step % args.eval_steps == 0:
                acc = evaluate(model, eval_loader)
                print(f"epoch {epoch} step {global_step} loss {running_loss / args.eval_steps:.4f} eval acc {acc:.3f}")
                running_loss = 0.0
    print(f"done: {global_step} steps")


if __name__ == "__main__":
    main()
