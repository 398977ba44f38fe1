"""`torchdoctor run -m torch.distributed.run ... -m pkg.train ARGS`: the doctor would measure
torchrun's agent, which trains nothing; the ranks and the entry point are read from torchrun's own
command line and launched the doctor's way."""

import argparse

import pytest

from torchdoctor.cli import main
from torchdoctor.commands import run as run_command


def test_a_torchrun_target_becomes_the_doctors_ranks(monkeypatch, capsys):
    seen = {}

    def launch(opts, raw_knobs, nproc, target, args, module, finish, follow=None):
        seen.update(nproc=nproc, target=target, args=args, module=module, nnodes=opts.nnodes)
        return 0

    monkeypatch.setattr("torchdoctor.commands.run_distributed.launch_ranks", launch)
    assert main(["run", "--steps", "5", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                 "-m", "--", "pkg.train", "--logs", "none"]) == 0
    assert seen == {"nproc": 2, "target": "pkg.train", "args": ["--logs", "none"], "module": True, "nnodes": 1}
    assert "torchrun's launcher: measuring its 2 rank(s) of pkg.train" in capsys.readouterr().err


@pytest.mark.parametrize("argv, says", [
    (["--nproc-per-node", "2", "-m", "torch.distributed.run", "--nproc-per-node", "2", "t.py"], "given twice"),
    (["-m", "torch.distributed.run", "--nproc-per-node", "gpu", "t.py"], "give the number of ranks"),
])
def test_a_torchrun_target_the_doctor_cannot_carry_is_one_line(capsys, argv, says):
    assert main(["run", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and "Traceback" not in err


def test_a_plain_target_is_left_alone():
    opts = argparse.Namespace(nproc_per_node=None, nnodes=1)
    assert run_command._through_torchrun(opts, "train.py", ["--lr", "1"], False) == ("train.py", ["--lr", "1"], False)
    assert opts.nproc_per_node is None
