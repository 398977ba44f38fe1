"""Multi-rank runs: launching the ranks through torch.distributed.run (launch.py), being one
rank (child.py, identity.py, heartbeat.py, check.py), children of torch.multiprocessing.spawn
(spawned.py), and the simulated slow link for tests (slow_link.py)."""
