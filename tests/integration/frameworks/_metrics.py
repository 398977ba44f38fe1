"""A helper module of the framework scripts, as projects keep their metrics apart from the model."""

import torch


def batch_accuracy(logits: torch.Tensor, labels: torch.Tensor) -> float:
    # A Python float every step: on a GPU the host waits for the device here each time.
    return (logits.argmax(dim=-1) == labels).float().mean().item()  # planted: TD201
