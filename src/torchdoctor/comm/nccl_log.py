"""What NCCL chose, read from its `NCCL_DEBUG=INFO` lines.

NCCL prints one line per channel connection when a communicator starts, e.g.
`host:123:456 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC` (or `via SHM/direct/direct`,
`via NET/Socket/0`, `via NET/IB/0/GDRDMA`, `via P2P/CUMEM/read`), and one line for every
`NCCL_*` parameter taken from the environment: `NCCL_SHM_DISABLE set by environment to 1.`
The transport the communicator actually used is the slowest one among its connections
(a ring is as fast as its slowest hop).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_CHANNEL = re.compile(r"NCCL INFO Channel \d+(?:/\d+)?\s*:\s*(\d+)\[[0-9a-fx]+\]\s*->\s*(\d+)\[[0-9a-fx]+\]"
                      r"(?:\s*\[(?:send|receive)\])?\s+via\s+(\S+)")
_ENV = re.compile(r"NCCL INFO (NCCL_[A-Z0-9_]+) set by environment to (\S+?)\.?$")
_VERSION = re.compile(r"NCCL version (\S+)")

# Slowest first: a connection through the network is slower than through host memory,
# which is slower than peer-to-peer over PCIe or NVLink.
TRANSPORT_ORDER = ("NET/Socket", "NET/IB", "SHM", "P2P")


@dataclass
class NcclChoice:
    version: str | None = None
    transports: dict[str, int] = field(default_factory=dict)  # "P2P/IPC" -> connections
    env: dict[str, str] = field(default_factory=dict)  # NCCL_* taken from the environment

    @property
    def slowest(self) -> str | None:
        """The slowest transport family any connection used: NET/Socket, NET/IB, SHM or P2P."""
        families = {_family(t) for t in self.transports}
        return next((f for f in TRANSPORT_ORDER if f in families), None)


def _family(transport: str) -> str:
    if transport.startswith("NET/"):
        return "NET/IB" if transport.startswith("NET/IB") else "NET/Socket"
    return transport.split("/", 1)[0]


def parse_nccl_info(text: str) -> NcclChoice:
    choice = NcclChoice()
    for raw in text.splitlines():
        line = raw.strip()
        if "NCCL" not in line:
            continue
        if (m := _CHANNEL.search(line)) is not None:
            transport = m.group(3)
            key = "/".join(transport.split("/")[:2])  # P2P/IPC, SHM/direct, NET/Socket, NET/IB
            choice.transports[key] = choice.transports.get(key, 0) + 1
        elif (m := _ENV.search(line)) is not None:
            choice.env[m.group(1)] = m.group(2)
        elif (m := _VERSION.search(line)) is not None and choice.version is None:
            choice.version = m.group(1)
    return choice
