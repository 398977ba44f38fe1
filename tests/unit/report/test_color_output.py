"""Severity in colour on a terminal; plain text in a pipe, in a file, or with NO_COLOR."""

import io
import os
import subprocess
import sys

import pytest
from helpers.records import record
from helpers.reports import full_report

from torchdoctor.report import emit, wants_color

ESC = "\x1b["
RED_BOLD = "\x1b[1;31m"  # SEVERITY_STYLE["high"]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def plain_environment(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")


def test_a_terminal_gets_severity_in_colour():
    out = Terminal()
    emit(full_report(), "text", out)
    text = out.getvalue()
    assert RED_BOLD + "2. TD101 slug-td101" in text  # the heading of a high-severity finding
    assert RED_BOLD + "high" in text  # and its severity


def test_a_pipe_gets_plain_text():
    out = io.StringIO()
    emit(full_report(), "text", out)
    assert ESC not in out.getvalue() and "high" in out.getvalue()


@pytest.mark.parametrize("env", [{"NO_COLOR": "1"}, {"TERM": "dumb"}])
def test_no_color_and_dumb_terminals_get_plain_text(monkeypatch, env):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    out = Terminal()
    emit(full_report(), "text", out)
    assert ESC not in out.getvalue()


def test_an_empty_no_color_does_not_turn_colour_off(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "")  # no-color.org: only a non-empty value counts
    assert wants_color(Terminal())


@pytest.mark.parametrize("fmt", ["md", "json", "html"])
def test_other_formats_are_never_coloured(fmt):
    out = Terminal()
    emit(full_report(), fmt, out)
    assert ESC not in out.getvalue()


def test_a_closed_stream_is_not_a_terminal():
    stream = io.StringIO()
    stream.close()
    assert not wants_color(stream)


def on_terminal(command: list[str], env: dict) -> bytes:
    """What `command` writes to stdout when stdout is a pseudo-terminal."""
    leader, follower = os.openpty()
    child = subprocess.Popen(command, stdout=follower, env=env)
    os.close(follower)
    out = b""
    try:
        while chunk := os.read(leader, 65536):
            out += chunk
    except OSError:  # Linux: EIO once the child has exited and the buffer is drained
        pass
    finally:
        os.close(leader)
    assert child.wait(timeout=120) == 0
    return out


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
def test_the_report_command_colours_a_real_terminal_and_not_a_pipe(tmp_path):
    record(steps=10, warmup=2).save(tmp_path / "record.json")
    command = [sys.executable, "-m", "torchdoctor", "report", str(tmp_path)]
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")} | {"TERM": "xterm"}
    coloured = on_terminal(command, env)
    assert ESC.encode() in coloured and b"torchdoctor" in coloured
    piped = subprocess.run(command, capture_output=True, env=env, timeout=120)
    assert piped.returncode == 0 and ESC.encode() not in piped.stdout and b"torchdoctor" in piped.stdout
    plain = on_terminal(command, env | {"NO_COLOR": "1"})
    assert ESC.encode() not in plain and b"torchdoctor" in plain
