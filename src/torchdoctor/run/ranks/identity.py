"""Who this process is in a multi-rank job, read from what the launcher set.

torch.distributed.run (torchrun) gives every worker RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, GROUP_RANK (the node), MASTER_ADDR/MASTER_PORT (the agent's store, with
TORCHELASTIC_USE_AGENT_STORE=True) and TORCHELASTIC_RUN_ID. A `torchdoctor run` started with
those is one rank of a job: its record goes to RUN_DIR/rank-K/record.json.

Torch-free, except `agent_store` and `agree_job_id`, which talk to the launcher's store.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

# Set by `torchdoctor run --nproc-per-node` for its ranks (the coordinator's run directory
# and job id). A rank without them was started by torchrun directly.
RANKS_DIR_ENV = "TORCHDOCTOR_RANKS_DIR"
JOB_ID_ENV = "TORCHDOCTOR_JOB_ID"
STORE_TIMEOUT_S = 60.0
JOB_KEY = "torchdoctor/job_id"


@dataclass
class LaunchEnv:
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    master_addr: str | None
    master_port: int | None
    run_id: str | None
    agent_store: bool
    coordinated: bool  # started by `torchdoctor run --nproc-per-node` (not torchrun directly)

    @property
    def host(self) -> str:
        return socket.gethostname()


def launch_env(environ: dict[str, str] | None = None) -> LaunchEnv | None:
    """The launcher's settings for this process, or None when it is not one rank of a launch."""
    env = os.environ if environ is None else environ
    if "RANK" not in env or "WORLD_SIZE" not in env or not ("TORCHELASTIC_RUN_ID" in env or RANKS_DIR_ENV in env):
        return None
    try:
        port = env.get("MASTER_PORT")
        return LaunchEnv(
            rank=int(env["RANK"]), world_size=int(env["WORLD_SIZE"]),
            local_rank=int(env.get("LOCAL_RANK", env["RANK"])),
            local_world_size=int(env.get("LOCAL_WORLD_SIZE", env["WORLD_SIZE"])),
            node_rank=int(env.get("GROUP_RANK", "0")),
            master_addr=env.get("MASTER_ADDR"), master_port=int(port) if port else None,
            run_id=env.get("TORCHELASTIC_RUN_ID"),
            agent_store=env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true",
            coordinated=RANKS_DIR_ENV in env,
        )
    except ValueError:
        return None


def default_ranks_dir(target: str, launch: LaunchEnv, parent: Path = Path("torchdoctor-runs")) -> Path:
    """Where ranks started by torchrun directly write when no --out is given: one folder per
    launch, the same for every rank of this node (the launcher's run id names it)."""
    from torchdoctor.model.layout import safe_name

    stem = Path(target).stem if target.endswith(".py") else target.replace(".", "-")
    run_id = launch.run_id if launch.run_id and launch.run_id != "none" else f"{launch.master_addr}-{launch.master_port}"
    return parent / f"torchrun-{safe_name(stem)}-{safe_name(run_id)[:40]}"


def agent_store(launch: LaunchEnv, timeout_s: float = STORE_TIMEOUT_S):
    """A client of the launcher's key-value store (the one init_process_group joins), or None."""
    if not launch.agent_store or not launch.master_addr or not launch.master_port:
        return None
    import torch.distributed as dist

    try:
        return dist.TCPStore(launch.master_addr, launch.master_port, is_master=False,
                             timeout=timedelta(seconds=timeout_s), wait_for_workers=False)
    except Exception:  # no store to talk to: the job id falls back to the launcher's run id
        return None


def agree_job_id(store, launch: LaunchEnv, proposed: str | None) -> str:
    """One id for every rank of the job, across nodes: rank 0's, through the store."""
    if store is None:
        return proposed or launch.run_id or uuid.uuid4().hex
    if launch.rank == 0:
        job = proposed or uuid.uuid4().hex
        store.set(JOB_KEY, job)
        return job
    try:
        return store.get(JOB_KEY).decode()
    except Exception:  # rank 0 never published one (it died at start-up)
        return proposed or launch.run_id or uuid.uuid4().hex
