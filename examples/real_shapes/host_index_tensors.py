"""Imitates a recommendation-model training script that mixes host-side bookkeeping
tensors with device tensors: a `Dataset` of user sessions stored as one flat event tensor
plus an offsets tensor, whose `__getitem__` reads its own offsets with `.item()`; a
host-resident item feature table from which each batch's negative items are gathered by
iterating a `torch.randint` index element by element; a two-tower model on the device;
and a periodic hit-rate summary computed after an explicit `.cpu()`.

Planted: the negatives are gathered with a Python loop over the 2048 elements of a host
index tensor (TD301: 2048 indexing ops and a stack per step, ~24 % of the step on this
CPU, 8.5 of 35 ms; `item_table[neg_idx]` is one gather of 0.1 ms). It is a host tensor
in a GPU run too, so the loop is not 2048 device syncs; there, with the model's part
faster, its share is larger.

Neither planted nor a trap: loading sessions in the main process (num_workers=0) is ~2 %
of the step.

Traps: the Dataset's `.item()` reads its own host offsets (no device involved); the
`torch.randint` index never lives on the device; the hit-rate summary runs every 10 steps
and iterates a tensor that was copied to the host once with `.cpu()`.
"""
# torchdoctor-example: planted
import argparse

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, Dataset


class SessionDataset(Dataset):
    """Sessions of item ids stored flat: events[offsets[i]:offsets[i + 1]] is session i."""

    def __init__(self, n_sessions: int, n_items: int, seed: int):
        gen = torch.Generator().manual_seed(seed)
        lengths = torch.randint(3, 14, (n_sessions,), generator=gen)
        self.offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
        self.events = torch.randint(1, n_items, (int(self.offsets[-1]),), generator=gen)

    def __len__(self):
        return len(self.offsets) - 1

    def __getitem__(self, i):
        # The dataset's own host tensor: reading it waits on nothing, in a GPU run too.
        start, end = self.offsets[i].item(), self.offsets[i + 1].item()  # trap: TD201
        return self.events[start:end - 1], self.events[end - 1]


def collate_sessions(samples):
    histories, targets = zip(*samples)
    return pad_sequence(histories, batch_first=True), torch.stack(targets)


class TwoTower(nn.Module):
    def __init__(self, n_items: int, feat_dim: int, dim: int = 128):
        super().__init__()
        self.item_emb = nn.Embedding(n_items, dim, padding_idx=0)
        self.user = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim))
        self.item = nn.Sequential(nn.Linear(dim + feat_dim, dim), nn.ReLU(), nn.Linear(dim, dim))

    def user_vec(self, history):
        mask = (history > 0).unsqueeze(-1).float()
        pooled = (self.item_emb(history) * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return self.user(pooled)

    def item_vec(self, ids, feats):
        return self.item(torch.cat([self.item_emb(ids), feats], dim=-1))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--n-items", type=int, default=5000)
    parser.add_argument("--feat-dim", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--negatives", type=int, default=2048)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--summary-every", type=int, default=10)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    item_table = torch.randn(args.n_items, args.feat_dim)  # host-resident item features
    loader = DataLoader(SessionDataset(2560, args.n_items, seed=1), batch_size=args.batch_size, shuffle=True,
                        collate_fn=collate_sessions)
    model = TwoTower(args.n_items, args.feat_dim).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)

    step = 0
    for epoch in range(args.epochs):
        for history, target in loader:
            pos_feats = item_table[target].to(device)  # host gather, then one copy
            history, target = history.to(device), target.to(device)
            neg_idx = torch.randint(1, args.n_items, (args.negatives,))
            # 2048 elements of a host index, each an indexing op, then a stack: a Python loop
            # of tiny ops, ~24 % of every step. Cause: item_table[neg_idx], one gather. The
            # index is a host tensor (no device=, never moved): no element read is a sync.
            neg_feats = torch.stack([item_table[j] for j in neg_idx])  # expect: TD301  # trap: TD201
            neg_feats = neg_feats.to(device)
            neg_ids = neg_idx.to(device)
            user = model.user_vec(history)
            pos = model.item_vec(target, pos_feats)
            neg = model.item_vec(neg_ids, neg_feats)
            logits = torch.cat([(user * pos).sum(-1, keepdim=True), user @ neg.T], dim=1)
            loss = F.cross_entropy(logits, torch.zeros(len(user), dtype=torch.long, device=device))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            if step % args.summary_every == 0:
                # Every 10 steps: one copy to the host, then host-only reads.
                ranks = (logits.detach() > logits.detach()[:, :1]).sum(1).cpu()  # trap: TD201
                hits = sum(1 for r in ranks if r.item() < 10)  # trap: TD201, TD301
                print(f"epoch {epoch} step {step}: loss {loss.item():.4f}, hit@10 {hits / len(ranks):.3f}")  # trap: TD201


if __name__ == "__main__":
    main()
