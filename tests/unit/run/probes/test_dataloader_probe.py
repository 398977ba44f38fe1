import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

from torchdoctor.run.probes.dataloader import CPU_EVERY, DataLoaderProbe, batch_rows
from torchdoctor.model.record import RunRecord
from torchdoctor.run.session import RunSession, SessionConfig


def test_batch_rows_finds_the_first_tensor():
    assert batch_rows((torch.zeros(5, 2), torch.zeros(5))) == 5
    assert batch_rows({"ids": [torch.zeros(7, 3)]}) == 7
    assert batch_rows("text") is None and batch_rows(torch.tensor(3.0)) is None


def test_waits_epochs_config_and_creation_line_are_recorded():
    session = RunSession(SessionConfig(warmup=0, steps=100))
    probe = DataLoaderProbe(session)
    probe.install()
    try:
        loader = DataLoader(TensorDataset(torch.zeros(10, 2)), batch_size=4, drop_last=True); line = sys._getframe().f_lineno  # noqa: E702
        for _ in range(2):
            for (x,) in loader:
                pass
    finally:
        probe.uninstall()
    (stats,) = probe.stats
    assert stats.created_at.line == line and stats.created_at.path.endswith("test_dataloader_probe.py")
    assert (stats.batch_size, stats.num_workers, stats.drop_last, stats.dataset_len) == (4, 0, True, 10)
    assert stats.batches == 4 and len(stats.iterator_starts_s) == 2 and len(stats.first_batch_waits_s) == 2
    assert session.ledger.samples == 16 and session.ledger.seconds["data_wait"] > 0
    record = RunRecord.__new__(RunRecord)
    probe.contribute(record)
    assert record.loaders == [stats]


def test_epoch_starts_are_placed_among_steps_and_loading_cpu_time_is_counted():
    ticks = iter(range(1_000_000))
    session = RunSession(SessionConfig(warmup=0, steps=100), cpu_clock=lambda: float(next(ticks)))
    probe = DataLoaderProbe(session)
    probe.install()
    try:
        loader = DataLoader(TensorDataset(torch.zeros(8, 2)), batch_size=4)
        for _ in range(2):
            for (x,) in loader:
                session.on_optimizer_step()
    finally:
        probe.uninstall()
    (stats,) = probe.stats
    assert stats.epoch_start_steps == [0, 2]  # the epochs' first steps are steps 1 and 3
    # a timed next() reads the CPU clock twice, one tick apart; one call in CPU_EVERY (16) is timed:
    # calls 1-3 of each epoch are 2 batches + the StopIteration, made with 0, 1, 2 then 2, 3, 4
    # batches counted before them: the first alone is timed
    assert CPU_EVERY == 16 and stats.wait_cpu_s == 1.0
    assert 0 < stats.cpu_timed_wait_s < stats.wait_total_s
