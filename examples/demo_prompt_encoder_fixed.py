"""The demo with the reference report's fixes applied: the prompt written with one
`index_copy`, the loss kept on the device between logs, evaluation accuracy summed on the
device. Same numerics as demo_prompt_encoder.py.
"""
# torchdoctor-example: fixed
import argparse

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
        prompt_positions = blocked_indices[0]  # the same positions in every row
        expanded = replace_embeds.unsqueeze(0).expand(batch_size, -1, -1)
        return inputs_embeds.index_copy(1, prompt_positions, expanded)

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
    correct, total = torch.zeros(()), 0
    with torch.no_grad():
        for ids, blocked, labels in loader:
            correct += (model(ids, blocked).argmax(-1) == labels).sum()
            total += labels.numel()
    model.train()
    return correct.item() / total


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
    step, running = 0, torch.zeros(())
    for epoch in range(args.epochs):
        for ids, blocked, labels in train:
            logits = model(ids, blocked)
            loss = nn.functional.cross_entropy(logits.reshape(-1, vocab), labels.reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            running += loss.detach()
            step += 1
            if step % args.eval_steps == 0:
                acc = evaluate(model, val)
                print(f"step {step} loss {running.item() / args.eval_steps:.4f} acc {acc:.3f}")
                running = torch.zeros(())


if __name__ == "__main__":
    main()
