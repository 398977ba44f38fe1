"""RunProgress: silent per step off a terminal, one rewritten line on one."""

import io

from torchdoctor.model.record import StepSample
from torchdoctor.run.progress import CLEAR_LINE, RunProgress


class FakeTTY(io.StringIO):
    def isatty(self):
        return True


class BrokenStream:
    def isatty(self):
        return True

    def write(self, text):
        raise OSError("stderr closed")

    def flush(self):
        pass


def test_off_a_terminal_only_the_close_line_is_printed():
    stream = io.StringIO()
    progress = RunProgress(total_steps=30, warmup=3, stream=stream)
    for step in range(1, 34):
        progress.update(step, 0.0452)
    assert stream.getvalue() == ""
    progress.close("torchdoctor: step-limit after 33 steps")
    assert stream.getvalue() == "torchdoctor: step-limit after 33 steps\n"


def test_on_a_terminal_one_line_is_rewritten():
    stream = FakeTTY()
    progress = RunProgress(total_steps=30, warmup=3, stream=stream, min_interval_s=0)
    progress.update(2, None)
    progress.update(15, 0.0452)
    out = stream.getvalue()
    assert "\n" not in out
    assert out.split("\r\x1b[K")[1:] == ["torchdoctor: warmup 2/3",
                                         "torchdoctor: step 12/30 (warmup 3) 45.2 ms/step"]
    progress.close("done")
    assert stream.getvalue().endswith("45.2 ms/step\r\x1b[Kdone\n")


def test_redraws_are_throttled_on_fast_loops():
    stream = FakeTTY()
    progress = RunProgress(total_steps=1000, warmup=0, stream=stream, min_interval_s=60)
    for step in range(1, 1001):
        progress.update(step, 0.001)
    assert stream.getvalue().count("\r") == 1  # only the first step drew


def test_enabled_overrides_the_tty_check():
    stream = io.StringIO()
    RunProgress(total_steps=5, warmup=0, stream=stream, enabled=True, min_interval_s=0).update(1, 0.01)
    assert stream.getvalue() == "\r\x1b[Ktorchdoctor: step 1/5 10.0 ms/step"
    tty = FakeTTY()
    RunProgress(total_steps=5, warmup=0, stream=tty, enabled=False).update(1, 0.01)
    assert tty.getvalue() == ""


def test_close_prints_once():
    stream = io.StringIO()
    progress = RunProgress(total_steps=5, warmup=0, stream=stream)
    progress.close("done")
    progress.close("done")
    progress.update(3, 0.1)
    assert stream.getvalue() == "done\n"


def test_a_broken_stream_never_raises_into_the_training_loop():
    progress = RunProgress(total_steps=5, warmup=0, stream=BrokenStream(), min_interval_s=0)
    progress.update(1, 0.1)
    progress.update(2, 0.1)
    progress.close("done")


def test_defaults_to_the_current_stderr(capsys):
    progress = RunProgress(total_steps=5, warmup=1)
    progress.update(3, 0.1)
    progress.close("finished")
    assert capsys.readouterr().err == "finished\n"


def test_the_live_line_is_cleared_before_the_script_prints():
    stream = io.StringIO()
    progress = RunProgress(total_steps=10, warmup=0, stream=stream, enabled=True, min_interval_s=0.0)
    progress.on_step(StepSample(index=3, start=0.0, end=0.0613, warmup=False, sampled=False))
    progress.on_output()
    drawn = stream.getvalue()
    assert drawn.endswith(CLEAR_LINE) and drawn.count(CLEAR_LINE) == 2  # drawn, then taken away
    progress.on_output()  # nothing drawn now: nothing more written
    assert stream.getvalue() == drawn
