"""Collective communication on the user's machine: the all-reduce bandwidth table
(`bench.py`, runs in the ranks), the path between the ranks and what it should carry
(`topology.py`, `nccl_log.py`, `environment.py`, `links.py`) and the verdict (`verdict.py`).

Used by `torchdoctor comm` (whose ranks run `run/ranks/comm_worker.py`) and by the short check
a multi-rank `run` makes after the script. Everything but `bench.py` is torch-free.
"""
