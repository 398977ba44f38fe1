"""Environment probe: versions, device, precision flags and the environment variables
that change performance. Read at the end of the run, since scripts set flags as they go."""

from __future__ import annotations

import os
import platform
import sys

import torch

from torchdoctor.machine.cpus import usable_cpus
from torchdoctor.model.record import Environment

WATCHED_ENV_PREFIXES = ("NCCL_", "TORCH_", "OMP_", "MKL_", "CUDA_", "PYTORCH_")


def read_environment() -> Environment:
    cuda_available = torch.cuda.is_available()
    env = Environment(
        python=platform.python_version(),
        platform=f"{platform.system()} {platform.machine()}",
        torch=torch.__version__,
        cuda_available=cuda_available,
        cuda_used=bool(cuda_available and torch.cuda.is_initialized()),
        cuda_version=torch.version.cuda,
        float32_matmul_precision=torch.get_float32_matmul_precision(),
        num_threads=torch.get_num_threads(),
        cpu_count=usable_cpus(),  # what this process may use (affinity, cgroup quota), not the host's
        env_vars={k: v for k, v in sorted(os.environ.items()) if k.startswith(WATCHED_ENV_PREFIXES)},
    )
    if cuda_available:
        try:
            index = torch.cuda.current_device()
            props = torch.cuda.get_device_properties(index)
            env.device_name = props.name
            env.compute_capability = [props.major, props.minor]
            env.tf32_matmul = bool(torch.backends.cuda.matmul.allow_tf32)
            env.tf32_cudnn = bool(torch.backends.cudnn.allow_tf32)
            env.cudnn_benchmark = bool(torch.backends.cudnn.benchmark)
        except Exception as exc:  # a broken driver must not end the report
            env.env_vars["torchdoctor.cuda_error"] = f"{type(exc).__name__}: {exc}"[:200]
    return env


def python_version() -> str:
    return sys.version.split()[0]
