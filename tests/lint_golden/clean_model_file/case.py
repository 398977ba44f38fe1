"""Clean: model definitions whose forward keeps everything on the device."""
import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int = 8, causal: bool = False):
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.heads = heads
        self.causal = causal

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, need_weights: bool = False):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        if mask is not None:
            mask = mask[:, None, None, :]
        if self.causal:
            out = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            out = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        if need_weights:
            return out, None
        return out.reshape(b, t, d)


class Tower(nn.Module):
    def __init__(self, depth=4, dim=64):
        super().__init__()
        self.layers = nn.ModuleList(Attention(dim) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)

    def forward(self, x, padding_mask=None):
        for layer in self.layers:
            x = x + layer(self.norm(x), padding_mask)
        return x.masked_fill(torch.isnan(x), 0.0)
