"""Real shape 5: costly code behind a command-line flag or a config field is off unless the
user turns it on; code behind a default that is on, or a flag the script itself sets, is not.
`# want: CODE` lines must be reported at low or above; `# trap` lines must not be (they may
be `info`, naming the flag)."""
import argparse
from dataclasses import dataclass

import torch
import torch.nn as nn

parser = argparse.ArgumentParser(description="GAN on 64x64 images")
parser.add_argument("--ngpu", type=int, default=1, help="GPUs to spread the generator over")
parser.add_argument("--synchronize-step", action="store_true", help="wait for the GPU after each step")
parser.add_argument("--no-sync-check", action="store_true")
parser.add_argument("--gpu", type=int, default=None)
parser.add_argument("--workers", type=int, default=2)
opt = parser.parse_args()
ngpu = int(opt.ngpu)


@dataclass
class LogConfig:
    print_every_step: bool = True
    debug_sync: bool = False


class Generator(nn.Module):
    def __init__(self, ngpu):
        super().__init__()
        self.ngpu = ngpu
        self.main = nn.Sequential(nn.ConvTranspose2d(100, 64, 4), nn.Tanh())

    def forward(self, z):
        if z.is_cuda and self.ngpu > 1:
            return nn.parallel.data_parallel(self.main, z, range(self.ngpu))  # trap: --ngpu defaults to 1
        return self.main(z)


def main_worker(gpu, net, loader, optimizer, cfg: LogConfig):
    opt.gpu = gpu
    for step, (real, _) in enumerate(loader):
        if opt.gpu is not None:
            real = real.cuda(opt.gpu)
        loss = net(real).mean()
        loss.backward()
        optimizer.step()
        if opt.synchronize_step:
            torch.cuda.synchronize()  # trap: off unless --synchronize-step
        if not opt.no_sync_check:
            torch.cuda.synchronize()  # want: TD204
        if cfg.debug_sync:
            torch.cuda.synchronize()  # trap: debug_sync defaults to False
        if cfg.print_every_step:
            print("loss", loss.item())  # want: TD201


net_g = Generator(ngpu).cuda()
optimizer_g = torch.optim.Adam(net_g.parameters(), lr=2e-4)
loader = torch.utils.data.DataLoader(torch.load("faces.pt"), batch_size=128, num_workers=opt.workers)  # want: TD103
main_worker(0, net_g, loader, optimizer_g, LogConfig())
