"""TD301: Python loops over a batch or sequence dimension that index tensors element by element."""
import random

import torch
from torch import nn


class PromptEncoder(nn.Module):
    def __init__(self, prompt_length=3):
        super().__init__()
        self.prompt_length = prompt_length
        self.prompts = nn.Parameter(torch.randn(2 * prompt_length, 32))
        self.blocks = nn.ModuleList(nn.Linear(32, 32) for _ in range(4))

    def _apply_prompt(self, inputs_embeds, blocked_indices, replace_embeds):
        batch_size = inputs_embeds.shape[0]
        for i in range(batch_size):
            for j in range(2 * self.prompt_length):
                inputs_embeds[i, blocked_indices[i, j], :] = replace_embeds[j, :]  # triggers (write)
        return inputs_embeds

    def forward(self, embeds, blocked):
        embeds = self._apply_prompt(embeds, blocked, self.prompts)
        for k in range(len(self.blocks)):
            embeds = self.blocks[k](embeds)  # no finding: a loop over layers, not a tensor dimension
        rows = [embeds[t] * 2 for t in range(embeds.size(0))]  # low: reads one row per iteration
        return torch.stack(rows)


def time_mask(feats, starts, width):
    for i in range(feats.shape[0]):
        for start in starts[i]:
            feats[i, start:start + width, :] = 0.0  # triggers: called from the training loop
    return feats


class Windows(torch.utils.data.Dataset):
    def __getitem__(self, idx):
        row = torch.randn(64)
        for k in range(row.shape[0]):
            row[k] = row[k] * 2  # no finding: dataset code, not the training step
        return row


model = PromptEncoder()
opt = torch.optim.Adam(model.parameters())
for step in range(10):
    feats = time_mask(torch.randn(8, 100, 32), [[random.randrange(90)] for _ in range(8)], 6)
    loss = model(feats, torch.randint(0, 100, (8, 6))).mean()
    loss.backward()
    opt.step()
