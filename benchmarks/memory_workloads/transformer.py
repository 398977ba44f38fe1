"""A transformer encoder classifier over token sequences (3 layers, 128 wide, 64 tokens), AdamW."""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Encoder(nn.Module):
    def __init__(self, vocab=1000, dim=128, layers=3):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        layer = nn.TransformerEncoderLayer(dim, nhead=4, dim_feedforward=256, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=layers, enable_nested_tensor=False)
        self.head = nn.Linear(dim, 4)

    def forward(self, ids):
        return self.head(self.encoder(self.embed(ids)).mean(1))


parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=16)
args = parser.parse_args()
torch.manual_seed(0)
torch.set_num_threads(1)
tokens = torch.randint(0, 1000, (4096, 64))
loader = DataLoader(TensorDataset(tokens, tokens[:, 0] % 4), batch_size=args.batch_size, shuffle=True,
                    drop_last=True)
model = Encoder()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
for epoch in range(100):
    for ids, labels in loader:
        loss = nn.functional.cross_entropy(model(ids), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
