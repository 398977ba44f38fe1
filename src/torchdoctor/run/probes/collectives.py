"""Collectives the user's code calls (`dist.all_reduce`, `barrier`, `all_gather`, ...), timed
and attributed to their source line, and the script's `init_process_group`.

A blocking collective's wall time includes waiting for the slowest rank to arrive, which is
what a step loses to it. Calls made by torch itself (DDP's communication hooks, the object
collectives' inner calls) are not the user's and are not counted here; DDP's own traffic is
the DDP probe's. `init_process_group` is recorded (backend, line) and checked against the
launch: a world size or rank that contradicts the launcher would make every rank wait for
ranks that never come, so it fails at once with a message saying so.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from typing import Any

import torch
import torch.distributed as dist

from torchdoctor.model.distributed_record import CollectiveSite, DistributedInfo, RankIdentity
from torchdoctor.model.location import Location
from torchdoctor.model.record import RunRecord
from torchdoctor.run.probes.frames import USER, classify_file, frame_line, location_of, user_frame
from torchdoctor.run.probes.patching import PatchSet
from torchdoctor.comm import slow_link
from torchdoctor.run.session import RunSession

OPS = ("all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
       "broadcast", "reduce", "barrier", "all_to_all", "all_to_all_single", "gather", "scatter",
       "all_gather_object", "broadcast_object_list", "gather_object", "monitored_barrier")


def moved_bytes(op: str, args: tuple, kwargs: dict) -> int:
    """The data one call moves per rank: the full gathered or scattered size for the
    gather/scatter family, the tensor for the others; 0 for barriers and Python objects."""
    if op in ("all_gather", "all_gather_into_tensor"):
        return slow_link.tensor_bytes(args[0] if args else kwargs.get("output_tensor_list", kwargs.get("output_tensor")))
    if op in ("reduce_scatter", "reduce_scatter_tensor"):
        return slow_link.tensor_bytes(args[1] if len(args) > 1 else kwargs.get("input_list", kwargs.get("input")))
    if op.endswith("barrier") or op.endswith("_object") or op.endswith("_list"):
        return 0
    return slow_link.tensor_bytes(args[0] if args else kwargs.get("tensor"))


class CollectivesProbe:
    name = "collectives"

    def __init__(self, session: RunSession) -> None:
        self.session = session
        self.patches = PatchSet()
        self.sites: dict[tuple[str, int, str], CollectiveSite] = {}
        self.identity: RankIdentity | None = None  # filled by init_process_group
        self.store = None  # the default group's store, kept for the check after the script
        self.simulated = slow_link.simulated_gbps()

    def install(self) -> None:
        if not dist.is_available():
            return
        for op in OPS:
            if hasattr(dist, op):
                self.patches.wrap(dist, op, functools.partial(self._wrap, op))
        self.patches.wrap(dist, "init_process_group", self._wrap_init)

    def uninstall(self) -> None:
        self.patches.restore()

    def contribute(self, record: RunRecord) -> None:
        if not self.sites and self.identity is None:
            return
        info = record.distributed
        if info is None:
            info = record.distributed = DistributedInfo(identity=self.identity or RankIdentity(rank=0, world_size=1))
        elif self.identity is not None:
            info.identity.backend = self.identity.backend
            info.identity.init_location = self.identity.init_location
        counted = {s.index for s in record.measured_steps}
        for site in self.sites.values():
            site.in_measured_s = sum(v for k, v in site.steps.items() if int(k) in counted)
        info.collectives = sorted(self.sites.values(), key=lambda s: -s.total_s)

    # ---- the collectives -------------------------------------------------------------------
    def _wrap(self, op: str, original):
        if self.simulated is not None and op in slow_link.DELAYED:
            original = slow_link.delayed(original, op, self.simulated, _world_size_of_call, moved_bytes)
        probe = self

        def collective(*args, **kwargs):  # no functools.wraps: cheap, and torch never inspects it
            caller = sys._getframe(1)
            if classify_file(caller.f_code.co_filename) != USER:
                return original(*args, **kwargs)  # torch's own call (a DDP hook, an object collective)
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                probe._count(op, caller, time.perf_counter() - started, moved_bytes(op, args, kwargs))

        return collective

    def _count(self, op: str, frame, seconds: float, nbytes: int) -> None:
        key = (frame.f_code.co_filename, frame_line(frame), op)
        site = self.sites.get(key)
        if site is None:
            user, _ = user_frame(frame)
            location = location_of(user) if user is not None else Location("<unknown>", 0)
            site = self.sites[key] = CollectiveSite(location=location, op=op)
        site.calls += 1
        site.total_s += seconds
        site.bytes += nbytes
        step = str(self.session.step_count + 1)  # the open step
        site.steps[step] = site.steps.get(step, 0.0) + seconds

    # ---- init_process_group ------------------------------------------------------------------
    def _wrap_init(self, original):
        probe = self

        @functools.wraps(original)
        def init_process_group(*args, **kwargs):
            frame, _ = user_frame(sys._getframe(1))
            location = location_of(frame) if frame is not None else None
            backend = kwargs.get("backend", args[0] if args else None)
            check_launch(backend, kwargs.get("world_size", -1), kwargs.get("rank", -1), location)
            result = original(*args, **kwargs)
            probe.identity = RankIdentity(rank=dist.get_rank(), world_size=dist.get_world_size(),
                                          backend=str(dist.get_backend()), init_location=location)
            try:
                probe.store = dist.distributed_c10d._get_default_store()
            except Exception:  # an init without a store (a fake backend): no check after the script
                probe.store = None
            return result

        return init_process_group


def check_launch(backend: Any, world_size: Any, rank: Any, location: Location | None) -> None:
    """Fail now, with a message, where the script's own arguments contradict the launch."""
    where = f"{location} calls init_process_group" if location else "the script calls init_process_group"
    launched = os.environ.get("WORLD_SIZE")
    if launched and isinstance(world_size, int) and world_size not in (-1, int(launched)):
        raise RuntimeError(
            f"torchdoctor: {where}(world_size={world_size}), but this launch started {launched} ranks in all "
            f"(--nproc-per-node x --nnodes); every rank would wait for ranks that never start. Read the world "
            f"size from the environment (init_process_group(backend) with no world_size/rank reads WORLD_SIZE and "
            f"RANK), or launch {world_size} ranks.")
    env_rank = os.environ.get("RANK")
    if env_rank and isinstance(rank, int) and rank not in (-1, int(env_rank)):
        raise RuntimeError(
            f"torchdoctor: {where}(rank={rank}), but the launcher made this process rank {env_rank}; two "
            f"processes would claim one rank. Read the rank from the environment (RANK), as torchrun sets it.")
    name = str(backend).lower() if backend is not None else ""
    if "nccl" in name and not torch.cuda.is_available():
        raise RuntimeError(
            f"torchdoctor: {where}(backend={backend!r}), but this machine has no CUDA device: NCCL only "
            f"runs on GPUs. Use the gloo backend on CPU (init_process_group('gloo'), or "
            f"'nccl' if torch.cuda.is_available() else 'gloo').")


def _world_size_of_call() -> int:
    try:
        return dist.get_world_size() if dist.is_initialized() else int(os.environ.get("WORLD_SIZE", "1"))
    except Exception:
        return int(os.environ.get("WORLD_SIZE", "1"))
