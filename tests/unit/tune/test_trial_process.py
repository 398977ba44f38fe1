"""The bounded child process and the tail of its output, shared by tune's and memory's trials."""

import subprocess
import sys

from torchdoctor.tune.trials import output_tail, run_bounded


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
