"""torchdoctor: tells a PyTorch user why their training is slow, with measured evidence."""

__version__ = "0.1.0"
