"""Byte sizes through one door (model/units.py): one way to print them, one rule to read them,
the same for every command (before, `24GB` was 24x10^9 bytes to `memory` and 24x2^30 to `comm`)."""

import pytest

from torchdoctor.commands.comm import parser as comm_parser
from torchdoctor.commands.memory import parser as memory_parser
from torchdoctor.errors import UsageError
from torchdoctor.memory.sizes import parse_size
from torchdoctor.model.units import GIB, KIB, MIB, SIZE_RULE, format_bytes, parse_bytes


def test_one_way_to_print_a_size():
    assert [format_bytes(n) for n in (100, 512 * KIB, 25 * MIB, 1.5 * GIB, -3 * MIB)] == [
        "100 B", "512.0 KiB", "25.0 MiB", "1.50 GiB", "-3.0 MiB"]


def test_one_rule_to_read_a_size():
    assert parse_bytes("24G") == parse_bytes("24GB") == parse_bytes("24GiB") == parse_bytes("24 gib") == 24 * GIB
    assert parse_bytes("512K") == 512 * KIB and parse_bytes("1000") == 1000 and parse_bytes("1.5M") == 3 * MIB // 2
    for bad, says in (("24Gb", "bits"), ("twelve", "not a size"), ("0M", "more than 0"), ("-3M", "not a size")):
        with pytest.raises(ValueError, match=says):
            parse_bytes(bad)


def test_every_command_reads_a_size_the_same_way():
    assert parse_size("24GB") == parse_bytes("24GB") == 24 * GIB  # memory --device-memory
    for help_text in (comm_parser().format_help(), memory_parser().format_help()):  # the rule, in --help
        assert SIZE_RULE in " ".join(help_text.split())
    with pytest.raises(UsageError, match="bits"):
        parse_size("24Gb")
