"""TD607: NCCL transports turned off in code, as the first reference report's launcher did
under WSL2 (`NCCL_SHM_DISABLE=1`, `NCCL_IB_DISABLE=1`)."""
import os

import torch.distributed as dist

os.environ["NCCL_SHM_DISABLE"] = "1"  # triggers
os.environ.setdefault("NCCL_P2P_DISABLE", "1")  # triggers
os.environ.update({"NCCL_IB_DISABLE": "1", "NCCL_DEBUG": "INFO"})  # triggers
os.environ["NCCL_P2P_LEVEL"] = "NVL"  # no finding: peer-to-peer over NVLink stays on
os.environ["NCCL_SHM_DISABLE"] = "0"  # no finding
os.environ["NCCL_NET"] = os.environ.get("CLUSTER_NET", "IB")  # info: the run will decide
os.environ["NCCL_SOCKET_IFNAME"] = "eth0"  # no finding: picks an interface, disables nothing

dist.init_process_group("nccl")
