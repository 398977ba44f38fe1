"""Child processes through one door (run/children.py): torchrun's options for every launch,
the limits on every child's command line, the bounded child process and its output's tail."""

import subprocess
import sys

import pytest

from torchdoctor.commands.run_distributed import child_argv
from torchdoctor.errors import UsageError
from torchdoctor.memory.trials import ProcessTrials
from torchdoctor.memory.trials import TrialSettings as MemorySettings
from torchdoctor.model.limits import DEFAULT_MAX_SECONDS, Limits
from torchdoctor.run.children import output_tail, run_bounded, torchrun_options
from torchdoctor.run.ranks.launch import LaunchRequest, launcher_argv
from torchdoctor.run.session import SessionConfig
from torchdoctor.tune.plan import Trial
from torchdoctor.tune.trials import TrialSettings, command_for


def test_output_tail_keeps_the_last_characters_or_the_start_of_the_last_line():
    text = "first\n\n   \nsecond line\nthird line is long\n"
    assert output_tail(text, 2000) == "first\nsecond line\nthird line is long"
    assert output_tail(text, 10) == "first\nsecond line\nthird line is long"[-10:]
    assert output_tail(text, 5, last_line=True) == "third"
    assert output_tail(None, 5, last_line=True) == "" and output_tail("", 5) == ""


def test_a_child_past_its_time_is_stopped_and_one_that_ends_gives_its_code(tmp_path):
    with open(tmp_path / "log", "w") as log:
        assert run_bounded([sys.executable, "-c", "import sys; sys.exit(3)"], 30, stdout=log,
                           stderr=subprocess.STDOUT) == 3
        assert run_bounded([sys.executable, "-c", "import time; time.sleep(60)"], 0.5, stdout=log,
                           stderr=subprocess.STDOUT) is None


def test_every_launch_gives_torchrun_the_same_options(tmp_path):
    """`run --nproc-per-node` and memory's DDP trials (and `comm`) start ranks alike: before
    this door, memory's trials had none of the shutdown settings."""
    options = torchrun_options(2)
    assert launcher_argv(LaunchRequest(nproc_per_node=2, child_argv=["t.py"]))[:len(options)] == options
    trials = ProcessTrials(MemorySettings("t.py", [], steps=4, warmup=1, max_seconds=50.0, nproc_per_node=2), tmp_path)
    command = trials.command(8, tmp_path / "trial")
    assert command[1:3] == ["-m", "torch.distributed.run"] and command[3:3 + len(options)] == options
    assert command[command.index("--module") + 1:command.index("--module") + 3] == ["--", "torchdoctor.memory.child"]


def test_every_child_command_line_carries_the_same_limits(tmp_path):
    limits = Limits(warmup=1, steps=4, max_seconds=50.0)
    tune = command_for(Trial(name="baseline", knobs={}, kind="baseline"), TrialSettings("t.py", [], False, steps=4, warmup=1,
                                                                      max_seconds=50.0), tmp_path)
    memory = ProcessTrials(MemorySettings("t.py", [], steps=4, warmup=1, max_seconds=50.0), tmp_path).command(8, tmp_path)
    opts = type("Opts", (), dict(steps=4, warmup=1, max_seconds=50.0, format="text", trace=None))
    rank = child_argv(opts, [], tmp_path, "t.py", [], False)
    for command in (tune, memory, rank):
        at = command.index("--warmup")
        assert command[at:at + 6] == limits.argv()


def test_one_set_of_limit_defaults_and_one_check():
    assert SessionConfig().max_seconds == Limits().max_seconds == DEFAULT_MAX_SECONDS  # SessionConfig said 600
    for bad in (Limits(steps=0), Limits(warmup=-1), Limits(max_seconds=0), Limits(max_seconds=float("nan")),
                Limits(steps=True)):
        with pytest.raises(UsageError):
            bad.check()
    Limits(steps=1, warmup=0, max_seconds=0.5).check()
