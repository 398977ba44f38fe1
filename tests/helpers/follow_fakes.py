"""A follower (run/follow/follower.py) driven by hand: a session that only keeps time and takes
the follower's requests, the line sampler's counters, steps made one by one."""

import threading
from types import SimpleNamespace

from torchdoctor.model.record import StepSample
from torchdoctor.run.follow.follower import Follower, FollowOptions


class FakeSession:
    def __init__(self):
        self.now = 0.0
        self.t0 = 0.0
        self.steps = []
        self.steps_lock = threading.Lock()
        self.last_batch_at = None
        self.baseline_s = None
        self.stop_reason = None
        self.stop_signal = None
        self.line_sampler = object()
        self.planned = []

    def clock(self):
        return self.now

    def steps_after(self, index):
        return [s for s in self.steps if s.index > index]

    def plan_window(self, name, first, count):
        self.planned.append((name, first, count))

    def request_stop(self, reason):
        self.stop_reason = reason


class Lines:  # the line sampler's counters, as the follower reads them
    def __init__(self):
        self.hits, self.seconds, self.loading_hits, self.total, self.total_s = {}, {}, {}, 0, 0.0


def make(tmp_path, gpu=None, **options):
    """A follower writing into tmp_path; `gpu`: the GPU probe it reads NVML's figures from."""
    session = FakeSession()
    probes = SimpleNamespace(lines=Lines(), **({"gpu": gpu} if gpu is not None else {}))
    follower = Follower(session, probes, tmp_path, FollowOptions(**options))
    return session, follower


def step(session, follower, seconds, probes=(), wait=0.0):
    index = len(session.steps) + 1
    start = session.now
    session.now += seconds
    sample = StepSample(index=index, start=start, end=session.now, warmup=index <= 3, sampled=bool(probes),
                        samples=32, data_wait_s=wait, probes=list(probes))
    session.steps.append(sample)
    follower.on_step(sample)  # as the session polls it (now and then; here every step)
