"""TD403: TF32 switched off explicitly."""
import torch
import torch.backends.cudnn as cudnn

torch.backends.cuda.matmul.allow_tf32 = False  # triggers
cudnn.allow_tf32 = False  # triggers: through the module alias
torch.set_float32_matmul_precision("highest")  # triggers
torch.set_float32_matmul_precision("high")  # no finding
torch.backends.cuda.matmul.allow_tf32 = True  # no finding
torch.backends.cuda.matmul.fp32_precision = "ieee"  # triggers: the torch >= 2.9 spelling
torch.backends.cuda.matmul.fp32_precision = "tf32"  # no finding
