"""The storage ledger's bookkeeping of op outputs (the memory window's per-op work)."""

import sys

import torch

import torchdoctor.run.probes.memory_ledger as memory_ledger
from torchdoctor.run.probes.memory_ledger import StorageLedger

ADD = torch.ops.aten.add.Tensor


def test_new_storages_are_counted_once_and_views_of_inputs_never(monkeypatch):
    """Most ops take tensors and give one: no generator is walked for them (the ledger sees every
    op of the accounted steps); a tuple of outputs is walked as before."""
    walked = []
    real = memory_ledger._tensors
    monkeypatch.setattr(memory_ledger, "_tensors", lambda *a: walked.append(a) or real(*a))
    ledger = StorageLedger()
    ledger.start()
    frame = sys._getframe()
    x = torch.ones(4)
    out = x + 1
    ledger.on_outputs(ADD, (x, 1), {}, out, frame)
    ledger.on_outputs(ADD, (out,), None, out[:2], frame)  # a view of a counted storage
    ledger.on_outputs(ADD, (x,), {}, x[:2], frame)  # a view of an input the ledger never saw
    assert walked == []
    assert [e.nbytes for e in ledger.live.values()] == [16]
    entry = next(iter(ledger.live.values()))
    assert (entry.op, entry.shape, entry.frame_key[2]) == ("aten::add", [4], "test_new_storages_are_counted_once_and_"
                                                           "views_of_inputs_never")
    pair = (torch.ones(2), torch.ones(3))
    ledger.on_outputs(ADD, ([x],), {"other": x}, pair, frame)
    assert sorted(e.nbytes for e in ledger.live.values()) == [8, 12, 16] and walked[0][0] is pair
    assert ledger._shares_input(id(x.untyped_storage()), ([x],), None)  # inside a list: still searched
    assert ledger._shares_input(id(x.untyped_storage()), (), {"other": x})
