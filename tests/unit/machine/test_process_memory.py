"""The process's own memory readings: the C heap in use follows what the program holds (a tensor's
storage counts while it lives and not after), the RSS high-water mark never falls."""

import pytest
import torch

from torchdoctor.machine.memory import heap_in_use_bytes, peak_rss_bytes

MIB = 2**20


@pytest.mark.skipif(heap_in_use_bytes() is None, reason="this C library has no mallinfo2")
def test_the_heap_in_use_counts_a_tensor_while_it_lives():
    before = heap_in_use_bytes()
    held = torch.ones(64 * MIB // 4)  # 64 MiB of storage, written
    during = heap_in_use_bytes()
    del held
    after = heap_in_use_bytes()
    assert during - before >= 63 * MIB
    assert during - after >= 63 * MIB


def test_the_rss_high_water_mark_covers_what_was_resident():
    held = torch.ones(32 * MIB // 4)
    mark = peak_rss_bytes()
    del held
    assert mark is not None and mark >= 32 * MIB and peak_rss_bytes() >= mark
